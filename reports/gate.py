"""Comparing two runs, and gating a change on the comparison (`bench compare`, `bench gate`).

First the two runs must be comparable (`comparability`): the same scenarios with the same
transcripts (sha256 from the manifests), the same strategies, profiles, answerer, judge,
summarizer, probes, options, usage mode and repeats, and every cell present in both. A difference
is a `GateError` naming it (exit 2) unless allowed (`allow_different_inputs`). Runs that differ
only in their summary templates while the summarizer is the offline one are refused too (unless
`allow_offline_summarizer`): the offline extractive summarizer does not read instruction wording,
so such a gate cannot see the change it is asked about.

A rule `METRIC:TOLERANCE` fails when the candidate is worse than the baseline by more than the
tolerance in the metric's bad direction. Probe metrics are tested on the paired checkpoints
(`compaction_bench.metrics.aggregate`), per (strategy, profile), on the (probe, checkpoint) pairs
both runs have:
- `retention` (alias `presence`): the fact present in the context;
- `summarized_source`: on the pairs whose source item had gone into a summary in both runs, whether
  the summary text carries the answer (the summary-dependent metric: the same facts, summarized
  by both, compared on what the summaries keep);
- `answered`: the answerer's grade.
The change is the mean over probes of each probe's mean difference (each probe weighs one). A rule
fails when the drop exceeds the tolerance and is significant on the same rows, by both tests the
project's claims rest on (`compaction_bench.metrics.stats`): the clustered bootstrap (scenarios,
then probes; the share of resampled changes at or above 0) and the exact one-sided sign-flip test
of the per-probe differences; the p-value shown is the larger of the two, compared with alpha. So a
drop confined to one scenario of several, or to fewer probes than the sign-flip test needs (the
table's "min. probes"), does not fail a rule. The flipped probes are named by scenario and probe.
Other metrics compare summary sums or means over the cells both runs hold; the probe metrics'
baseline and candidate are each run's pooled values (every probe weighing one, as in the run's
leaderboard). A rule no row of the runs can test is listed as untested in the notes. The result
is a markdown table for a pull-request comment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd

from compaction_bench.errors import BenchError
from compaction_bench.llm import is_offline
from compaction_bench.metrics.aggregate import HEADLINE_KINDS, combine, overall, probe_differences, votes
from compaction_bench.metrics.stats import bootstrap_p_below_zero, min_probes, signflip_p
from compaction_bench.store import load_run

#: metric -> (summary columns summed into it, True when higher is better, how scenarios combine)
METRICS: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "retention": (("retention",), True, "mean"),
    "summarized_source": (("retention_summarized_source",), True, "mean"),
    "answered": (("answered",), True, "mean"),
    "integrity": (("integrity_openai_chat", "integrity_openai_responses", "integrity_anthropic"), False, "sum"),
    "failed_requests": (("failed_requests",), False, "sum"),
    "overflows": (("overflows",), False, "sum"),
    "silent_loss": (("silent_loss",), False, "sum"),
    "estimate_ape": (("estimate_ape",), False, "mean"),
    "cache_hit_rate": (("cache_hit_rate",), True, "mean"),
    "rebilled_tokens": (("rebilled_tokens",), False, "sum"),
    "cost": (("cost_usd",), False, "sum"),
}
#: probe metric -> probe-table column tested
PROBE_METRICS = {"retention": "present", "summarized_source": "in_summary", "answered": "correct"}
#: probe metric -> its pooled column (`aggregate.overall`)
POOLED = {"retention": "retention", "summarized_source": "retention_summarized_source", "answered": "answered"}
ALIASES = {"presence": "retention"}
#: metrics that are shares between 0 and 1 (their tolerance too)
SHARES = ("retention", "summarized_source", "answered", "cache_hit_rate")
#: Manifest `config` entries that must agree (prompts are the change a gate is usually about).
SAME_CONFIG = ("strategies", "profiles", "summarizer", "answerer", "judge", "api_base", "usage", "repeats", "options", "probes", "seed")
FLIPPED_SHOWN = 10


class GateError(BenchError, ValueError):
    """A gate rule that cannot be read, or two runs that cannot be compared (the message says why)."""


@dataclass(frozen=True)
class Rule:
    metric: str
    tolerance: float

    @classmethod
    def parse(cls, text: str) -> Rule:
        metric, colon, value = text.partition(":")
        metric = ALIASES.get(metric, metric)
        if metric not in METRICS:
            raise GateError(f"--fail-on {text!r}: unknown metric {metric!r}; metrics: {', '.join(METRICS)}")
        if not colon or not value.strip():
            raise GateError(f"--fail-on {text!r}: a rule needs a tolerance, METRIC:TOLERANCE (e.g. {metric}:0.02, or {metric}:0 for any worsening)")
        try:
            tolerance = float(value)
        except ValueError:
            raise GateError(f"--fail-on {text!r}: tolerance {value!r} is not a number") from None
        if tolerance < 0 or tolerance != tolerance:
            raise GateError(f"--fail-on {text!r}: the tolerance must be a number ≥ 0")
        if metric in SHARES and tolerance >= 1:
            raise GateError(f"--fail-on {text!r}: {metric} is a share, so its tolerance is too (0.02 for 2 points); {tolerance:g} could never fail")
        return cls(metric, tolerance)


# ---------------------------------------------------------------------------- comparability
@dataclass
class Run:
    """What the gate reads of one run folder."""

    root: Path
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame]

    @classmethod
    def load(cls, root: str | Path) -> Run:
        path = Path(root)
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise GateError(f"{path}: not a run folder (no manifest.json)")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise GateError(f"{manifest_path}: malformed JSON ({exc})") from None
        if not isinstance(manifest, dict):
            raise GateError(f"{manifest_path}: not a JSON object")
        return cls(path, manifest, load_run(path))

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.manifest.get("config") or {})

    def scenarios(self) -> dict[str, dict[str, Any]]:
        return {str(s.get("name")): dict(s) for s in self.manifest.get("scenarios") or ()}

    def cells(self) -> set[tuple[str, str, str]]:
        summary = self.tables["summary"]
        if summary.empty:
            return set()
        return {(str(a), str(b), str(c)) for a, b, c in summary[["scenario", "strategy", "profile"]].itertuples(index=False)}

    def expected_cells(self) -> set[tuple[str, str, str]]:
        return {(s, st, p) for s in self.scenarios() for st in self.config.get("strategies") or () for p in self.config.get("profiles") or ()}

    def probe_ids(self) -> dict[tuple[str, str, str], set[str]]:
        """The probe ids with rows, per cell (scenario, strategy, profile)."""
        probes = self.tables["probes"]
        if probes.empty:
            return {}
        return {(str(a), str(b), str(c)): set(map(str, g)) for (a, b, c), g in probes.groupby(["scenario", "strategy", "profile"])["probe_id"]}


def _shown(values: Sequence[Any], limit: int = 5) -> str:
    items = [str(v) for v in values]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def comparability(baseline: Run, candidate: Run) -> tuple[list[str], list[str]]:
    """(differences in inputs, differences in summary templates) between two runs."""
    differences: list[str] = []
    for name, run in (("baseline", baseline), ("candidate", candidate)):
        missing = sorted(run.expected_cells() - run.cells())
        failed = [f.get("cell", "?") for f in (run.manifest.get("cells") or {}).get("failed") or ()]
        if missing or failed:
            shown = _shown(failed or [" · ".join(m) for m in missing])
            differences.append(f"{name} is missing {max(len(missing), len(failed))} cell(s): {shown}")
    a, b = baseline.scenarios(), candidate.scenarios()
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        differences.append(
            "scenarios differ"
            + (f"; only in baseline: {_shown(only_a)}" if only_a else "")
            + (f"; only in candidate: {_shown(only_b)}" if only_b else "")
        )
    for name in sorted(set(a) & set(b)):
        hash_a, hash_b = a[name].get("sha256"), b[name].get("sha256")
        if hash_a and hash_b and hash_a != hash_b:
            differences.append(f"scenario {name!r}: the transcripts differ (sha256 {hash_a[:12]} vs {hash_b[:12]})")
        elif bool(hash_a) != bool(hash_b):
            differences.append(f"scenario {name!r}: only one run records the transcript's sha256, so the transcripts cannot be checked")
        elif not hash_a and a[name].get("items") != b[name].get("items"):
            differences.append(f"scenario {name!r}: the transcripts differ ({a[name].get('items')} vs {b[name].get('items')} items)")
    config_a, config_b = baseline.config, candidate.config
    for key in SAME_CONFIG:
        if config_a.get(key) != config_b.get(key):
            differences.append(f"{key} differs: baseline {config_a.get(key)!r}, candidate {config_b.get(key)!r}")
    ids_a, ids_b = baseline.probe_ids(), candidate.probe_ids()
    shared_cells = baseline.cells() & candidate.cells()
    for cell in sorted(shared_cells):
        mine, theirs = ids_a.get(cell, set()), ids_b.get(cell, set())
        if mine != theirs:
            differences.append(f"{' · '.join(cell)}: the probes with rows differ ({_shown(sorted(mine ^ theirs))})")
    templates: list[str] = []
    if (config_a.get("prompts") or {}) != (config_b.get("prompts") or {}):
        templates.append(f"--prompt overrides: baseline {config_a.get('prompts') or {}}, candidate {config_b.get('prompts') or {}}")
    hashes_a, hashes_b = baseline.manifest.get("template_hashes") or {}, candidate.manifest.get("template_hashes") or {}
    changed = sorted(k for k in set(hashes_a) | set(hashes_b) if hashes_a.get(k) != hashes_b.get(k))
    if changed:
        templates.append(f"templates whose text differs: {', '.join(changed)}")
    return differences, templates


def check_comparable(
    baseline: Run, candidate: Run, *, allow_different_inputs: bool = False, allow_offline_summarizer: bool = False
) -> list[str]:
    """Raise `GateError` when the runs cannot be compared; return notes on what was allowed."""
    differences, templates = comparability(baseline, candidate)
    if differences and not allow_different_inputs:
        raise GateError(
            f"{baseline.root} and {candidate.root} are not comparable: " + "; ".join(differences)
            + " (--allow-different-inputs compares them anyway)"
        )
    notes = [f"allowed difference: {d}" for d in differences]
    summarizer = str(baseline.config.get("summarizer") or "")
    if templates and not differences and is_offline(summarizer):
        explanation = (
            f"the runs differ only in summary templates ({'; '.join(templates)}) and the summarizer is {summarizer}, "
            "which does not read instruction wording (it takes section headings and its budget from the request), "
            "so this gate cannot see what the prompt change does; use a real summarizer (--summarizer MODEL, responses cached)"
        )
        if not allow_offline_summarizer:
            raise GateError(explanation + " or pass --allow-offline-summarizer")
        notes.append("allowed: " + explanation)
    return notes


# ---------------------------------------------------------------------------- summary metrics
def _shared_cells(summary: pd.DataFrame, cells: set[tuple[str, str, str]]) -> pd.DataFrame:
    keys = summary[["scenario", "strategy", "profile"]].astype(str).itertuples(index=False, name=None)
    return summary[[key in cells for key in keys]]


def _metric_values(run: dict[str, pd.DataFrame], cells: set[tuple[str, str, str]]) -> pd.DataFrame:
    """Per (strategy, profile), every metric over `cells`: the summary's sums or means, and the probe
    metrics pooled as the run's leaderboard pools them (`overall`, each probe weighing one)."""
    frame = _shared_cells(run["summary"], cells)
    out = {}
    for name, (columns, _, how) in METRICS.items():
        present = [c for c in columns if c in frame.columns]
        if name in PROBE_METRICS or not present:
            continue
        rows = frame.assign(**{name: frame[present].sum(axis=1, min_count=1)}) if len(present) > 1 else frame
        column = name if len(present) > 1 else present[0]
        out[name] = pd.Series({key: combine(group, column, how) for key, group in rows.groupby(["strategy", "profile"])}, dtype=float)
    table = pd.DataFrame(out)
    if len(table):
        table.index.names = ["strategy", "profile"]
    probes, requests = run["probes"], run["requests"]
    if not probes.empty:
        pooled = overall(_shared_cells(probes, cells), _shared_cells(requests, cells) if len(requests) else requests)
        if not pooled.empty:
            pooled = pooled.set_index(["strategy", "profile"])
            for name, column in POOLED.items():
                if column in pooled.columns:
                    table[name] = pooled[column]
    return table


def compare_runs(baseline: Run, candidate: Run) -> pd.DataFrame:
    """Per (strategy, profile): every metric for both runs and the change (candidate − baseline),
    over the cells (scenario, strategy, profile) both hold (check `comparability` first: this
    compares what is shared, so a cell one run lacks leaves the other's out too)."""
    for run in (baseline, candidate):
        if run.tables["summary"].empty:
            raise GateError(f"{run.root}: the run has no summary rows")
    shared = baseline.cells() & candidate.cells()
    if not shared:
        raise GateError(f"{baseline.root} and {candidate.root} share no cell (scenario, strategy, profile)")
    left, right = _metric_values(baseline.tables, shared), _metric_values(candidate.tables, shared)
    both = left.add_suffix("_baseline").join(right.add_suffix("_candidate"), how="inner")
    for name in left.columns.intersection(right.columns):
        both[f"{name}_change"] = both[f"{name}_candidate"] - both[f"{name}_baseline"]
    return both


# ---------------------------------------------------------------------------- probe tests
@dataclass(frozen=True)
class ProbeTest:
    baseline: float
    candidate: float
    change: float
    p_value: float  # the larger of the clustered bootstrap's and the sign-flip test's one-sided p
    probes: int
    pairs: int
    min_probes: int  # the fewest probes that must worsen before the sign-flip test can reject
    lost: tuple[str, ...]  # scenario/probe present (or right) in the baseline and absent (or wrong) in the candidate somewhere
    gained: tuple[str, ...]


def _labelled(runs: tuple[Run, Run], strategy: str, profile: str) -> pd.DataFrame:
    frames = []
    for label, run in zip(("baseline", "candidate"), runs, strict=True):
        probes = run.tables["probes"]
        if probes.empty:
            continue
        frame = probes[(probes["strategy"] == strategy) & (probes["profile"] == profile)].copy()
        frame["strategy"] = label
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def probe_test(runs: tuple[Run, Run], strategy: str, profile: str, metric: str, alpha: float) -> ProbeTest | None:
    """The paired test of one probe metric for one (strategy, profile); None without shared pairs."""
    frame = _labelled(runs, strategy, profile)
    column = PROBE_METRICS[metric]
    if frame.empty or column not in frame.columns:
        return None
    if "point_kind" not in frame.columns:
        frame = frame.rename(columns={"point": "point_kind"})
    if metric == "summarized_source":
        point = ["scenario", "probe_id", "point_kind", "step"]
        marked = frame[frame["source_summarized"].astype(bool)] if "source_summarized" in frame.columns else frame.iloc[:0]
        both = marked.groupby(point, sort=False)["strategy"].nunique()
        keys = set(both[both == 2].index)
        frame = frame[[k in keys for k in frame[point].itertuples(index=False, name=None)]]
        if frame.empty:
            return None
    diffs = probe_differences(frame, "baseline", "candidate", column=column, rows=HEADLINE_KINDS)
    if diffs.empty:
        return None
    voted = votes(frame)
    voted = voted[voted["point_kind"].isin(HEADLINE_KINDS)].dropna(subset=[column])
    point = ["scenario", "probe_id", "point_kind", "step"]
    table = voted.pivot_table(index=point, columns="strategy", values=column, aggfunc="first").dropna()
    per_probe = table.astype(float).groupby(level=["scenario", "probe_id"]).mean()

    def named(mask: pd.Series) -> tuple[str, ...]:
        flipped = table[mask].index
        return tuple(dict.fromkeys(f"{scenario}/{probe}" for scenario, probe in zip(flipped.get_level_values("scenario"), flipped.get_level_values("probe_id"), strict=True)))

    clusters = [g.tolist() for _, g in diffs.groupby("scenario", sort=False)["difference"]]
    return ProbeTest(
        baseline=float(per_probe["baseline"].mean()),
        candidate=float(per_probe["candidate"].mean()),
        change=float(diffs["difference"].mean()),
        p_value=max(bootstrap_p_below_zero(clusters), signflip_p(diffs["difference"].tolist())),
        probes=len(diffs),
        pairs=int(diffs["pairs"].sum()),
        min_probes=min_probes(alpha),
        lost=named(table["baseline"].astype(bool) & ~table["candidate"].astype(bool)),
        gained=named(~table["baseline"].astype(bool) & table["candidate"].astype(bool)),
    )


# ---------------------------------------------------------------------------- the gate
def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


@dataclass
class GateResult:
    table: pd.DataFrame
    failures: list[str]
    notes: list[str] = field(default_factory=list)
    flipped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def tested(self) -> bool:
        """Whether any rule was applied to any (strategy, profile): not when every one was untested (see `notes`)."""
        return not self.table.empty

    def markdown(self) -> str:
        lines = [
            "| strategy | profile | metric | baseline | candidate | change | tolerance | p (one-sided) | probes (pairs) | min. probes | verdict |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in self.table.to_dict("records"):
            p = "–" if _missing(row["p_value"]) else f"{row['p_value']:.3g}"
            probes = "–" if _missing(row["probes"]) else f"{int(row['probes'])} ({int(row['pairs'])})"
            needed = "–" if _missing(row["min_probes"]) else f"{int(row['min_probes'])}"
            lines.append(
                f"| {row['strategy']} | {row['profile']} | {row['metric']} | {row['baseline']:.4g} | {row['candidate']:.4g} | "
                f"{row['change']:+.4g} | {row['tolerance']:g} | {p} | {probes} | {needed} | {'**fail**' if row['failed'] else 'ok'} |"
            )
        verdict = "passed" if self.passed else f"failed ({len(self.failures)} regression{'s' if len(self.failures) > 1 else ''})"
        if not self.tested:
            verdict = "untested (no rule could be applied to these runs)"
        out = [f"**compaction-bench gate: {verdict}**", "", *lines]
        if self.flipped:
            out += ["", "Flipped probes (baseline → candidate):", *[f"- {line}" for line in self.flipped]]
        if self.notes:
            out += ["", *[f"> {note}" for note in self.notes]]
        return "\n".join(out)


def gate(
    baseline: str | Path,
    candidate: str | Path,
    rules: Sequence[Rule],
    *,
    alpha: float = 0.05,
    allow_different_inputs: bool = False,
    allow_offline_summarizer: bool = False,
) -> GateResult:
    """Check the runs are comparable, then apply the rules to every (strategy, profile) both hold."""
    if not rules:
        raise GateError("no --fail-on rule given")
    if not 0 < alpha < 1:
        raise GateError(f"--alpha {alpha}: must be between 0 and 1")
    runs = (Run.load(baseline), Run.load(candidate))
    notes = check_comparable(*runs, allow_different_inputs=allow_different_inputs, allow_offline_summarizer=allow_offline_summarizer)
    compared = compare_runs(*runs)
    rows, failures, flipped = [], [], []
    for key, values in compared.iterrows():
        strategy, profile = (str(k) for k in cast(tuple[Any, Any], key))
        for rule in rules:
            higher_is_better = METRICS[rule.metric][1]
            test = probe_test(runs, strategy, profile, rule.metric, alpha) if rule.metric in PROBE_METRICS else None
            if rule.metric in PROBE_METRICS:
                if test is None:  # e.g. no summarized source in either run, or no answerer grade
                    notes.append(f"untested: {strategy} {profile} {rule.metric}: no probe point both runs hold has a value for it")
                    continue
                if test.probes < test.min_probes:
                    notes.append(
                        f"{strategy} {profile} {rule.metric}: {test.probes} probes, fewer than the {test.min_probes} the sign-flip test "
                        f"needs to reach p < {alpha:g}; this rule cannot fail on these runs"
                    )
                base, cand, change = test.baseline, test.candidate, test.change
            else:
                if f"{rule.metric}_change" not in values:
                    raise GateError(f"metric {rule.metric!r} is missing from one of the runs")
                base, cand, change = values[f"{rule.metric}_baseline"], values[f"{rule.metric}_candidate"], values[f"{rule.metric}_change"]
            worse_by = -change if higher_is_better else change
            failed = bool(pd.notna(worse_by) and worse_by > rule.tolerance)
            if test is not None:
                failed = failed and test.p_value < alpha
                if test.lost or test.gained:
                    flipped.append(
                        f"{strategy} {profile} {rule.metric}: lost {len(test.lost)} ({_shown(test.lost, FLIPPED_SHOWN) or '–'}), "
                        f"gained {len(test.gained)} ({_shown(test.gained, FLIPPED_SHOWN) or '–'})"
                    )
            rows.append(
                {
                    "strategy": strategy, "profile": profile, "metric": rule.metric, "baseline": base, "candidate": cand,
                    "change": change, "tolerance": rule.tolerance, "p_value": test.p_value if test else None,
                    "probes": test.probes if test else None, "pairs": test.pairs if test else None,
                    "min_probes": test.min_probes if test else None, "failed": failed,
                }
            )
            if failed:
                failures.append(f"{strategy} {profile} {rule.metric}: {change:+.4g}")
    return GateResult(pd.DataFrame(rows), failures, notes, flipped)

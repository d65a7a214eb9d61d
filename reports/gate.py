"""Comparing two runs, and gating a change on the comparison (`bench compare`, `bench gate`).

First the two runs must be comparable (`comparability`): the same scenarios with the same
transcripts and probe files (sha256 from the manifests; each file read as the same format, with the
same import options, as the same session), the same strategies, profiles (each name's
definition too: window, tokenizer, prices, cache rules), answerer, judge, summarizer, probes,
options, usage mode, repeats and seed, the endpoint each model role was called at (`endpoints`, where
both manifests record it: `--api-base` or a provider's base-URL environment variable), the code that made
them (compaction_bench's source files and the measuring packages' versions, as `bench run --resume` compares
them), and every cell present in both; settings compared as they are read (strategies and profiles in any order, options as
the strategy parses them, the probe file by its content, a `--prompt` override by the text it rendered, an endpoint without its credentials). A difference
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
The baseline, candidate and change shown are what the tests are of: each probe weighing one, its value in a
repeat its mean over the points both runs reached there, a session's repeats averaged (for `answered` the repeats'
mean grade, not their majority). The tests' unit is the summary draw, not the probe (`draw_changes`): a summarizer writes each session's
summary afresh in every run and repeat, so the probes of one session in one run move together (a
probe-level test failed about one comparison of an unchanged prompt in five on one recorded session,
7–10% on two to five: the s45 audit). A draw is a (scenario, repeat) both runs hold, the baseline's
repeat r paired with the candidate's repeat r (under no change both are draws of one distribution, so
the draw's change is as likely negated); its change is the sum over its probes of candidate −
baseline in that repeat, scaled so that the draws' mean is the change shown (each probe weighing one), and it takes
the tolerance in proportion to its probes. A rule fails when the data show a drop larger than the tolerance: the
one-sided sign-flip test (`compaction_bench.metrics.stats`, exact up to 16 draws) of the draws' changes shifted by
their shares of the tolerance (`DrawTest.shifted`) finds the change below −tolerance, and the same test of the
changes themselves finds a drop at all (at tolerance 0 the two are one). The test of a drop at all is exact by design
(under no change a draw's change is as likely negated). The tolerance's is about these sessions, held fixed, as the
change shown is: exact when every draw's shifted change is symmetric about 0 at the boundary (one mean change per
probe in every draw), conservative where the draws' means differ but not their spreads, and approximate otherwise, as
every test of a mean on a few draws is: for skewed changes (a count that rises in most draws and falls by much in a
few), and for draws inside the tolerance and noisy beside draws beyond it and steady (the README gives the error
measured at the boundary). Until the forty-ninth pass the clustered bootstrap tested the tolerance, and with 8–16
draws a drop of exactly the tolerance failed a row 7–9% of the time at alpha 0.05. A drop whose estimate exceeds the
tolerance but whose test does not reach past it does not fail: the estimate alone would fail about half the
candidates whose true drop is the tolerance itself. The gate's tests are one family, its decision one claim, so
their p-values are adjusted together before they are compared with alpha (`JointFamily`,
`stats.step_down_min_p`, Westfall and Young's step-down min-p): one sign assignment flips a summary draw in every
row at once, so rows that count the same events cost about one test (Holm's method, used until the forty-eighth pass,
paid for each). The chance that a gate fails on some row without a real regression there stays at alpha
however many strategies, profiles and rules it tests (by design under no change, and where a tolerance is tested on
its test's symmetry). So a drop confined to one scenario of several,
or to fewer summary draws than the sign-flip test needs (the table's "min. draws": 5 at 0.05,
sessions × repeats), does not fail a rule: where its estimate is beyond the tolerance, its row reads
"undecided" (beyond tolerance, not significant), never "ok", and the headline says the gate passed
with undecided rows (exit 0: no rule failed); a row with fewer draws than that cannot fail whatever
the candidate does (one recorded session needs `--repeat`; only draws that can get worse count, not one whose baseline
is already the metric's worst), and is listed as such, not as a pass, and
so is a row the family puts out of reach: even with all its draws worse, the other rows as observed,
its adjusted p would not go below alpha (with m tests, `stats.min_units(alpha / m)` draws always
suffice, 8 for a family of 8 at 0.05; fewer do where rows change together). A
row whose shifted changes hold too few non-zero draws to reach alpha is no member of the family (Tarone's argument:
the tests are conditional on those draws, which no flip changes). At tolerance 0 they are the draws that changed, so
the strategies a change did not touch do not dilute the one it did; with a tolerance an unchanged draw is +tolerance,
so such rows are members (they cannot fail, and rows unchanged on the same draws count once). Taking members by the
changed draws instead is not valid with tolerances: whether a row changed in enough draws can depend on the very signs
the test flips (a candidate that trades a retention drop in some sessions for a failed request in the others failed
the family in 18 of its 256 sign patterns that way, 2 by the shifted changes: the forty-ninth pass's audit). A rule that no row could test, or that could fail on none,
leaves the gate untested unless another rule failed; each metric takes one rule. The
flipped probes are named by scenario and probe.
Other metrics show summary sums or means over the cells both runs hold (a change within `ROUNDING` of
the values is none: the same costs summed in another order). With a deterministic summarizer the runs
repeat exactly and they are compared exactly, with no test: a change is the change's. With a model
summarizer they are sampled too (a summary's length moves later compactions, overflows and costs;
compared exactly, two recordings of one unchanged prompt failed `failed_requests:0` or `overflows:0` in
6 of 6 pairs in the forty-sixth pass's audit), so they are tested per summary draw as the probe metrics
are (`metric_draws`: each draw's value from that repeat's requests and compactions alone,
`aggregate.draw_metrics`), in the same family, and a row fails only when the change shown is beyond
the tolerance as well. A metric without a value in one run is untested, and so is a cost either run
cannot know (a model without a price in litellm's map: shown as unpriced, its change as "cannot compare").
A rule no row of the runs can test is listed as untested in the notes. The result is a markdown
table for a pull-request comment, with what the decision rests on: the tests, and the summarizer
and answerer the probe metrics measure (an offline heuristic said to be one).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from compaction_bench.errors import BenchError, did_you_mean
from compaction_bench.llm import DEFAULT_SUMMARIZER, is_offline, redact_url
from compaction_bench.metrics.aggregate import (
    HEADLINE_KINDS,
    INTEGRITY_COLUMNS,
    RATE_WEIGHTS,
    combine,
    draw_metrics,
    held_weights,
    lacking_draw_columns,
    overall,
    silenced,
    voted_differences,
    votes,
)
from compaction_bench.metrics.cost import UNPRICED, format_dollars
from compaction_bench.metrics.stats import (
    SAMPLES,
    best_case_p,
    flip_ranks,
    min_units,
    shared_signs,
    signflip_p,
    step_down_min_p,
)
from compaction_bench.profiles import stored_profile
from compaction_bench.registry import strategy_class
from compaction_bench.reports.leaderboard import count_text
from compaction_bench.run_folder import INPUT_FILES, SCENARIO_IDENTITY, code_difference, strategy_file_key
from compaction_bench.store import load_run, read_manifest

#: metric -> (summary columns summed into it, True when higher is better, how scenarios combine)
METRICS: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "retention": (("retention",), True, "mean"),
    "summarized_source": (("retention_summarized_source",), True, "mean"),
    "answered": (("answered",), True, "mean"),
    "integrity": (INTEGRITY_COLUMNS, False, "sum"),
    "failed_requests": (("failed_requests",), False, "sum"),
    "overflows": (("overflows",), False, "sum"),
    "refused_requests": (("refused_requests",), False, "sum"),
    "silent_loss": (("silent_loss",), False, "sum"),
    "estimate_ape": (("estimate_ape",), False, "mean"),
    "cache_hit_rate": (("cache_hit_rate",), True, "mean"),
    "rebilled_tokens": (("rebilled_tokens",), False, "sum"),
    "cost": (("cost_usd",), False, "sum"),
}
#: Metrics whose value is unknown, not missing, where a run's model has no price (`cost.UNPRICED`).
UNKNOWABLE = ("cost",)
#: Metrics that are counts summed over a strategy's cells (requests, overflows, tokens): shown whole.
COUNTS = tuple(name for name, (_, _, how) in METRICS.items() if how == "sum" and name not in UNKNOWABLE)
#: What a change of such a metric is when either run's value is unknown.
NOT_COMPARABLE = "cannot compare"
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
#: A change of a summed or averaged metric no larger than this share of its values is rounding, not a change.
ROUNDING = 1e-9
#: The smallest `--alpha`: a Monte Carlo sign-flip test draws 2 × tests / alpha sign assignments, each over every draw.
MIN_ALPHA = 1e-3
#: Profile fields that describe it in words (the others define what a run measured).
PROFILE_WORDING = ("description",)
#: What a scenario's manifest entry says of how its file was read (`run_folder.SCENARIO_IDENTITY` but the hashes,
#: compared on their own): another format, import option or session of one file is another transcript.
IMPORT_IDENTITY = tuple(key for key in SCENARIO_IDENTITY if key not in ("sha256", "probes_sha256"))


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
            raise GateError(f"--fail-on {text!r}: unknown metric {metric!r}{did_you_mean(metric, METRICS)}; metrics: {', '.join(METRICS)}")
        if not colon or not value.strip():
            raise GateError(f"--fail-on {text!r}: a rule needs a tolerance, METRIC:TOLERANCE (e.g. {metric}:0.02, or {metric}:0 for any worsening)")
        try:
            tolerance = float(value)
        except ValueError:
            raise GateError(f"--fail-on {text!r}: tolerance {value!r} is not a number") from None
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise GateError(f"--fail-on {text!r}: the tolerance must be a finite number ≥ 0")
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
        return cls(path, read_manifest(path), load_run(path))

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

    def rename_strategies(self, names: Mapping[str, str]) -> None:
        """Call strategy `old` `names[old]` everywhere the gate reads it: the tables, the configured strategies, their
        options and the sha256 of their files (`align_plugins`)."""
        for table in self.tables.values():
            if "strategy" in table.columns:
                table["strategy"] = table["strategy"].map(lambda value: names.get(value, value))
        config = self.config
        config["strategies"] = [names.get(spec, spec) for spec in config.get("strategies") or ()]
        config["options"] = {names.get(spec, spec): value for spec, value in (config.get("options") or {}).items()}
        files = {strategy_file_key(before[0]): strategy_file_key(after[0]) for old, new in names.items()
                 if (before := _plugin_file(old)) is not None and (after := _plugin_file(new)) is not None}
        self.manifest = {**self.manifest, "config": config,
                         INPUT_FILES: {files.get(flag, flag): digest for flag, digest in (self.manifest.get(INPUT_FILES) or {}).items()}}

    def probe_ids(self) -> dict[tuple[str, str, str], set[str]]:
        """The probe ids with rows, per cell (scenario, strategy, profile)."""
        probes = self.tables["probes"]
        if probes.empty:
            return {}
        return {(str(a), str(b), str(c)): set(map(str, g)) for (a, b, c), g in probes.groupby(["scenario", "strategy", "profile"])["probe_id"]}


def _shown(values: Sequence[Any], limit: int = 5) -> str:
    items = [str(v) for v in values]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _plugin_file(spec: str) -> tuple[str, str, str] | None:
    """A strategy loaded from a file (`path/file.py:Class`, or a variant of one, `…@KEY=VALUE`) as (the name its
    file's sha256 is recorded under, `run_folder.strategy_file_key`; the class; the variant
    suffix); None for a registered strategy."""
    from compaction_bench.runner import variant_base

    name = variant_base(spec)
    return (name, name.partition(".py:")[2], spec[len(name):]) if ".py:" in name else None


def _plugin_identity(run: Run, spec: str) -> tuple[str, str, str] | None:
    """What makes a plug-in strategy the one it is: (its file's sha256 as the run recorded it, the class, the variant);
    None for a registered strategy or a run that recorded no sha256 for its file (a run before the record)."""
    parts = _plugin_file(spec)
    digest = (run.manifest.get(INPUT_FILES) or {}).get(strategy_file_key(parts[0])) if parts else None
    return (str(digest), parts[1], parts[2]) if parts and digest else None


def align_plugins(baseline: Run, candidate: Run) -> dict[str, str]:
    """Rename each plug-in strategy of the candidate that is one of the baseline's under another path (the same file
    content and class: a second checkout, say) to the baseline's name, so that the runs' cells pair; return the
    names changed (candidate's → baseline's). A plug-in compares by its content, not the path it was given by, as
    the probe file and a `--prompt` override do."""
    ours = [str(spec) for spec in baseline.config.get("strategies") or ()]
    theirs = [str(spec) for spec in candidate.config.get("strategies") or ()]
    by_identity = {identity: spec for spec in ours if (identity := _plugin_identity(baseline, spec)) is not None}
    names = {spec: by_identity[identity] for spec in theirs
             if spec not in ours and (identity := _plugin_identity(candidate, spec)) in by_identity and by_identity[identity] not in theirs}
    if names:
        candidate.rename_strategies(names)
    return names


def _plugin_differences(baseline: Run, candidate: Run) -> list[str]:
    """The plug-in strategies both runs name whose files' content differs (the sha256 each run recorded)."""
    files_a, files_b = baseline.manifest.get(INPUT_FILES) or {}, candidate.manifest.get(INPUT_FILES) or {}
    shared = {str(spec) for spec in baseline.config.get("strategies") or ()} & {str(spec) for spec in candidate.config.get("strategies") or ()}
    names = sorted({parts[0] for spec in shared if (parts := _plugin_file(spec)) is not None})
    out = []
    for name in names:
        before, after = files_a.get(strategy_file_key(name)), files_b.get(strategy_file_key(name))
        if before and after and before != after:
            out.append(f"strategy {name}: the file differs (sha256 {before[:12]} vs {after[:12]})")
    return out


def comparability(baseline: Run, candidate: Run) -> tuple[list[str], list[str]]:
    """(differences in inputs, differences in summary templates) between two runs (a plug-in strategy named by
    another path in each is compared once `align_plugins` has paired it)."""
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
        for key in IMPORT_IDENTITY:  # the same file read as another format, with other options, or another session of it
            if key in a[name] and key in b[name] and a[name][key] != b[name][key]:
                differences.append(f"scenario {name!r}: {key} differs ({a[name][key]!r} vs {b[name][key]!r}): another transcript of the same file")
        probes_a, probes_b = a[name].get("probes_sha256"), b[name].get("probes_sha256")
        if probes_a and probes_b and probes_a != probes_b:
            differences.append(f"scenario {name!r}: the probes differ (probes_sha256 {probes_a[:12]} vs {probes_b[:12]})")
    profiles_a, profiles_b = baseline.manifest.get("profiles") or {}, candidate.manifest.get("profiles") or {}
    for name in sorted(set(profiles_a) & set(profiles_b)):
        left, right = stored_profile(profiles_a[name] or {}), stored_profile(profiles_b[name] or {})  # an older run's prices in today's form
        changed = sorted(k for k in set(left) | set(right) if k not in PROFILE_WORDING and left.get(k) != right.get(k))
        if changed:
            differences.append(f"profile {name!r} is defined differently ({_shown(changed)})")
    config_a, config_b = baseline.config, candidate.config
    for key in SAME_CONFIG:
        if not _same_setting(key, config_a.get(key), config_b.get(key), _probes_hashed(a, b)):
            differences.append(f"{key} differs: baseline {config_a.get(key)!r}, candidate {config_b.get(key)!r}")
    differences += _plugin_differences(baseline, candidate)
    differences += _endpoint_differences(config_a.get("endpoints"), config_b.get("endpoints"))
    ids_a, ids_b = baseline.probe_ids(), candidate.probe_ids()
    shared_cells = baseline.cells() & candidate.cells()
    for cell in sorted(shared_cells):
        mine, theirs = ids_a.get(cell, set()), ids_b.get(cell, set())
        if mine != theirs:
            differences.append(f"{' · '.join(cell)}: the probes with rows differ ({_shown(sorted(mine ^ theirs))})")
    differences += [f"the code differs (baseline then, candidate now): {d}" for d in _code_differences(baseline.manifest, candidate.manifest)]
    templates: list[str] = []
    prompts_a, prompts_b = config_a.get("prompts") or {}, config_b.get("prompts") or {}
    # an override is compared by the text it rendered, not by its path: a copy of the stock template is no change;
    # only where either run records no text for it (a run before the record) do the paths tell
    overridden = sorted(name for name in set(prompts_a) | set(prompts_b) if prompts_a.get(name) != prompts_b.get(name))
    if any(_template_hash(baseline.manifest, name) is None or _template_hash(candidate.manifest, name) is None for name in overridden):
        templates.append(f"--prompt overrides: baseline {prompts_a}, candidate {prompts_b}")
    # The templates either run rendered, each compared with its text in the other run: the one that run rendered, else
    # the one its template set held (a template the other run's strategies never rendered is no change it measured)
    names = set(baseline.manifest.get("template_hashes") or {}) | set(candidate.manifest.get("template_hashes") or {})
    texts = {name: (_template_hash(baseline.manifest, name), _template_hash(candidate.manifest, name)) for name in sorted(names)}
    changed = [name for name, (x, y) in texts.items() if x is not None and y is not None and x != y]
    unknown = [name for name, (x, y) in texts.items() if x is None or y is None]
    if changed:
        templates.append(f"templates whose text differs: {', '.join(changed)}")
    if unknown:
        templates.append(f"templates one run rendered whose text in the other run is not recorded (a run before this record): {', '.join(unknown)}")
    return differences, templates


def _code_differences(baseline: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """The code that made two runs, where it differs: the measuring packages' versions and the sha256 of compaction_bench's
    source files (the git revision for a run made before that record), as `bench run --resume` compares them
    (`run_folder.code_difference`); the profiles it also compares are compared above, each in today's form."""
    def without_profiles(manifest: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in manifest.items() if key != "profiles"}

    return code_difference(without_profiles(baseline), without_profiles(candidate))


def _template_hash(manifest: dict[str, Any], name: str) -> str | None:
    """The sha256 of template `name` in a run: of the text its cells rendered, else of the text its template set held
    (`template_set_hashes`, recorded since 2026-12-05); None when the run records neither."""
    rendered = (manifest.get("template_hashes") or {}).get(name)
    return rendered if rendered is not None else (manifest.get("template_set_hashes") or {}).get(name)


def _probes_hashed(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> bool:
    """Whether every scenario both runs hold records its probes' sha256 in both (then they are compared by content)."""
    shared = set(a) & set(b)
    return bool(shared) and all(a[name].get("probes_sha256") and b[name].get("probes_sha256") for name in shared)


def _endpoint_differences(left: Any, right: Any) -> list[str]:
    """The model roles whose endpoint differs between two manifests' `endpoints` (`RunConfig.endpoints`: where
    each role's calls went, `--api-base` or the provider's base-URL environment variable; None the provider's own
    endpoint or an offline model), compared where both record the role: a run made before the record (no
    `endpoints`) compares by `api_base` alone, as it did."""
    if not isinstance(left, dict) or not isinstance(right, dict):
        return []
    return [f"the {role}'s endpoint differs: baseline {left[role]!r}, candidate {right[role]!r} (--api-base or the provider's "
            "base-URL environment variable, e.g. OPENAI_BASE_URL)"
            for role in sorted(set(left) & set(right)) if _endpoint(left[role]) != _endpoint(right[role])]


def _endpoint(value: Any) -> Any:
    """A recorded endpoint as compared: a URL without its credentials (`redact_url`), anything else as written."""
    return redact_url(value) if isinstance(value, str) else value


def _same_setting(key: str, left: Any, right: Any, probes_hashed: bool) -> bool:
    """Whether two runs' `config[key]` mean the same run: strategies and profiles in any order; options as the
    strategies read them (`0.50` is `.5`, a default given is the default); the probe file by its content where
    every scenario records it (`probes_sha256`, compared apart), not by the path it was given as."""
    if left == right:
        return True
    if key in ("strategies", "profiles") and isinstance(left, list) and isinstance(right, list):
        return sorted(map(str, left)) == sorted(map(str, right))
    if key == "probes":
        return probes_hashed
    if key == "api_base" and isinstance(left, str | None) and isinstance(right, str | None):
        return redact_url(left) == redact_url(right)  # a run recorded before its credentials were left out
    if key == "options" and isinstance(left, dict) and isinstance(right, dict):
        return all(_parsed_options(name, left.get(name)) == _parsed_options(name, right.get(name)) for name in set(left) | set(right))
    return False


def _parsed_options(strategy: str, values: Any) -> Any:
    """A strategy's options as it reads them, or the values as written when they cannot be read here (a strategy
    loaded from a file, which the gate does not run; an unknown strategy or option)."""
    if ".py:" in strategy:
        return values
    try:
        return dataclasses.asdict(strategy_class(strategy).parse_options(values))
    except BenchError:
        return values


def check_comparable(
    baseline: Run, candidate: Run, *, allow_different_inputs: bool = False, allow_offline_summarizer: bool = False, by: str = "gate"
) -> list[str]:
    """Raise `GateError` when the runs cannot be compared; return notes on what was allowed (`by`: what compares them,
    "gate" or "comparison", as the notes name it). A plug-in strategy of the candidate that is one of the baseline's
    at another path is renamed to the baseline's name first (`align_plugins`: the runs are changed in place)."""
    renamed = align_plugins(baseline, candidate)
    differences, templates = comparability(baseline, candidate)
    if differences and not allow_different_inputs:
        raise GateError(
            f"{baseline.root} and {candidate.root} are not comparable: " + "; ".join(differences)
            + " (--allow-different-inputs compares them anyway)"
        )
    notes = [f"the candidate's strategy {theirs} is the baseline's {ours}: the same file content, at another path"
             for theirs, ours in renamed.items()]
    notes += [f"allowed difference: {d}" for d in differences]
    summarizer = str(baseline.config.get("summarizer") or "")
    if templates and differences:  # the change a gate is usually about is named beside the differences it was allowed
        notes += [f"summary templates differ: {t}" for t in templates]
        if is_offline(summarizer):
            notes.append(f"the summarizer is {summarizer}, which does not read instruction wording: "
                         "what the template change does is not what these runs measure")
    if templates and not differences and is_offline(summarizer):
        explanation = (
            f"the runs differ only in summary templates ({'; '.join(templates)}) and the summarizer is {summarizer}, "
            "which does not read instruction wording (it takes section headings and its budget from the request), "
            f"so this {by} cannot see what the prompt change does; use a real summarizer (--summarizer MODEL, responses cached)"
        )
        if not allow_offline_summarizer:
            raise GateError(explanation + " or pass --allow-offline-summarizer")
        notes.append("allowed: " + explanation)
    return notes


# ---------------------------------------------------------------------------- summary metrics
def _shared_cells(summary: pd.DataFrame, cells: set[tuple[str, str, str]]) -> pd.DataFrame:
    keys = summary[["scenario", "strategy", "profile"]].astype(str).itertuples(index=False, name=None)
    return summary[[key in cells for key in keys]]


def _metric_values(run: dict[str, pd.DataFrame], cells: set[tuple[str, str, str]], columns_of_both: set[str]) -> pd.DataFrame:
    """Per (strategy, profile), every metric over `cells`: the summary's sums or means, and the probe
    metrics pooled as the run's leaderboard pools them (`overall`, each probe weighing one). A metric
    summed over several columns sums those `columns_of_both` runs have (a run made before a wire format
    was checked has no column for it: the other run's errors in that format would read as a change)."""
    frame = _shared_cells(run["summary"], cells)
    out = {}
    for name, (columns, _, how) in METRICS.items():
        present = [c for c in columns if c in frame.columns and c in columns_of_both]
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
    columns_of_both = set(baseline.tables["summary"].columns) & set(candidate.tables["summary"].columns)
    left = _metric_values(baseline.tables, shared, columns_of_both)
    right = _metric_values(candidate.tables, shared, columns_of_both)
    both = left.add_suffix("_baseline").join(right.add_suffix("_candidate"), how="inner")
    for name in left.columns.intersection(right.columns):
        before, after = both[f"{name}_baseline"], both[f"{name}_candidate"]
        change = after - before
        # sums of the same costs added in another order (repeats averaged, cells merged) differ in their last bits
        both[f"{name}_change"] = change.mask(change.abs() <= ROUNDING * pd.concat([before.abs(), after.abs()], axis=1).max(axis=1), 0.0)
    return both


# ---------------------------------------------------------------------------- probe tests
def shifted_changes(changes: Sequence[float], weights: Sequence[float], tolerance: float) -> list[float]:
    """Each draw's change plus its share of the tolerance (its weight times the tolerance), rounded to 12 decimals so
    that a drop of exactly the tolerance is 0: what the tolerance's sign-flip test flips (`DrawTest.shifted`)."""
    return [round(change + tolerance * weight, 12) for change, weight in zip(changes, weights, strict=True)]


@dataclass(frozen=True)
class DrawTest:
    """The gate's test of one metric on the summary draws (a scenario in one repeat) both runs hold."""

    #: the larger of the one-sided sign-flip tests' p-values of a drop beyond the tolerance (the changes shifted by it)
    #: and of a drop at all (the same test at tolerance 0: with a tolerance of 0 the two are one)
    p_value: float
    #: what the tests' changes are shifted by: the gate's joint test flips `shifted`, each change plus this times the
    #: draw's weight
    tolerance: float
    #: the summary draws (scenario × repeat) the test's unit is, from this many scenarios and repeats
    draws: int
    sessions: int
    repeats: int
    #: the draws whose shifted change is not 0 (at tolerance 0, those that changed): the joint test's sample for the
    #: row, which its flips leave as it is, so the gate's family takes its members by it (Tarone's argument)
    changed: int
    min_draws: int  # the fewest draws that must worsen before the sign-flip test can reject
    #: each draw's (scenario, repeat, change), the change in the metric's good direction (a drop is negative), scaled so
    #: that the draws' mean is the change the row shows
    changes: tuple[tuple[str, int, float], ...]
    #: each draw's share of what the change shown weighs (a probe metric's probes: `draw_changes`), times the number of
    #: draws, so they average 1: the tolerance it takes (1 each where every draw weighs alike)
    weights: tuple[float, ...]
    #: the draws (scenario, repeat) that cannot get worse, the baseline's value already the metric's worst (every probe
    #: of a session lost, a hit rate of 0): a row can fail only on the others
    stuck: tuple[tuple[str, int], ...]

    @property
    def worsenable(self) -> int:
        """The draws that could get worse: what a row needs `min_draws` of before it can fail."""
        return self.draws - len(self.stuck)

    @property
    def shifted(self) -> tuple[tuple[str, int, float], ...]:
        """Each draw's change plus its share of the tolerance (`weights`; rounded to 12 decimals: a drop of exactly the
        tolerance is 0): what the tolerance's sign-flip test flips, below 0 in sum when the drop shown is beyond the
        tolerance."""
        shifted = shifted_changes([change for _, _, change in self.changes], self.weights, self.tolerance)
        return tuple((scenario, repeat, moved) for (scenario, repeat, _), moved in zip(self.changes, shifted, strict=True))

    @property
    def all_worse(self) -> tuple[tuple[str, int, float], ...]:
        """`shifted` as it would be with every draw that can get worse far worse (a flip of one outweighs all the draws
        that cannot, together) and those that cannot unchanged (at + their share of the tolerance): the data most likely
        to fail the row, `JointFamily.best_case`'s."""
        stuck = set(self.stuck)
        unchanged = shifted_changes([0.0] * len(self.changes), self.weights, self.tolerance)
        far = 1.0 + 2.0 * sum(shift for (scenario, repeat, _), shift in zip(self.changes, unchanged, strict=True) if (scenario, repeat) in stuck)
        return tuple((scenario, repeat, shift if (scenario, repeat) in stuck else -far)
                     for (scenario, repeat, _), shift in zip(self.changes, unchanged, strict=True))


@dataclass(frozen=True)
class ProbeTest(DrawTest):
    """A probe metric's `DrawTest` with what it describes of the probes (voted over the repeats)."""

    baseline: float
    candidate: float
    change: float
    probes: int
    pairs: int
    lost: tuple[str, ...]  # scenario/probe present (or right) in the baseline and absent (or wrong) in the candidate somewhere
    gained: tuple[str, ...]
    #: the summary draws one run holds and the other lacks (a failed repeat), named with the run that holds them: the
    #: row's figures and its test leave them out (`unshared_probe_draws`)
    unshared: tuple[str, ...] = ()


def draw_test(draws: pd.DataFrame, alpha: float, tolerance: float = 0.0, family: int = 1, *, two_sided: bool = False) -> DrawTest:
    """The test of the draws' changes (`draws`: one row per (scenario, repeat) with its `change`, in the metric's good
    direction, so a drop is negative and the draws' mean is the change shown; its `weight`, the draw's share of the
    tolerance, 1 where absent; and, where some draw's baseline is already the metric's worst value, `stuck` True
    there): its p-value (unadjusted) is the larger of two one-sided sign-flip tests' (`stats.signflip_p`, exact up to
    `stats.EXACT_FLIPS` draws, Monte Carlo beyond), that the changes shifted by their shares of `tolerance` sum below 0
    (the change is beyond the tolerance) and that the changes do (a drop at all).

    Under no change each draw's change is as likely negated (both runs' repeat r are draws of one distribution), so
    the test of a drop at all is exact by design. The tolerance's is exact when each draw's shifted change is symmetric
    about 0 at the boundary, its sessions held fixed, and conservative where the draws' means differ but not their
    spreads; otherwise (skewed changes, noisy draws inside the tolerance beside steady ones beyond it) it is
    approximate, as every test of a mean on a few draws is (the README gives the error measured at the boundary).

    `family` is the number of tests adjusted together: a Monte Carlo test's resamples are enough for a p-value, never
    below 1/(samples + 1), to reach alpha / family. `two_sided` (at tolerance 0, `bench compare`'s tags) tests a change
    either way: the share of sign assignments whose sum is as far from 0 as the observed one or farther."""
    if two_sided and tolerance:
        raise ValueError("a two-sided draw test has no tolerance")
    changes = draws["change"].astype(float).tolist()
    weights = tuple(draws["weight"].astype(float).tolist()) if "weight" in draws.columns else (1.0,) * len(draws)
    shifted = shifted_changes(changes, weights, tolerance)
    samples = max(SAMPLES, math.ceil(2 * family / alpha))
    p_value = signflip_p(changes, two_sided=two_sided, samples=samples)
    if tolerance:
        p_value = max(p_value, signflip_p(shifted, samples=samples))
    return DrawTest(
        p_value=p_value,
        tolerance=tolerance,
        draws=len(draws),
        sessions=int(draws["scenario"].nunique()),
        repeats=int(draws["repeat"].nunique()),
        changed=int(np.count_nonzero(shifted)),
        min_draws=min_units(alpha),  # the sign-flip test's smallest sample, here of draws
        changes=tuple(zip(map(str, draws["scenario"].tolist()), map(int, draws["repeat"].tolist()), changes, strict=True)),
        weights=weights,
        stuck=tuple((str(scenario), int(repeat)) for scenario, repeat in draws.loc[draws["stuck"], ["scenario", "repeat"]].itertuples(index=False))
        if "stuck" in draws.columns else (),
    )


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


def draw_changes(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per summary draw, a (scenario, repeat) both runs hold (the baseline's repeat r paired with the candidate's
    repeat r), the change (`change`): the sum over the draw's probes of each probe's mean candidate − baseline over
    its headline points in that repeat (a point a repeat reaches twice pairs by occurrence, as `aggregate.votes`
    pairs it), scaled so that the draws' mean is the change shown, each probe weighing one: a draw of scenario s, one
    of its R_s among N draws, with P probes in all (a scenario's probes over its repeats, summed over the scenarios),
    is its sum × N / (R_s · P). Its `weight`, its probes × N / (R_s · P), is its share of the tolerance: the shifted
    changes sum below 0 exactly when the change shown is beyond the tolerance, and a draw of many probes takes as much
    more of it as it weighs more in the change (with each draw the mean of its probes, the test was of the sessions'
    mean change, each session weighing one, and a drop of exactly the tolerance in the change shown, concentrated in
    the small sessions, failed 5 of 16 equally likely patterns: the forty-ninth pass's audit). A summarizer writes a
    session's summary afresh in every run and repeat, so the probes of one draw move together: the draw, not the
    probe, is what varies independently, and under no change each draw's change is as likely negated (both runs'
    repeat r are draws of one distribution). `frame` holds the rows labelled `baseline` and `candidate`
    (`_labelled`). `stuck` marks a draw whose baseline holds no point with a value above 0 (every probe lost, or
    wrong): it cannot get worse. `baseline` and `candidate` are its probes' values, scaled as its change is: their
    means over the draws are the row's baseline and candidate, and their difference its change. Where an answer
    failed, an answer grade's points are weighed within their draw as the tables weigh them (`aggregate.held_weights`:
    a point both runs were asked at survives failures less often than one where a run's context overflowed), and a
    probe weighs the share of its points its graded ones stand for, in place of one."""
    rows = frame[frame["point_kind"].isin(HEADLINE_KINDS)]
    rows = rows.assign(repeat=rows["repeat"] if "repeat" in rows.columns else 0, value=pd.to_numeric(rows[column], errors="coerce"))
    point = ["scenario", "repeat", "probe_id", "point_kind", "step"]
    if "request" in rows.columns:  # one row per request, in request order
        rows = rows.drop_duplicates([*point, "strategy", "request"]).sort_values("request", kind="stable")
    rows = rows.assign(occurrence=rows.groupby([*point, "strategy"], sort=False).cumcount())
    # where an answer failed, each graded point weighs for the failed points of its kind in its draw (`answer_weights`)
    held = held_weights(rows, [*point, "occurrence"], ["scenario", "repeat", "probe_id"], column, within=["scenario", "repeat"])
    if held is not None:
        rows = rows.assign(weight=held[0])
    rows = rows.dropna(subset=["value"])
    pair = rows.groupby([*point, "occurrence"], sort=False).ngroup().to_numpy()  # the point both runs' rows pair on
    value = rows["value"].to_numpy(dtype=float)
    sign = np.where(rows["strategy"].to_numpy() == "candidate", 1.0, -1.0)
    paired = np.bincount(pair, minlength=pair.max(initial=-1) + 1)[pair] == 2  # held by both runs
    unit = rows[["scenario", "repeat", "probe_id"]][paired]
    probe = unit.groupby(["scenario", "repeat", "probe_id"], sort=False).ngroup().to_numpy()
    weight = rows["weight"].to_numpy(dtype=float)[paired] if held is not None else np.ones(int(paired.sum()))
    # per probe: its paired points' weight (each point's two rows), and the weighted mean over them of the candidate's
    # value, and of the baseline's
    points = np.bincount(probe, weights=weight) / 2
    candidate = np.bincount(probe, weights=(np.where(sign > 0, value, 0.0)[paired]) * weight) / points
    baseline = np.bincount(probe, weights=(np.where(sign < 0, value, 0.0)[paired]) * weight) / points
    kept = baseline > 0  # the baseline has something to lose
    probes = rows[paired].assign(probe=probe).drop_duplicates("probe")[["scenario", "repeat"]]
    # a probe weighs one, or, where answers failed, its graded points' weight over its points both runs hold
    share = 1.0 if held is None else points / held[1].reindex(pd.MultiIndex.from_frame(unit.drop_duplicates())).to_numpy()
    per_draw = pd.DataFrame({"baseline": baseline * share, "candidate": candidate * share, "probes": share, "kept": kept},
                            index=pd.MultiIndex.from_frame(probes))
    draws = per_draw.groupby(level=["scenario", "repeat"], sort=False).agg(
        baseline=("baseline", "sum"), candidate=("candidate", "sum"), probes=("probes", "sum"), kept=("kept", "any"))
    repeats = draws.groupby(level="scenario", sort=False)["probes"].transform("size")
    # each draw's share of the probes the row weighs (a session's probes, over its repeats), times the draws
    scale = len(draws) / (draws["probes"] / repeats).sum() / repeats
    return pd.DataFrame({
        "change": ((draws["candidate"] - draws["baseline"]) * scale).round(12),  # a sum of thirds that is 0 stays 0
        "weight": draws["probes"] * scale,
        "stuck": ~draws["kept"],
        "baseline": draws["baseline"] * scale,
        "candidate": draws["candidate"] * scale,
    }).reset_index()


def _probe_rows(runs: tuple[Run, Run], strategy: str, profile: str, metric: str) -> pd.DataFrame | None:
    """Both runs' probe rows of the strategy and profile, labelled `baseline` and `candidate` (`_labelled`), for
    `summarized_source` only the points whose source went into a summary in both runs, repeat by repeat; None when
    no row has the metric's column or none is left."""
    frame = silenced(_labelled(runs, strategy, profile))  # a run whose answerer answered nothing has no grade to compare
    if frame.empty or PROBE_METRICS[metric] not in frame.columns:
        return None
    if "point_kind" not in frame.columns:
        frame = frame.rename(columns={"point": "point_kind"})
    if metric == "summarized_source":
        point = [k for k in ("scenario", "repeat", "probe_id", "point_kind", "step") if k in frame.columns]
        marked = frame[frame["source_summarized"].astype(bool)] if "source_summarized" in frame.columns else frame.iloc[:0]
        both = marked.groupby(point, sort=False)["strategy"].nunique()
        keys = set(both[both == 2].index)
        frame = frame[[k in keys for k in frame[point].itertuples(index=False, name=None)]]
    return None if frame.empty else frame


def probe_draw_test(
    runs: tuple[Run, Run], strategy: str, profile: str, metric: str, alpha: float, tolerance: float = 0.0, family: int = 1,
    *, two_sided: bool = False,
) -> DrawTest | None:
    """`probe_test`'s test alone, without the description of the probes (all `bench compare`'s tags read): None
    without a summary draw both runs hold."""
    frame = _probe_rows(runs, strategy, profile, metric)
    draws = draw_changes(frame, PROBE_METRICS[metric]) if frame is not None else None
    return draw_test(draws, alpha, tolerance, family, two_sided=two_sided) if draws is not None and len(draws) else None


def probe_test(
    runs: tuple[Run, Run], strategy: str, profile: str, metric: str, alpha: float, tolerance: float = 0.0, family: int = 1,
    *, two_sided: bool = False,
) -> ProbeTest | None:
    """The paired test of one probe metric for one (strategy, profile): `draw_test` of its summary draws'
    changes (`draw_changes`: a scenario in one repeat; `two_sided` as there); None without shared pairs. The
    baseline, candidate and change shown are the draws' means, what the test is of: each probe weighing one, its value
    in a repeat its mean over the points both runs reached there, a session's repeats averaged (for `answered` the
    repeats' mean grade, where the runs' tables take their majority; without a draw both runs hold, the voted
    figures). The probes, pairs and flipped probes describe the probes voted over the repeats, as the runs' own tables
    do."""
    frame = _probe_rows(runs, strategy, profile, metric)
    if frame is None:
        return None
    column = PROBE_METRICS[metric]
    voted = votes(frame)
    diffs = voted_differences(voted, "baseline", "candidate", column=column, rows=HEADLINE_KINDS)
    if diffs.empty:
        return None
    voted = voted[voted["point_kind"].isin(HEADLINE_KINDS)].dropna(subset=[column])
    point = ["scenario", "probe_id", "point_kind", "step"]
    table = voted.pivot_table(index=point, columns="strategy", values=column, aggfunc="first").dropna()
    per_probe = table.astype(float).groupby(level=["scenario", "probe_id"]).mean()

    def named(mask: pd.Series) -> tuple[str, ...]:
        flipped = table[mask].index
        return tuple(dict.fromkeys(f"{scenario}/{probe}" for scenario, probe in zip(flipped.get_level_values("scenario"), flipped.get_level_values("probe_id"), strict=True)))

    draws = draw_changes(frame, column)
    tested = draw_test(draws, alpha, tolerance, family, two_sided=two_sided)
    held = len(draws) > 0
    return ProbeTest(
        **dataclasses.asdict(tested),
        baseline=float(draws["baseline"].mean() if held else per_probe["baseline"].mean()),
        candidate=float(draws["candidate"].mean() if held else per_probe["candidate"].mean()),
        change=float(draws["change"].mean() if held else diffs["difference"].mean()),
        probes=len(diffs),
        pairs=int(diffs["pairs"].sum()),
        lost=named(table["baseline"].astype(bool) & ~table["candidate"].astype(bool)),
        gained=named(~table["baseline"].astype(bool) & table["candidate"].astype(bool)),
        unshared=tuple(unshared_probe_draws(frame)),
    )


def unshared_probe_draws(frame: pd.DataFrame) -> list[str]:
    """The summary draws (scenario, repeat) whose probe rows one run holds and the other lacks (`frame` as
    `_labelled` makes it), named with the run that holds them, as `unshared_draws` names them for the other metrics."""
    rows = frame.assign(repeat=frame["repeat"] if "repeat" in frame.columns else 0)
    baseline, candidate = (_draw_keys(rows[rows["strategy"] == label]) for label in ("baseline", "candidate"))
    return _held_by_one(baseline, candidate)


def sampled_summaries(runs: tuple[Run, Run]) -> bool:
    """Whether a model wrote either run's summaries: its repeats and recordings are then draws, and every metric a
    summary's length moves (later compactions, overflows, costs) varies between two recordings of one prompt."""
    return any(not is_offline(model) for model in _models(runs, "summarizer"))


def metric_draws(draws: tuple[pd.DataFrame, pd.DataFrame], strategy: str, profile: str, metric: str) -> pd.DataFrame:
    """Per summary draw (a (scenario, repeat) both runs' `aggregate.draw_metrics` hold for the strategy and profile, with
    a value of `metric` in both), the change of a metric outside the probes in its good direction (`draw_test`'s
    input). A summed metric's change is scaled so that the draws' mean is the change the table shows (each
    scenario's mean over its repeats, summed over scenarios): a draw of scenario s with R_s draws among N weighs
    N / R_s. A rate's (`aggregate.RATE_WEIGHTS`: the table shows the pooled ratio, each draw's rate r weighing what it
    is a share of, a = the tokens that could hit the cache or the requests with an estimate, over its scenario's R_s
    repeats) is the pooled ratio's change linearized (the delta method): with ā the two runs' mean amount a / R_s, r̄
    their mean rate and R the ratio pooled over both runs, N · (ā · (r_c − r_b) + (a_c − a_b) / R_s · (r̄ − R)) / Σ ā.
    A swap of the runs only negates it (ā, r̄ and R do not move), and the draws' mean is the change shown up to second
    order in the runs' differences (exactly when their amounts agree); without the second term, a candidate that only
    moved its tokens towards its high-rate sessions read as a drop. Its share of the tolerance (`weight`) is N · ā / Σ
    ā. `stuck` marks a draw that cannot get worse (a hit rate already 0). Empty when no draw has a value in both
    runs."""
    columns, higher_is_better, how = METRICS[metric]
    present = [c for c in columns if all(c in frame.columns for frame in draws)]
    amount = RATE_WEIGHTS.get(present[0]) if how == "mean" and len(present) == 1 else None
    weighed_by = amount if amount is not None and all(amount in frame.columns for frame in draws) else None
    values = []
    for frame in draws:
        cell = frame[(frame["strategy"] == strategy) & (frame["profile"] == profile)]
        values.append(cell[["scenario", "repeat"]].assign(value=cell[present].astype(float).sum(axis=1, min_count=1),
                                                          amount=cell[weighed_by].astype(float) if weighed_by else 1.0))
    both = values[0].merge(values[1], on=["scenario", "repeat"], suffixes=("_baseline", "_candidate")).dropna()
    before, after = both["value_baseline"].astype(float), both["value_candidate"].astype(float)
    change = (after - before).mask((after - before).abs() <= ROUNDING * np.maximum(before.abs(), after.abs()), 0.0)
    repeats = both.groupby("scenario")["scenario"].transform("size")
    weight = pd.Series(1.0, index=both.index)
    if how == "sum" and len(both):
        change = change * len(both) / repeats
    elif weighed_by and len(both):
        base_amount, cand_amount = both["amount_baseline"] / repeats, both["amount_candidate"] / repeats
        mean_amount = (base_amount + cand_amount) / 2
        if mean_amount.sum() > 0:
            pooled = (base_amount * before + cand_amount * after).sum() / (base_amount + cand_amount).sum()
            moved = (cand_amount - base_amount) * ((before + after) / 2 - pooled)  # the pooled ratio's change of composition
            weight = mean_amount * len(both) / mean_amount.sum()
            change = (weight * change + len(both) * moved / mean_amount.sum()).round(12)
    if not higher_is_better:
        change = -change
    # a rate that only rises when it improves (the cache hit rate) cannot fall below 0; counts and costs can always rise
    stuck = (before <= 0) if higher_is_better else pd.Series(False, index=both.index)
    return pd.DataFrame({"scenario": both["scenario"], "repeat": both["repeat"], "change": change, "weight": weight, "stuck": stuck})


def unshared_draws(draws: tuple[pd.DataFrame, pd.DataFrame], strategy: str, profile: str) -> list[str]:
    """The summary draws (scenario, repeat) of the strategy and profile that one run's `aggregate.draw_metrics` holds and
    the other's lacks (a failed repeat), named with the run that holds them: the figure shown averages each run's own
    repeats while the test pairs the draws both hold, so the two would measure different things."""
    baseline, candidate = (_draw_keys(frame[(frame["strategy"] == strategy) & (frame["profile"] == profile)]) for frame in draws)
    return _held_by_one(baseline, candidate)


def _draw_keys(frame: pd.DataFrame) -> set[tuple[str, int]]:
    return {(str(scenario), int(repeat)) for scenario, repeat in frame[["scenario", "repeat"]].itertuples(index=False, name=None)}


def _held_by_one(baseline: set[tuple[str, int]], candidate: set[tuple[str, int]]) -> list[str]:
    """The draws (scenario, repeat) one run holds and the other lacks, named with the run that holds them."""
    return [f"{scenario} repeat {repeat} ({label} only)" for label, mine, other in (("baseline", baseline, candidate), ("candidate", candidate, baseline))
            for scenario, repeat in sorted(mine - other)]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


#: A row's verdict: it failed, it passed, its drop is beyond the tolerance but not significant, it could not fail (too
#: few summary draws), or it could not be computed.
FAIL, OK, UNDECIDED, CANNOT_FAIL, UNTESTED = "fail", "ok", "undecided", "cannot fail", "untested"


@dataclass
class GateResult:
    table: pd.DataFrame
    failures: list[str]
    notes: list[str] = field(default_factory=list)
    flipped: list[str] = field(default_factory=list)
    #: what the decision rests on: the tests and the models the probe metrics measure
    basis: list[str] = field(default_factory=list)
    #: the rules (`METRIC:TOLERANCE`) that no row could test, or that could fail on none (see `notes`)
    untested_rules: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def undecided(self) -> list[str]:
        """The rows whose estimated drop is beyond the tolerance but not significant: the data neither show a regression
        nor its absence (a drop carried by one scenario of a few, say), so the pass they leave is no "no regression"."""
        if self.table.empty:
            return []
        rows = self.table[self.table["status"] == UNDECIDED]
        return [f"{r.strategy} {r.profile} {r.metric}: {change_figure(r.change, str(r.metric))}" for r in rows.itertuples(index=False)]

    @property
    def tested(self) -> bool:
        """Whether every rule could have failed on some row: a rule untested on every row, or that could
        fail on none (too few summary draws; see `notes`), leaves the gate undecided unless another rule failed."""
        return not self.table.empty and not self.untested_rules

    def markdown(self) -> str:
        # The adjustment is named only where it was made: rows outside the family (too few changed summary draws
        # to reach alpha) show their own p-value, marked so where others were adjusted.
        family = bool(self.table["adjusted"].any()) if "adjusted" in self.table.columns else False
        lines = [
            f"| strategy | profile | metric | baseline | candidate | change | tolerance | p (one-sided{', adjusted' if family else ''}) | probes (pairs) | "
            "summary draws | min. draws | verdict |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in self.table.to_dict("records"):
            p = "–" if _missing(row["p_value"]) else f"{row['p_value']:.3g}" + (" (not adjusted)" if family and not row["adjusted"] else "")
            probes = "–" if _missing(row["probes"]) else f"{int(row['probes'])} ({int(row['pairs'])})"
            draws = "–" if _missing(row["draws"]) else f"{int(row['draws'])}"
            needed = "–" if _missing(row["min_draws"]) else f"{int(row['min_draws'])}"
            status = row.get("status") or (FAIL if row["failed"] else OK)
            # a row with the draws its own test needs cannot fail because of the family (the notes give its best p)
            own = row.get("worsenable", row["draws"])  # the draws that could get worse (a table written before it counts them all)
            few = "too few summary draws" if _missing(own) or own < row["min_draws"] else "too few summary draws for the family"
            shown = {FAIL: "**fail**", OK: "ok", UNDECIDED: "**undecided**: beyond tolerance, not significant",
                     CANNOT_FAIL: f"cannot fail ({few})", UNTESTED: "untested"}[status]
            lines.append(
                f"| {row['strategy']} | {row['profile']} | {row['metric']} | {metric_figure(row['baseline'], row['metric'])} | "
                f"{metric_figure(row['candidate'], row['metric'])} | {change_figure(row['change'], row['metric'])} | {row['tolerance']:,.15g} | {p} | {probes} | {draws} | {needed} | {shown} |"
            )
        verdict = "passed" if self.passed else f"failed ({len(self.failures)} regression{'s' if len(self.failures) > 1 else ''})"
        if self.passed and self.undecided:
            verdict = (f"passed with {len(self.undecided)} undecided row{'s' if len(self.undecided) > 1 else ''} (a drop beyond the "
                       f"tolerance that the tests cannot confirm: {'; '.join(self.undecided)})")
        if self.passed and not self.tested:
            verdict = (f"untested ({', '.join(self.untested_rules)} could not be applied to these runs, or could fail on none of their rows)"
                       if self.untested_rules else "untested (no rule could be applied to these runs)")
        out = [f"**compaction-bench gate: {verdict}**", "", *lines]
        if self.flipped:
            out += ["", "Flipped probes (baseline → candidate):", *[f"- {line}" for line in self.flipped]]
        if self.basis:
            out += ["", "What the decision rests on:", *[f"- {line}" for line in self.basis]]
        if self.notes:
            out += ["", *[f"> {note}" for note in self.notes]]
        return "\n".join(out)


def metric_figure(value: Any, metric: str, fmt: str = "{:.4g}") -> str:
    """A run's value of a gate metric for a table (`fmt` a `str.format` pattern): a cost by the dollars rule
    (`cost.format_dollars`, an unknown one as `unpriced`), a count (`COUNTS`) whole with thousands separators
    (`leaderboard.count_text`: 1,234,567 tokens, not 1.235e+06), any other missing value as an en dash."""
    if metric in UNKNOWABLE:
        return format_dollars(value, fmt)
    if _missing(value):
        return "–"
    return count_text(value) if metric in COUNTS else fmt.format(value)


def change_figure(change: Any, metric: str) -> str:
    """The change of a gate metric between two runs, signed; `NOT_COMPARABLE` where either run's cost is unknown."""
    if metric in UNKNOWABLE and _missing(change):
        return NOT_COMPARABLE
    if metric in COUNTS and not _missing(change):
        return ("-" if change < 0 else "+") + count_text(abs(change))
    return metric_figure(change, metric, "{:+.4g}")


def _too_few_draws_note(row: str, test: DrawTest, alpha: float) -> str:
    """Why a rule tested per summary draw cannot fail on a row, in the user's terms: its draws (sessions × repeats) that
    could get worse are fewer than the sign-flip test needs to reach alpha, however many probes or requests they hold."""
    counted = f"{test.sessions} session{'' if test.sessions == 1 else 's'} × {test.repeats} repeat{'' if test.repeats == 1 else 's'}"
    held = (
        f"the probes of one session in one run share its summary, so they count once however many there are ({test.probes} here)"
        if isinstance(test, ProbeTest)
        else "a session's requests and compactions in one run follow its summaries, so they are one draw of this metric"
    )
    stuck = (f", of which {len(test.stuck)} cannot get worse (the baseline's value there is already the metric's worst: "
             f"{_shown([f'{scenario} repeat {repeat}' for scenario, repeat in test.stuck])}), so {test.worsenable} could" if test.stuck else "")
    return (
        f"{row}: {test.draws} summary draw{'' if test.draws == 1 else 's'} ({counted}){stuck}, fewer than the {test.min_draws} "
        f"the sign-flip test needs to reach p < {alpha:g}; {held}: this rule cannot fail on these runs, so its row is no "
        "pass; record more sessions or use --repeat"
    )


def _out_of_reach_note(rows: Sequence[str], family: int, enough: int, alpha: float) -> str:
    """Why rows with enough summary draws for one test cannot fail among the gate's `family` tests adjusted together."""
    return (
        f"cannot fail: the gate's {family} tests are adjusted together, and even with every one of their summary draws worse "
        f"(the other rows as observed) these rows would not reach p < {alpha:g} (their draws and that p in brackets): "
        f"{_shown(rows, FLIPPED_SHOWN)}. They are no pass: {enough} draws, every one worse, fail whatever the other rows show "
        "(fewer do where rows change together: the joint test counts them about once); record more sessions, use --repeat, or "
        "gate fewer rules"
    )


def _untested_note(strategy: str, profile: str, metric: str, base: Any, cand: Any) -> str:
    """Why a rule of an exact metric could not be applied: a run without a value for it, or an unpriced cost."""
    lacking = "both runs" if _missing(base) and _missing(cand) else "the baseline" if _missing(base) else "the candidate"
    if metric in UNKNOWABLE:
        return (f"untested: {strategy} {profile} {metric}: {UNPRICED} in {lacking} (a model without a price in litellm's map), "
                "so the costs cannot be compared")
    return f"untested: {strategy} {profile} {metric}: no value in {lacking}"


def _models(runs: tuple[Run, Run], key: str) -> list[str]:
    """The model of `key` (summarizer, answerer) in each run, once when the runs agree."""
    defaults = {"summarizer": DEFAULT_SUMMARIZER, "answerer": ""}
    return list(dict.fromkeys(str(run.config.get(key, defaults[key]) or "") for run in runs))


def _basis(runs: tuple[Run, Run], rules: Sequence[Rule], tests: int, alpha: float) -> list[str]:
    """What the gate's decision rests on, in words: the tests of the probe rules and their adjustment, how the other
    metrics are compared (tested per summary draw with a model's summaries, exactly with a deterministic summarizer's),
    and the summarizer and answerer the probe metrics measure, an offline heuristic named as one."""
    metrics = {rule.metric for rule in rules}
    adjusted = (f"adjusted over the gate's {tests} tests (one decision: jointly, one sign flip of a summary draw in every row at "
                "once, so rows that move together count about once), " if tests > 1 else "")
    test = (
        "a row fails when the one-sided sign-flip test of the draws' changes shifted by their shares of its tolerance puts "
        "the drop beyond it (exact when each shifted change is symmetric about 0, approximate for skewed changes) and the same test of "
        f"the changes finds a drop at all: the larger of the two p-values, {adjusted}below alpha {alpha:g}"
    )
    out = []
    if metrics & set(PROBE_METRICS):
        out.append(
            f"{', '.join(m for m in PROBE_METRICS if m in metrics)}: per strategy and profile on the probe points both runs hold, each "
            "probe weighing one; the tests' unit is the summary draw (a session in one repeat: its probes share its summary), "
            f"each draw's change its probes' summed, scaled so the draws' mean is the change shown (a probe's value in a repeat its "
            f"mean over the points both runs reached, a session's repeats averaged), and its share of the tolerance its share of the probes; {test}"
        )
    others = [m for m in METRICS if m in metrics and m not in PROBE_METRICS]
    if others:
        sampled = [model for model in _models(runs, "summarizer") if not is_offline(model)]
        out.append(
            f"{', '.join(others)}: the runs' sums or means over the same cells; "
            + (f"the summaries of {', '.join(sampled)} are sampled, and a summary's length moves later compactions, overflows and "
               "costs, so two recordings of one unchanged prompt differ in these too (compared exactly, the forty-sixth pass's "
               "audit failed failed_requests:0 or overflows:0 in 6 of 6 such pairs): they are tested per summary draw, each "
               "draw's change its session's value in that repeat, candidate − baseline (a sum's scaled so the draws' mean is "
               "the change shown; a rate's the pooled ratio's change linearized, each draw weighing its share of the tokens or requests "
               f"pooled, in its change and in its share of the tolerance), and the change shown must be beyond the tolerance too; {test}"
               if sampled else "compared exactly (no test): with a deterministic summarizer the runs repeat exactly, so a change is the change's")
        )
    if metrics & {"retention", "summarized_source"}:
        for model in _models(runs, "summarizer"):
            if is_offline(model):
                out.append(
                    f"summaries written by {model}, a deterministic extractive heuristic: the summary part of retention and "
                    "summarized_source measure that heuristic, not what a model would keep"
                )
            else:
                out.append(f"summaries written by {model}")
    if "answered" in metrics:
        for model in _models(runs, "answerer"):
            if not model:
                out.append("no answerer: answered has no grades")
            elif is_offline(model):
                out.append(
                    f"answered graded with {model}, a deterministic heuristic that quotes the context line most like the question: "
                    "it measures what that matching finds, not what a model would answer"
                )
            else:
                out.append(f"answered graded with {model}")
    return out


class JointFamily:
    """The draw tests of one decision (a gate's rows, the rows a `bench compare` page tags), adjusted together.

    Each test's sign-flip test of its shifted changes (`DrawTest.shifted`: at tolerance 0 the changes themselves) is
    adjusted jointly (`stats.step_down_min_p`, Westfall and Young's step-down min-p), one sign assignment flipping a
    summary draw in every test at once. Both runs' repeat r of a session are draws of one distribution under no change,
    whichever strategy, profile or metric a test reads of them, so the swap is one for all of them: tests that count the
    same events (a failed request that is an overflow too, a probe kept in the context and in the summary) cost about
    one test, where Holm's method charged for each; a test with a tolerance joins on the assumption its own test makes,
    that its shifted changes are symmetric at the boundary. The draws flipped are those some test's shifted change is
    not 0 at (flipping another changes nothing) and those of `held` (draws a test outside the family holds, for
    `best_case`)."""

    def __init__(self, tests: Sequence[DrawTest], alpha: float, *, two_sided: bool = False,
                 held: Sequence[tuple[str, int]] = ()) -> None:
        self.tests = list(tests)
        shifted = [test.shifted for test in self.tests]
        flipped = [(scenario, repeat) for changes in shifted for scenario, repeat, change in changes if change != 0]
        self.index = {unit: j for j, unit in enumerate(dict.fromkeys([*flipped, *held]))}
        self.signs = shared_signs(len(self.index), samples=max(SAMPLES, math.ceil(2 * len(self.tests) / alpha)))
        self.ranks = flip_ranks(self.signs, self._matrix(shifted), two_sided=two_sided)

    def _matrix(self, draws: Sequence[Sequence[tuple[str, int, float]]]) -> np.ndarray:
        """(tests × draws flipped): each test's change per draw, 0 for a draw it does not hold."""
        out = np.zeros((len(draws), len(self.index)))
        for i, changes in enumerate(draws):
            for scenario, repeat, change in changes:
                if (scenario, repeat) in self.index:
                    out[i, self.index[(scenario, repeat)]] = change
        return out

    def adjusted(self) -> list[float]:
        """Each test's p-value adjusted over the family, never below its own p (which holds its test of a drop at
        all beside the tolerance's)."""
        joint = step_down_min_p(self.ranks)
        return [max(test.p_value, float(joint[i])) for i, test in enumerate(self.tests)]

    def best_case(self, cases: Sequence[tuple[int | None, Sequence[tuple[str, int, float]]]]) -> list[float]:
        """For each case (a test of the family by its position, or None for one outside it; and the shifted changes it
        would have, `DrawTest.all_worse`), the adjusted p it would get with them, the other tests as observed
        (one-sided)."""
        worst = flip_ranks(self.signs, self._matrix([changes for _, changes in cases]))
        return best_case_p(self.ranks, [(test, worst[:, i]) for i, (test, _) in enumerate(cases)])


def family_members(rows: Sequence[dict[str, Any]], alpha: float) -> list[int]:
    """The gate's rows (indices) whose tests are adjusted together: those tested whose shifted changes hold enough
    non-zero draws to reach alpha (`DrawTest.changed`: 0.5 to its power below alpha). A row with fewer can never fail,
    and the tests are conditional on which draws those are (no flip changes them), so leaving it out keeps the family's
    error at alpha (Tarone's argument). By the draws that changed instead, membership could follow the signs the test
    flips once a row has a tolerance, and the family's error would not hold."""
    return [k for k, row in enumerate(rows) if row["test"] is not None and row["status"] != CANNOT_FAIL and 0.5 ** row["test"].changed < alpha]


def _holm_bound(row: int, tested: Sequence[int], alpha: float) -> int:
    """The draws, every one worse, with which a row (an index into the gate's rows) fails whatever the others show:
    Holm's bound over the family (`tested`), the row counted in it (`stats.min_units` at alpha over its size)."""
    return min_units(alpha / (len(tested) + (row not in tested)))


def _family_p_values(rows: Sequence[dict[str, Any]], tested: Sequence[int], alpha: float) -> tuple[dict[int, float], dict[int, float]]:
    """The p-values of the gate's family (`tested`, indices into `rows`) adjusted together (`JointFamily`), and the rows
    no candidate could fail, each with the smallest adjusted p it could reach.

    A row with too few draws for the family may be out of reach: Holm's bound (`stats.min_units` at alpha over the
    family) says when it surely is not, and below it the row's draws that can get worse are set far worse (those that
    cannot unchanged, `DrawTest.all_worse`), the other rows as observed, and adjusted with the family
    (`JointFamily.best_case`); if even that p is not below alpha the row cannot fail. A row that could fail as observed
    is never in it."""
    suspects = [k for k, row in enumerate(rows) if row["test"] is not None and row["status"] is None and row["worsenable"] < _holm_bound(k, tested, alpha)]
    worse = {k: rows[k]["test"].all_worse for k in suspects}
    family = JointFamily([rows[k]["test"] for k in tested], alpha, held=[(scenario, repeat) for k in suspects for scenario, repeat, change in worse[k] if change])
    adjusted = dict(zip(tested, family.adjusted(), strict=True))
    doubtful = [k for k in suspects if not (k in adjusted and adjusted[k] < alpha)]
    best = family.best_case([(tested.index(k) if k in tested else None, worse[k]) for k in doubtful])
    return adjusted, {k: p for k, p in zip(doubtful, best, strict=True) if p >= alpha}


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
    tolerances: dict[str, float] = {}
    for rule in rules:
        if rule.metric in tolerances:
            aliases = "".join(f"; {alias} is {rule.metric}" for alias, metric in ALIASES.items() if metric == rule.metric)
            raise GateError(
                f"--fail-on: two rules for {rule.metric} (tolerances {tolerances[rule.metric]:.15g} and {rule.tolerance:.15g}{aliases}): give "
                "each metric one tolerance (a second rule tests nothing the stricter one does not, and adds a test the adjustment pays for)"
            )
        tolerances[rule.metric] = rule.tolerance
    if not MIN_ALPHA <= alpha < 1:
        raise GateError(f"--alpha {alpha:g}: must be at least {MIN_ALPHA:g} (a Monte Carlo sign-flip test draws 2 × tests / alpha sign assignments) and below 1")
    runs = (Run.load(baseline), Run.load(candidate))
    notes = check_comparable(*runs, allow_different_inputs=allow_different_inputs, allow_offline_summarizer=allow_offline_summarizer)
    compared = compare_runs(*runs)
    # with a model's summaries every metric is sampled and tested per summary draw; with a deterministic one the runs
    # repeat exactly, and the metrics outside the probes are compared exactly
    sampled = sampled_summaries(runs)
    lacking = {label: lacking_draw_columns(run.tables["requests"], run.tables["compactions"]) for label, run in zip(("baseline", "candidate"), runs, strict=True)}
    drawn = None
    if sampled and not any(lacking.values()) and any(rule.metric not in PROBE_METRICS for rule in rules):
        drawn = (draw_metrics(runs[0].tables["requests"], runs[0].tables["compactions"]), draw_metrics(runs[1].tables["requests"], runs[1].tables["compactions"]))
    family = len(compared) * sum(rule.metric in PROBE_METRICS or sampled for rule in rules)  # at most this many tests
    rows: list[dict[str, Any]] = []
    flipped: list[str] = []
    for key, values in compared.iterrows():
        strategy, profile = (str(k) for k in cast(tuple[Any, Any], key))
        unshared = unshared_draws(drawn, strategy, profile) if drawn is not None else []
        for rule in rules:
            higher_is_better = METRICS[rule.metric][1]
            test: DrawTest | None = None
            status = None
            if rule.metric in PROBE_METRICS:
                test = probe_test(runs, strategy, profile, rule.metric, alpha, rule.tolerance, family)
                if test is None:  # e.g. no summarized source in either run, or no answerer grade
                    notes.append(f"untested: {strategy} {profile} {rule.metric}: no probe point both runs hold has a value for it")
                    continue
                if test.worsenable < test.min_draws:
                    status = CANNOT_FAIL
                    notes.append(_too_few_draws_note(f"{strategy} {profile} {rule.metric}", test, alpha))
                if isinstance(test, ProbeTest) and test.unshared:
                    notes.append(f"{strategy} {profile} {rule.metric}: shown and tested on the summary draws both runs hold; the runs' other "
                                 f"draws are left out ({_shown(test.unshared)})")
                base, cand, change = test.baseline, test.candidate, test.change
                if test.lost or test.gained:
                    flipped.append(
                        f"{strategy} {profile} {rule.metric}: lost {len(test.lost)} ({_shown(test.lost, FLIPPED_SHOWN) or '–'}), "
                        f"gained {len(test.gained)} ({_shown(test.gained, FLIPPED_SHOWN) or '–'})"
                    )
            else:
                if f"{rule.metric}_change" not in values:
                    raise GateError(f"metric {rule.metric!r} is missing from one of the runs")
                base, cand, change = values[f"{rule.metric}_baseline"], values[f"{rule.metric}_candidate"], values[f"{rule.metric}_change"]
                if _missing(change):
                    status = UNTESTED
                    notes.append(_untested_note(strategy, profile, rule.metric, base, cand))
                elif unshared:  # only with sampled summaries (`drawn`)
                    status = UNTESTED
                    notes.append(f"untested: {strategy} {profile} {rule.metric}: the runs hold different summary draws ({_shown(unshared)}), so "
                                 "the figures shown (each run's mean over its own repeats) and the test (the draws both hold) would differ")
                elif sampled:
                    changes = metric_draws(drawn, strategy, profile, rule.metric) if drawn is not None else None
                    if changes is None or changes.empty:
                        status = UNTESTED
                        notes.append(f"untested: {strategy} {profile} {rule.metric}: " + (
                            "no summary draw both runs hold has a value for it" if changes is not None else
                            "; ".join(f"the {label}'s tables lack {', '.join(columns)}" for label, columns in lacking.items() if columns)
                            + " (a run written by an earlier version): with sampled summaries it is tested per summary draw, which they cannot give"))
                    else:
                        test = draw_test(changes, alpha, rule.tolerance, family)
                        if test.worsenable < test.min_draws:
                            status = CANNOT_FAIL
                            notes.append(_too_few_draws_note(f"{strategy} {profile} {rule.metric}", test, alpha))
            rows.append(
                {
                    "strategy": strategy, "profile": profile, "metric": rule.metric, "baseline": base, "candidate": cand,
                    "change": change, "tolerance": rule.tolerance, "p_test": test.p_value if test else None,
                    "probes": test.probes if isinstance(test, ProbeTest) else None, "pairs": test.pairs if isinstance(test, ProbeTest) else None,
                    "draws": test.draws if test else None, "worsenable": test.worsenable if test else None,
                    "min_draws": test.min_draws if test else None,
                    "test": test,
                    "worse_by": -change if higher_is_better else change, "status": status,
                }
            )
    # The tests (the probe rules', and the others' with a model's summaries) are one family: the gate fails if any of
    # them does, so their p-values are adjusted together (`JointFamily`). A row whose changed summary draws are
    # too few to reach alpha (0.5^changed ≥ alpha, all in one direction) can never fail, so it is no member (Tarone's
    # argument): `family_members`.
    tested = family_members(rows, alpha)
    adjusted, out_of_reach = _family_p_values(rows, tested, alpha)
    # A row the family puts out of reach cannot fail, whatever the candidate does, and is said to be so (a gate whose
    # every row is so is untested, exit 2), not read as a pass.
    if out_of_reach:
        for k in out_of_reach:
            rows[k]["status"] = CANNOT_FAIL
        notes.append(_out_of_reach_note([f"{rows[k]['strategy']} {rows[k]['profile']} {rows[k]['metric']} ({rows[k]['draws']} draws, p ≥ {p:.3g})"
                                         for k, p in out_of_reach.items()], len(tested),
                                        max(_holm_bound(k, tested, alpha) for k in out_of_reach), alpha))
    failures = []
    for k, row in enumerate(rows):
        row.pop("test")
        worse_by = float(row.pop("worse_by"))
        p_value = adjusted.get(k, row["p_test"])
        row["p_value"] = p_value
        if row["status"] is None:
            beyond = worse_by == worse_by and worse_by > float(row["tolerance"])
            row["status"] = (FAIL if p_value is None or p_value < alpha else UNDECIDED) if beyond else OK
            if row["status"] == UNDECIDED:
                notes.append(
                    f"undecided: {row['strategy']} {row['profile']} {row['metric']}: the estimated change "
                    f"{change_figure(row['change'], row['metric'])} is beyond the tolerance {row['tolerance']:.15g}, but not significantly "
                    f"(p = {p_value:.3g}, alpha {alpha:g}): the drop may sit in few scenarios or probes; it is no regression the "
                    "tests confirm, and no pass either"
                )
        row["failed"] = row["status"] == FAIL
        if row["failed"]:
            failures.append(f"{row['strategy']} {row['profile']} {row['metric']}: {change_figure(row['change'], row['metric'])}")
    for k, row in enumerate(rows):
        row["adjusted"] = len(tested) > 1 and k in adjusted  # its p-value was adjusted with the others of the family
    columns = ["strategy", "profile", "metric", "baseline", "candidate", "change", "tolerance", "p_value", "p_test", "adjusted", "probes",
               "pairs", "draws", "worsenable", "min_draws", "status", "failed"]
    decided = {row["metric"] for row in rows if row["status"] in (OK, UNDECIDED, FAIL)}
    untested = [f"{rule.metric}:{rule.tolerance:.15g}" for rule in rules if rule.metric not in decided]
    return GateResult(pd.DataFrame(rows, columns=columns), failures, notes, flipped, _basis(runs, rules, len(tested), alpha), untested)

"""The verdict of a run: per profile, strategies ranked by retention with 95% intervals, P(best), and one sentence.

The numbers are the project's headline figures (`compaction_bench.metrics.aggregate`): retention is
the share of probe answers present at the *paired* checkpoints (the points every strategy of the
profile has; each probe weighs one), its 95% interval and P(best) come from `overall()` (probes
clustered by scenario), and the difference the sentence states comes from `paired_differences()`
on the same pairs (the headline rows every strategy of the profile has). Strategies that cannot serve the window (the summary's `cannot_serve`; without
it, a scenario whose last turn request still overflowed) or whose requests break tool pairs in every
wire format (no API accepts them) are flagged and ranked after the others; the sentence says why, with
how many of its scenarios (and requests) it concerns, as one bad request in one scenario flags it too.
Every figure covers the scenarios in which each strategy of the profile finished its cell
(`aggregate.shared_scenarios`); the others are named in the verdict's notes, a scenario in which every
cell failed too (from the run's own list of scenarios).
P(best) ranks the strategies that serve the window (`servable`: those not flagged, or all where each is),
the same ones the sentence compares and the Pareto front draws; a flagged strategy is no choice, and its
P(best) is NaN (shown "–", a note says why). P(best) is withheld (NaN, shown "–") where the difference
between the two highest retentions it ranks is not detectable (`aggregate.overall`); a note says why
(`p_best_note`).
A strategy without retention (no probe points) gets no rank and comes last.
`finding()` turns the numbers into one sentence and claims a difference only when its interval
excludes 0 and the two-sided sign-flip test over the scenarios rejects at 5%
(`PairedDifference.detectable`): a scenario's probes are read from one context and one summary, so
they move together, and the test flips each scenario's difference whole; fewer than six scenarios
that differ never make a claim, however many probes they hold. The sentence names what the tests
resample, the probes and the scenarios they are clustered in, next to the paired points (a probe
asked at many checkpoints is still one probe).
Ranks order the strategies by retention (servable first); strategies whose retention is the same
share a rank (1, 1, 3), as nothing but their names would order them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from compaction_bench.metrics.aggregate import (
    INTEGRITY_COLUMNS,
    Contenders,
    combine,
    compared_rows,
    every_format_broken,
    leading_pair,
    overall,
    paired_differences,
    shared_scenarios,
    unfinished,
)
from compaction_bench.metrics.cost import format_dollars
from compaction_bench.metrics.stats import CLAIM_UNITS, detectable

BASIS = "the paired checkpoints and the final context"


@dataclass(frozen=True)
class Difference:
    """Retention of `a` minus retention of `b` (a share, not points) with its 95% interval and
    two-sided sign-flip p-value (over the scenarios) on `n` paired points, which are `probes` probes in
    `scenarios` scenarios (0: not known). `p_adjusted` is the p-value adjusted with the other tests of
    the same decision (`stats.holm`; on `bench compare`'s rows `gate.JointFamily`), when there are any: then it is
    the one `detectable` reads. On `bench
    compare`'s rows the p-value and `changed` are the gate's draw test's (`compare.retention_changes`)."""

    a: str
    b: str
    mean: float
    lo: float
    hi: float
    n: int
    p_value: float
    probes: int = 0
    scenarios: int = 0
    p_adjusted: float | None = None
    #: the scenarios whose difference is not 0 (`PairedDifference.changed`): the sign-flip test's sample (on `bench
    #: compare`'s rows, the summary draws whose change is not 0)
    changed: int = 0

    @property
    def detectable(self) -> bool:
        return detectable(self.lo, self.hi, self.p_value if self.p_adjusted is None else self.p_adjusted)

    def basis(self) -> str:
        """What the numbers rest on: "120 paired points of 40 probes in 2 scenarios", or the paired points alone."""
        if not self.probes:
            return f"{self.n} paired points"
        points = f"{self.n} paired points of " if self.n != self.probes else ""
        return f"{points}{self.probes} probes in {self.scenarios} scenario{'' if self.scenarios == 1 else 's'}"


@dataclass
class StrategyRow:
    strategy: str
    retention: float
    lo: float
    hi: float
    p_best: float
    points: int
    scenarios: int
    cost_usd: float
    cache_hit_rate: float
    rebilled_tokens: float
    failed_requests: float
    overflows: float
    compactions: float
    pair_errors: tuple[float, ...]
    cannot_serve: int
    #: place in the verdict's order; None for a strategy without retention, which nothing ranks
    rank: int | None = None
    #: its scenarios with a request that breaks tool pairs in some wire format the run measured
    pair_error_scenarios: int = 0
    #: its turn and summary requests, and those that break tool pairs in some measured wire format (0, 0: not known,
    #: a requests table without the integrity columns)
    requests: int = 0
    pair_error_requests: int = 0
    #: its input tokens, and of them those read from and written to the prompt cache (NaN: not known), over its scenarios
    input_tokens: float = float("nan")
    cached_tokens: float = float("nan")
    cache_write_tokens: float = float("nan")

    @property
    def uncached(self) -> bool:
        """None of its input tokens was read from or written to a prompt cache (known to be none: the model caches
        nothing, or none of its prefixes qualified), so each cost the input price."""
        return self.cached_tokens == 0 and self.cache_write_tokens == 0

    @property
    def measured_pair_errors(self) -> list[float]:
        """The pair errors of the wire formats the run measured (a format its tables lack, measured
        before it was added, is NaN)."""
        return [e for e in self.pair_errors if np.isfinite(e)]

    @property
    def rejected(self) -> bool:
        """Its requests break tool call/result pairs in every wire format the run measured: no API would
        take them (HTTP 400)."""
        return every_format_broken(self.pair_errors)

    @property
    def flagged(self) -> bool:
        return self.cannot_serve > 0 or self.rejected

    @property
    def pair_error_total(self) -> float:
        """The pair errors of every wire format the run measured, together (what the table sorts them by)."""
        return float(sum(self.measured_pair_errors))


@dataclass
class ProfileVerdict:
    profile: str
    rows: list[StrategyRow]
    basis: str
    sentence: str
    difference: Difference | None = None
    notes: list[str] = field(default_factory=list)


def difference(probes: pd.DataFrame, a: str, b: str) -> Difference:
    """Retention of `a` minus retention of `b` on the pairs both have (`paired_differences`, which gives b − a reversed)."""
    change = paired_differences(probes, b, a)
    return Difference(a, b, change.mean, change.lo, change.hi, change.pairs, change.p_value, change.probes, change.scenarios,
                      changed=change.changed)


#: Retention values closer than this are the same (their means may differ in the last bits by the order of a sum).
TIE = 1e-9


def _rank(rows: list[StrategyRow]) -> None:
    """Competition ranks (1, 1, 3) of the rows with retention, in their order: a row whose flag and
    retention equal the previous row's shares its rank."""
    ranked = [r for r in rows if np.isfinite(r.retention)]
    for place, row in enumerate(ranked, start=1):
        before = ranked[place - 2] if place > 1 else None
        same = before is not None and before.flagged == row.flagged and abs(before.retention - row.retention) <= TIE
        row.rank = before.rank if same and before is not None else place


def _points(share: float) -> str:
    """Percentage points: whole above 1, else two significant digits (−0.04, never a signed "−0.0")."""
    value = 100 * share
    return f"{value:.2g}" if value != 0 and abs(value) < 1 else f"{value:.0f}"


def _interval(lo: float, hi: float) -> str:
    joiner = " to " if lo < 0 or hi < 0 else "–"
    return f"95% CI {_points(lo)}{joiner}{_points(hi)}"


def _ratio(value: float) -> str:
    """A ratio of two costs: two decimals from 0.1 to 10 (1.04×, 0.14×; "1.0×" would hide a 4% difference),
    two significant digits below, whole above."""
    if value < 0.1:
        return f"{value:.2g}"
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"


def _cost_clause(first: StrategyRow, second: StrategyRow) -> str:
    """What the first strategy costs against the second: in dollars where both are priced, as a user pays
    them; where a model has no price, in tokens, named as such. Re-billed tokens alone could point
    the other way: they leave out cached reads, output, and history sent again inside a new text (a serialized
    summary input), so a strategy re-billing 0.13× the tokens cost 1.04× the dollars in an audit's run. Where
    neither strategy read or wrote a cached token (`StrategyRow.uncached`: a model that caches nothing, as 78 of
    the map's 79 unpriced ones), every input token costs the same input price, and no cache could have saved the
    re-billed ones: the input tokens are the measure (the cost audit's case: `pi` sent less input than
    `opencode-v1` and re-billed more). Elsewhere re-billed tokens are."""
    a, b = first.cost_usd, second.cost_usd
    if np.isfinite(a) and np.isfinite(b):
        if a > 0 and b > 0:
            return f" at {_ratio(a / b)}× the cost"
        return ", neither costing anything" if a == b == 0 else f", costing ${format_dollars(a)} against ${format_dollars(b)}"
    if first.uncached and second.uncached:
        return _token_clause(first.input_tokens, second.input_tokens, "input tokens", "sending", "a model without a price, caching none of them")
    return _token_clause(first.rebilled_tokens, second.rebilled_tokens, "re-billed tokens", "re-billing", "a model without a price")


def _token_clause(a: float, b: float, measure: str, verb: str, note: str) -> str:
    """`_cost_clause` in tokens: the first strategy's `a` of `measure` against the second's `b`."""
    if not (np.isfinite(a) and np.isfinite(b)):
        return ""
    if a > 0 and b > 0:
        return f" at {_ratio(a / b)}× the {measure} ({note})"
    if a == 0 and b == 0:
        return f", neither {verb} any tokens ({note})"
    return f", {verb} {a:,.0f} tokens against {b:,.0f} ({note})"


def finding(profile: str, rows: list[StrategyRow], diff: Difference | None) -> str:
    """One sentence stating the profile's finding from the numbers; no claim without an interval excluding 0."""
    tail = _unserved_clause(profile, [r for r in rows if r.cannot_serve > 0])
    tail += "".join(_rejected_clause(r) for r in rows if r.rejected)
    if diff is None or not np.isfinite(diff.mean):
        measured = [r for r in rows if np.isfinite(r.retention)]
        if not measured:
            return f"At {profile}, no probe points to compare." + tail
        kept = f"it keeps {_points(measured[0].retention)}% of the facts."
        if len(measured) == 1:
            return f"At {profile}, only {measured[0].strategy} can be compared: {kept}" + tail
        # the others have retention too, but each is flagged: the tail says why it is ranked after this one
        return f"At {profile}, {measured[0].strategy} is the only strategy that serves every scenario: {kept}" + tail
    by_name = {r.strategy: r for r in rows}
    first, second = by_name[diff.a], by_name[diff.b]
    if 0 < diff.scenarios < CLAIM_UNITS:  # never a claim (the test needs that many differing scenarios): say what the interval is
        these = "this scenario" if diff.scenarios == 1 else f"these {diff.scenarios} scenarios"
        return (
            f"At {profile}, no detectable difference in retention between {diff.a} and {diff.b} "
            f"({'+' if diff.mean > 0 else ''}{_points(diff.mean)} points, {_interval(diff.lo, diff.hi)} over the probes of {these}, "
            f"{diff.basis()}: a test or an interval that holds for other sessions needs {CLAIM_UNITS} scenarios)." + tail
        )
    if not diff.detectable:
        untested = _untested_clause(diff) if diff.lo > 0 or diff.hi < 0 else ""
        return (
            f"At {profile}, no detectable difference in retention between {diff.a} and {diff.b} "
            f"({'+' if diff.mean > 0 else ''}{_points(diff.mean)} points, {_interval(diff.lo, diff.hi)}{untested}, {diff.basis()})." + tail
        )
    if diff.mean < 0:
        first, second = second, first
        diff = replace(diff, a=diff.b, b=diff.a, mean=-diff.mean, lo=-diff.hi, hi=-diff.lo)
    basis = f"; {diff.basis()}" if diff.probes else ""
    return (
        f"At {profile}, {first.strategy} keeps {_points(diff.mean)} points more facts than {second.strategy} "
        f"({_interval(diff.lo, diff.hi)}{basis}){_cost_clause(first, second)}." + tail
    )


def _count(count: int, total: int, noun: str) -> str:
    """"1 of its 3 scenarios", "all 3 of its scenarios", "its one scenario"."""
    if count == total:
        return f"its one {noun}" if total == 1 else f"all {total:,} of its {noun}s"
    return f"{count:,} of its {total:,} {noun}s"


def _rejected_clause(row: StrategyRow) -> str:
    """Why a strategy whose requests break tool pairs in every wire format is ranked after the others, with its
    scope: one request of one scenario flags it as surely as all of them, and the reader needs to know which."""
    scope = _count(row.pair_error_scenarios, row.scenarios, "scenario")
    if row.requests:
        scope = f"{_count(row.pair_error_requests, row.requests, 'request')}, in {scope}"
    return (f" {row.strategy} is ranked after the strategies that serve every scenario, as every API would reject some of its requests "
            f"(HTTP 400): they break tool pairs in every wire format ({scope}).")


def _differing(changed: int) -> str:
    """"no scenario differs", "only 1 scenario differs", "only 3 scenarios differ"."""
    return "no scenario differs" if changed == 0 else f"only {changed} scenario{'s differ' if changed > 1 else ' differs'}"


def _untested_clause(diff: Difference) -> str:
    """Why a difference whose interval is clear of 0 is no claim: the sign-flip test over the scenarios does not reject."""
    if diff.changed < CLAIM_UNITS:
        return f", but {_differing(diff.changed)}, and the sign-flip test over the scenarios needs {CLAIM_UNITS}"
    return f", but the sign-flip test over the {diff.scenarios} scenarios gives p = {diff.p_value:.2g}, not below 0.05"


def p_best_note(lead: Difference) -> str:
    """Why P(best) is withheld, from the difference between the two highest retentions (`lead`, not detectable)."""
    pair = f"{lead.a} and {lead.b}, the two highest retentions"
    if lead.changed < CLAIM_UNITS:
        why = (f"{_differing(lead.changed)} between {pair}, and the sign-flip test needs {CLAIM_UNITS} before it can tell two strategies apart "
               "(it counts scenarios, as a scenario's probes move together)")
    else:
        why = (f"the difference between {pair}, is not detectable ({'+' if lead.mean > 0 else ''}{_points(lead.mean)} points, "
               f"{_interval(lead.lo, lead.hi)}, sign-flip p = {lead.p_value:.2g} over {lead.scenarios} scenarios)")
    return f"P(best) is not shown: {why}; a share of bootstrap resamples would claim more than the tests can."


def few_scenarios_notes(paired: pd.DataFrame) -> dict[str, str]:
    """Per profile whose compared rows (`paired`: `compared_rows`) pool fewer scenarios than the sign-flip test needs,
    what its intervals describe. They are the scenario-clustered bootstrap, which with few scenarios resamples little
    but these sessions' probes: in the forty-sixth pass's simulation of a sampling summarizer, the retention interval
    held the mean over sessions 51% of the time on one scenario, 79.5% on two and 86% on three (92.5% on five)."""
    out = {}
    for profile, frame in paired.groupby("profile", sort=False) if not paired.empty else ():
        count = frame["scenario"].nunique()
        if count < CLAIM_UNITS:
            out[str(profile)] = f"The intervals pool {count} scenario{'' if count == 1 else 's'}: {few_scenarios_clause(count)}."
    return out


def few_scenarios_clause(count: int) -> str:
    """What an interval over `count` scenarios, fewer than `CLAIM_UNITS`, describes (the verdict's notes, `bench compare`)."""
    these, them = ("this session's", "this session") if count == 1 else ("these sessions'", "these sessions")
    return (
        f"with fewer than {CLAIM_UNITS} they resample little but {these} probes, so they describe {them} (and, with a model "
        f"summarizer, the summaries drawn for {'it' if count == 1 else 'them'}), not sessions like them; in a simulation of a "
        "sampling summarizer they held the mean over sessions 51% of the time on one scenario and 86% on three"
    )


def p_best_notes(pooled: pd.DataFrame, paired: pd.DataFrame, contenders: Contenders | None = None) -> dict[str, str]:
    """Per profile whose P(best) `overall` withheld (`pooled`, two strategies or more it ranks with retention, P(best)
    NaN): `p_best_note`, from the difference `overall` tested, on the same rows (`paired`: `compared_rows`);
    `contenders` are the strategies `overall` ranked (`servable`; every strategy of a profile it does not name)."""
    out: dict[str, str] = {}
    if pooled.empty or "p_best" not in pooled.columns:
        return out
    for profile, frame in pooled.groupby("profile", sort=False):
        if contenders is not None and str(profile) in contenders:
            frame = frame[frame["strategy"].astype(str).isin(list(contenders[str(profile)]))]
        pair = leading_pair(dict(zip(frame["strategy"].astype(str), frame["retention"].astype(float), strict=True)))
        if pair and frame["p_best"].isna().all():
            out[str(profile)] = p_best_note(difference(paired[paired["profile"] == profile], *pair))
    return out


def _unserved_clause(profile: str, unserved: list[StrategyRow]) -> str:
    """The strategies that cannot serve the window, each with how many of its scenarios when not all: a strategy
    that fails one scenario of three serves the other two, which "cannot serve the window" alone would deny."""
    if not unserved:
        return ""
    everywhere = [r.strategy for r in unserved if r.cannot_serve >= r.scenarios]
    partly = [f"{r.strategy} in {r.cannot_serve} of its {r.scenarios} scenarios" for r in unserved if r.cannot_serve < r.scenarios]
    if everywhere:
        named = f"{', '.join(everywhere)} cannot serve the {profile} window" + "".join(f", {p}" for p in partly)
    else:
        named = f"{partly[0].replace(' in ', f' cannot serve the {profile} window in ', 1)}" + "".join(f", {p}" for p in partly[1:])
    return f" {named} (requests that never got through: overflowed, or not sent by the agent)."


def _unserved(requests: pd.DataFrame, summary: pd.DataFrame) -> pd.Series:
    """Scenarios per (strategy, profile) whose window the strategy cannot serve."""
    if "cannot_serve" in summary.columns:
        flags = summary["cannot_serve"].fillna(0).astype(float) > 0
        return flags.groupby([summary["strategy"], summary["profile"]]).sum()
    if requests.empty:
        return pd.Series(dtype=float)
    turns = requests[requests["kind"] == "turn"].sort_values("request")
    last = turns.groupby(["scenario", "strategy", "profile", "repeat"], sort=False).tail(1)
    return last["overflow"].astype(bool).groupby([last["strategy"], last["profile"]]).sum()


def _pair_errors(requests: pd.DataFrame, summary: pd.DataFrame) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per (strategy, profile): its scenarios with a pair error in a wire format the run measured (from `summary`),
    and its turn and summary requests and those with a pair error (from `requests`; 0, 0 without its integrity columns)."""
    errors = summary[[c for c in INTEGRITY_COLUMNS if c in summary.columns]].apply(pd.to_numeric, errors="coerce").fillna(0) > 0
    cells = pd.DataFrame({"strategy": summary["strategy"].astype(str), "profile": summary["profile"].astype(str),
                          "scenarios": errors.any(axis=1).astype(int)}).groupby(["strategy", "profile"]).sum()
    measured = [c for c in INTEGRITY_COLUMNS if c in requests.columns]
    if measured:
        asked = requests[requests["kind"].isin(("turn", "summary"))]  # the requests `summarize` counts pair errors on
        tally = pd.DataFrame({"strategy": asked["strategy"].astype(str), "profile": asked["profile"].astype(str), "requests": 1,
                              "errors": (asked[measured].fillna(0) > 0).any(axis=1).astype(int)})
        cells = cells.join(tally.groupby(["strategy", "profile"]).sum(), how="left")
    cells = cells.reindex(columns=["scenarios", "requests", "errors"]).fillna(0).astype(int).reset_index()
    columns = (cells[c].tolist() for c in ("strategy", "profile", "scenarios", "requests", "errors"))
    return {(strategy, profile): (counts[0], counts[1], counts[2]) for strategy, profile, *counts in zip(*columns, strict=True)}


def _strategy_rows(summary: pd.DataFrame, requests: pd.DataFrame) -> dict[str, list[StrategyRow]]:
    """Per profile of `summary` (and `requests`, of the scenarios compared), a row per strategy with its counts,
    costs and flags, its pooled figures (retention, interval, P(best), points) NaN until `verdicts` sets them."""
    unserved = _unserved(requests, summary)
    pair_errors = _pair_errors(requests, summary)
    out: dict[str, list[StrategyRow]] = {}
    for (strategy, profile), frame in summary.groupby(["strategy", "profile"], sort=False):
        strategy, profile = str(strategy), str(profile)
        error_scenarios, requested, error_requests = pair_errors.get((strategy, profile), (0, 0, 0))
        out.setdefault(profile, []).append(
            StrategyRow(
                strategy=strategy, retention=float("nan"), lo=float("nan"), hi=float("nan"), p_best=float("nan"), points=0,
                scenarios=int(frame["scenario"].nunique()), cost_usd=combine(frame, "cost_usd", "sum"),
                cache_hit_rate=combine(frame, "cache_hit_rate", "mean"), rebilled_tokens=combine(frame, "rebilled_tokens", "sum"),
                failed_requests=combine(frame, "failed_requests", "sum"), overflows=combine(frame, "overflows", "sum"),
                compactions=combine(frame, "compactions", "sum"), pair_errors=tuple(combine(frame, c, "sum") for c in INTEGRITY_COLUMNS),
                cannot_serve=int(unserved.get((strategy, profile), 0)), pair_error_scenarios=error_scenarios, requests=requested,
                pair_error_requests=error_requests, input_tokens=combine(frame, "input_tokens", "sum"),
                cached_tokens=combine(frame, "cached_tokens", "sum"), cache_write_tokens=combine(frame, "cache_write_tokens", "sum"),
            )
        )
    return out


def unreached_threshold_notes(summary: pd.DataFrame, requests: pd.DataFrame) -> dict[str, list[str]]:
    """Per profile, the strategies that never compacted there while some of their requests overflowed, and whose
    smallest threshold is above every request the window admitted: their rule could not fire at this window (an API's
    default trigger above a small study window, say), so they ran as no compaction does and their figures measure
    that, not the strategy. Read from the requests' own thresholds and counts, so nothing here knows a strategy."""
    needed = {"strategy", "profile", "threshold", "true_tokens", "overflow"}
    if requests.empty or not needed <= set(requests.columns) or "compactions" not in summary.columns:
        return {}
    out: dict[str, list[str]] = {}
    compacted = summary.groupby(["strategy", "profile"], sort=False)["compactions"].sum()
    for (strategy, profile), frame in requests.groupby(["strategy", "profile"], sort=False):
        thresholds = frame["threshold"].dropna()
        overflowed = frame["overflow"].astype(bool)
        admitted = frame.loc[~overflowed, "true_tokens"].dropna()
        if compacted.get((strategy, profile), 1) or thresholds.empty or not overflowed.any() or admitted.empty:
            continue
        lowest, largest = float(thresholds.min()), float(admitted.max())
        if lowest > largest:
            out.setdefault(str(profile), []).append(
                f"{strategy} never compacted at {profile}: its threshold ({lowest:,.0f} tokens) is above every request the "
                f"window admitted (at most {largest:,.0f}), so it ran as no compaction does and its figures measure that; "
                f"give it a lower trigger where its options allow one (`bench list strategies {strategy}`) to measure it at this window."
            )
    return out


def _serving(rows: dict[str, list[StrategyRow]]) -> dict[str, set[str]]:
    """Per profile, its strategies that are not flagged, or all of them where each is."""
    return {profile: {r.strategy for r in own if not r.flagged} or {r.strategy for r in own} for profile, own in rows.items()}


def servable(summary: pd.DataFrame, requests: pd.DataFrame | None, scenarios: Sequence[str] = ()) -> dict[str, set[str]]:
    """Per profile, the strategies the verdict ranks as serving the window, over the scenarios every strategy of the
    profile finished (`scenarios`: the run's own, as `verdicts` takes them): those not flagged (it cannot serve the
    window, or its requests break tool pairs in every wire format), or every one where each is. The sentence compares
    the two best of them, the Pareto front draws them, and P(best) ranks them (`aggregate.overall`'s `contenders`)."""
    requests = requests if requests is not None else pd.DataFrame()
    left_out = unfinished(requests, scenarios)
    return _serving(_strategy_rows(shared_scenarios(summary, left_out), shared_scenarios(requests, left_out)))


def _unranked_note(rows: Sequence[StrategyRow], contenders: set[str]) -> list[str]:
    """Why flagged strategies show no P(best) beside strategies that do (none where every P(best) is withheld)."""
    unranked = [r.strategy for r in rows if r.strategy not in contenders and np.isfinite(r.retention)]
    if not unranked or not any(np.isfinite(r.p_best) for r in rows):
        return []
    one = len(unranked) == 1
    return [f"P(best) ranks only the strategies that serve the window, as the sentence does: {', '.join(unranked)} "
            f"{'is' if one else 'are'} flagged, so {'its' if one else 'their'} P(best) is –."]


def verdicts(
    summary: pd.DataFrame, probes: pd.DataFrame, requests: pd.DataFrame, *, pooled: pd.DataFrame | None = None, strategies: Sequence[str] = (),
    scenarios: Sequence[str] = (),
) -> list[ProfileVerdict]:
    """One verdict per profile of the run, strategies ranked (servable first, then by retention);
    `pooled` is `overall(probes, requests, contenders=servable(summary, requests, scenarios))` when the caller
    has it, and `strategies` and `scenarios` the run's own (one that finished no cell of a profile is named in
    its notes: a scenario in which every strategy's cell failed has no row in the tables)."""
    out: list[ProfileVerdict] = []
    if summary.empty:
        return out
    # per profile (each has a verdict, even with every scenario left out): the strategies that finished a cell
    finished = {str(profile): set(frame["strategy"]) for profile, frame in summary.groupby("profile", sort=False)}
    left_out = unfinished(requests, scenarios)  # every figure below compares the strategies on the same scenarios
    summary, probes, requests = (shared_scenarios(frame, left_out) for frame in (summary, probes, requests))
    by_profile = _strategy_rows(summary, requests)
    contenders = _serving(by_profile)
    if pooled is None:
        pooled = overall(probes, requests, contenders=contenders) if not probes.empty else pd.DataFrame()
    paired = compared_rows(probes, requests)  # the rows the ranking is on: the sentence's difference too
    withheld = p_best_notes(pooled, paired, contenders)
    unreached = unreached_threshold_notes(summary, requests)
    few = few_scenarios_notes(paired)
    pooled = pooled.set_index(["strategy", "profile"]) if not pooled.empty else pd.DataFrame()

    def headline(strategy: str, profile: str, column: str) -> float:
        if (strategy, profile) not in pooled.index or column not in pooled.columns:
            return float("nan")
        return float(np.asarray(pooled.loc[(strategy, profile), column], dtype=float))

    for profile in finished:
        rows = by_profile.get(profile, [])
        for r in rows:
            r.retention, r.lo, r.hi = (headline(r.strategy, profile, c) for c in ("retention", "retention_lo", "retention_hi"))
            r.p_best, r.points = headline(r.strategy, profile, "p_best"), int(np.nan_to_num(headline(r.strategy, profile, "paired_pairs")))
        rows.sort(key=lambda r: (not np.isfinite(r.retention), r.flagged, -np.nan_to_num(r.retention), r.strategy))
        _rank(rows)
        compared = [r for r in rows if not r.flagged and np.isfinite(r.retention)] or [r for r in rows if np.isfinite(r.retention)]
        diff = None
        if len(compared) >= 2 and not paired.empty:
            diff = difference(paired[paired["profile"] == profile], compared[0].strategy, compared[1].strategy)
        notes = [
            f"Left out of this comparison: {scenario}, where {', '.join(missing)} did not finish "
            f"{'its cell' if len(missing) == 1 else 'their cells'} (see errors.log)."
            for (scenario, where), missing in left_out.items()
            if where == profile
        ]
        notes += [
            f"Not in this comparison: {s}, which finished no cell at {profile} (see errors.log)." for s in strategies if s not in finished[profile]
        ]
        notes += [withheld[profile]] if profile in withheld else _unranked_note(rows, contenders.get(profile, set()))
        notes += [few[profile]] if profile in few else []
        notes += unreached.get(profile, [])
        out.append(ProfileVerdict(profile, rows, BASIS, finding(profile, rows, diff), diff, notes))
    return out

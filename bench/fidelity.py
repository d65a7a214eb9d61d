"""Fidelity: a strategy's decisions, and the cache model, next to what a real agent recorded.

This composition module holds every `bench fidelity` table; the engine knows nothing of it.

- Pi (docs/specs/pi.md §2, §3, §8): `fidelity_table(path)` replays a Pi session file with each Pi strategy, with the session's own
recorded usage at every step (`usage="recorded-always"`), the session model's window (`session_profile`: a built-in
profile, else litellm's entry for the model, else `--profile`), and `compact_at_recorded` (so the
replay compacts where the real agent did, as a manual `/compact` when the strategy's own trigger
does not fire there, and stays in step with the recorded usage afterwards). For every recorded
compaction it puts the strategy's trigger decision, `tokensBefore` and cut point next to the
recorded ones, as a markdown table; where the strategy decided but made no compaction (nothing to
summarise, or a summary that did not fit) the decision is shown with the reason.
- Cache model (docs/specs/evaluation.md, provider cache rules): `recorded_agreement(transcript, profile)`
  replays a transcript through `none` with its recorded usage and compares modelled cached tokens
  with the provider's recorded ones, on the requests whose replayed context is the recording's
  (none after the recording agent's own compaction); its agreement figures compare the uncached
  input, which an unrecorded prefix the provider cached (system prompt, tool schemas) does not move.
- Claude Code (docs/specs/claude-code.md §9, §11): `claude_code_fidelity_rows(path)` replays each
  session of a Claude Code JSONL with recorded usage and puts every recorded `compact_boundary`
  (trigger, preTokens, file line) next to the replay's decision, count and threshold, and says
  whether the count read recorded or simulated usage (the gap to preTokens only for recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any, cast

from compaction_bench.errors import BenchError
from compaction_bench.importing import load_transcript
from compaction_bench.profiles import PROFILES, ModelProfile, ProfileError, get_profile
from compaction_bench.records import CompactionRecord, ReplayResult, RequestRecord
from compaction_bench.replay import replay
from compaction_bench.strategy import Strategy
from compaction_bench.transcript import Item, Transcript, Usage

DEFAULT_STRATEGIES = ("pi", "pi-2026-03", "pi-2025-12")
#: A window no request reaches: the cache comparison replays `none` and must reject nothing.
UNLIMITED_WINDOW = 100_000_000


def _builtin_profile(model: str) -> ModelProfile | None:
    """The built-in profile whose model the session's is (a dated id such as `claude-opus-4-5-20251101` too)."""
    for profile in PROFILES.values():
        if profile.model and (model == profile.model or model.startswith(profile.model)):
            return profile
    return None


def _map_profile(transcript: Transcript) -> ModelProfile | None:
    """The profile of the session model in litellm's bundled map (`profiles.model_profile`), as the model id
    itself or under a provider its responses recorded (a Pi assistant message's `provider`, docs/specs/pi.md §1.2)."""
    model = transcript.model or ""
    providers = dict.fromkeys(str(i.meta["provider"]) for i in transcript.items if i.meta.get("provider"))
    for name in (model, *(f"{provider}/{model}" for provider in providers)):
        try:
            return get_profile(name)
        except ProfileError:
            continue
    return None


def session_profile(transcript: Transcript) -> ModelProfile:
    """The profile of the session's recorded model (its context window): the built-in one for that model, else
    litellm's entry for it (as `bench run --profile` resolves a model id). A model neither knows is refused with
    the option that names one."""
    model = transcript.model or ""
    found = _builtin_profile(model) or (_map_profile(transcript) if model else None)
    if found is None:
        raise ProfileError(
            f"no profile for the session model {model!r} (neither a built-in profile's nor in litellm's model map); "
            "name one with --profile (`bench list profiles`; any litellm model id, e.g. anthropic/claude-opus-4-5)"
        )
    return found


@dataclass(frozen=True)
class FidelityRow:
    recorded_entry: str
    recorded_tokens_before: int | None
    recorded_cut: str
    recorded_kept: int | None
    strategy: str
    trigger: str
    tokens_before: int | None
    cut: str
    kept: int | None


@dataclass(frozen=True)
class Unreplayed:
    """A recorded compaction where the strategy's trigger decision was made but no compaction followed:
    `compact` gave False, so no record holds the decision (`recorded`: what `_recorded_compaction` worked
    out, strategies/pi.py: entry, triggerFires, contextTokens, firstKeptRole, keptTokensEstimate)."""

    recorded: dict[str, Any]
    threshold: int | None
    why: str


#: Why a Pi compaction the trigger asked for was not made: `prepareCompaction` gave nothing ("Already
#: compacted", "Nothing to compact (session too small)", docs/specs/pi.md §3.1, §7; LATER also when nothing
#: precedes the cut, strategies/pi_compaction.py `prepare_compaction`), or the summary request did not fit.
NOTHING_TO_SUMMARISE = "nothing to summarise"
SUMMARY_DID_NOT_FIT = "the summary did not fit"


def _keeping_unreplayed(name: str) -> tuple[type[Strategy], list[Unreplayed]]:
    """The Pi strategy `name`, and the list its replay fills with the recorded compactions it did not make.

    At a recorded compaction Pi's `_recorded_compaction` (strategies/pi.py, `compact_at_recorded`) works out the
    trigger decision and hands it to `compact(extra=...)`, which keeps it in the compaction's record; when
    `compact` makes none, the decision went with it and the table said "not replayed". The class returned here
    is the strategy itself with `compact` noting, when it gives False, the decision it was handed."""
    from compaction_bench.registry import strategy_class
    from compaction_bench.strategies.pi import PiStrategy

    base = strategy_class(name)
    kept: list[Unreplayed] = []
    if not issubclass(base, PiStrategy):
        return base, kept

    def compact(self: Any, reason: str, *, decision: Any = None, extra: dict[str, Any] | None = None) -> bool:
        # the engine's records, read as the strategy's own `_own_record_details` reads them
        requests: list[RequestRecord] = getattr(getattr(self.ctx, "result", None), "requests", [])
        start = len(requests)
        done: bool = base.compact(self, reason, decision=decision, extra=extra)
        if not done and extra and "recorded" in extra:
            overflowed = any(r.kind == "summary" and r.overflow for r in requests[start:])
            why = SUMMARY_DID_NOT_FIT if overflowed else NOTHING_TO_SUMMARISE
            kept.append(Unreplayed(dict(extra["recorded"]), self.reported_threshold, why))
        return done

    return cast("type[Strategy]", type(base.__name__, (base,), {"compact": compact})), kept


def _cut(lines: dict[str, int], entry: str | None, role: str | None, split: bool | None = None) -> str:
    """`id` (role, file line[, split turn])."""
    if not entry:
        return "—"
    where = f", line {lines[entry]}" if entry in lines else ""
    return f"`{entry}` ({role or '?'}{where}" + (", split turn)" if split else ")")


def _number(value: int | None) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


def _decision(recorded: dict[str, Any], threshold: int | None) -> str:
    """Pi's trigger decision at a recorded compaction: `contextTokens` against `threshold`, the smallest count that
    fires (`Request.threshold`: Pi's strict `>` of T is `≥ T + 1`, docs/specs/pi.md §2.2)."""
    tokens = recorded.get("contextTokens")
    if tokens is None:
        return "no usable usage → manual"
    sign = "≥" if recorded.get("triggerFires") else "<"
    verdict = "fires" if recorded.get("triggerFires") else "does not fire → manual"
    return f"{verdict} ({_number(tokens)} {sign} {_number(threshold)})"


def _trigger(record: CompactionRecord) -> str:
    return _decision(record.details.get("recorded") or {}, record.threshold)


def _recorded_row(
    marker: Item, lines: dict[str, int], strategy: str, record: CompactionRecord | None, unreplayed: Unreplayed | None
) -> FidelityRow:
    """One recorded compaction next to the strategy's record of it, or, where it made none, its decision there."""
    meta = marker.meta
    recorded = (record.details.get("recorded") or {}) if record else unreplayed.recorded if unreplayed else {}
    if record is not None:
        trigger = _trigger(record)
    elif unreplayed is not None:
        trigger = f"{_decision(unreplayed.recorded, unreplayed.threshold)} → not compacted ({unreplayed.why})"
    else:
        trigger = "not replayed (the strategy kept no decision here)"
    details = record.details if record else {}
    return FidelityRow(
        recorded_entry=f"`{meta.get('entry')}` (line {meta.get('line')})",
        recorded_tokens_before=meta.get("tokensBefore"),
        recorded_cut=_cut(lines, meta.get("firstKeptEntryId"), recorded.get("firstKeptRole")),
        recorded_kept=recorded.get("keptTokensEstimate"),
        strategy=strategy,
        trigger=trigger,
        tokens_before=details.get("tokensBefore"),
        cut=_cut(lines, details.get("firstKeptEntryId"), details.get("firstKeptRole"), details.get("isSplitTurn")) if record else "—",
        kept=details.get("keptTokensEstimate"),
    )


def _own_row(lines: dict[str, int], strategy: str, record: CompactionRecord) -> FidelityRow:
    """A compaction of the replay where the recording has none."""
    return FidelityRow(
        recorded_entry="(none)",
        recorded_tokens_before=None,
        recorded_cut="—",
        recorded_kept=None,
        strategy=strategy,
        trigger=f"{record.trigger} at step {record.step}",
        tokens_before=record.details.get("tokensBefore"),
        cut=_cut(lines, record.details.get("firstKeptEntryId"), record.details.get("firstKeptRole"), record.details.get("isSplitTurn")),
        kept=record.details.get("keptTokensEstimate"),
    )


def fidelity_rows(
    path: str | Path, *, strategies: Sequence[str] = DEFAULT_STRATEGIES, profile: ModelProfile | str | None = None
) -> list[FidelityRow]:
    transcript = load_transcript(path, format="pi")
    chosen = get_profile(profile) if profile is not None else session_profile(transcript)
    lines = {str(i.meta["entry"]): i.meta["line"] for i in transcript.items if i.meta.get("entry") and i.meta.get("line")}
    rows = []
    for strategy in strategies:
        strategy_cls, unreplayed = _keeping_unreplayed(strategy)
        result = replay(transcript, strategy_cls, profile=chosen, usage="recorded-always", options={"compact_at_recorded": True})
        at_marker = {c.details["recorded"]["entry"]: c for c in result.compactions if c.details.get("recorded")}
        decided = {u.recorded.get("entry"): u for u in unreplayed}
        for marker in transcript.markers("compaction"):
            entry = marker.meta.get("entry")
            rows.append(_recorded_row(marker, lines, strategy, at_marker.get(entry), decided.get(entry)))
        rows.extend(_own_row(lines, strategy, c) for c in result.compactions if not c.details.get("recorded") and c.trigger != "branch")
    return rows


def fidelity_table(
    path: str | Path, *, strategies: Sequence[str] = DEFAULT_STRATEGIES, profile: ModelProfile | str | None = None
) -> str:
    """Markdown table: each recorded compaction of a Pi session next to each strategy's replay."""
    rows = fidelity_rows(path, strategies=strategies, profile=profile)
    if not rows:  # an empty table would read as agreement
        raise FidelityError(f"{path}: no recorded compaction (a Pi `compaction` entry) to set the replays beside; "
                            "`bench inspect` counts a file's compactions")
    header = (
        "| recorded compaction | recorded tokensBefore | recorded cut (firstKeptEntryId) | recorded kept (est.) "
        "| strategy | trigger decision | tokensBefore | cut (firstKeptEntryId) | kept (est.) |\n"
        "|---|---:|---|---:|---|---|---:|---|---:|"
    )
    lines = [
        f"| {r.recorded_entry} | {_number(r.recorded_tokens_before)} | {r.recorded_cut} | {_number(r.recorded_kept)} "
        f"| `{r.strategy}` | {r.trigger} | {_number(r.tokens_before)} | {r.cut} | {_number(r.kept)} |"
        for r in rows
    ]
    return "\n".join([header, *lines])


def _compared_requests(transcript: Transcript, profile: ModelProfile) -> tuple[list[tuple[RequestRecord, Usage]], int]:
    """(modelled request, recorded usage) of every turn request of a `none` replay with recorded usage whose
    recording reports input tokens and whose context is the recording's (a simulated usage would agree with
    itself), and how many turn requests with recorded input were left out for the second reason."""
    widened = replace(profile, context_window=max(profile.context_window, UNLIMITED_WINDOW))
    result = replay(transcript, "none", profile=widened, usage="recorded")
    with_input = {step.index for step in transcript.steps() if step.usage is not None and step.usage.input > 0}
    turns = [r for r in result.requests if r.kind == "turn" and not r.overflow and r.step in with_input]
    pairs = [(r, r.usage) for r in turns if r.usage_source == "recorded" and r.usage is not None]
    return pairs, len(turns) - len(pairs)


def _uncached_miss(request: RequestRecord, usage: Usage) -> int:
    """|recorded − modelled| uncached input of one request: recorded `input − cached_input` against modelled
    `true_tokens − cached_tokens`. A prefix the provider cached (the unrecorded system prompt and tool schemas,
    on almost every request) is in neither; one it did not cache is in the recorded side alone."""
    return abs((usage.input - usage.cached_input) - (request.true_tokens - request.cached_tokens))


def _uncached_agreement(pairs: Sequence[tuple[RequestRecord, Usage]]) -> dict[str, Any]:
    """The figures of `recorded_agreement` that do not move with an always-cached unrecorded prefix."""
    replayed = sum(r.true_tokens for r, _ in pairs)
    misses = [_uncached_miss(r, u) for r, u in pairs]
    per_request = [m / r.true_tokens for m, (r, _) in zip(misses, pairs, strict=True) if r.true_tokens]
    return {
        "recorded_uncached_tokens": sum(u.input - u.cached_input for _, u in pairs),
        "modelled_uncached_tokens": sum(r.true_tokens - r.cached_tokens for r, _ in pairs),
        "uncached_error_share": sum(misses) / replayed if replayed else None,
        "uncached_error_median": float(median(per_request)) if per_request else None,
    }


def recorded_agreement(transcript: Transcript, profile: str | ModelProfile) -> dict[str, Any]:
    """Modelled vs recorded cached tokens for a replay of `none` with the transcript's own usage.

    Compared are the requests whose recorded usage reports input tokens and whose replayed context
    is still the recording's (`usage="recorded"`): after a compaction the recording agent made,
    `none` sends the whole history where the agent sent a summary, so from there on a modelled
    request is another request than the recorded one (and would read as a cache hit where the
    agent rewrote its prefix); those are counted in `requests_not_compared`. The window is widened
    so that no request is rejected: what is compared is the cache model.

    The recorded input holds what the transcript never recorded (the agent's system prompt and tool
    schemas, `unrecorded_tokens_median`), which the replay cannot send and the provider caches on almost
    every request. Every figure of cached tokens moves with its size: `recorded_hit_rate` (recorded
    cached / recorded input) and `mae_share` (the mean over requests of |modelled cached / modelled input
    − recorded cached / recorded input|) rise or fall with it, and `mae_tokens_share` (Σ|modelled −
    recorded cached| / Σ recorded input) is mostly that prefix; none is a measure of the cache model.
    What does not move with it is the uncached input (`_uncached_miss`): a prefix the provider cached is
    in neither side, so adding the same always-cached prefix to every recorded request changes none of
    `recorded_uncached_tokens`, `modelled_uncached_tokens`, `uncached_error_share` (Σ|recorded −
    modelled uncached| / Σ modelled input, the replayed messages' tokens) and `uncached_error_median`
    (the median over requests of that error / the request's modelled input). A prefix the provider did
    not cache (a session's first request, a request after the cache expired) counts in them as error:
    those tokens were billed uncached and the replay, without them, cannot say so.
    """
    chosen = get_profile(profile)
    pairs, not_compared = _compared_requests(transcript, chosen)
    recorded_input = sum(u.input for _, u in pairs)
    recorded_cached = sum(u.cached_input for _, u in pairs)
    shares = [abs(r.cached_tokens / r.true_tokens - u.cached_input / u.input) for r, u in pairs if r.true_tokens]
    return {
        "transcript": transcript.id,
        "profile": chosen.name,
        "requests": len(pairs),
        "requests_not_compared": not_compared,
        "requests_with_recorded_cache": sum(1 for _, u in pairs if u.cached_input > 0),
        "recorded_cached_tokens": recorded_cached,
        "modelled_cached_tokens": sum(r.cached_tokens for r, _ in pairs),
        "recorded_hit_rate": recorded_cached / recorded_input if recorded_input else None,
        "modelled_hit_rate": sum(r.cached_tokens for r, _ in pairs) / max(sum(r.true_tokens for r, _ in pairs), 1) if pairs else None,
        "mae_share": sum(shares) / len(shares) if shares else None,
        "mae_tokens_share": sum(abs(r.cached_tokens - u.cached_input) for r, u in pairs) / recorded_input if recorded_input else None,
        **_uncached_agreement(pairs),
        # What the provider counted that the transcript does not hold (system prompt, tool schemas):
        "unrecorded_tokens_median": float(median(u.input - r.true_tokens for r, u in pairs)) if pairs else None,
    }


# --------------------------------------------------------------------------- Claude Code
#: The Claude Code strategies `bench fidelity claude-code` replays (docs/specs/claude-code.md §9, §11).
CLAUDE_CODE_STRATEGIES = ("claude-code",)


class FidelityError(BenchError, ValueError):
    """A strategy the fidelity table cannot replay (not one of the agent's own)."""


def check_claude_code_strategies(strategies: Sequence[str]) -> None:
    """Refuse a strategy that is not a Claude Code one (a subclass of `ClaudeCode`): the table reads
    its trigger count and threshold, which other strategies do not record."""
    from compaction_bench.registry import strategies as registered
    from compaction_bench.registry import strategy_class
    from compaction_bench.strategies.claude_code import ClaudeCode

    for name in strategies:
        if not issubclass(strategy_class(name), ClaudeCode):
            family = ", ".join(n for n, cls in registered().items() if issubclass(cls, ClaudeCode))
            raise FidelityError(f"--strategy {name!r} is not a Claude Code strategy; `bench fidelity claude-code` replays one of: {family}")


@dataclass(frozen=True)
class ClaudeCodeFidelityRow:
    """One recorded `compact_boundary` (or one replay compaction the recording does not have).

    `count_source` is where the usage the count reads came from (`RequestRecord.usage_source` of the last
    response before the check): "recorded" while the replayed context is the recording's, "simulated" from the
    first difference on (a boundary the replay did not compact at), when the engine feeds the provider model's
    usage, which holds none of the unrecorded system prompt and tool schemas; None with no response before it.
    `previous_source` is the same for the previous check."""

    file: str
    line: int | None
    recorded_trigger: str | None
    recorded_pre_tokens: int | None
    recorded_output: int | None
    strategy: str
    decision: str
    replay_trigger: str | None
    count: int | None
    threshold: int | None
    previous_check: int | None
    count_source: str | None = "recorded"
    previous_source: str | None = "recorded"

    @property
    def gap(self) -> int | None:
        """Recorded preTokens minus the replay's count (the output tokens the JSONL line did not capture); None
        unless the count reads recorded usage (a count of simulated usage lacks the unrecorded prefix, so the
        difference would be that prefix and the replay's drift, not a gap of the count)."""
        if self.recorded_pre_tokens is None or self.count is None or self.count_source != "recorded":
            return None
        return self.recorded_pre_tokens - self.count


def _uuid_lines(path: Path) -> dict[str, int]:
    """1-based file line of every uuid in a Claude Code JSONL file."""
    import json

    from compaction_bench.importing import read_input

    lines: dict[str, int] = {}
    raw, _ = read_input(path)  # a regular file only (never blocks on a FIFO), `.zst` decompressed
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:  # invalid UTF-8 replaced as the importer replaces it, so a uuid reads as the transcript's
            data = json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):  # a line the importer reports as a problem
            continue
        if isinstance(data, dict) and data.get("uuid"):
            lines[str(data["uuid"])] = number
    return lines


def _claude_profile(transcript: Transcript) -> ModelProfile:
    found = _builtin_profile(transcript.model or "")
    if found is not None:
        return found
    return get_profile("claude-opus" if "opus" in (transcript.model or "") else "claude-sonnet")


def _usage_source_before(requests: Sequence[RequestRecord], index: int | None) -> str | None:
    """Where the usage of the last response before request `index` came from (None: no response before it), the
    usage Claude Code's count reads (`last_usage`, docs/specs/claude-code.md §2.2). The engine feeds recorded
    usage only up to the first request whose context differs from the recording, then simulated usage to the end
    (bench/replay.py `_recorded_usage`), so the last response's source is that of every usage before it."""
    answered = [r for r in requests if r.kind == "turn" and r.usage_source is not None and (index is None or r.index < index)]
    return answered[-1].usage_source if answered else None


def _compaction_start(record: CompactionRecord) -> int | None:
    """The first request index at or after a replay compaction: its first summary request, else the request after it."""
    return record.summary_request_indices[0] if record.summary_request_indices else record.next_request


def _decision_text(record: CompactionRecord | None, count: int | None, threshold: int | None) -> str:
    over = count is not None and threshold is not None and count >= threshold
    relation = f"({_number(count)} {'≥' if over else '<'} {_number(threshold)})"
    if record is not None and record.trigger == "auto":
        return f"fires {relation}"
    if record is not None:  # a manual compaction: the user's /compact came before any auto check
        return f"{'over the threshold' if over else 'does not fire'} → {record.trigger} {relation}"
    return f"{'over the threshold, not compacted' if over else 'does not fire'} {relation}"


def _boundary_row(
    path: Path, line: int | None, marker: Item, output: int | None, strategy: str, result: ReplayResult, record: CompactionRecord | None
) -> ClaudeCodeFidelityRow:
    """A recorded boundary next to the replay: its count and threshold at the request after the boundary (or, for a
    manual boundary, at the manual `/compact`), the count of the check before it, and the usage each count read."""
    turns = [r for r in result.requests if r.kind == "turn" and r.attempt == 0]
    after = next((r for r in turns if r.meta.get("after_recorded_compaction") == marker.id), None)
    previous = [r for r in turns if after is not None and r.index < after.index]
    count = record.details.get("count") if record else (after.estimate_tokens if after else None)
    threshold = record.threshold if record else (after.threshold if after else None)
    checked_at = _compaction_start(record) if record else (after.index if after else None)
    return ClaudeCodeFidelityRow(
        file=path.name, line=line, recorded_trigger=marker.meta.get("trigger"), recorded_pre_tokens=marker.meta.get("preTokens"),
        recorded_output=output, strategy=strategy, decision=_decision_text(record, count, threshold),
        replay_trigger=record.trigger if record else None, count=count, threshold=threshold,
        previous_check=previous[-1].estimate_tokens if previous else None,
        count_source=_usage_source_before(result.requests, checked_at) if count is not None else None,
        previous_source=_usage_source_before(result.requests, previous[-1].index) if previous else None,
    )


def _unrecorded_row(path: Path, strategy: str, result: ReplayResult, record: CompactionRecord) -> ClaudeCodeFidelityRow:
    """A replay compaction where the recording has no boundary."""
    return ClaudeCodeFidelityRow(
        file=path.name, line=None, recorded_trigger=None, recorded_pre_tokens=None, recorded_output=None,
        strategy=strategy, decision=f"fires where the recording did not (step {record.step})",
        replay_trigger=record.trigger, count=record.details.get("count"), threshold=record.threshold,
        previous_check=None, count_source=_usage_source_before(result.requests, _compaction_start(record)), previous_source=None,
    )


def claude_code_fidelity_rows(
    path: str | Path,
    *,
    strategies: Sequence[str] = CLAUDE_CODE_STRATEGIES,
    options: dict[str, Any] | None = None,
    profile: ModelProfile | str | None = None,
) -> list[ClaudeCodeFidelityRow]:
    """Every recorded `compact_boundary` of a Claude Code session next to the replay's decision with the
    session's recorded usage: the replay's count and threshold at the request after the boundary (or,
    for a manual boundary, at the manual `/compact`), and the count of the check before it."""
    from compaction_bench.importing import load_transcripts

    check_claude_code_strategies(strategies)
    path = Path(path)
    lines = _uuid_lines(path)
    rows: list[ClaudeCodeFidelityRow] = []
    for transcript in load_transcripts(path, format="claude-code"):
        chosen = get_profile(profile) if profile is not None else _claude_profile(transcript)
        position = {item.id: n for n, item in enumerate(transcript.items)}
        steps = transcript.steps()
        for strategy in strategies:
            chosen_options = {"model": transcript.model or chosen.model, **(options or {})}
            result = replay(transcript, strategy, profile=chosen, usage="recorded", options=chosen_options)
            by_marker = {c.details["recorded"]["id"]: c for c in result.compactions if c.details.get("recorded")}
            for marker in transcript.markers("compaction"):
                before = [s for s in steps if position[s.items[-1].id] < position[marker.id]]
                output = before[-1].usage.output if before and before[-1].usage else None
                rows.append(_boundary_row(path, lines.get(marker.id), marker, output, strategy, result, by_marker.get(marker.id)))
            rows.extend(
                _unrecorded_row(path, strategy, result, record)
                for record in result.compactions
                if not record.details.get("recorded") and record.trigger != "microcompact"
            )
    return rows


#: What the count column reads, by `ClaudeCodeFidelityRow.count_source`.
COUNT_SOURCES = {"recorded": "recorded", "simulated": "simulated (the replay left the recording)", None: "none (no response before it)"}


def _source_cell(row: ClaudeCodeFidelityRow) -> str:
    return "—" if row.count is None else COUNT_SOURCES.get(row.count_source, str(row.count_source))


def _gap_cell(row: ClaudeCodeFidelityRow) -> str:
    if row.gap is None and row.recorded_pre_tokens is not None and row.count is not None:
        return "withheld (simulated usage)"
    return _number(row.gap)


def _previous_cell(row: ClaudeCodeFidelityRow) -> str:
    simulated = row.previous_check is not None and row.previous_source == "simulated"
    return _number(row.previous_check) + (" (simulated)" if simulated else "")


def claude_code_fidelity_table(rows: Sequence[ClaudeCodeFidelityRow]) -> str:
    """Markdown table of `claude_code_fidelity_rows`."""
    header = (
        "| file | recorded boundary | recorded trigger | recorded preTokens | recorded output of last response "
        "| strategy | replay decision | replay preTokens (count) | usage the count reads | preTokens − count | previous check |\n"
        "|---|---|---|---:|---:|---|---|---:|---|---:|---:|"
    )
    body = [
        f"| {r.file} | {f'line {r.line}' if r.line else '(none)'} | {r.recorded_trigger or '—'} | {_number(r.recorded_pre_tokens)} "
        f"| {_number(r.recorded_output)} | `{r.strategy}` | {r.decision} | {_number(r.count)} "
        f"| {_source_cell(r)} | {_gap_cell(r)} | {_previous_cell(r)} |"
        for r in rows
    ]
    return "\n".join([header, *body])


def simulated_rows_note(rows: Sequence[ClaudeCodeFidelityRow]) -> str | None:
    """The note under a table whose counts read simulated usage somewhere (None if none does)."""
    simulated = [r for r in rows if r.count_source == "simulated"]
    if not simulated:
        return None
    return (f"{len(simulated)} of {len(rows)} rows count on simulated usage: the replay's context no longer matched the "
            "recording's there (a boundary it did not compact at, or a compaction of its own), so the engine fed the "
            "simulated provider's usage, which lacks the unrecorded system prompt and tool schemas; their preTokens − count "
            "is withheld")

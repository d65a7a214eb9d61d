"""Fidelity: a strategy's decisions, and the cache model, next to what a real agent recorded.

This composition module holds every `bench fidelity` table; the engine knows nothing of it.

- Pi (docs/specs/pi.md §2, §3, §8): `fidelity_table(path)` replays a Pi session file with each Pi strategy, with the session's own
recorded usage at every step (`usage="recorded-always"`), the session model's window, and `compact_at_recorded` (so the
replay compacts where the real agent did, as a manual `/compact` when the strategy's own trigger
does not fire there, and stays in step with the recorded usage afterwards). For every recorded
compaction it puts the strategy's trigger decision, `tokensBefore` and cut point next to the
recorded ones, as a markdown table.
- Cache model (docs/specs/evaluation.md, provider cache rules): `recorded_agreement(transcript, profile)`
  replays a transcript through `none` with its recorded usage and compares modelled cached tokens
  with the provider's recorded ones, on the requests whose replayed context is the recording's
  (none after the recording agent's own compaction).
- Claude Code (docs/specs/claude-code.md §9, §11): `claude_code_fidelity_rows(path)` replays each
  session of a Claude Code JSONL with recorded usage and puts every recorded `compact_boundary`
  (trigger, preTokens, file line) next to the replay's decision, count and threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

from compaction_bench.errors import BenchError
from compaction_bench.importing import load_transcript
from compaction_bench.profiles import PROFILES, ModelProfile, ProfileError, get_profile
from compaction_bench.records import CompactionRecord
from compaction_bench.replay import replay
from compaction_bench.transcript import Transcript

DEFAULT_STRATEGIES = ("pi", "pi-2026-03", "pi-2025-12")
#: A window no request reaches: the cache comparison replays `none` and must reject nothing.
UNLIMITED_WINDOW = 100_000_000


def session_profile(transcript: Transcript) -> ModelProfile:
    """The built-in profile of the session's recorded model (its context window)."""
    model = transcript.model or ""
    for profile in PROFILES.values():
        if profile.model and (model == profile.model or model.startswith(profile.model)):
            return profile
    raise ProfileError(f"no built-in profile for the session model {model!r}; pass profile=...")


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


def _cut(lines: dict[str, int], entry: str | None, role: str | None, split: bool | None = None) -> str:
    """`id` (role, file line[, split turn])."""
    if not entry:
        return "—"
    where = f", line {lines[entry]}" if entry in lines else ""
    return f"`{entry}` ({role or '?'}{where}" + (", split turn)" if split else ")")


def _number(value: int | None) -> str:
    return f"{value:,}" if isinstance(value, int) else "—"


def _trigger(record: CompactionRecord) -> str:
    recorded = record.details.get("recorded") or {}
    tokens, threshold = recorded.get("contextTokens"), record.threshold
    if tokens is None:
        return "no usable usage → manual"
    # `record.threshold` is the smallest count that fires (`Request.threshold`: Pi's strict `>` of T is `≥ T + 1`)
    sign = "≥" if recorded.get("triggerFires") else "<"
    verdict = "fires" if recorded.get("triggerFires") else "does not fire → manual"
    return f"{verdict} ({_number(tokens)} {sign} {_number(threshold)})"


def fidelity_rows(
    path: str | Path, *, strategies: Sequence[str] = DEFAULT_STRATEGIES, profile: ModelProfile | str | None = None
) -> list[FidelityRow]:
    transcript = load_transcript(path, format="pi")
    chosen = profile if profile is not None else session_profile(transcript)
    lines = {str(i.meta["entry"]): i.meta["line"] for i in transcript.items if i.meta.get("entry") and i.meta.get("line")}
    rows = []
    for strategy in strategies:
        result = replay(transcript, strategy, profile=chosen, usage="recorded-always", options={"compact_at_recorded": True})
        at_marker = {c.details["recorded"]["entry"]: c for c in result.compactions if c.details.get("recorded")}
        for marker in transcript.markers("compaction"):
            meta = marker.meta
            record = at_marker.get(meta.get("entry"))
            recorded = (record.details.get("recorded") or {}) if record else {}
            rows.append(
                FidelityRow(
                    recorded_entry=f"`{meta.get('entry')}` (line {meta.get('line')})",
                    recorded_tokens_before=meta.get("tokensBefore"),
                    recorded_cut=_cut(lines, meta.get("firstKeptEntryId"), recorded.get("firstKeptRole")),
                    recorded_kept=recorded.get("keptTokensEstimate"),
                    strategy=strategy,
                    trigger=_trigger(record) if record else "not replayed",
                    tokens_before=record.details.get("tokensBefore") if record else None,
                    cut=_cut(lines, record.details.get("firstKeptEntryId"), record.details.get("firstKeptRole"), record.details.get("isSplitTurn")) if record else "—",
                    kept=record.details.get("keptTokensEstimate") if record else None,
                )
            )
        for record in result.compactions:
            if not record.details.get("recorded") and record.trigger != "branch":
                rows.append(
                    FidelityRow(
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
                )
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


def recorded_agreement(transcript: Transcript, profile: str | ModelProfile) -> dict[str, Any]:
    """Modelled vs recorded cached tokens for a replay of `none` with the transcript's own usage.

    Compared are the requests whose recorded usage reports input tokens and whose replayed context
    is still the recording's (`usage="recorded"`): after a compaction the recording agent made,
    `none` sends the whole history where the agent sent a summary, so from there on a modelled
    request is another request than the recorded one (and would read as a cache hit where the
    agent rewrote its prefix); those are counted in `requests_not_compared`. `mae_share` is the mean
    over the compared requests of |modelled cached / modelled input − recorded cached / recorded input|
    (shares, so tokens the transcript never recorded, such as a tool schema, do not count as
    error); `mae_tokens_share` is Σ|modelled − recorded cached| / Σ recorded input. The window is
    widened so that no request is rejected: what is compared is the cache model.
    """
    profile = get_profile(profile)
    profile = replace(profile, context_window=max(profile.context_window, UNLIMITED_WINDOW))
    result = replay(transcript, "none", profile=profile, usage="recorded")
    with_input = {step.index for step in transcript.steps() if step.usage is not None and step.usage.input > 0}
    turns = [r for r in result.requests if r.kind == "turn" and not r.overflow and r.step in with_input]
    # (modelled request, recorded usage) for every turn request whose recording reports input tokens
    # and whose context is the recording's (a simulated usage would agree with itself)
    pairs = [(r, r.usage) for r in turns if r.usage_source == "recorded" and r.usage is not None]
    shares = [abs(r.cached_tokens / r.true_tokens - u.cached_input / u.input) for r, u in pairs if r.true_tokens]
    recorded_input = sum(u.input for _, u in pairs)
    recorded_cached = sum(u.cached_input for _, u in pairs)
    return {
        "transcript": transcript.id,
        "profile": profile.name,
        "requests": len(pairs),
        "requests_not_compared": len(turns) - len(pairs),
        "requests_with_recorded_cache": sum(1 for _, u in pairs if u.cached_input > 0),
        "recorded_cached_tokens": recorded_cached,
        "modelled_cached_tokens": sum(r.cached_tokens for r, _ in pairs),
        "recorded_hit_rate": recorded_cached / recorded_input if recorded_input else None,
        "modelled_hit_rate": sum(r.cached_tokens for r, _ in pairs) / max(sum(r.true_tokens for r, _ in pairs), 1) if pairs else None,
        "mae_share": sum(shares) / len(shares) if shares else None,
        "mae_tokens_share": sum(abs(r.cached_tokens - u.cached_input) for r, u in pairs) / recorded_input if recorded_input else None,
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
    """One recorded `compact_boundary` (or one replay compaction the recording does not have)."""

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

    @property
    def gap(self) -> int | None:
        """Recorded preTokens minus the replay's count (the output tokens the JSONL line did not capture)."""
        if self.recorded_pre_tokens is None or self.count is None:
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
    try:
        return session_profile(transcript)
    except ProfileError:
        return get_profile("claude-opus" if "opus" in (transcript.model or "") else "claude-sonnet")


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
            turns = [r for r in result.requests if r.kind == "turn" and r.attempt == 0]
            by_marker = {c.details["recorded"]["id"]: c for c in result.compactions if c.details.get("recorded")}
            for marker in transcript.markers("compaction"):
                before = [s for s in steps if position[s.items[-1].id] < position[marker.id]]
                output = before[-1].usage.output if before and before[-1].usage else None
                after = next((r for r in turns if r.meta.get("after_recorded_compaction") == marker.id), None)
                previous = [r for r in turns if after is not None and r.index < after.index]
                record = by_marker.get(marker.id)
                count = record.details.get("count") if record else (after.estimate_tokens if after else None)
                threshold = record.threshold if record else (after.threshold if after else None)
                over = count is not None and threshold is not None and count >= threshold
                relation = f"({_number(count)} {'≥' if over else '<'} {_number(threshold)})"
                if record is not None and record.trigger == "auto":
                    decision = f"fires {relation}"
                elif record is not None:  # a manual compaction: the user's /compact came before any auto check
                    decision = f"{'over the threshold' if over else 'does not fire'} → {record.trigger} {relation}"
                else:
                    decision = f"{'over the threshold, not compacted' if over else 'does not fire'} {relation}"
                rows.append(
                    ClaudeCodeFidelityRow(
                        file=path.name, line=lines.get(marker.id), recorded_trigger=marker.meta.get("trigger"),
                        recorded_pre_tokens=marker.meta.get("preTokens"), recorded_output=output, strategy=strategy,
                        decision=decision, replay_trigger=record.trigger if record else None, count=count,
                        threshold=threshold, previous_check=previous[-1].estimate_tokens if previous else None,
                    )
                )
            for record in result.compactions:
                if record.details.get("recorded") or record.trigger == "microcompact":
                    continue
                rows.append(
                    ClaudeCodeFidelityRow(
                        file=path.name, line=None, recorded_trigger=None, recorded_pre_tokens=None, recorded_output=None,
                        strategy=strategy, decision=f"fires where the recording did not (step {record.step})",
                        replay_trigger=record.trigger, count=record.details.get("count"), threshold=record.threshold,
                        previous_check=None,
                    )
                )
    return rows


def claude_code_fidelity_table(rows: Sequence[ClaudeCodeFidelityRow]) -> str:
    """Markdown table of `claude_code_fidelity_rows`."""
    header = (
        "| file | recorded boundary | recorded trigger | recorded preTokens | recorded output of last response "
        "| strategy | replay decision | replay preTokens (count) | preTokens − count | previous check |\n"
        "|---|---|---|---:|---:|---|---|---:|---:|---:|"
    )
    body = [
        f"| {r.file} | {f'line {r.line}' if r.line else '(none)'} | {r.recorded_trigger or '—'} | {_number(r.recorded_pre_tokens)} "
        f"| {_number(r.recorded_output)} | `{r.strategy}` | {r.decision} | {_number(r.count)} | {_number(r.gap)} "
        f"| {_number(r.previous_check)} |"
        for r in rows
    ]
    return "\n".join([header, *body])

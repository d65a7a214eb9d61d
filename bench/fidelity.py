"""Fidelity: a strategy's decisions, and the cache model, next to what a real agent recorded.

This composition module holds every `bench fidelity` table; the engine knows nothing of it.

- Pi (docs/specs/pi.md §2, §3, §8): `fidelity_table(path)` replays a Pi session file with each Pi strategy, with the session's own
recorded usage (`usage="recorded"`), the session model's window, and `compact_at_recorded` (so the
replay compacts where the real agent did, as a manual `/compact` when the strategy's own trigger
does not fire there, and stays in step with the recorded usage afterwards). For every recorded
compaction it puts the strategy's trigger decision, `tokensBefore` and cut point next to the
recorded ones, as a markdown table.
- Cache model (docs/specs/evaluation.md, provider cache rules): `recorded_agreement(transcript, profile)`
  replays a transcript through `none` with its recorded usage and compares modelled cached tokens
  with the provider's recorded ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

from compaction_bench.importing import load_transcript
from compaction_bench.profiles import PROFILES, ModelProfile, ProfileError, get_profile
from compaction_bench.replay import CompactionRecord, replay
from compaction_bench.transcript import Transcript

DEFAULT_STRATEGIES = ("pi", "pi-2026-03")
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
    sign = ">" if recorded.get("triggerFires") else "≤"
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
        result = replay(transcript, strategy, profile=chosen, usage="recorded", options={"compact_at_recorded": True})
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

    Compared are the requests whose recorded usage reports input tokens. `mae_share` is the mean
    over those requests of |modelled cached / modelled input − recorded cached / recorded input|
    (shares, so tokens the transcript never recorded, such as a tool schema, do not count as
    error); `mae_tokens_share` is Σ|modelled − recorded cached| / Σ recorded input. The window is
    widened so that no request is rejected: what is compared is the cache model, and a session the
    recording agent compacted natively would otherwise overflow under `none`.
    """
    profile = get_profile(profile)
    profile = replace(profile, context_window=max(profile.context_window, UNLIMITED_WINDOW))
    result = replay(transcript, "none", profile=profile, usage="recorded")
    rows = [r for r in result.requests if r.kind == "turn" and not r.overflow and r.usage is not None and r.usage.input > 0]
    with_cached = [r for r in rows if r.usage is not None and r.usage.cached_input > 0]
    shares = [abs(r.cached_tokens / r.true_tokens - r.usage.cached_input / r.usage.input) for r in rows if r.true_tokens]
    recorded_input = sum(r.usage.input for r in rows)
    return {
        "transcript": transcript.id,
        "profile": profile.name,
        "requests": len(rows),
        "requests_with_recorded_cache": len(with_cached),
        "recorded_cached_tokens": sum(r.usage.cached_input for r in rows),
        "modelled_cached_tokens": sum(r.cached_tokens for r in rows),
        "recorded_hit_rate": sum(r.usage.cached_input for r in rows) / recorded_input if recorded_input else None,
        "modelled_hit_rate": sum(r.cached_tokens for r in rows) / max(sum(r.true_tokens for r in rows), 1) if rows else None,
        "mae_share": sum(shares) / len(shares) if shares else None,
        "mae_tokens_share": sum(abs(r.cached_tokens - r.usage.cached_input) for r in rows) / recorded_input if recorded_input else None,
        # What the provider counted that the transcript does not hold (system prompt, tool schemas):
        "unrecorded_tokens_median": float(median(r.usage.input - r.true_tokens for r in rows)) if rows else None,
    }

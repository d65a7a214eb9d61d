"""Calibrating the offline summarizer against summaries real models wrote (`bench calibrate FILES…`).

The corpora hold summaries written at real compactions: Codex `compacted` lines, Claude Code
`isCompactSummary` messages (markers `compaction-summary`) and Pi `compaction` entries (markers
`compaction` carrying the summary text). For each one, the span the real summary replaced is:
- Pi: the entries from the previous compaction's first kept entry (or the start) up to this
  compaction's `firstKeptEntryId` (later entries stayed verbatim, docs/specs/pi.md);
- Claude Code and Codex: every item since the previous compaction (they summarize all of it).
Probes are mined from that span (`compaction_bench.scenarios.mining`; the judged families are left
out: they need a model to grade), the offline summarizer (`offline/extractive`) summarizes the
same span under the agent's own summary template with its default budget, and both summaries
are graded by presence (evidence-anchored, `compaction_bench.metrics.grading`): how many of the
span's facts each keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction_bench.importing import load_transcripts
from compaction_bench.offline_models import extractive_summary
from compaction_bench.request import message_from_item
from compaction_bench.templates import PromptSet
from compaction_bench.tokens import shared_counter
from compaction_bench.transcript import Item, Transcript

#: transcript format -> (summary template, its variables)
TEMPLATES: dict[str, tuple[str, dict[str, Any]]] = {
    "pi": ("pi_summary.j2", {"update": False}),
    "claude-code": ("claude_code_summary.j2", {"instructions": None, "text_only": True}),
    "codex": ("codex_summary.j2", {}),
}
SUMMARY_EVENTS = {"pi": "compaction", "claude-code": "compaction-summary", "codex": "compaction"}


@dataclass(frozen=True)
class Calibration:
    """One recorded compaction: the span's facts and how many each summary keeps."""

    file: str
    session: str
    compaction: int
    span_items: int
    probes: int
    real_tokens: int
    offline_tokens: int
    real_kept: int
    offline_kept: int
    both_kept: int

    def cells(self) -> list[str]:
        return [
            self.file, str(self.compaction), f"{self.span_items:,}", str(self.probes), f"{self.real_tokens:,}", f"{self.offline_tokens:,}",
            f"{self.real_kept} ({self._share(self.real_kept)})", f"{self.offline_kept} ({self._share(self.offline_kept)})", str(self.both_kept),
        ]

    def _share(self, kept: int) -> str:
        return f"{kept / self.probes:.0%}" if self.probes else "–"


HEADER = ["file", "compaction", "span items", "facts (probes)", "real summary tokens", "offline summary tokens", "real keeps", "offline keeps", "both keep"]


def _format(transcript: Transcript) -> str:
    fmt = str(transcript.source.get("format") or "")
    return "codex" if fmt.startswith("codex") else fmt


def spans(transcript: Transcript) -> list[tuple[list[Item], str]]:
    """(the items a recorded summary replaced, the summary text), in order."""
    fmt = _format(transcript)
    event = SUMMARY_EVENTS.get(fmt)
    if event is None:
        return []
    out: list[tuple[list[Item], str]] = []
    start = 0
    positions = {item.id: n for n, item in enumerate(transcript.items)}
    for n, item in enumerate(transcript.items):
        if item.kind != "marker" or item.meta.get("event") != event or not item.text.strip():
            continue
        end = n
        kept = item.meta.get("firstKeptEntryId") if fmt == "pi" else None
        if kept in positions and start <= positions[kept] < n:
            end = positions[kept]
        span = [i for i in transcript.items[start:end] if i.kind != "marker"]
        if span:
            out.append((span, item.text))
        start = end if fmt == "pi" and kept in positions else n + 1
    return out


def _offline(span: Sequence[Item], fmt: str, prompts: PromptSet) -> str:
    from compaction_bench.metrics.grading import context_messages

    template, variables = TEMPLATES[fmt]
    messages = context_messages([message_from_item(i) for i in span])
    return extractive_summary([*messages, {"role": "user", "content": prompts.render(template, **variables)}], None)


def calibrate_transcript(transcript: Transcript, file: str) -> list[Calibration]:
    """One row per recorded compaction of a transcript (none for formats without them)."""
    from compaction_bench.metrics.grading import anchor, presence
    from compaction_bench.metrics.retention import source_position
    from compaction_bench.scenarios.mining import mine_probes

    fmt = _format(transcript)
    prompts = PromptSet()
    count = shared_counter("o200k_base").count
    rows = []
    for index, (span, real) in enumerate(spans(transcript)):
        part = transcript.with_items(span)
        probes = [p for p in mine_probes(part) if p.match != "judge"]
        offline = _offline(span, fmt, prompts)
        real_kept = offline_kept = both = 0
        for probe in probes:
            source = part.items[source_position(part, probe)]
            evidence = anchor(probe, "\n".join(t for t in (source.text, source.arguments) if t))
            in_real, in_offline = presence(probe, real, None, evidence).present, presence(probe, offline, None, evidence).present
            real_kept += in_real
            offline_kept += in_offline
            both += in_real and in_offline
        rows.append(
            Calibration(file, transcript.id, index, len(span), len(probes), count(real), count(offline), real_kept, offline_kept, both)
        )
    return rows


def calibrate(files: Iterable[str | Path]) -> list[Calibration]:
    """Every recorded compaction of every session in the files."""
    rows = []
    for file in files:
        path = Path(file)
        for transcript in load_transcripts(path):
            rows += calibrate_transcript(transcript, f"{path.parent.name}/{path.name}")
    return rows


def markdown(rows: Sequence[Calibration]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join(["---", "---:", *["---:"] * (len(HEADER) - 2)]) + "|"]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    if rows:
        probes = sum(r.probes for r in rows)
        real, offline = sum(r.real_kept for r in rows), sum(r.offline_kept for r in rows)
        lines.append(
            f"| all | {len(rows)} | {sum(r.span_items for r in rows):,} | {probes} | {sum(r.real_tokens for r in rows):,} | "
            f"{sum(r.offline_tokens for r in rows):,} | {real} ({real / probes:.0%}) | {offline} ({offline / probes:.0%}) | "
            f"{sum(r.both_kept for r in rows)} |" if probes else "| all | – | – | 0 | – | – | – | – | – |"
        )
    return "\n".join(lines)

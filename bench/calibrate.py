"""Calibrating the offline summarizer against summaries real models wrote (`bench calibrate FILES…`).

The corpora hold summaries written at real compactions: Codex `compacted` lines, Claude Code
`isCompactSummary` messages (markers `compaction-summary`) and Pi `compaction` entries (markers
`compaction` carrying the summary text). For each one, the span the real summary replaced is the
part of the history its summarizer was given and did not keep verbatim:
- Pi: up to this compaction's `firstKeptEntryId` (later entries stayed verbatim), from the entry
  after the previous compaction for a compaction recorded before Pi's fix eeace797 (2026-03-27:
  until then the previous compaction's kept tail was neither summarized nor kept, issue #2608),
  from the previous compaction's first kept entry after it (docs/specs/pi.md §3, "Boundaries");
- Claude Code and Codex: every item since the previous compaction (they summarize all of it).
A compaction without summary text (a Codex remote compaction) still ends the span of the next one.
Probes are mined from that span (`compaction_bench.scenarios.mining`; the judged families are left
out: they need a model to grade), the offline summarizer (`offline/extractive`) summarizes the
same span under the agent's own summary template with its default budget, and both summaries
are graded by presence (evidence-anchored, `compaction_bench.metrics.grading`): how many of the
span's facts each keeps.

A session is one unit however many compactions it holds: a session given twice (the same content
in another file) is counted once, the same path given twice is refused, and the difference
offline − real is given with a bootstrap interval clustered by session and the two-sided sign-flip
test of the facts one summary keeps and the other does not (`compaction_bench.metrics.stats`); it
is called a difference only when the interval excludes 0, the test rejects at 0.05 and there are
two sessions at least. Sessions that yield no row are named under the table, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError
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
#: Pi's fix eeace797: from this day a compaction summarizes the previous one's kept tail too.
PI_KEPT_TAIL_FIX = "2026-03-27"


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


def _pi_kept_tail_summarized(marker: Item) -> bool:
    """Whether Pi summarized the previous compaction's kept tail at this compaction: recorded on or
    after the fix's date (a compaction without a timestamp is taken to be the current rule's)."""
    return not marker.timestamp or marker.timestamp[:10] >= PI_KEPT_TAIL_FIX


def spans(transcript: Transcript) -> list[tuple[list[Item], str]]:
    """(the items a recorded summary replaced, the summary text), in order."""
    fmt = _format(transcript)
    event = SUMMARY_EVENTS.get(fmt)
    if event is None:
        return []
    out: list[tuple[list[Item], str]] = []
    start = 0
    kept_from: int | None = None  # Pi: where the previous compaction's kept tail begins
    positions = {item.id: n for n, item in enumerate(transcript.items)}
    for n, item in enumerate(transcript.items):
        if item.kind != "marker" or item.meta.get("event") != event:
            continue
        if fmt == "pi" and kept_from is not None and _pi_kept_tail_summarized(item):
            start = kept_from
        kept = positions.get(str(item.meta.get("firstKeptEntryId"))) if fmt == "pi" else None
        if kept is not None and not start <= kept < n:
            kept = None
        span = [i for i in transcript.items[start:n if kept is None else kept] if i.kind != "marker"]
        if span and item.text.strip():
            out.append((span, item.text))
        start, kept_from = n + 1, kept
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


class CalibrationError(BenchError, ValueError):
    """A list of files that cannot be calibrated as given (the same path twice)."""


class Calibrations(list[Calibration]):
    """The rows of `calibrate`, and a line for each session given that yields none, saying why."""

    def __init__(self, rows: Iterable[Calibration] = (), notes: Iterable[str] = ()) -> None:
        super().__init__(rows)
        self.notes = list(notes)


def _no_row(transcript: Transcript) -> str:
    """Why a session yields no row."""
    fmt = _format(transcript)
    if fmt not in SUMMARY_EVENTS:
        return f"format {fmt or 'unknown'} is not calibrated (no summary template for it here)"
    markers = [i for i in transcript.items if i.kind == "marker" and i.meta.get("event") == SUMMARY_EVENTS[fmt]]
    if not markers:
        return "no recorded compaction"
    if not any(i.text.strip() for i in markers):
        return f"{len(markers)} recorded compaction(s), none with summary text"
    return "its recorded summaries replaced no items"


def calibrate(files: Iterable[str | Path]) -> Calibrations:
    """Every recorded compaction of every distinct session in the files (each path once)."""
    from compaction_bench.runner import repeated_path, session_digest

    paths = [Path(file) for file in files]
    repeated = repeated_path(paths)
    if repeated is not None:
        raise CalibrationError(repeated)
    out = Calibrations()
    taken: dict[str, str] = {}  # session digest -> where it was first given
    for path in paths:
        transcripts = load_transcripts(path)
        for number, transcript in enumerate(transcripts, start=1):
            folder = f"{path.parent.name}/" if path.parent.name else ""  # a file of this folder is named alone, not "/name"
            label = f"{folder}{path.name}" + (f" session {number}" if len(transcripts) > 1 else "")
            digest = session_digest(transcript)
            if digest in taken:
                out.notes.append(f"{label}: the same session as {taken[digest]}; counted once")
                continue
            taken[digest] = label
            rows = calibrate_transcript(transcript, label)
            out += rows
            if not rows:
                out.notes.append(f"{label}: {_no_row(transcript)}; no row")
    return out


def difference(rows: Sequence[Calibration]) -> str:
    """Offline − real share of the facts kept, with its interval clustered by session and the
    sign-flip test of the facts only one summary keeps; the verdict only where both say so."""
    from compaction_bench.metrics.stats import DIFFERENCE, cluster_bootstrap_ci, detectable, signflip_p

    clusters: dict[str, list[float]] = {}
    for row in rows:
        only_offline, only_real = row.offline_kept - row.both_kept, row.real_kept - row.both_kept
        facts = [1.0] * only_offline + [-1.0] * only_real + [0.0] * (row.probes - only_offline - only_real)
        clusters.setdefault(row.session, []).extend(facts)
    values = [v for facts in clusters.values() for v in facts]
    if not values:
        return "offline − real: no facts to compare."
    mean = sum(values) / len(values)
    low, high = cluster_bootstrap_ci(list(clusters.values()), bounds=DIFFERENCE)
    p_value = signflip_p(values, two_sided=True)
    changed = sum(v != 0 for v in values)
    units = f"{len(clusters)} session(s), {len(rows)} compaction(s), {len(values)} facts"
    if len(clusters) < 2:
        verdict = "one session: its compactions and facts are not independent units, so no verdict"
    elif detectable(low, high, p_value):
        verdict = f"the offline summarizer keeps {'more' if mean > 0 else 'fewer'} of the spans' facts than the real summaries"
    else:
        verdict = "no detectable difference"
    return (
        f"offline − real, share of the spans' facts kept: {mean:+.1%}, 95% interval [{low:+.1%}, {high:+.1%}] "
        f"(bootstrap over {units}, clustered by session; two-sided sign-flip p = {p_value:.3f} over the {changed} facts "
        f"only one summary keeps): {verdict}."
    )


def markdown(rows: Sequence[Calibration]) -> str:
    """The table, its total row, the difference line and (for `Calibrations`) the notes on sessions without rows."""
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
        lines += ["", difference(rows)]
    notes = getattr(rows, "notes", ())
    if notes:
        lines += ["", "Sessions without a row:", *(f"- {note}" for note in notes)]
    return "\n".join(lines)

"""Calibrating the offline summarizer against summaries real models wrote (`bench calibrate FILES…`).

The corpora hold summaries written at real compactions: Codex `compacted` lines, Claude Code
`isCompactSummary` messages (markers `compaction-summary`) and Pi `compaction` entries (markers
`compaction` carrying the summary text). For each one, the span the real summary replaced is the
part of the history its summarizer was given and did not keep verbatim:
- Pi: up to this compaction's `firstKeptEntryId` (later entries stayed verbatim), from the entry
  after the previous compaction for a compaction recorded before Pi's fix eeace797 (2026-03-27:
  until then the previous compaction's kept tail was neither summarized nor kept, issue #2608),
  from the previous compaction's first kept entry after it (docs/specs/pi.md §3, "Boundaries");
  Pi names an entry, and an assistant entry's items are `<entry>.<n>` (scenarios/pi_session.py),
  so the cut is found by the entry id each item carries in `meta["entry"]`; a `firstKeptEntryId`
  that is no entry between the span's start and the compaction is a problem: that compaction gets
  no row (it is named under the table) and the next one starts after it, as Pi's own fallback does;
- Claude Code and Codex: every item since the previous compaction (they summarize all of it). Codex
  keeps real user messages verbatim in the new history (docs/specs/codex.md §2.2 steps 2-3): the
  ones its `compacted` line's `replacement_history` holds (§7.2; the importer keeps their texts in
  the marker's `replacement_user_messages`), else the newest within 20,000 tokens, the one crossing
  the budget middle-truncated (`build_compacted_history`, §7.3 step 4). The facts mined from those
  messages are left out (a truncated one: the facts its kept text holds): they were not the
  summary's to keep; both summarizers are still given the messages. Claude Code keeps no message
  verbatim (§4: the files, todo list and plan it re-attaches are read again, and not recorded in
  the session file), except a `preservedSegment` (2.1.x, §1.2, §8.5, §8.7), which the transcript
  does not delimit: a summary saying "Recent messages are preserved verbatim." is a problem, no row.
A compaction without summary text (a Codex remote compaction) still ends the span of the next one.
Probes are mined from that span (`compaction_bench.scenarios.mining`; the judged families are left
out: they need a model to grade), the offline summarizer (`offline/extractive`) summarizes the
same span under the agent's own summary template with its default budget, and both summaries
are graded by presence (evidence-anchored, `compaction_bench.metrics.grading`): how many of the
span's facts each keeps.

A session is one unit however many compactions it holds: a session given twice (the same content
in another file) is counted once, the same path given twice is refused, and the difference
offline − real is given with a bootstrap interval clustered by session and the two-sided sign-flip
test over the sessions, each session's facts (those one summary keeps and the other does not) flipped
together, as one summary's facts move together (`compaction_bench.metrics.stats`); it is called a
difference only when the interval excludes 0 and the test rejects at 0.05, which takes six sessions
that differ at the least; one session gets no verdict at all. Sessions that yield no row, and compactions whose span cannot be known, are named
under the table, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compaction_bench.errors import BenchError
from compaction_bench.importing import load_transcripts
from compaction_bench.offline_models import extractive_summary
from compaction_bench.request import message_from_item
from compaction_bench.templates import PromptSet
from compaction_bench.tokens import shared_counter
from compaction_bench.transcript import Item, Transcript

if TYPE_CHECKING:
    from compaction_bench.metrics.grading import Anchor
    from compaction_bench.probes import Probe

#: transcript format -> (summary template, its variables)
TEMPLATES: dict[str, tuple[str, dict[str, Any]]] = {
    "pi": ("pi_summary.j2", {"update": False}),
    "claude-code": ("claude_code_summary.j2", {"instructions": None, "text_only": True}),
    "codex": ("codex_summary.j2", {}),
}
SUMMARY_EVENTS = {"pi": "compaction", "claude-code": "compaction-summary", "codex": "compaction"}
#: Pi's fix eeace797: from this day a compaction summarizes the previous one's kept tail too.
PI_KEPT_TAIL_FIX = "2026-03-27"
#: The mark Codex's `truncate_text` puts where it cut the middle of a text (spec §9; core/src/truncate.rs).
CODEX_CUT = re.compile(r"…\d+ (?:tokens|chars) truncated…")
#: What Claude Code's summary message says when it keeps recent messages verbatim after it (`preservedSegment`;
#: docs/specs/claude-code.md §8.5, cc@2.1.112 cli.js L2461).
CLAUDE_CODE_PRESERVED = "Recent messages are preserved verbatim."


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
    verbatim: int = 0  # facts of the span left out: the agent kept the messages holding them verbatim

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


@dataclass(frozen=True)
class Compaction:
    """A recorded compaction with summary text: `items`, the span its summarizer was given and did not
    keep verbatim as a whole (module docstring); `kept`, the messages of the span the agent kept verbatim
    all the same (Codex's user messages: item id -> the text kept, middle-truncated for one)."""

    number: int  # its place among the transcript's compactions with summary text, from 0
    items: list[Item]
    summary: str
    kept: Mapping[str, str] = field(default_factory=dict)


class Compactions(list[Compaction]):
    """The compactions of a transcript that give a span, and a line for each that cannot, saying why."""

    def __init__(self, compactions: Iterable[Compaction] = (), problems: Iterable[str] = ()) -> None:
        super().__init__(compactions)
        self.problems = list(problems)


def _pi_entry_positions(items: Sequence[Item]) -> dict[str, int]:
    """Each Pi entry id -> the position of its first item. An assistant entry's items are `<entry>.<n>`
    and carry the entry id in `meta["entry"]` (scenarios/pi_session.py); an item without it is its own entry."""
    positions: dict[str, int] = {}
    for n, item in enumerate(items):
        positions.setdefault(str(item.meta.get("entry", item.id)), n)
    return positions


def _pi_first_kept(marker: Item, positions: Mapping[str, int], start: int, end: int) -> tuple[int | None, str | None]:
    """Where the entries a Pi compaction kept begin: a position in [start, end) (docs/specs/pi.md §3.3 step 6:
    Pi cuts within the boundary, before the compaction entry it appends), or None and the problem."""
    kept_id = marker.meta.get("firstKeptEntryId")
    if not isinstance(kept_id, str) or not kept_id:
        return None, f"compaction entry {marker.id}: no firstKeptEntryId ({kept_id!r})"
    kept = positions.get(kept_id)
    if kept is None:
        return None, f"compaction entry {marker.id}: firstKeptEntryId {kept_id!r} is no entry of the session's path"
    if not start <= kept < end:
        return None, (f"compaction entry {marker.id}: firstKeptEntryId {kept_id!r} is not between the span's start and the "
                      "compaction (Pi cuts there)")
    return kept, None


def _is_cut_of(kept: str, text: str) -> bool:
    """Whether `kept` is `text` with its middle cut out by Codex's `truncate_text` (head, mark, tail)."""
    return any(text.startswith(kept[: m.start()]) and text.endswith(kept[m.end():]) for m in CODEX_CUT.finditer(kept))


def _codex_recorded_kept(users: Sequence[Item], recorded: Sequence[str]) -> tuple[dict[str, str], str | None]:
    """The span's real user messages a recorded `replacement_history` kept: Codex keeps the newest user messages
    of the whole history (spec §2.2 step 3), so its list ends with the span's newest; only its oldest may be cut."""
    kept: dict[str, str] = {}
    for depth, (text, item) in enumerate(zip(reversed(recorded), reversed(users), strict=False)):
        if text != item.text and not (depth == len(recorded) - 1 and _is_cut_of(text, item.text)):
            return {}, (f"the compaction's replacement_history keeps user message {len(recorded) - depth} of {len(recorded)} "
                        f"as {text[:60]!r}, which is not user message {item.id} of the span ({item.text[:60]!r})")
        kept[item.id] = text
    return kept, None


def _codex_rule_kept(users: Sequence[Item]) -> dict[str, str]:
    """The span's real user messages Codex's rule keeps when the line records no history (spec §7.3 step 4): the
    newest within Codex's budget (`codex-local`'s `compact_user_message_max_tokens`, `COMPACT_USER_MESSAGE_MAX_TOKENS`:
    spec §2.2 step 3), the crossing one middle-truncated (`select_user_messages`). The span's messages are the history's
    newest, so the rule over them alone picks the same ones of them."""
    from compaction_bench.strategies.codex import LocalOptions
    from compaction_bench.strategies.codex_components import ItemConverter, select_user_messages

    converter = ItemConverter()
    budget = LocalOptions().compact_user_message_max_tokens
    return {k.item_ids[0]: k.text for k in select_user_messages([converter.convert(u) for u in users], budget)}


def _codex_kept(span: Sequence[Item], recorded: Sequence[str] | None) -> tuple[dict[str, str], str | None]:
    """The span's user messages Codex kept verbatim (item id -> kept text), or the problem that hides them: those
    `recorded` in the compaction's `replacement_history` (the marker's `replacement_user_messages`, which the
    importer takes from it: scenarios/codex_rollout.py `replacement_user_texts`), else Codex's rule. The transcript's
    real user messages are its user items that are not synthetic (contextual fragments and agent messages are)."""
    users = [i for i in span if i.kind == "user" and not i.synthetic]
    if recorded is None:
        return _codex_rule_kept(users), None
    return _codex_recorded_kept(users, recorded)


def compactions(transcript: Transcript) -> Compactions:
    """The transcript's recorded compactions with summary text and a span, in order (module docstring), and the
    problems of those whose span cannot be known."""
    fmt = _format(transcript)
    event = SUMMARY_EVENTS.get(fmt)
    out = Compactions()
    if event is None:
        return out
    items = transcript.items
    markers = [n for n, i in enumerate(items) if i.kind == "marker" and i.meta.get("event") == event]
    positions = _pi_entry_positions(items) if fmt == "pi" else {}
    start, number = 0, 0
    kept_from: int | None = None  # Pi: where the previous compaction's kept tail begins
    for n in markers:
        marker, end, problem = items[n], n, None
        if fmt == "pi":
            if kept_from is not None and _pi_kept_tail_summarized(marker):
                start = kept_from
            kept_from, problem = _pi_first_kept(marker, positions, start, n)
            end = n if kept_from is None else kept_from
        if marker.text.strip():
            span = [i for i in items[start:end] if i.kind != "marker"]
            kept, problem = _kept_in_span(fmt, span, marker) if problem is None else ({}, problem)
            if problem:
                out.problems.append(f"compaction {number}: {problem}; no row")
            elif span:
                out.append(Compaction(number, span, marker.text, kept))
            number += 1
        start = n + 1
    return out


def _recorded_user_messages(marker: Item) -> Sequence[str] | None:
    """The real user messages a Codex compaction's `replacement_history` kept, as the importer recorded them in its
    marker (`replacement_user_messages`); None when the line records no history (a legacy line) or the marker was
    not read from a rollout (a transcript built in memory)."""
    recorded = marker.meta.get("replacement_user_messages")
    return None if recorded is None else [str(text) for text in recorded]


def _kept_in_span(fmt: str, span: Sequence[Item], marker: Item) -> tuple[dict[str, str], str | None]:
    """The messages of a span the agent kept verbatim (item id -> the text kept), or the problem that hides them."""
    if fmt == "codex":
        return _codex_kept(span, _recorded_user_messages(marker))
    if fmt == "claude-code" and CLAUDE_CODE_PRESERVED in marker.text:
        return {}, f"summary {marker.id} says recent messages are kept verbatim after it (a preservedSegment), which the transcript does not delimit"
    return {}, None


def spans(transcript: Transcript) -> list[tuple[list[Item], str]]:
    """(the items a recorded summary replaced, the summary text), in order; a compaction whose span cannot be
    known is an error here (`compactions` names it and goes on)."""
    found = compactions(transcript)
    if found.problems:
        raise CalibrationError(f"{transcript.id}: " + "; ".join(found.problems))
    return [(c.items, c.summary) for c in found]


def _offline(span: Sequence[Item], fmt: str, prompts: PromptSet) -> str:
    from compaction_bench.metrics.grading import context_messages

    template, variables = TEMPLATES[fmt]
    messages = context_messages([message_from_item(i) for i in span])
    return extractive_summary([*messages, {"role": "user", "content": prompts.render(template, **variables)}], None)


def calibrate_transcript(transcript: Transcript, file: str, found: Compactions | None = None) -> list[Calibration]:
    """One row per recorded compaction of a transcript that gives a span (`found`, else `compactions(transcript)`;
    none for formats without them)."""
    from compaction_bench.metrics.grading import anchor, presence
    from compaction_bench.metrics.retention import source_position
    from compaction_bench.scenarios.mining import mine_probes

    fmt = _format(transcript)
    prompts = PromptSet()
    count = shared_counter("o200k_base").count
    found = compactions(transcript) if found is None else found
    rows = []
    for compaction in found:
        span, real = compaction.items, compaction.summary
        part = transcript.with_items(span)
        offline = _offline(span, fmt, prompts)
        probes = verbatim = real_kept = offline_kept = both = 0
        for probe in (p for p in mine_probes(part) if p.match != "judge"):
            source = part.items[source_position(part, probe)]
            evidence = anchor(probe, "\n".join(t for t in (source.text, source.arguments) if t))
            if _kept_verbatim(probe, source, compaction.kept.get(source.id), evidence):
                verbatim += 1
                continue
            in_real, in_offline = presence(probe, real, None, evidence).present, presence(probe, offline, None, evidence).present
            probes += 1
            real_kept += in_real
            offline_kept += in_offline
            both += in_real and in_offline
        rows.append(Calibration(file, transcript.id, compaction.number, len(span), probes, count(real), count(offline),
                                real_kept, offline_kept, both, verbatim))
    return rows


def _kept_verbatim(probe: Probe, source: Item, kept: str | None, evidence: Anchor) -> bool:
    """Whether the agent kept the fact verbatim: its source message is kept whole, or cut and the kept text
    still holds the fact (graded as a summary is)."""
    from compaction_bench.metrics.grading import presence

    return kept is not None and (kept == source.text or presence(probe, kept, None, evidence).present)


class CalibrationError(BenchError, ValueError):
    """Files that cannot be calibrated as given (the same path twice), or, from `spans`, a compaction whose span
    cannot be known."""


class Calibrations(list[Calibration]):
    """The rows of `calibrate`, and a line for each session given that yields none and each compaction whose span
    cannot be known, saying why."""

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
            found = compactions(transcript)
            rows = calibrate_transcript(transcript, label, found)
            out += rows
            out.notes += [f"{label}: {problem}" for problem in found.problems]
            if not rows and not found.problems:
                out.notes.append(f"{label}: {_no_row(transcript)}; no row")
    return out


def difference(rows: Sequence[Calibration]) -> str:
    """Offline − real share of the facts kept, with its interval clustered by session and the sign-flip test over
    the sessions (each session's facts only one summary keeps flipped together); the verdict only where both say so."""
    from compaction_bench.metrics.stats import CLAIM_UNITS, DIFFERENCE, cluster_bootstrap_ci, detectable, signflip_p, unit_sums

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
    sums = unit_sums(list(clusters.values()))
    p_value = signflip_p(sums.tolist(), two_sided=True)
    changed, differing = sum(v != 0 for v in values), int((sums != 0).sum())
    units = f"{len(clusters)} session(s), {len(rows)} compaction(s), {len(values)} facts"
    if len(clusters) < 2:
        verdict = "one session: its compactions and facts are not independent units, so no verdict"
    elif detectable(low, high, p_value):
        verdict = f"the offline summarizer keeps {'more' if mean > 0 else 'fewer'} of the spans' facts than the real summaries"
    else:
        verdict = "no detectable difference"
    scope = (f" (over {len(clusters)} session{'' if len(clusters) == 1 else 's'}, fewer than {CLAIM_UNITS}: it describes "
             f"{'this session' if len(clusters) == 1 else 'these sessions'}, not sessions like them)" if len(clusters) < CLAIM_UNITS else "")
    return (
        f"offline − real, share of the spans' facts kept: {mean:+.1%}, 95% interval [{low:+.1%}, {high:+.1%}]{scope} "
        f"(bootstrap over {units}, clustered by session; two-sided sign-flip p = {p_value:.3f} over the {differing} session(s) "
        f"that differ, each session's facts only one summary keeps, {changed} in all, flipped together): {verdict}."
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
        verbatim = sum(r.verbatim for r in rows)
        if verbatim:
            lines.append(f"Left out of the facts: {verbatim} mined from messages the agent kept verbatim (Codex's user messages); "
                         "they were not the summaries' to keep.")
    notes = getattr(rows, "notes", ())
    if notes:
        lines += ["", "Sessions and compactions without a row:", *(f"- {note}" for note in notes)]
    return "\n".join(lines)

"""Probe rows: where each probe is asked, what the context held, and whether the model saw it.

Paired checkpoints (`checkpoints`): one set per scenario, derived from the transcript alone, so
every strategy of a run is probed at the same places (docs/specs/evaluation.md §1: every method
is judged at the same points of the same conversation):
- the start of every real user turn: the first recorded model response after the user message;
- inside a long turn, every `every_steps` responses after the turn's start (default
  `DEFAULT_EVERY_STEPS`; None or 0 turns it off);
- the end of the session (`final`).
A session with more than `max_checkpoints` of them (default `DEFAULT_MAX_CHECKPOINTS`; None: all)
keeps that many, evenly spaced in order, plus the end: answering every probe at each of 200 turns
would cost more than it tells.

The context at a checkpoint is taken from the engine's request records: the request of that
step, i.e. what the model was sent when it produced the recorded response; after an overflow and
a recovery, the last attempt of the step. At the end it is the final context. A probe is asked at
every checkpoint whose context comes after its source (the source item lies before the step's
first output item).

Compaction points (the first request after a compaction, `ProbePoint`s of the replay) give extra
diagnostic rows, `point_kind="compaction"`; checkpoint rows have `point_kind="checkpoint"` or
`"final"`. Headline figures use only the latter (`compaction_bench.metrics.aggregate`).

Per row:
- `status`: `seen`, or `not_seen` when that request overflowed (it reached no model): then the
  probe is absent and unanswered (`present=False`, `correct=False`; a judge probe's `judge_strict` and
  `judge_lenient` False too, where a judge is set: no rubric accepted a reply), never graded as if seen;
- `present` (evidence-anchored, `grading.presence`) and `found`, which splits `present` so that
  `kept` + `summary` = `present`: `summary` when the summary text by itself carries the answer and
  the messages that are not a summary do not; `kept` for every other present answer, i.e. the kept
  messages carry it alone, or only the two together do (a set with one member in each, a short
  answer whose evidence term is in the other part: what is not the summary's alone is not credited
  to it); else `absent`. A summary message is a `compaction` item or one that carries a
  compaction's summary text;
- `source_summarized`: the probe's source item went into a summary (an earlier compaction's
  `summarized_ids`) and is not itself in the context, and `in_summary`: the summary text holds
  the answer (whatever the rest of the context holds): on those rows it measures the summary;
- `correct` (the answerer's reply, graded by the probe's rule; a probe a guess or a stray number
  could pass counts only when its answer is `present`, evidence included: `exact`/`contains` with
  only short answers, every `number` probe (a unit or not: `42 ms`), and a `set` with a short
  member; so a guess is never retention) and, on checkpoint and
  final rows, `ceiling_correct`: the same question on the uncompacted transcript up to that
  checkpoint (the answerer's ceiling on the same rows, the same for every strategy; asked once
  per process, scenario and checkpoint);
- `fact_age_tokens`: true tokens of the transcript after the source item (its own tokens not
  counted) and before the checkpoint.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from compaction_bench.llm import CallSettings, LLMClient, LLMError, PreparedContext
from compaction_bench.metrics import grading
from compaction_bench.metrics.aggregate import beyond_window
from compaction_bench.probes import Probe, ProbeError
from compaction_bench.provider import MessageCounter
from compaction_bench.records import CompactionRecord, ReplayResult, RequestRecord
from compaction_bench.request import Message, message_from_item
from compaction_bench.tokens import last_user_message
from compaction_bench.transcript import Transcript

#: Inside a turn longer than this many model responses, a checkpoint every that many responses.
DEFAULT_EVERY_STEPS = 25
#: At most this many checkpoints per scenario besides the end (evenly spaced).
DEFAULT_MAX_CHECKPOINTS = 24
#: The leading characters of a summary that identify a message carrying it.
SUMMARY_SIGNATURE = 200
#: A shorter summary marks only a message that ends with it (a few words occur anywhere).
MIN_SIGNATURE = 20
#: Ceiling answers kept per process (the same uncompacted context is asked by every strategy's cell).
CEILING_CACHE_SIZE = 100_000
_ceiling_cache: dict[tuple[Any, ...], bool | None] = {}


@dataclass(frozen=True)
class Checkpoint:
    """A paired checkpoint: the context of step `step`, seen after transcript `position` items."""

    kind: str  # "checkpoint" | "final"
    step: int
    position: int


def source_position(transcript: Transcript, probe: Probe) -> int:
    """Transcript position where the probe's fact first appears."""
    if probe.source:
        try:
            return transcript.position(probe.source)
        except KeyError:
            raise ProbeError(f"probe {probe.id!r}: source item {probe.source!r} is not in transcript {transcript.id!r}") from None
    assert probe.source_text is not None
    for position, item in enumerate(transcript.items):
        if probe.source_text in item.text or (item.arguments and probe.source_text in item.arguments):
            return position
    raise ProbeError(f"probe {probe.id!r}: source_text {probe.source_text!r} occurs nowhere in transcript {transcript.id!r}")


def checkpoints(
    transcript: Transcript, every_steps: int | None = DEFAULT_EVERY_STEPS, max_checkpoints: int | None = DEFAULT_MAX_CHECKPOINTS
) -> list[Checkpoint]:
    """The scenario's paired checkpoints in order, the end of the session last (module docstring)."""
    steps = transcript.steps()
    starts = [transcript.position(step.items[0].id) for step in steps]
    chosen: set[int] = set()
    for user in transcript.real_user_messages():
        first = bisect.bisect_right(starts, transcript.position(user.id))
        if first < len(steps):
            chosen.add(first)
    if every_steps and every_steps > 0:
        bounds = sorted({0, *chosen, len(steps)})
        for low, high in itertools.pairwise(bounds):
            chosen.update(range(low + every_steps, high, every_steps))
    ordered = sorted(chosen)
    if max_checkpoints is not None and len(ordered) > max_checkpoints > 0:
        ordered = [ordered[round(n * (len(ordered) - 1) / max(max_checkpoints - 1, 1))] for n in range(max_checkpoints)]
        ordered = sorted(set(ordered))
    out = [Checkpoint("checkpoint", steps[k].index, starts[k]) for k in ordered]
    out.append(Checkpoint("final", len(steps), len(transcript.items)))
    return out


def _cumulative_tokens(transcript: Transcript, provider: MessageCounter) -> list[int]:
    """cum[p]: true tokens of the model-visible items before position p. Kept per process for the
    transcripts measured last (every strategy's cell of a scenario asks): a message's count depends on
    the profile's tokenizer and image price alone (`MessageCounter.message_tokens`)."""
    key = (id(transcript), provider.counter.encoding_name, provider.profile.image_tokens)
    kept = _cumulative_kept.get(key)
    if kept is not None and kept[0] is transcript:
        return kept[1]
    out = [0]
    for item in transcript.items:
        tokens = 0 if item.kind == "marker" else provider.message_tokens(message_from_item(item))
        out.append(out[-1] + tokens)
    if len(_cumulative_kept) >= CUMULATIVE_KEPT:
        _cumulative_kept.clear()
    _cumulative_kept[key] = (transcript, out)  # the transcript is held: its id is not reused while it is a key
    return out


#: Transcripts whose cumulative token counts are kept per process (`_cumulative_tokens`).
CUMULATIVE_KEPT = 16
_cumulative_kept: dict[tuple[int, str, int], tuple[Transcript, list[int]]] = {}


def source_text(transcript: Transcript, position: int) -> str:
    """The text of a probe's source item (its text and a call's arguments), where its evidence is anchored."""
    item = transcript.items[position]
    return "\n".join(t for t in (item.text, item.arguments) if t)


@dataclass(frozen=True)
class _Texts:
    """A context's text outside and inside summaries, each also normalized (`grading.normalize`)."""

    kept: str
    summary: str
    normalized_kept: str
    normalized_summary: str

    @property
    def whole(self) -> str:
        return "\n".join(t for t in (self.kept, self.summary) if t)

    @property
    def normalized(self) -> str:
        """`normalize(whole)`: the two normalized texts joined as `grading.normalize_joined` does."""
        return " ".join(t for t in (self.normalized_kept, self.normalized_summary) if t)


NOT_SEEN = _Texts("", "", "", "")


class _Contexts:
    """Per request of one cell: kept text, summary text (the last request's kept) and the ids it summarized away.

    `drops_thinking`: the cell's model drops earlier turns' thinking and its requests do not ask to keep it
    (`compaction_bench.profiles.strips_earlier_thinking`, `Strategy.keeps_thinking`): a thinking message before a
    request's last user message is not in what the model reads (`visible`), as it is not in its count."""

    def __init__(self, result: ReplayResult, drops_thinking: bool = False) -> None:
        self.result = result
        self.drops_thinking = drops_thinking
        self.summaries = [s for s in (c.summary.strip() for c in result.compactions if c.summary) if s]
        self.signatures = [s[:SUMMARY_SIGNATURE] for s in self.summaries]
        self._is_summary: dict[Message, bool] = {}
        self._split: dict[Message, tuple[str, str] | None] = {}
        #: the texts of the last request asked for, by its index: kept for the next probe point of that request only, as
        #: every point's texts held at once (four joined and normalized contexts each) grew with the points times the
        #: window (0.8 GB over the 839 points of a cell that compacts before every turn)
        self._texts: tuple[int, _Texts] | None = None
        #: each summarized id -> the next request of the first compaction that summarized it (made once)
        self._summarized_at: dict[str, int] | None = None

    def is_summary(self, message: Message) -> bool:
        known = self._is_summary.get(message)
        if known is None:
            content = message.content.rstrip()
            known = message.role == "compaction" or (
                message.role != "tool"
                and any(sig in content if len(sig) >= MIN_SIGNATURE else content.endswith(sig) for sig in self.signatures)
            )
            self._is_summary[message] = known
        return known

    def visible(self, request: RequestRecord) -> Sequence[Message]:
        """The request's messages the model reads: all of them, or, where earlier turns' thinking is dropped
        (`drops_thinking`), all but the thinking before the last user message (a tool result is no user message)."""
        messages = request.messages
        if not self.drops_thinking:
            return messages
        last_user = last_user_message(messages)
        return [m for n, m in enumerate(messages) if not (n < last_user and m.role == "reasoning")]

    def split(self, message: Message) -> tuple[str, str] | None:
        """A summary message that carries a compaction's whole summary text beside other text (OpenCode V2's
        checkpoint: the summary, then the recent messages kept verbatim): (the summary text, the rest); None when
        it carries nothing else, or no summary text whole."""
        if message not in self._split:
            content = grading.readable(message)
            found = next((summary for summary in self.summaries if summary in content), None)
            rest = content.replace(found, "\n", 1).strip() if found is not None else ""
            self._split[message] = (found, rest) if found is not None and rest else None
        return self._split[message]

    def texts(self, request: RequestRecord) -> _Texts:
        """The text of the messages that are not a summary, of the summary messages (but what a summary message
        carries beside its summary, `split`), and both normalized."""
        if self._texts is not None and self._texts[0] == request.index:
            return self._texts[1]
        kept_messages: list[Message] = []
        summary_messages: list[Message] = []
        beside: list[str] = []  # what summary messages carry besides their summary: kept text
        carried: list[str] = []  # the summary texts of those messages
        for message in self.visible(request):  # each message judged once
            if not self.is_summary(message):
                kept_messages.append(message)
            elif (parts := self.split(message)) is not None:
                carried.append(parts[0])
                beside.append(parts[1])
            else:
                summary_messages.append(message)
        kept = grading.context_parts(kept_messages) + beside
        summaries = grading.context_parts(summary_messages) + carried
        texts = _Texts("\n".join(kept), "\n".join(summaries), grading.normalize_joined(kept), grading.normalize_joined(summaries))
        self._texts = (request.index, texts)
        return texts

    def summarized_before(self, request: RequestRecord, ids: Iterable[str]) -> set[str]:
        """Those of `ids` that an earlier compaction (one whose next request is this one or before it) gave
        to the summarizer, and that the request does not hold itself."""
        summarized_at = self._summarized_at
        if summarized_at is None:
            summarized_at = self._summarized_at = _first_summarized(self.result.compactions)
        earlier = {i for i in ids if summarized_at.get(i, request.index + 1) <= request.index}
        return earlier - set(request.item_ids()) if earlier else earlier


def _first_summarized(compactions: Sequence[CompactionRecord]) -> dict[str, int]:
    """Each id any compaction summarized, with the lowest `next_request` of those that did (compactions
    with none are skipped): one pass over every compaction's ids, made once per cell, so a probe point
    asks about its probes' sources instead of uniting every earlier compaction's ids."""
    first: dict[str, int] = {}
    for compaction in compactions:
        after = compaction.next_request
        if after is None:
            continue
        for i in compaction.summarized_ids:
            if first.get(i, after) >= after:
                first[i] = after
    return first


def _model(client: LLMClient | None) -> object:
    """What decides a client's answers, for the ceiling cache, which lives as long as the process (a notebook's
    second run): its model, its call settings (stored responses, offline) and the endpoint its calls go to, named
    by `--api-base` or by the provider's base-URL variable (`LLMClient.endpoint`, as its request keys name it)."""
    if client is None:
        return None
    settings = getattr(client, "settings", None)
    if not isinstance(settings, CallSettings):  # a client of the caller's own making: its model names it
        return getattr(client, "model", id(client))
    return (client.model, dataclasses.astuple(settings), client.endpoint())


class _Uncompacted:
    """The uncompacted transcript before a position, as an answerer context (converted once per checkpoint;
    the items' messages are built once, checkpoints come in order)."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self._messages: list[Message] = []  # the model-input messages of transcript.items[: self._upto]
        self._upto = 0
        self._built: tuple[int, PreparedContext] | None = None
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        """The transcript's content (`transcript_digest`): what the ceiling cache is keyed by (two sessions of one id
        and length, two runs of one task, are other contexts)."""
        if self._digest is None:
            self._digest = transcript_digest(self.transcript)
        return self._digest

    def before(self, position: int) -> PreparedContext:
        if self._built is None or self._built[0] != position:
            if position < self._upto:
                self._messages, self._upto = [], 0
            self._messages.extend(message_from_item(i) for i in self.transcript.items[self._upto : position] if i.kind != "marker")
            self._upto = position
            self._built = (position, PreparedContext(self._messages))
        return self._built[1]


def transcript_digest(transcript: Transcript) -> str:
    """A sha256 of everything of a transcript a model reads (each item's kind, text, call and arguments), computed
    once per transcript object of the process."""
    kept = _digests.get(id(transcript))
    if kept is not None and kept[0] is transcript:
        return kept[1]
    digest = hashlib.sha256()
    for item in transcript.items:
        for part in (item.kind, item.text, item.call_id or "", item.tool_name or "", item.arguments or ""):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
    if len(_digests) >= CUMULATIVE_KEPT:
        _digests.clear()
    _digests[id(transcript)] = (transcript, digest.hexdigest())
    return _digests[id(transcript)][1]


#: `transcript_digest`s kept per process, by the transcript object's id (the object is kept with it).
_digests: dict[int, tuple[Transcript, str]] = {}


def _ceiling(
    uncompacted: _Uncompacted, position: int, probe: Probe, answerer: LLMClient, judge: LLMClient | None, sample: int,
    clients: tuple[object, object],
) -> bool | None:
    """The answerer's grade on the uncompacted transcript before `position` (None: unscored or failed); `clients`:
    `_model` of the answerer and of the judge, found once per cell. A failed call is not kept: the next cell asks
    again, as it asks its own failed answers again, so which cells get a ceiling does not depend on which of them
    shared a worker process (`-j`)."""
    key = (uncompacted.digest, position, probe.id, probe.question, probe.answers, *clients, sample)
    if key in _ceiling_cache:
        return _ceiling_cache[key]
    try:
        correct = grading.ask(probe, uncompacted.before(position), answerer, judge, sample=sample).grade.correct
    except LLMError:
        return None
    if len(_ceiling_cache) >= CEILING_CACHE_SIZE:
        _ceiling_cache.clear()
    _ceiling_cache[key] = correct
    return correct


def _beyond(answerer: LLMClient, tokens: int) -> bool:
    """Whether a context of `tokens` (the session's count) is beyond the answerer model's own input window
    (litellm's map; an offline or unmapped answerer has none): such a question reaches no model."""
    limits = answerer.limits
    return limits is not None and limits.overflows(tokens, 0)


def _needs_evidence(probe: Probe) -> bool:
    """Whether a correct reply counts only when the answer is present: a number (with a unit or not), a set
    with a short member, an exact or contains probe whose every answer is short (module docstring)."""
    if probe.match == "number":
        return True
    if probe.match == "set":
        return any(grading.is_short(a) for a in probe.answers)
    return probe.match in ("exact", "contains") and all(grading.is_short(a) for a in probe.answers)


def probe_rows(
    result: ReplayResult,
    probes: Sequence[Probe],
    provider: MessageCounter,
    answerer: LLMClient | None,
    judge: LLMClient | None,
    repeat: int,
    every_steps: int | None = DEFAULT_EVERY_STEPS,
    max_checkpoints: int | None = DEFAULT_MAX_CHECKPOINTS,
    drops_thinking: bool = False,
) -> list[dict[str, Any]]:
    """One row per probe per point (paired checkpoints, then compaction points) of one replayed cell; where the
    model drops earlier turns' thinking (`drops_thinking`), presence and the answerer read the context without it."""
    if not probes:
        return []
    transcript = result.transcript
    sources = {p.id: source_position(transcript, p) for p in probes}
    anchors = {p.id: grading.anchor(p, source_text(transcript, sources[p.id])) for p in probes}
    source_ids = {p.id: transcript.items[sources[p.id]].id for p in probes}
    cumulative = _cumulative_tokens(transcript, provider)
    starts = {step.index: transcript.position(step.items[0].id) for step in transcript.steps()}
    contexts = _Contexts(result, drops_thinking)
    uncompacted = _Uncompacted(transcript)
    clients = (_model(answerer), _model(judge))  # the ceiling cache's names of the two models, found once
    last_attempt: dict[int, int] = {}
    for request in result.requests:
        if request.kind == "turn":
            last_attempt[request.step] = request.index
    points: list[tuple[str, int, int, int, int | None]] = []  # (kind, step, position, request, compaction)
    for checkpoint in checkpoints(transcript, every_steps, max_checkpoints):
        index = result.final.index if checkpoint.kind == "final" else last_attempt.get(checkpoint.step)
        if index is not None:
            points.append((checkpoint.kind, checkpoint.step, checkpoint.position, index, None))
    for point in result.points:
        if point.reason == "compaction":
            points.append(("compaction", point.step, starts.get(point.step, len(transcript.items)), point.request, point.compaction))
    rows: list[dict[str, Any]] = []
    for kind, step, position, index, compaction in points:
        asked = [p for p in probes if sources[p.id] < position]
        if not asked:
            continue
        request = result.requests[index]
        seen = not request.overflow
        texts = contexts.texts(request) if seen else NOT_SEEN
        kept_text, summary_text, whole = texts.kept, texts.summary, texts.whole
        normalized, normalized_kept, normalized_summary = texts.normalized, texts.normalized_kept, texts.normalized_summary
        summarized = contexts.summarized_before(request, (source_ids[p.id] for p in asked))
        context = PreparedContext(contexts.visible(request)) if answerer is not None and seen else None
        # the answerer's own window, for the uncompacted transcript (the ceiling) and for this context
        ceiling_beyond = answerer is not None and _beyond(answerer, cumulative[position])
        context_beyond = answerer is not None and seen and _beyond(answerer, request.true_tokens)
        for probe in asked:
            evidence = anchors[probe.id]
            found = grading.presence(probe, whole, normalized, evidence) if seen else grading.Presence(False, 0.0)
            in_kept = seen and found.present and grading.presence(probe, kept_text, normalized_kept, evidence).present
            in_summary = bool(summary_text) and found.present and grading.presence(probe, summary_text, normalized_summary, evidence).present
            row: dict[str, Any] = {
                "probe_id": probe.id,
                "kind": probe.kind,
                "match": probe.match,
                "point_kind": kind,
                "step": step,
                "request": index,
                "compaction": compaction,
                "status": "seen" if seen else "not_seen",
                "present": found.present,
                "present_share": found.share,
                "found": "absent" if not found.present else ("summary" if in_summary and not in_kept else "kept"),
                "source_summarized": source_ids[probe.id] in summarized,
                "in_summary": in_summary,
                "correct": None,
                "ceiling_correct": None,
                "score": None,
                "judge_strict": None,
                "judge_lenient": None,
                "answer": None,
                "answer_cached": None,
                "answer_error": None,
                "sample": repeat,
                "fact_age_tokens": cumulative[position] - cumulative[sources[probe.id] + 1],
            }
            if answerer is not None:
                if kind != "compaction" and not ceiling_beyond:
                    row["ceiling_correct"] = _ceiling(uncompacted, position, probe, answerer, judge, repeat, clients)
                if not seen:  # the request reached no model: unanswered, so no rubric accepted a reply
                    if probe.match != "judge":
                        row.update(correct=False, score=0.0)
                    elif judge is not None:  # without a judge no context grades a judge probe
                        row.update(correct=False, score=0.0, judge_strict=False, judge_lenient=False)
                elif context_beyond:  # the answerer's own window: no call, unscored
                    row["answer_error"] = beyond_window(request.true_tokens, answerer.model)
                else:
                    assert context is not None
                    try:
                        answer = grading.ask(probe, context, answerer, judge, sample=repeat)
                    except LLMError as exc:  # e.g. a context beyond the answerer's window: unscored, never passed
                        row["answer_error"] = str(exc)
                    else:
                        correct = answer.grade.correct
                        if correct and _needs_evidence(probe) and not found.present:
                            correct = False  # a short answer whose evidence is gone is a guess
                        row.update(
                            correct=correct,
                            score=answer.grade.score if correct is not False else 0.0,
                            judge_strict=answer.grade.judge_strict,
                            judge_lenient=answer.grade.judge_lenient,
                            answer=answer.reply,
                            answer_cached=answer.cache_hit,
                        )
            rows.append(row)
    return rows

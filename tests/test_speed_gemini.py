"""The incremental bookkeeping of `gemini-cli`, `hybrid`, `openhands` and `openhands-v0` against the
straightforward computation (issue 18): every replay must equal, request by request and compaction by
compaction, one that recomputes from the whole history on every request.

The references are the rules as the spec states them, computed from scratch each time: `gemini-cli`
serializes every content with `json.dumps` for the split, estimates every part from its text, builds
every truncated text and renders every content anew (Gemini CLI §3, §4, §8, §10.2); `hybrid` renders
the whole history with every masked output replaced; the OpenHands condensers build every message of
the view anew and filter the view for unpaired calls on every request (OpenHands §4.4, §7), and V0's
reference recomputes its view, browser masking and condensations from the whole log, written from
upstream apart from the strategy (§5.1, §5.2, §5.4, §7).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import ReplayResult, replay
from compaction_bench.request import Message, Request, ToolCall, message_from_item
from compaction_bench.strategies.gemini_cli import (
    ACK,
    MASKED_TAG,
    SNAPSHOT_TAG,
    Content,
    CutChanges,
    GeminiCli,
    Part,
    TextMeasure,
    Truncation,
    compact_json_length,
    estimate_parts,
    format_truncated_output,
    truncation_path,
)
from compaction_bench.strategies.hybrid import Hybrid
from compaction_bench.strategies.openhands import (
    V0_ERROR_SUFFIX,
    V0_TRUNCATION,
    Event,
    OpenHands,
    OpenHandsV0,
    _clip,
    _event_str,
    sdk_tool_text,
    v0_error_observation,
    v0_observation_text,
)
from compaction_bench.strategy import SummaryOverflow
from compaction_bench.transcript import Attachment
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile

CODEX_FILE = "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl"
PI_FILE = "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl"
#: texts with every kind of character the measures treat apart: quotes, backslashes, control
#: characters (two- and six-character JSON escapes), non-ASCII, astral (two UTF-16 units), and long
TEXTS = ["", "abc", 'say "hi" \\ back', "tab\there\nline\r\x01\x1f", "naïve café ünïcode", "emoji 😀 and 𝄞 clef",
         "x" * 100_001, "é" * 100_001, "<state_snapshot> old", "<tool_output_masked> done"]
#: a folder of saved outputs whose name JSON escapes
FOLDER = '~/.gemini/tmp/prøject "x"/tool-outputs'


# ---------------------------------------------------------------------------------------------- gemini
def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _stringify(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def ref_estimate_parts(parts: Sequence[Part]) -> int:
    """§10.2 `estimateTokenCountSync`, part by part from the text."""
    total = 0.0
    for part in parts:
        if part.kind == "text":
            units = _utf16(part.text)
            ascii_chars = len(part.text.encode("ascii", "ignore"))
            total += units / 4 if units > 100_000 else 0.25 * ascii_chars + 1.5 * (units - ascii_chars)
        elif part.kind == "response":
            # a failed tool's response is `{error: message}` (`tool-executor.ts@5411f113 L148-166`)
            total += _utf16(part.name) / 4 + _utf16(_stringify({"error" if part.error_response else "output": part.text})) / 4
            # the attachments are the functionResponse's nested parts, estimated by a recursive (floored) call
            total += ref_estimate_parts([Part("data", mime=a.mime) for a in part.attachments])
        elif part.kind == "data":
            mime = part.mime
            total += 3_000 if mime.startswith("image/") else 25_800 if mime.startswith("application/pdf") else _utf16(_stringify(part.to_json())) / 4
        else:
            total += _utf16(_stringify(part.to_json())) / 4
    return math.floor(total)


def ref_estimate_contents(contents: Sequence[Content]) -> int:
    return ref_estimate_parts([p for c in contents for p in c.parts])


def ref_split_point(contents: Sequence[Content], fraction: float) -> int:
    """§4 `findCompressSplitPoint` on `JSON.stringify` of every content."""
    counts = [_utf16(_stringify(c.to_json())) for c in contents]
    target = sum(counts) * fraction
    last_split = cumulative = 0
    for i, content in enumerate(contents):
        if content.role == "user" and not content.has_response:
            if cumulative >= target:
                return i
            last_split = i
        cumulative += counts[i]
    if contents and contents[-1].role == "model" and not contents[-1].has_call:
        return len(contents)
    return last_split


class ReferenceGeminiCli(GeminiCli):
    """Every request: contents rendered anew, every response truncated into a new part (§3), the split on
    `json.dumps` of every content (§4), estimates from the texts (§10.2), masking from the texts (§8)."""

    name = "gemini-cli-reference"
    history: list[Content]
    failed_latch: bool

    def render(self, contents: Sequence[Content]) -> list[Message]:
        return [m for c in contents for m in self._render_content(c)]

    def messages(self) -> list[Message]:
        return [*(message_from_item(i) for i in self.system), *self.render(self.history), *self.render(self.pending)]

    def truncate_to_budget(self, contents: Sequence[Content]) -> list[Content]:
        o = self.options
        threshold = min(4 * (self.limit - self.ui_prompt_tokens), o.truncate_tool_output_threshold)
        counter = 0
        out: list[Content] = []
        for content in reversed(contents):
            parts: list[Part] = []
            for part in reversed(content.parts):
                if part.kind != "response":
                    parts.append(part)
                    continue
                # §3 `contentStr`: the output string, or an error response's `JSON.stringify(response, null, 2)`, which a
                # truncation rewrites as `{output: ...}` (`chatCompressionService.ts@5411f113 L155-179`)
                source = json.dumps({"error": part.text}, indent=2, ensure_ascii=False) if part.error_response else part.text
                tokens = ref_estimate_parts([Part("text", text=source)])
                if counter + tokens > o.function_response_token_budget:
                    message = format_truncated_output(source, truncation_path(self.outputs_dir, part.name, self._next_truncation_id()),
                                                      threshold)
                    parts.append(Part("response", text=message, name=part.name, call_id=part.call_id, item_id=part.item_id,
                                      is_error=part.is_error, attachments=part.attachments))
                    counter += ref_estimate_parts([Part("text", text=message)])
                else:
                    parts.append(part)
                    counter += tokens
            out.append(Content(content.role, parts[::-1]))
        return out[::-1]

    def _truncate_only(self, count: int) -> None:
        truncated = self.truncate_to_budget(self.history)
        if ref_estimate_contents(truncated) < count:
            before = self.messages()
            self.history = truncated
            self.last_prompt_tokens = self.ui_prompt_tokens = ref_estimate_contents(self.history)
            after = self.messages()
            if after != before:
                self.ctx.record_compaction(trigger="truncate", before=before, after=after, summary=None, estimate_tokens=count,
                                           details={"status": "CONTENT_TRUNCATED"})

    def _compress(self, count: int, *, force: bool) -> None:
        o = self.options
        truncated = self.truncate_to_budget(self.history)
        split = ref_split_point(truncated, 1 - o.preserve_fraction)
        if split == 0:
            return
        original = self.history[:split]
        chosen = original if ref_estimate_contents(original) < self.limit else truncated[:split]
        previous = any(SNAPSHOT_TAG in p.text for c in chosen for p in c.parts if p.kind == "text")
        system = Message("system", self.ctx.render_prompt("gemini_compression_system.j2", plan_path=None))
        body = self.render(chosen)
        ask = Message("user", self.ctx.render_prompt("gemini_compression_request.j2", previous=previous))
        first = self.ctx.summarize(Request([system, *body, ask], kind="summary"))  # a SummaryOverflow fails the turn
        verify = Message("user", self.ctx.render_prompt("gemini_compression_verify.j2"))
        second = self.ctx.summarize(Request([system, *body, Message("assistant", first.text), verify], kind="summary"),
                                    purpose="verify")
        final = (second.text.strip() or first.text).strip()
        if not final:
            return
        new_history = [Content("user", [Part("text", text=final)]), Content("model", [Part("text", text=ACK)]), *truncated[split:]]
        new_tokens = ref_estimate_contents(new_history)
        if new_tokens > count:
            self.failed_latch = self.failed_latch or not force
            self.ctx.record_compaction(trigger="inflated", before=self.messages(), after=self.messages(), summary=None,
                                       estimate_tokens=count, details={"new_tokens": new_tokens}, probe=False)
            return
        before = self.messages()
        self.history = new_history
        self.failed_latch = False
        self.last_prompt_tokens = self.ui_prompt_tokens = new_tokens
        self.ctx.record_compaction(
            trigger="manual" if force else "threshold", before=before, after=self.messages(), summary=final,
            summarized_ids=[i for m in self.render(original) for i in m.item_ids], estimate_tokens=count,
            threshold=math.floor(o.compression_threshold * self.limit),
            details={"split": split, "kept_contents": len(truncated) - split, "new_tokens": new_tokens, "anchored": previous},
        )

    def _mask(self) -> None:
        o = self.options
        start = len(self.history) - (2 if o.mask_protect_latest_turn else 1)
        protected, window_closed, total = 0, False, 0
        prunable: list[tuple[int, int, int]] = []
        for ci in range(start, -1, -1):
            content = self.history[ci]
            for pi in range(len(content.parts) - 1, -1, -1):
                part = content.parts[pi]
                if part.kind != "response" or part.name in self.exempt or MASKED_TAG in part.text:
                    continue
                tokens = ref_estimate_parts([part])
                if not window_closed:
                    protected += tokens
                    if protected <= o.mask_protection_tokens:
                        continue
                    window_closed = True
                prunable.append((ci, pi, tokens))
                total += tokens
        if total < o.mask_min_prunable_tokens:
            return
        before = self.messages()
        masked = []
        for ci, pi, tokens in prunable:
            part = self.history[ci].parts[pi]
            path = self.masked_output_path(part)
            snippet = f"<tool_output_masked>\n{self._preview(part)}\n\nOutput too large. Full output available at: {path}\n</tool_output_masked>"
            new = Part("response", text=snippet, name=part.name, call_id=part.call_id, item_id=part.item_id, is_error=part.is_error,
                       attachments=part.attachments)
            if ref_estimate_parts([new]) < tokens:
                self.history[ci].parts[pi] = new
                masked.append(part.call_id)
        if masked:
            self.last_prompt_tokens = ref_estimate_contents(self.history)
            self.ctx.record_compaction(trigger="masking", before=before, after=self.messages(), summary=None,
                                       details={"masked": masked}, probe=False)


# ---------------------------------------------------------------------------------------------- hybrid
class ReferenceHybrid(Hybrid):
    """The whole history rendered on every request, each masked output replaced (evaluation.md §2)."""

    name = "hybrid-reference"

    def messages(self, unmasked_from: int | None = None) -> list[Message]:
        head = [Message("user", self.summary)] if self.summary is not None else []
        return [*self.history.render(self.system), *head, *self.body(self.history.items)]

    def _mask(self, ids: Sequence[str]) -> None:
        self.masked.update(ids)


# ---------------------------------------------------------------------------------------------- openhands
class ReferenceOpenHands(OpenHands):
    """SDK `events_to_messages` over the whole view and `enforce_properties` on every request (§4.4)."""

    name = "openhands-reference"
    view: list[Event]

    def messages(self, view: Sequence[Any] | None = None) -> list[Message]:
        out: list[Message] = []
        batch: int | None = None
        for e in self.view if view is None else view:
            if e.kind != "action":
                batch = None
            if e.kind == "system":
                out.append(Message("system", e.text, item_ids=e.item_ids))
            elif e.kind == "summary":
                out.append(Message("user", e.text))
            elif e.kind == "message" and e.source == "user":
                out.append(Message("user", e.text, item_ids=e.item_ids, attachments=e.items[0].attachments))
            elif e.kind == "message":
                out += [Message("reasoning", t.text, item_ids=(t.id,)) for t in e.thinking]
                out.append(Message("assistant", e.text, item_ids=tuple(i.id for i in e.items if i.kind == "assistant")))
            elif e.kind == "action":
                call = ToolCall(e.call_id, e.tool_name, e.arguments)
                if batch is not None and e.response == batch and not e.thinking:
                    prev = out[-1]
                    out[-1] = Message(prev.role, prev.content, tool_calls=prev.tool_calls + (call,), item_ids=prev.item_ids + e.item_ids[-1:])
                    continue
                out += [Message("reasoning", t.text, item_ids=(t.id,)) for t in e.thinking]
                ids = tuple(i.id for i in e.items if i.kind in ("assistant", "tool_call"))
                out.append(Message("assistant", e.text, tool_calls=(call,), item_ids=ids))
                batch = e.response
            else:
                out.append(Message("tool", sdk_tool_text(e), tool_call_id=e.call_id, item_ids=e.item_ids, name=e.tool_name,
                                   is_error=e.is_error, attachments=e.items[0].attachments))
        # event/base.py@611629e6 L107-175: a user message after a user message joins it (`_can_merge_user_messages`)
        merged: list[Message] = []
        for m in out:
            if m.role == "user" and merged and merged[-1].role == "user":
                prev = merged[-1]
                m = Message("user", f"{prev.content}\n{m.content}", item_ids=prev.item_ids + m.item_ids,
                            attachments=prev.attachments + m.attachments)
                merged.pop()
            merged.append(m)
        return merged

    def _prefix_tokens(self, start: int) -> Iterator[int]:
        # §4.3: the view's first `start` events, then one more event at a time, each prefix rendered anew
        for m in range(min(start, len(self.view)), len(self.view) + 1):
            yield self.ctx.count_tokens(self.messages(self.view[:m]))

    def _enforce(self) -> None:
        calls = {e.call_id for e in self.view if e.kind == "action"}
        results = {e.call_id for e in self.view if e.kind == "observation"}
        self.view = [e for e in self.view
                     if not (e.kind == "action" and e.call_id not in results) and not (e.kind == "observation" and e.call_id not in calls)]


class ReferenceOpenHandsV0(OpenHandsV0):
    """V0 recomputed from the whole log on every request, written from upstream (OpenHands@156d0686), with
    none of the strategy's incremental state: `View.from_events` (the log's events not forgotten, the
    newest summary inserted at its offset), `BrowserOutputCondenser` over it anew (§5.4),
    `ConversationWindowCondenser` and `LLMSummarizingCondenser.get_condensation` on that view (§5.1, §5.2,
    §5.9), and `process_events` building every message anew (§7): the whole model response waits for the
    results of all its calls, then a user message that follows a user message gets "\\n\\n" in front."""

    name = "openhands-v0-reference"

    # ------------------------------------------------------------------ the view
    def base_view(self) -> list[Event]:
        # view.py L47-78: the events not forgotten; the newest summary inserted at its offset (list.insert)
        events = [e for e in self.log.events if e.id not in self.forgotten]
        if self.summary is not None:
            events.insert(self.summary[1], Event(id=-1, kind="summary", text=self.summary[0], source="environment"))
        return events

    def view(self) -> list[Event]:
        # browser_output_condenser.py L22-39: newest first, a browser output once `attention_window` newer ones
        # were kept becomes "Visited URL …" (an AgentCondensationObservation)
        urls: dict[str, str] = {}
        for e in self.log.events:
            if e.kind == "action" and e.call_id not in urls:
                try:
                    arguments = json.loads(e.arguments or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                urls[e.call_id] = str(arguments.get("url", "")) if isinstance(arguments, dict) else ""
        out: list[Event] = []
        kept = 0
        for e in reversed(self.base_view()):
            browser = e.kind == "observation" and e.tool_name in self.browser
            if browser and kept >= self.options.browser_attention_window:
                out.append(replace(e, text=f"Visited URL {urls.get(e.call_id, '')}\nContent omitted", masked=True))
            else:
                out.append(e)
                kept += browser
        return out[::-1]

    # ------------------------------------------------------------------ the messages
    def messages(self, view: Sequence[Any] | None = None) -> list[Message]:
        limit = self.options.max_message_chars
        view = self.view() if view is None else view
        # every action of the log by its model response (a response's calls, forgotten ones included)
        responses: dict[Any, list[Event]] = {}
        for a in self.log.events:
            if a.kind == "action":
                responses.setdefault(a.response if a.response is not None else ("own", a.id), []).append(a)
        out: list[Message] = []
        pending: dict[Any, list[Event]] = {}
        results: dict[str, Message] = {}
        for e in view:
            if e.kind == "action":
                # conversation_memory.py L258-270: the model response that made the call, all its text and calls
                key = e.response if e.response is not None else ("own", e.id)
                pending[key] = responses[key]
            elif e.kind == "observation" and not e.masked:
                text = _clip(v0_observation_text(e), limit, V0_TRUNCATION) + (V0_ERROR_SUFFIX if v0_error_observation(e) else "")
                results[e.call_id] = Message("tool", text, tool_call_id=e.call_id,
                                             item_ids=e.item_ids, name=e.tool_name, is_error=e.is_error)
            elif e.kind == "system":
                out.append(Message("system", e.text, item_ids=e.item_ids))
            elif e.kind == "message" and e.source == "user":
                # L303-322 with vision active: the text, then "Image N:" and the image for each of `image_urls`
                images = tuple(a for a in e.items[0].attachments if a.is_image)
                labels = "".join(f"\nImage {n}:" for n in range(1, len(images) + 1))
                out.append(Message("user", e.text + labels, item_ids=e.item_ids, attachments=images))
            elif e.kind == "message":
                out.append(Message("assistant", e.text, item_ids=tuple(i.id for i in e.items if i.kind != "reasoning")))
            else:  # the summary or a masked browser output: an AgentCondensationObservation
                out.append(Message("user", _clip(e.text, limit, V0_TRUNCATION)))
            # L130-156, after every event: a response whose calls all have results goes out, then the results
            for key, actions in list(pending.items()):
                if all(a.call_id in results for a in actions):
                    items = [i for a in actions for i in a.items]
                    text = "\n".join(i.text for i in items if i.kind == "assistant")
                    ids = tuple(i.id for i in items if i.kind == "assistant") + tuple(i.id for i in items if i.kind == "tool_call")
                    calls = tuple(ToolCall(a.call_id, a.tool_name, a.arguments) for a in actions)
                    out.append(Message("assistant", text if text.strip() else "", tool_calls=calls, item_ids=ids))
                    out += [results.pop(a.call_id) for a in actions]
                    del pending[key]
        # L167-182 `_apply_user_message_formatting`
        formatted: list[Message] = []
        for m in out:
            if m.role == "user" and formatted and formatted[-1].role == "user":
                m = replace(m, content="\n\n" + m.content)
            formatted.append(m)
        return formatted

    # ------------------------------------------------------------------ the pipeline
    def request(self) -> Request:
        view = self.view()
        if self.unhandled_request:
            self._reference_window(view)
        elif len(view) > self.options.max_size:
            self._reference_summary(view)
        return Request(self.messages(), meta={"view_events": len(self.base_view())})

    def _reference_window(self, view: list[Event]) -> None:
        """conversation_window_condenser.py L28-188, without recall events (a replay has none)."""
        self.unhandled_request = False
        system = next((e for e in view if e.kind == "system"), None)
        first_user = next((e for e in view if e.kind == "message" and e.source == "user"), None)
        if first_user is None:
            return
        essential = {e.id for e in (system, first_user) if e is not None}
        start = max(0, len(view) - max(1, (len(view) - len(essential)) // 2))
        recent = view[start:]
        # leading Observations (the summary is an AgentCondensationObservation) are dangling: skipped
        while recent and recent[0].kind in ("observation", "summary"):
            recent = recent[1:]
        # the summary's -1 is no event of the log (View.from_events inserts the summary anew)
        ids = sorted({e.id for e in view} - essential - {e.id for e in recent} - {-1})
        self._reference_forget(ids, [], None, "conversation-window")

    def _reference_summary(self, view: list[Event]) -> None:
        """llm_summarizing_condenser.py L52-158."""
        o = self.options
        head = view[: o.keep_first]
        events_from_tail = o.max_size // 2 - len(head) - 1

        def condensation_observation(e: Event) -> bool:
            return e.kind == "summary" or e.masked

        previous = view[o.keep_first].text if condensation_observation(view[o.keep_first]) else "No events summarized"
        forgotten = [e for e in view[o.keep_first: -events_from_tail] if not condensation_observation(e)]
        if not forgotten:
            return
        events = [(e.id, _clip(_event_str(e), o.max_event_length, V0_TRUNCATION)) for e in forgotten]
        prompt = self.ctx.render_prompt("openhands_summary.j2", v0=True, events=events,
                                        previous=_clip(previous, o.max_event_length, V0_TRUNCATION))
        try:
            summary = self.ctx.summarize(Request([Message("user", prompt)], kind="summary")).text
        except SummaryOverflow:
            return
        first, last = min(e.id for e in forgotten), max(e.id for e in forgotten)
        self._reference_forget(list(range(first, last + 1)), forgotten, (summary, o.keep_first), "condensation")

    def _reference_forget(self, ids: list[int], summarized: list[Event], summary: tuple[str, int] | None, trigger: str) -> None:
        before = self.messages()
        self.forgotten.update(ids)
        if summary is not None:
            self.summary = summary
        # the base view's calls and results that no message carries
        view = self.base_view()
        sent = self.messages(view)
        calls = {e.call_id for e in view if e.kind == "action"} - {c.id for m in sent for c in m.tool_calls}
        results = {e.call_id for e in view if e.kind == "observation"} - {m.tool_call_id for m in sent if m.role == "tool"}
        self.ctx.record_compaction(
            trigger=trigger, before=before, after=self.messages(), summary=summary[0] if summary else None,
            summarized_ids=[i for e in summarized for i in e.item_ids], threshold=None,
            details={"forgotten_range": [min(ids), max(ids)] if ids else None,
                     "orphaned_calls": sorted(calls - {""}), "orphaned_results": sorted(results - {""})})


# ---------------------------------------------------------------------------------------------- helpers
def _trace(result: ReplayResult) -> tuple[list[Any], list[Any]]:
    requests = [(r.kind, r.true_tokens, r.estimate_tokens, r.threshold, r.overflow, r.meta, tuple(r.messages)) for r in result.requests]
    compactions = [(c.step, c.trigger, c.summary, c.details, c.summarized_ids, tuple(c.before), tuple(c.after)) for c in result.compactions]
    return requests, compactions


def _assert_same(a: ReplayResult, b: ReplayResult) -> None:
    (requests_a, compactions_a), (requests_b, compactions_b) = _trace(a), _trace(b)
    assert len(requests_a) == len(requests_b) and len(compactions_a) == len(compactions_b)
    for n, (x, y) in enumerate(zip(requests_a, requests_b, strict=True)):
        assert x == y, f"request {n} differs"
    for n, (x, y) in enumerate(zip(compactions_a, compactions_b, strict=True)):
        assert x == y, f"compaction {n} differs"


def _masking_and_compression() -> Session:
    """Large outputs of every character class, read and run through a shell tool (truncated when it runs,
    §9); masked as they age (§8); recorded counts over half the window then compress (§4-§6), the
    older outputs over the 50,000-token budget truncated first (§3)."""
    s = Session()
    s.user("start: read the logs")
    s.assistant("ok", total=1_000)
    fillers = ["a" * 90_000, "é\"\\\n" * 25_000, "😀 x\t" * 20_000, "line\n" * 20_000, "q" * 130_000, "z" * 80_000]
    for n, text in enumerate(fillers):
        s.assistant(f"read {n}", calls=[(f"r{n}", "read_file", {"path": f"log{n}.txt"})], total=1_000)
        s.result(f"r{n}", text, name="read_file")
        s.assistant(f"run {n}", calls=[(f"b{n}", "run_shell_command", {"command": f"cat log{n}"})], total=1_000)
        s.result(f"b{n}", text[: 60_000 - 5_000 * n], name="run_shell_command")
    s.assistant("read them", total=1_000)
    s.user("summarize progress")
    s.assistant("progress", total=200_000)
    s.user("background: " + "w " * 150_000)
    s.assistant("noted", total=1_000)
    s.user("now the task: " + "q " * 50_000)
    s.assistant("look", calls=[("c2", "read_file", {"path": "a"})], total=1_000)
    s.result("c2", "r " * 35_000, name="read_file")
    s.assistant("more", calls=[("c3", "read_file", {"path": "b"})], total=32_000)
    s.result("c3", "small", name="read_file")
    s.assistant("done", total=400_000)
    s.user("next")
    s.assistant("fine", total=33_000)
    s.user("again")
    s.assistant("fine", total=1_000)
    return s


def _latch_and_truncation() -> Session:
    """Outputs over the budget, then a kept 30 % larger than the recorded count: the compression fails as
    inflated and latches (§6, §2.3), and the next checks only truncate (§7)."""
    s = Session()
    s.user("start")
    s.assistant("ok", total=1_000)
    for n, text in enumerate(["a" * 90_000, "é\"\\\n" * 25_000, "😀 x\t" * 20_000, "line\n" * 20_000]):
        s.assistant(f"read {n}", calls=[(f"r{n}", "read_file", {"path": f"log{n}.txt"})], total=1_000)
        s.result(f"r{n}", text, name="read_file")
    s.user("background: " + "w " * 150_000)
    s.assistant("noted", total=1_000)
    s.user("now the task: " + "q " * 50_000)
    s.assistant("look", calls=[("c2", "read_file", {"path": "a"})], total=1_000)
    s.result("c2", "r " * 35_000, name="read_file")
    s.assistant("more", calls=[("c3", "read_file", {"path": "b"})], total=32_000)
    s.result("c3", "small", name="read_file")
    s.assistant("done", total=400_000)
    s.user("next")
    s.assistant("fine", total=300_000)
    s.user("again")
    s.assistant("fine", total=1_000)
    return s


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_gemini_measures_match_json_and_the_estimator(text):
    # Every part kind's JSON length and estimate, measured once, against json.dumps and §10.2 from the text.
    for part in (Part("text", text=text), Part("response", text=text, name="réad_\"file", call_id="c\n1"),
                 Part("call", name="run", call_id="c", args={"cmd": text}), Part("data", mime="image/png")):
        content = Content("user", [part, Part("text", text="tail é")])
        assert compact_json_length(content) == _utf16(_stringify(content.to_json()))
        assert estimate_parts([part]) == ref_estimate_parts([part])
        assert estimate_parts(content.parts) == ref_estimate_parts(content.parts)
    # a non-ASCII tool, a tool named by digits (a number that starts with them names the file alone) and none
    # ('unknown_tool'), in a folder with a non-ASCII name
    for name in ("réad", "1", ""):
        part = Part("response", text=text, name=name, call_id="c")
        # negative thresholds (a last prompt over the window: negative head and tail), -1 and 0 (no tail: the whole
        # text after the omission line), 7 (the emoji text's tail starts inside a surrogate pair)
        for threshold in (-9, -1, 0, 7, 40_000):
            for number in (1, 9, 10, 12_345):
                formatted = format_truncated_output(text, truncation_path(FOLDER, name, number), threshold)
                expected = None if formatted is text else TextMeasure.of(formatted)
                assert part.truncated_text(number, threshold, FOLDER) == expected
                if expected is not None:
                    assert expected.escaped == _utf16(json.dumps(formatted, ensure_ascii=False)) - 2
                cut = part.truncated(number, threshold, FOLDER)
                assert cut.text == formatted
                fresh = Part("response", text=formatted, name=name, call_id="c")
                assert cut.measure() == fresh.measure()
                assert estimate_parts([cut]) == ref_estimate_parts([fresh])
                assert compact_json_length(Content("user", [cut])) == _utf16(_stringify(Content("user", [fresh]).to_json()))


def test_gemini_cut_changes_sums_equal_the_cuts_summed_one_by_one():
    # Responses of every kind (cut, cut with an image, short with an image (kept whole, §3 keeps nested parts), kept) whose files' numbers
    # cross 9/10, 99/100 and 999/1000: every range's change equals the sum of each cut's escaped-length
    # change with its own number (`truncated_text`), one by one. Some tools are named by digits, so that some
    # numbers name their files alone.
    parts = [Part("response", text=text, name=("réad", "1", "9", "12")[n % 4], call_id=f"c{n}",
                  attachments=(Attachment("image/png", "a.png", 1),) if n % 4 == 1 else ())
             for n, text in enumerate(["x" * 900, "short", "é\"\n" * 200, "", "line\n" * 100, "ok"] * 5)]
    contents = [Content("user", parts[k:k + 3]) for k in range(0, len(parts), 3)]
    responses = [(ci, pi) for ci, c in enumerate(contents) for pi in range(len(c.parts))]
    for threshold in (-9, 0, 7, 300):
        changes = CutChanges(threshold, FOLDER).extend(contents, responses, 10).extend(contents, responses, len(responses))
        for top in (len(responses) - 1 + first for first in (1, 5, 95, 990)):  # the oldest response's file is `first`
            for start in range(0, len(responses), 4):
                for stop in range(start, len(responses) + 1, 3):
                    expected = 0
                    for j in range(start, stop):
                        part = contents[responses[j][0]].parts[responses[j][1]]
                        cut = part.truncated_text(top - j, threshold, FOLDER)
                        if cut is not None:
                            expected += cut.escaped - part.measure().text.escaped
                    assert changes.delta(start, stop, top) == expected
        assert changes.cuts[-1] == sum(1 for p in parts if len(p.text) > threshold)


def _many_responses() -> Session:
    """Two responses per step, one of a non-ASCII tool, some with an image; outputs of every character
    class; clean user turns between steps, one holding a state snapshot (§5.2)."""
    s = Session()
    s.user("start: port the parser")
    fillers = ["a" * 1_500, "é\"\\\n" * 300, "😀 x\t" * 250, "line\n" * 300]
    for k in range(24):
        tool = "1" if k % 4 == 3 else "réad_é"  # a tool named by digits: files 1x.txt are named by the number alone
        s.assistant(f"step {k}", calls=[(f"a{k}", "read_file", {"path": f"f{k}"}), (f"b{k}", tool, {"k": k})], total=1_000)
        s.result(f"a{k}", fillers[k % 4] + str(k), name="read_file")
        attachments = (Attachment("image/png", f"shot{k}.png", 10),) if k % 5 == 0 else ()
        s._add(kind="tool_result", call_id=f"b{k}", tool_name=tool, text=f"ok {k}" if k % 3 else "x" * 900, attachments=attachments)
        if k % 6 == 5:
            s.user(f"<state_snapshot>{k}</state_snapshot> go on" if k == 11 else f"continue with part {k}")
    s.assistant("done", total=1_000)
    return s


class ProbedGeminiCli(GeminiCli):
    """Before every request, the planned truncations and the masking totals against the contents built."""

    name = "gemini-cli-probed"
    probes = 0
    options: Any  # reassigned below (mypy cannot infer it from the assignments alone)

    def request(self) -> Request:
        self._index()
        log, at = self._sync_log(), self._log_at
        newest_first = self._responses[::-1]
        for threshold, measured in ((-9, 1), (0, 0), (7, 3), (1_000, 2), (40_000, 0)):
            plan = Truncation(self.history, threshold, self._units[-1], self.outputs_dir)
            # the newest `measured` responses cut one by one (§3's counter), the older ones all at once
            for n, (ci, pi) in enumerate(newest_first[:measured]):
                plan.cut(ci, pi, 8 + n)
            plan.cut_all(self._responses, self._positions, self._changes_at(threshold, len(newest_first)), max(len(newest_first) - measured, 0), 8 + measured)
            # §3 straightforwardly: every response (all are cut here) in the {output} shape, with its file's number
            numbers = {response: 8 + n for n, response in enumerate(newest_first)}
            built = [Content(c.role, [Part("response", text=format_truncated_output(p.text, truncation_path(self.outputs_dir, p.name, numbers[ci, pi]),
                                                                                    threshold),
                                           name=p.name, call_id=p.call_id, item_id=p.item_id, is_error=p.is_error,
                                           attachments=p.attachments)
                                      if p.kind == "response" else p for pi, p in enumerate(c.parts)])
                     for ci, c in enumerate(self.history)]
            assert ReferenceGeminiCli.render(self, plan.contents()) == ReferenceGeminiCli.render(self, built)
            assert plan.estimate() == ref_estimate_contents(built)
            assert plan.split(0.7, self._clean, self._json) == ref_split_point(built, 0.7)
            for stop in {*range(0, len(built), 7), len(built) - 1, len(built)}:
                assert plan.messages(log, at, stop) == ReferenceGeminiCli.render(self, built[:stop])
            ProbedGeminiCli.probes += 1
        default = self.options
        for protection in (-1, 0, 300, 2_000, 10**9):
            self.options = replace(default, mask_protection_tokens=protection)
            for start in {-1, *range(0, len(self.history), 3), len(self.history) - 1}:
                assert self._prunable_tokens(start) == self._prunable_reference(start)
        self.options = default
        return super().request()

    def _prunable_reference(self, start: int) -> int:
        """§8's walk, newest first: the window closes at the part that takes the protected sum over the limit."""
        protected, total, closed = 0, 0, False
        for content in self.history[start::-1] if start >= 0 else ():
            for part in content.parts[::-1]:
                if part.kind != "response" or part.name in self.exempt or MASKED_TAG in part.text:
                    continue
                tokens = ref_estimate_parts([part])
                if not closed:
                    protected += tokens
                    if protected <= self.options.mask_protection_tokens:
                        continue
                    closed = True
                total += tokens
        return total


def test_gemini_truncation_plans_and_masking_totals_equal_the_contents_built():
    # Cuts at a negative threshold (every output cut, negative head and tail) and at 0 (the header and the
    # omission line before the whole text), below and above the outputs' lengths; a response with an image
    # at a threshold it fits (kept whole, its image too); file numbers of one and two digits; the masking total for every start and protection window, including a window that
    # closes at once and one that never closes.
    ProbedGeminiCli.probes = 0
    result = replay(_many_responses().transcript(), ProbedGeminiCli, profile="1m")
    assert not result.compactions and ProbedGeminiCli.probes == 5 * len(result.requests)


@pytest.mark.parametrize(("session", "options", "triggers"), [
    (_masking_and_compression, {}, {"masking", "threshold"}),
    (_latch_and_truncation, {"mask_min_prunable_tokens": 10**9}, {"inflated", "truncate"}),
], ids=["masking-and-compression", "latch-and-truncation"])
def test_gemini_cli_equals_the_straightforward_replay(session, options, triggers):
    transcript = session().transcript()
    options = {"token_limit": 64_000, **options}
    for usage in ("recorded", "simulated"):
        fast = replay(transcript, GeminiCli, profile="1m", usage=usage, options=options)
        _assert_same(fast, replay(transcript, ReferenceGeminiCli, profile="1m", usage=usage, options=options))
        if usage == "recorded":
            assert {c.trigger for c in fast.compactions} == triggers


def test_gemini_cli_equals_the_straightforward_replay_on_a_codex_file():
    path = CORPORA / CODEX_FILE
    if not path.exists():
        pytest.skip(f"{path} is not available")
    transcript = load_transcripts(path)[0]
    _assert_same(replay(transcript, GeminiCli, profile="32k"), replay(transcript, ReferenceGeminiCli, profile="32k"))


def _steps(n: int, chars: int) -> Session:
    s = Session()
    s.user("Port the CLI to click; keep the --verbose flag.")
    for k in range(n):
        s.assistant(f"step {k}", calls=[(f"c{k}", "bash", {"cmd": f"run {k}"}), (f"d{k}", "read", {"path": f"f{k}"})])
        s.result(f"c{k}", f"out {k}\n" + "log line\n" * (chars // 9), name="bash")
        s.result(f"d{k}", f"file {k}", name="read")
        if k % 7 == 6:
            s.user(f"continue with part {k}")
            if k % 14 == 6:  # with a screenshot and a file (V0 sends the image after an "Image 1:" label)
                s.items[-1] = replace(s.items[-1], attachments=(Attachment("image/png", f"shot{k}.png", 9_000),
                                                                Attachment("application/pdf", "spec.pdf", 20_000)))
    s.assistant("done")
    return s


@pytest.mark.parametrize(("strategy", "reference"), [(Hybrid, ReferenceHybrid), (OpenHands, ReferenceOpenHands),
                                                     (OpenHandsV0, ReferenceOpenHandsV0)], ids=["hybrid", "openhands", "openhands-v0"])
def test_condensers_equal_the_straightforward_replay(strategy, reference):
    # A small window (token trigger, overflow and V0's conversation window) and a large one (step and event counts).
    summaries = 0
    for transcript, profile in ((_steps(70, 2_000).transcript(), small_profile(12_000)), (_steps(140, 100).transcript(), "1m")):
        result = replay(transcript, strategy, profile=profile)
        assert result.compactions
        summaries += sum(1 for c in result.compactions if c.summary)
        _assert_same(result, replay(transcript, reference, profile=profile))
    assert summaries


@pytest.mark.parametrize(("strategy", "reference"), [(Hybrid, ReferenceHybrid), (OpenHands, ReferenceOpenHands),
                                                     (OpenHandsV0, ReferenceOpenHandsV0)], ids=["hybrid", "openhands", "openhands-v0"])
def test_condensers_equal_the_straightforward_replay_on_a_pi_file(strategy, reference):
    path = CORPORA / PI_FILE
    if not path.exists():
        pytest.skip(f"{path} is not available")
    transcript = load_transcripts(path)[0]
    _assert_same(replay(transcript, strategy, profile="32k"), replay(transcript, reference, profile="32k"))


def _browsing() -> Session:
    s = Session()
    s.user("compare the docs pages")
    for k in range(8):
        s.assistant(f"visit {k}", calls=[(f"w{k}", "browser", {"url": f"https://docs.example/{k}"}), (f"r{k}", "read", {"path": f"f{k}"})])
        s.result(f"w{k}", f"page {k}\n" + "text\n" * 50, name="browser")
        s.result(f"r{k}", f"file {k}", name="read")
    s.assistant("done")
    return s


def test_v0_browser_masking_equals_the_straightforward_replay():
    # §5.4: each new browser observation masks the third newest, which changes an event inside the view
    # rendered (a new rendering, not an extension of the last one).
    transcript = _browsing().transcript()
    result = replay(transcript, OpenHandsV0, profile="1m")
    _assert_same(result, replay(transcript, ReferenceOpenHandsV0, profile="1m"))
    # A masked output is a user message and leaves its call unanswered, so the responses of visits 0-5 are never
    # sent (§7): the task and the six masked outputs are consecutive user messages, each after the first with V0's
    # "\n\n" in front (conversation_memory.py L167-182).
    last = result.requests[-1].messages
    assert [m.content for m in last[:7]] == ["compare the docs pages"] + [
        f"\n\nVisited URL https://docs.example/{k}\nContent omitted" for k in range(6)]
    assert [m.role for m in last[7:]] == ["assistant", "tool", "tool", "assistant", "tool", "tool", "assistant"]

"""Gemini CLI's chat compression and tool-output masking as the `gemini-cli` strategy
(docs/specs/gemini-cli.md, upstream `google-gemini/gemini-cli@5411f113`).

- §1 the history as Gemini `Content`s: user text, model text + `functionCall` parts, and user
  contents of `functionResponse` parts (results of one step together);
- §2 before every request, before the pending input (new user text or tool results) joins the
  history: compress when `lastPromptTokenCount ≥ 0.5 × tokenLimit`; the count is the previous
  response's prompt tokens, or the local estimate after the history was replaced; §2.3 the failure
  latch: after an automatic inflated result only truncation runs, until a compression succeeds;
- §3 reverse-budget truncation of function responses (50,000 estimated tokens, newest first, head
  20 % / tail 80 % of `min(40,000, 4 × remaining)` characters, with the header and omission lines);
- §4 the split on the truncated contents' compact-JSON lengths at fraction 0.7, only at user
  contents without function responses, "compress everything" after a final model text;
- §5 two summariser calls (the `<state_snapshot>` request with the anchor, then the verification
  pass), the original slice when its estimate fits the window, else the truncated one;
- §6 the new history `[summary, "Got it. Thanks for the additional context!", ...truncated tail]`
  and the inflation check (`new estimate > old count` fails);
- §7 the truncation-only path of the latch;
- §8 tool-output masking after every check (newest content protected, 50,000 protected tokens,
  30,000 minimum batch, exempt tools, `<tool_output_masked>` snippet, kept only if it saves tokens);
- §9 truncation of shell outputs when the tool runs; §10.2 the estimator.

The window defaults to the profile's (upstream's `tokenLimit` is 1,048,576 for every Gemini model);
transcripts hold no environment-context message, so none is re-inserted after a compression; the
system prompt items stay in front. Reasoning items are not replayed (Gemini keeps thought text out
of the curated history). The §10.4 pre-check that refuses to send is left to the simulated provider,
which rejects what does not fit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.strategy import Strategy, StrategyContext, SummaryOverflow
from compaction_bench.transcript import Attachment, Item, Usage

#: §6 the model's acknowledgement after the summary (protocol string).
ACK = "Got it. Thanks for the additional context!"
MASKED_TAG = "<tool_output_masked"
SNAPSHOT_TAG = "<state_snapshot>"
OUTPUT_DIR = ".gemini/tmp/tool-outputs"


# ----------------------------------------------------------------- contents (§1)
@dataclass
class Part:
    """One part of a Content: text, a function call, a function response, or inline data."""

    kind: str  # text | call | response | data
    text: str = ""
    name: str = ""
    call_id: str = ""
    args: Any = None
    item_id: str | None = None
    mime: str = ""
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.kind == "text":
            return {"text": self.text}
        if self.kind == "call":
            return {"functionCall": {"name": self.name, "args": self.args, "id": self.call_id}}
        if self.kind == "response":
            return {"functionResponse": {"name": self.name, "response": {"output": self.text}, "id": self.call_id}}
        return {"inlineData": {"mimeType": self.mime}}


@dataclass
class Content:
    role: str  # user | model
    parts: list[Part] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "parts": [p.to_json() for p in self.parts]}

    @property
    def has_response(self) -> bool:
        return any(p.kind == "response" for p in self.parts)

    @property
    def has_call(self) -> bool:
        return any(p.kind == "call" for p in self.parts)


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def compact_json_length(content: Content) -> int:
    """`JSON.stringify(content).length`: compact separators, non-ASCII unescaped, UTF-16 units (§4)."""
    return _utf16(json.dumps(content.to_json(), separators=(",", ":"), ensure_ascii=False))


def _text_units(text: str) -> float:
    """§10.2 text part: len/4 above 100,000 chars, else 0.25 per ASCII and 1.5 per other UTF-16 unit."""
    units = _utf16(text)
    if len(text) > 100_000:
        return units / 4
    ascii_chars = len(text.encode("ascii", "ignore"))
    return 0.25 * ascii_chars + 1.5 * (units - ascii_chars)


def estimate_parts(parts: Sequence[Part]) -> int:
    """`estimateTokenCountSync(parts)` (§10.2), floored once."""
    total = 0.0
    for part in parts:
        if part.kind == "text":
            total += _text_units(part.text)
        elif part.kind == "response":
            total += _utf16(part.name) / 4 + _utf16(json.dumps({"output": part.text}, separators=(",", ":"), ensure_ascii=False)) / 4
        elif part.kind == "data":
            total += 3_000 if part.mime.startswith("image/") else 25_800 if part.mime == "application/pdf" else 0
        else:
            total += _utf16(json.dumps(part.to_json(), separators=(",", ":"), ensure_ascii=False)) / 4
    return math.floor(total)


def estimate_contents(contents: Sequence[Content]) -> int:
    return estimate_parts([p for c in contents for p in c.parts])


def find_split_point(contents: Sequence[Content], fraction: float) -> int:
    """§4 `findCompressSplitPoint`: the index of the oldest kept content."""
    if fraction <= 0 or fraction >= 1:
        raise ValueError("fraction must be between 0 and 1")
    counts = [compact_json_length(c) for c in contents]
    target = sum(counts) * fraction
    last_split = 0
    cumulative = 0
    for i, content in enumerate(contents):
        if content.role == "user" and not content.has_response:
            if cumulative >= target:
                return i
            last_split = i
        cumulative += counts[i]
    if contents and contents[-1].role == "model" and not contents[-1].has_call:
        return len(contents)
    return last_split


def format_truncated_output(text: str, path: str, threshold: int) -> str:
    """`formatTruncatedToolOutput` (§3): header, head 20 %, omission marker, tail 80 %."""
    if len(text) <= threshold:
        return text
    head = math.floor(0.2 * threshold)
    tail = threshold - head
    omitted = len(text) - head - tail
    return (
        f"Output too large. Showing first {head:,} and last {tail:,} characters. For full output see: {path}\n"
        f"{text[:head]}\n\n... [{omitted:,} characters omitted] ...\n\n{text[len(text) - tail:] if tail else ''}"
    )


@dataclass(frozen=True)
class GeminiCliOptions:
    """Upstream defaults at BASE (§2.2, §3, §4, §8, §9)."""

    compression_threshold: float = 0.5
    preserve_fraction: float = 0.3
    function_response_token_budget: int = 50_000
    truncate_tool_output_threshold: int = 40_000
    #: `tokenLimit(model)`; None: the profile's window (upstream 1,048,576 for Gemini models)
    token_limit: int | None = None
    mask_protection_tokens: int = 50_000
    mask_min_prunable_tokens: int = 30_000
    mask_protect_latest_turn: bool = True
    mask_exempt_tools: str = "activate_skill,ask_user,enter_plan_mode,exit_plan_mode"
    #: tools whose output is truncated when it runs (§9) and gets the line preview when masked (§8)
    shell_tools: str = "run_shell_command,Bash,bash,shell,exec_command"


class GeminiCli(Strategy):
    name = "gemini-cli"
    description = "Gemini CLI: 0.5 × window on the last prompt count, keep 30 % split at clean user turns, state snapshot + verify, masking"
    spec = "docs/specs/gemini-cli.md §1-§10, §15"
    Options = GeminiCliOptions

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.limit = o.token_limit or ctx.profile.context_window
        self.system: list[Item] = []
        self.history: list[Content] = []
        self.pending: list[Content] = []
        self.last_prompt_tokens = 0
        self.failed_latch = False
        self.exempt = {t.strip() for t in o.mask_exempt_tools.split(",") if t.strip()}
        self.shell = {t.strip() for t in o.shell_tools.split(",") if t.strip()}
        self._files = 0
        #: §8 per function response (name, text): None when already masked, else its estimate
        self._estimates: dict[tuple[str, str], int | None] = {}
        #: rendered messages per content, by the role and the identities of its parts (kept alive here)
        self._rendered: dict[tuple[str, tuple[int, ...]], tuple[tuple[Part, ...], list[Message]]] = {}
        self._system_messages: dict[str, Message] = {}

    # ------------------------------------------------------------ observing
    def on_user_turn(self, item: Item) -> None:
        self._user_text(item)

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(item)
        elif item.kind == "tool_result":
            text = item.text
            if item.tool_name in self.shell:
                threshold = min(4 * (self.limit - self.last_prompt_tokens), self.options.truncate_tool_output_threshold)
                if threshold > 0:
                    text = format_truncated_output(text, self._output_path(item.tool_name or "tool"), threshold)
            part = Part("response", text=text, name=item.tool_name or "", call_id=item.call_id or "", item_id=item.id,
                        is_error=item.is_error, attachments=item.attachments)
            if self.pending and self.pending[-1].role == "user" and self.pending[-1].has_response:
                self.pending[-1].parts.append(part)
            else:
                self.pending.append(Content("user", [part]))
        elif item.kind == "user":
            self._user_text(item)
        elif item.is_model_output:
            self._model([item])

    def _user_text(self, item: Item) -> None:
        parts = [Part("text", text=item.text, item_id=item.id)]
        parts += [Part("data", mime=a.mime, item_id=item.id) for a in item.attachments]
        self.pending.append(Content("user", parts))

    def _model(self, items: Sequence[Item]) -> None:
        parts = []
        for item in items:
            if item.kind == "assistant" and item.text:
                parts.append(Part("text", text=item.text, item_id=item.id))
            elif item.kind == "tool_call":
                try:
                    args = json.loads(item.arguments or "{}")
                except json.JSONDecodeError:
                    args = {"raw": item.arguments}
                parts.append(Part("call", name=item.tool_name or "", call_id=item.call_id or "", args=args, item_id=item.id))
        if parts:
            self.pending.append(Content("model", parts))

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(self.pending)
        self.pending = []
        self._model(items)
        self.history.extend(self.pending)
        self.pending = []
        if usage is not None:
            self.last_prompt_tokens = usage.input

    def _output_path(self, tool: str) -> str:
        self._files += 1
        return f"{OUTPUT_DIR}/{tool}_{self._files}.txt"

    # ------------------------------------------------------------ rendering
    def render(self, contents: Sequence[Content]) -> list[Message]:
        """Wire messages for contents; each content's messages are built once for the parts it holds
        (a content whose parts change, by a new function response or a mask, is rendered anew)."""
        out: list[Message] = []
        for content in contents:
            key = (content.role, tuple(map(id, content.parts)))
            hit = self._rendered.get(key)
            if hit is None:
                hit = self._rendered[key] = (tuple(content.parts), self._render_content(content))
            out += hit[1]
        return out

    @staticmethod
    def _render_content(content: Content) -> list[Message]:
        out: list[Message] = []
        if content.role == "model":
            text = "\n".join(p.text for p in content.parts if p.kind == "text")
            calls = tuple(ToolCall(p.call_id, p.name, json.dumps(p.args, ensure_ascii=False)) for p in content.parts if p.kind == "call")
            ids = tuple(dict.fromkeys(p.item_id for p in content.parts if p.item_id))
            out.append(Message("assistant", text, tool_calls=calls, item_ids=ids))
            return out
        texts = [p for p in content.parts if p.kind == "text"]
        for p in content.parts:
            if p.kind == "response":
                out.append(Message("tool", p.text, tool_call_id=p.call_id, name=p.name, is_error=p.is_error,
                                   item_ids=(p.item_id,) if p.item_id else (), attachments=p.attachments))
        if texts:
            ids = tuple(dict.fromkeys(p.item_id for p in content.parts if p.item_id and p.kind != "response"))
            out.append(Message("user", "\n".join(p.text for p in texts), item_ids=ids))
        return out

    def messages(self) -> list[Message]:
        from compaction_bench.request import message_from_item

        system = [self._system_messages.get(i.id) or self._system_messages.setdefault(i.id, message_from_item(i)) for i in self.system]
        return [*system, *self.render(self.history), *self.render(self.pending)]

    # ------------------------------------------------------------ the check (§2)
    def request(self) -> Request:
        threshold = math.floor(self.options.compression_threshold * self.limit)
        count = self.last_prompt_tokens
        if self.history and count >= self.options.compression_threshold * self.limit:
            if self.failed_latch:
                self._truncate_only(count)
            else:
                self._compress(count, force=False)
        self._mask()
        return Request(self.messages(), estimate_tokens=count, threshold=threshold)

    # ------------------------------------------------------------ truncation (§3)
    def truncate_to_budget(self, contents: Sequence[Content]) -> list[Content]:
        o = self.options
        threshold = min(4 * (self.limit - self.last_prompt_tokens), o.truncate_tool_output_threshold)
        counter = 0
        out: list[Content] = []
        for content in reversed(contents):
            parts: list[Part] = []
            for part in reversed(content.parts):
                if part.kind != "response":
                    parts.append(part)
                    continue
                tokens = estimate_parts([Part("text", text=part.text)])
                if counter + tokens > o.function_response_token_budget:
                    message = format_truncated_output(part.text, self._output_path(part.name or "tool"), max(threshold, 0))
                    parts.append(Part("response", text=message, name=part.name, call_id=part.call_id, item_id=part.item_id,
                                      is_error=part.is_error))
                    counter += estimate_parts([Part("text", text=message)])
                else:
                    parts.append(part)
                    counter += tokens
            out.append(Content(content.role, parts[::-1]))
        return out[::-1]

    def _truncate_only(self, count: int) -> None:
        """§7: the failed-compression path."""
        truncated = self.truncate_to_budget(self.history)
        if estimate_contents(truncated) < count:
            before = self.messages()
            self.history = truncated
            self.last_prompt_tokens = estimate_contents(self.history)
            after = self.messages()
            if after != before:
                self.ctx.record_compaction(trigger="truncate", before=before, after=after, summary=None, estimate_tokens=count,
                                           details={"status": "CONTENT_TRUNCATED"})

    # ------------------------------------------------------------ compression (§4-§6)
    def _compress(self, count: int, *, force: bool) -> None:
        o = self.options
        truncated = self.truncate_to_budget(self.history)
        split = find_split_point(truncated, 1 - o.preserve_fraction)
        if split == 0:
            return
        original = self.history[:split]
        chosen = original if estimate_contents(original) < self.limit else truncated[:split]
        previous = any(SNAPSHOT_TAG in p.text for c in chosen for p in c.parts if p.kind == "text")
        system = Message("system", self.ctx.render_prompt("gemini_compression_system.j2", plan_path=None))
        body = self.render(chosen)
        ask = Message("user", self.ctx.render_prompt("gemini_compression_request.j2", previous=previous))
        try:
            first = self.ctx.summarize(Request([system, *body, ask], kind="summary"))
            verify = Message("user", self.ctx.render_prompt("gemini_compression_verify.j2"))
            second = self.ctx.summarize(Request([system, *body, Message("assistant", first.text), verify], kind="summary"),
                                        purpose="verify")
        except SummaryOverflow:
            # The summariser gives up and throws (§5.1): the turn goes on uncompressed.
            return
        final = (second.text.strip() or first.text).strip()
        if not final:
            return
        new_history = [Content("user", [Part("text", text=final)]), Content("model", [Part("text", text=ACK)]), *truncated[split:]]
        new_tokens = estimate_contents(new_history)
        if new_tokens > count:
            # COMPRESSION_FAILED_INFLATED_TOKEN_COUNT: nothing changes; an automatic attempt latches (§2.3).
            self.failed_latch = self.failed_latch or not force
            self.ctx.record_compaction(trigger="inflated", before=self.messages(), after=self.messages(), summary=None,
                                       estimate_tokens=count, details={"new_tokens": new_tokens}, probe=False)
            return
        before = self.messages()
        self.history = new_history
        self.failed_latch = False
        self.last_prompt_tokens = new_tokens
        self.ctx.record_compaction(
            trigger="manual" if force else "threshold", before=before, after=self.messages(), summary=final,
            summarized_ids=[i for m in self.render(original) for i in m.item_ids], estimate_tokens=count,
            threshold=math.floor(o.compression_threshold * self.limit),
            details={"split": split, "kept_contents": len(truncated) - split, "new_tokens": new_tokens, "anchored": previous},
        )

    # ------------------------------------------------------------ masking (§8)
    def _preview(self, part: Part) -> str:
        if part.name in self.shell:
            lines = part.text.split("\n")
            if len(lines) > 20:
                return "\n".join(lines[:10]) + f"\n\n... [{len(lines) - 20} lines omitted] ...\n\n" + "\n".join(lines[-10:])
            return part.text
        content = json.dumps({"output": part.text}, indent=2, ensure_ascii=False)
        if len(content) > 500:
            return content[:250] + "\n... [TRUNCATED] ...\n" + content[-250:]
        return content

    def _mask(self) -> None:
        o = self.options
        start = len(self.history) - (2 if o.mask_protect_latest_turn else 1)
        protected = 0
        window_closed = False
        prunable: list[tuple[int, int, int]] = []
        total = 0
        for ci in range(start, -1, -1):
            content = self.history[ci]
            for pi in range(len(content.parts) - 1, -1, -1):
                part = content.parts[pi]
                if part.kind != "response" or part.name in self.exempt:
                    continue
                key = (part.name, part.text)
                if key in self._estimates:
                    tokens = self._estimates[key]
                else:
                    tokens = self._estimates[key] = None if MASKED_TAG in part.text else estimate_parts([part])
                if tokens is None:
                    continue
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
            path = self._output_path(part.name or "tool")
            snippet = f"<tool_output_masked>\n{self._preview(part)}\n\nOutput too large. Full output available at: {path}\n</tool_output_masked>"
            new = Part("response", text=snippet, name=part.name, call_id=part.call_id, item_id=part.item_id, is_error=part.is_error)
            if estimate_parts([new]) < tokens:
                self.history[ci].parts[pi] = new
                masked.append(part.call_id)
        if masked:
            self.last_prompt_tokens = estimate_contents(self.history)
            self.ctx.record_compaction(trigger="masking", before=before, after=self.messages(), summary=None,
                                       details={"masked": masked}, probe=False)

"""Shared Codex components: the pieces every Codex strategy is built from (docs/specs/codex.md).

This module owns, once for all four Codex strategies:

- `CodexItem`: a history entry shaped like Codex's `ResponseItem`, converted from a transcript
  `Item` (with tool-output truncation at insertion, §9), with its model-visible JSON and its
  byte/4 estimate (§6) and its wire `Message`;
- `estimate_item` and `approx_tokens` (§6), `truncate_middle` (§9 / the 20k selection of §2.2);
- `for_prompt` normalization (§2.1): a synthetic ``"aborted"`` output for a call without one,
  orphan outputs removed;
- `PromptView` and `ActiveTerms`: the normalized, rendered history and the accountant's history
  terms kept up to date as the session's history grows (a request costs what was appended since
  the previous one), and taking a remote compaction's new history from what the caller holds
  (`adopt`);
- `ContextLimits` (§1.1), `TokenAccount` (the active-token accountant of §1.3, the
  ``fill_to_context_window`` quirk, the body-after-prefix prefill and the usage rebase of §1.5),
  `ContextWindows` (window number and ids, §1.5), `TokenStatus` (§1.2);
- `model_switch_reason` (§1.4 item 3), `downshift_at` (the count its downshift test fires at) and the
  model catalog facts it needs (comp_hash, windows);
- `remote_candidates` and `RetainedRun` (the 64k retention of §4.3, carried from one remote
  compaction to the next with running sums over the retained run) and
  `pretrim_tool_outputs` (§3.1);
- `remove_first_item` (§2.1: drop the oldest item together with its call/output partner);
- the context updates of a turn: what a contextual message is (`WORLD_STATE_MARKERS`: `is_initial_context`
  before the first user turn, `is_context_update` and `is_turn_input` after it, else history),
  `context_slot` (which initial-context entry a later contextual message replaces), `is_model_switch`
  (the `<model_switch>` developer message) and `update_context` (the *current* initial context a
  compaction re-injects, upstream `compact.rs` with the snapshots
  `pre_turn_compaction_including_incoming_shapes` and
  `pre_turn_compaction_strips_incoming_model_switch_shapes`).

Nothing here calls the LLM or the engine; `strategies/codex.py` composes these pieces.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain, islice
from operator import attrgetter
from typing import Any, Generic, TypeVar

from compaction_bench.log_view import LogView
from compaction_bench.request import Message, ToolCall
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.tokens import codex_estimate, codex_estimate_bytes, utf8_len
from compaction_bench.transcript import Attachment, Item, Usage, thaw

#: Codex item types produced by the model (history.rs L798-818, the ones this data model has).
MODEL_GENERATED_TYPES = frozenset({"reasoning", "function_call", "custom_tool_call", "compaction"})
TOOL_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
#: How an agent message that is a sub-agent's completion begins (§4.3 step 1; `compact.rs` L566-575).
FINAL_ANSWER_PREFIX = "Message Type: FINAL_ANSWER\n"
#: Placeholder text of a synthetic output for a call that has none (`for_prompt`, §2.1).
ABORTED_OUTPUT = "aborted"
#: A `data:` URL prefix counted with each inline image (§6: the payload counts as 7,373 bytes).
IMAGE_URL_PREFIX = "data:{mime};base64,"

#: Catalog comp_hash by model slug prefix (§1.4 item 3); gpt-5.2 has none.
COMP_HASHES: tuple[tuple[str, str], ...] = (("gpt-5.6", "3000"), ("gpt-5.5", "2911"), ("gpt-5.4", "2911"))


def approx_tokens(text: str) -> int:
    """`approx_token_count`: ceil(utf8 bytes / 4) (§6)."""
    return codex_estimate(text)


def approx_tokens_from_bytes(n_bytes: int) -> int:
    return (n_bytes + 3) // 4


def compact_json(value: object) -> str:
    """serde_json's compact serialization (no spaces, non-ASCII kept as is)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def wire_output(item: Item) -> str:
    """The tool output text the model saw: the JSON envelope re-encoded when the importer decoded one."""
    envelope = item.meta.get("output_envelope")
    if envelope is None:
        return item.text
    return compact_json({"output": item.text, **thaw(envelope)})


# --------------------------------------------------------------------------- truncation (§9)
def _utf8_cut(data: bytes, index: int, forward: bool) -> int:
    """Move `index` to a UTF-8 character boundary (backwards for a head, forwards for a tail)."""
    while 0 < index < len(data) and (data[index] & 0xC0) == 0x80:
        index += 1 if forward else -1
    return index


def truncate_middle(text: str, budget_bytes: int, *, unit: str = "tokens") -> str:
    """Codex `truncate_text`: keep the first floor(B/2) and last B-floor(B/2) bytes on UTF-8
    boundaries, joined by ``…N tokens truncated…`` (N = ceil((len-B)/4)) or, in bytes mode,
    ``…N chars truncated…`` (N = removed characters). No newline is added (§9).

    A lone UTF-16 surrogate (a hand-built text can hold one; the loaders replace it with U+FFFD) is
    3 bytes, as the U+FFFD a Rust `String` would hold in its place is (`utf8_len`): "surrogatepass"
    encodes it as a 3-byte sequence whose lead and continuation bytes `_utf8_cut` sees as one
    character, and decodes it back to the same surrogate, so the kept head and tail are exactly
    the text's own characters."""
    data = text.encode("utf-8", "surrogatepass")
    budget_bytes = max(0, budget_bytes)
    if len(data) <= budget_bytes:
        return text
    head_end = _utf8_cut(data, budget_bytes // 2, forward=False)
    tail_start = _utf8_cut(data, len(data) - (budget_bytes - budget_bytes // 2), forward=True)
    head = data[:head_end].decode("utf-8", "surrogatepass")
    tail = data[tail_start:].decode("utf-8", "surrogatepass")
    if unit == "tokens":
        marker = f"…{codex_estimate_bytes(len(data) - budget_bytes)} tokens truncated…"
    else:
        marker = f"…{len(text) - len(head) - len(tail)} chars truncated…"
    return f"{head}{marker}{tail}"


@dataclass(frozen=True)
class TruncationPolicy:
    """A model's tool-output policy (§9): `mode` tokens|bytes, `limit` in that unit."""

    mode: str = "tokens"
    limit: int = 10_000

    @classmethod
    def of(cls, mode: str, configured_tokens: int | None) -> TruncationPolicy:
        """The policy of a model in `mode` (its own limit 10,000 in that unit), overridden by the config's
        `tool_output_token_limit` as Codex reads it (§9): N tokens, or 4N bytes in bytes mode."""
        if configured_tokens is None:
            return cls(mode)
        return cls(mode, configured_tokens * 4 if mode == "bytes" else configured_tokens)

    def history_budget_bytes(self, multiplier: float) -> int:
        """The history-insertion budget: policy × multiplier, rounded up, in bytes."""
        scaled = math.ceil(self.limit * multiplier)
        return scaled * 4 if self.mode == "tokens" else scaled

    def truncate_for_history(self, text: str, multiplier: float) -> str:
        return truncate_middle(text, self.history_budget_bytes(multiplier), unit=self.mode)


# --------------------------------------------------------------------------- items (§6)
_T = TypeVar("_T")


class cached_property(Generic[_T]):  # noqa: N801 - named after the `functools` decorator it stands for
    """`functools.cached_property` without its lock (a replay runs on one thread; Python 3.12 dropped
    the lock too): the first read computes the value and stores it in the instance's `__dict__`,
    where every later read finds it without calling this descriptor."""

    __slots__ = ("func", "name")

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func, self.name = func, func.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> _T:
        if instance is None:
            return self  # type: ignore[return-value]  # the descriptor itself, read from the class
        value = instance.__dict__[self.name] = self.func(instance)
        return value


@dataclass(frozen=True)
class CodexItem:
    """One history entry in Codex's shape. `item_ids` trace the transcript items it carries."""

    type: str  # message | reasoning | function_call | custom_tool_call | *_output | compaction | agent_message
    role: str | None = None
    text: str = ""
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    encrypted_len: int = 0
    status: str | None = None
    images: tuple[Attachment, ...] = ()
    contextual: bool = False
    #: A user message Codex reads as a hook prompt (`TurnItem::HookPrompt`; the importer's `meta.hook_prompt`).
    hook_prompt: bool = False
    summary: bool = False
    is_error: bool = False
    item_ids: tuple[str, ...] = ()
    overhead_bytes: int = field(default=650, compare=False)
    image_bytes: int = field(default=7373, compare=False)

    # ---- classification (computed once per item: the retention, normalization and token terms ask on every compaction)
    @cached_property
    def is_model_generated(self) -> bool:
        return self.type in MODEL_GENERATED_TYPES or (self.type == "message" and self.role == "assistant")

    @cached_property
    def is_tool_output(self) -> bool:
        return self.type in TOOL_OUTPUT_TYPES

    @cached_property
    def is_call(self) -> bool:
        return self.type in ("function_call", "custom_tool_call")

    @cached_property
    def is_tool(self) -> bool:
        """A call or a tool output (what `for_prompt` pairs)."""
        return self.is_call or self.is_tool_output

    @cached_property
    def is_real_user(self) -> bool:
        """A user message that is neither a contextual fragment nor an earlier summary (§2.2)."""
        return self.type == "message" and self.role == "user" and not self.contextual and not self.summary

    @cached_property
    def is_user_turn_boundary(self) -> bool:
        return self.is_real_user or self.type == "agent_message"

    @cached_property
    def is_remote_candidate(self) -> bool:
        """A message §4.3 step 2 leaves: a real user message, a hook prompt or an agent message."""
        return self.is_user_turn_boundary or self.hook_prompt

    # ---- model-visible JSON and estimate
    def to_json(self) -> dict[str, object]:
        if self.type == "message":
            kind = "output_text" if self.role == "assistant" else "input_text"
            content: list[dict[str, str]] = [{"type": kind, "text": self.text}]
            content += [{"type": "input_image", "image_url": IMAGE_URL_PREFIX.format(mime=a.mime)} for a in self.images]
            return {"type": "message", "role": self.role or "user", "content": content}
        if self.type == "function_call":
            return {"type": "function_call", "name": self.name, "arguments": self.arguments or "", "call_id": self.call_id}
        if self.type == "custom_tool_call":
            data: dict[str, object] = {"type": "custom_tool_call"}
            if self.status is not None:
                data["status"] = self.status
            return data | {"call_id": self.call_id, "name": self.name, "input": self.arguments or ""}
        if self.is_tool_output:
            return {"type": self.type, "call_id": self.call_id, "output": self.text}
        if self.type == "reasoning":
            summary = [{"type": "summary_text", "text": self.text}] if self.text else []
            return {"type": "reasoning", "summary": summary, "content": None, "encrypted_content": None}
        return {"type": self.type, "message": self.text}  # agent_message

    @cached_property
    def estimate(self) -> int:
        """`estimate_item_token_count` (§6): an encrypted reasoning or a compaction item by the size of its encrypted
        content, any other item by its JSON, its images and the encrypted content of an agent message
        (`encrypted_content_bytes`)."""
        if self.type == "compaction" or (self.type == "reasoning" and self.encrypted_len):
            return approx_tokens_from_bytes(max(0, self.encrypted_len * 3 // 4 - self.overhead_bytes))
        return approx_tokens_from_bytes(utf8_len(compact_json(self.to_json())) + self.image_bytes * len(self.images)
                                        + self.encrypted_content_bytes)

    @cached_property
    def encrypted_content_bytes(self) -> int:
        """What an agent message's encrypted content adds to its estimate: ceil(len*9/16) bytes for its payload
        (spec §6; `encrypted_function_output_estimate_adjustment` and `estimate_encrypted_function_output_length`,
        openai/codex:codex-rs/core/src/context_manager/history.rs@3aae5d8 L515-517, L759-795, which take the payload
        out of the item's JSON and add that back). The payload is no part of `to_json` here (the transcript keeps only its
        size, `encrypted_len`), so only the ceil(len*9/16) bytes are added; `to_json` is this module's form of an agent
        message (`{"type", "message"}`, without the parts of upstream's `content`), so the encrypted part's own JSON
        wrapper is not counted either. 0 for any other item."""
        return -(-self.encrypted_len * 9 // 16) if self.type == "agent_message" else 0

    @cached_property
    def encrypted_reasoning(self) -> int:
        """The estimate of an encrypted reasoning item, else 0 (the reasoning term of §1.3)."""
        return self.estimate if self.encrypted_len and self.type == "reasoning" else 0

    @cached_property
    def text_tokens(self) -> int:
        """`approx_token_count` of the text alone (the retention and selection budgets of §2.2, §4.3)."""
        return approx_tokens(self.text)

    @cached_property
    def retention_cost(self) -> int:
        """What keeping this entry takes from §4.3's budget: a message max(1, Σ ceil(len(text part)/4))
        (images cost 0), anything else its estimate."""
        if self.type == "message":
            return self.text_tokens or 1  # ceil(bytes/4) is 0 only for an empty text
        return self.estimate

    @cached_property
    def message(self) -> Message:
        """The wire message (provider-neutral) for this entry."""
        if self.type in ("message", "agent_message"):
            role = "user" if self.type == "agent_message" else (self.role or "user")
            return Message(role=role, content=self.text, item_ids=self.item_ids, attachments=self.images)
        if self.is_call:
            call = ToolCall(id=self.call_id or "", name=self.name or "", arguments=self.arguments or "")
            return Message(role="assistant", tool_calls=(call,), item_ids=self.item_ids)
        if self.is_tool_output:
            return Message(role="tool", content=self.text, tool_call_id=self.call_id, item_ids=self.item_ids,
                           name=self.name, is_error=self.is_error)
        return Message(role=self.type, content=self.text, item_ids=self.item_ids)  # reasoning | compaction


def render(items: Sequence[CodexItem], base: str = "", folds: FoldMemo | None = None) -> list[Message]:
    """Wire messages: base instructions (as the system message) then the items; `folds` (the
    session's) builds each folded assistant message once across requests."""
    head = [Message(role="system", content=base)] if base else []
    return head + (folds or FoldMemo()).merge(i.message for i in items)


#: Attribute readers for the passes over a whole history (`map` and `filter` run them without a Python frame per item).
_IS_TOOL = attrgetter("is_tool")
_IS_REMOTE_CANDIDATE = attrgetter("is_remote_candidate")
_IS_REAL_USER = attrgetter("is_real_user")
_ITEM_IDS = attrgetter("item_ids")
_ESTIMATE = attrgetter("estimate")
_ENCRYPTED_REASONING = attrgetter("encrypted_reasoning")
_MESSAGE = attrgetter("message")
_RETENTION_COST = attrgetter("retention_cost")


def _tool_items(items: Iterable[CodexItem]) -> tuple[list[CodexItem], set[str | None], set[str | None]]:
    """The calls and tool outputs among `items`, and the call ids of each kind."""
    tools = list(filter(_IS_TOOL, items))
    return tools, {i.call_id for i in tools if i.is_call}, {i.call_id for i in tools if i.is_tool_output}


def item_ids_of(items: Iterable[CodexItem]) -> list[str]:
    """The transcript item ids the entries carry, in order."""
    return list(chain.from_iterable(map(_ITEM_IDS, items)))


def estimate_history(items: Sequence[CodexItem], base: str = "") -> int:
    """`estimate_token_count_with_base_instructions` (§6): ceil(len(base)/4) + Σ item estimates."""
    return approx_tokens(base) + sum(map(_ESTIMATE, items))


@dataclass(frozen=True)
class ItemConverter:
    """Transcript `Item` → `CodexItem`, applying history-insertion truncation to tool outputs (§9)."""

    policy: TruncationPolicy = TruncationPolicy()
    multiplier: float = 1.2
    overhead_bytes: int = 650
    image_bytes: int = 7373

    def make(self, **kw: object) -> CodexItem:
        return CodexItem(overhead_bytes=self.overhead_bytes, image_bytes=self.image_bytes, **kw)  # type: ignore[arg-type]

    def convert(self, item: Item) -> CodexItem:
        codex_type = item.meta.get("codex_type")
        ids = (item.id,)
        images = tuple(a for a in item.attachments if a.is_image) if item.attachments else ()
        if item.kind == "system":
            return self.make(type="message", role="developer", text=item.text, contextual=True, item_ids=ids)
        if item.kind == "user":
            if codex_type == "agent_message":  # an encrypted payload's size: `meta.encrypted_len` (scenarios/codex_rollout.py)
                return self.make(type="agent_message", text=item.text, encrypted_len=int(item.meta.get("encrypted_len") or 0), item_ids=ids)
            return self.make(type="message", role="user", text=item.text, images=images, contextual=item.synthetic,
                             hook_prompt=bool(item.meta.get("hook_prompt")), item_ids=ids)
        if item.kind == "assistant":
            return self.make(type="message", role="assistant", text=item.text, item_ids=ids)
        if item.kind == "reasoning":
            return self.make(type="reasoning", text=item.text, encrypted_len=int(item.meta.get("encrypted_len") or 0), item_ids=ids)
        if item.kind == "tool_call":
            kind = "custom_tool_call" if codex_type == "custom_tool_call" else "function_call"
            return self.make(type=kind, call_id=item.call_id, name=item.tool_name, arguments=item.arguments,
                             status=item.meta.get("status"), item_ids=ids)
        if item.kind == "tool_result":
            kind = "custom_tool_call_output" if codex_type == "custom_tool_call_output" else "function_call_output"
            text = self.policy.truncate_for_history(wire_output(item), self.multiplier)
            return self.make(type=kind, call_id=item.call_id, name=item.tool_name, text=text, images=images,
                             is_error=item.is_error, item_ids=ids)
        raise ValueError(f"item {item.id!r} of kind {item.kind!r} is not model input")


# --------------------------------------------------------------------------- normalization
def for_prompt(items: Sequence[CodexItem], make: Callable[..., CodexItem] = CodexItem) -> list[CodexItem]:
    """`for_prompt()` (§2.1): a synthetic ``"aborted"`` output right after each call that has no
    output, and orphan outputs removed."""
    _, calls, outputs = _tool_items(items)
    out: list[CodexItem] = []
    for item in items:
        if item.is_tool_output and item.call_id not in calls:
            continue
        out.append(item)
        if item.is_call and item.call_id not in outputs:
            kind = "custom_tool_call_output" if item.type == "custom_tool_call" else "function_call_output"
            out.append(make(type=kind, call_id=item.call_id, name=item.name, text=ABORTED_OUTPUT))
    return out


class _Follower:
    """Follows a history list that its owner only appends to between replacements: `_appended`
    returns the items appended since the last call, or (after `_restart`) the whole list when the
    list was replaced, shortened or its last seen item changed."""

    def __init__(self) -> None:
        self._history: list[CodexItem] | None = None
        self._seen = 0
        self._last: CodexItem | None = None

    def _restart(self) -> None:
        raise NotImplementedError

    def _appended(self, history: list[CodexItem]) -> list[CodexItem]:
        """(Do not edit the list returned: after a restart it is `history` itself, not a copy.)"""
        seen = self._seen
        if history is not self._history or len(history) < seen or (seen and history[seen - 1] is not self._last):
            self._history, seen = history, 0
            self._restart()
        self._seen = len(history)
        if self._seen:
            self._last = history[-1]
        return history[seen:] if seen else history


class PromptView(_Follower):
    """`render(for_prompt(history), base, folds)` kept up to date as the history grows: a request
    costs the items appended since the previous one, not the history.

    `items` is `for_prompt(history)` (the same synthetic ``"aborted"`` outputs on every call) and
    `messages` its rendering behind the base instructions, a `LogView` of an append-only log of
    folded messages; `items_estimate` and `history_estimate` are the sums of the item estimates of
    `items` and of `history` (`estimate_history` without the base instructions). Appended items
    without any call or output (a compaction's new history) are rendered in bulk. An item's normalization depends on the whole history: when appended items change
    the decision for an earlier one (an output arrives for a call that got an ``"aborted"`` output,
    or a call for an output dropped as an orphan), the view is built again from the start, as it is
    for a new list or new base instructions.
    """

    def __init__(self, make: Callable[..., CodexItem], folds: FoldMemo) -> None:
        super().__init__()
        self.make, self.folds = make, folds
        self._base: str | None = None
        #: the system message of the base instructions, one object while they stay the same (every request
        #: and summary request after a compaction starts with it, so what reads requests recognises it)
        self._system: Message | None = None

    def _restart(self) -> None:
        self.items: list[CodexItem] = []
        #: Σ estimates of `items`, and of the history they normalize (§6, without the base instructions)
        self.items_estimate = 0
        self.history_estimate = 0
        self._calls: set[str | None] = set()
        self._outputs: set[str | None] = set()
        self._aborted: set[str | None] = set()  # call ids given a synthetic output
        self._orphans: set[str | None] = set()  # call ids of dropped outputs
        self._log: list[Message] = []
        if self._base:
            if self._system is None or self._system.content != self._base:
                self._system = Message(role="system", content=self._base)
            self._log.append(self._system)
        self._group: list[Message] = []

    def messages(self, history: list[CodexItem], base: str) -> LogView:
        """The wire messages of `for_prompt(history)` behind `base` (`render`)."""
        self.update(history, base)
        group = self._group
        return LogView(self._log, len(self._log), (self.folds.fold(group),) if group else ())

    def messages_trimmed(self, history: list[CodexItem], base: str, items: Sequence[CodexItem]) -> LogView:
        """`render(items, base, folds)` for `items`, `update(history, base)` with trailing tool outputs
        replaced (`pretrim_tool_outputs`). A tool output is never folded: each is a message of its
        own, the last ones of `messages`, so the rendering is that of `messages` but its last ones."""
        full = self.messages(history, base)
        own, replaced = self.items, 0
        while replaced < len(items) and items[-1 - replaced] is not own[-1 - replaced]:
            replaced += 1
        if not replaced:
            return full
        tail = items[len(items) - replaced :]
        if len(items) != len(own) or not all(i.is_tool_output and own[-1 - n].is_tool_output for n, i in enumerate(reversed(tail))):
            raise ValueError("only trailing tool outputs of the prompt view's items may be replaced")
        return LogView(full.log, len(full) - replaced, tuple(i.message for i in tail))

    def update(self, history: list[CodexItem], base: str) -> list[CodexItem]:
        """Bring `items` up to date with `history`; returns them (do not edit the list)."""
        if base != self._base:
            self._base, self._history = base, None
        new = self._appended(history)
        tools, calls, outputs = _tool_items(new)
        if calls & self._orphans or outputs & self._aborted:
            self._history = None
            new = self._appended(history)
            tools, calls, outputs = _tool_items(new)
        self._calls |= calls
        self._outputs |= outputs
        if tools:
            self._add(new)
        elif new:
            added = sum(map(_ESTIMATE, new))
            self.items_estimate += added
            self.history_estimate += added
            # no call and no output: `for_prompt` keeps every item as it is, and no message carries tool
            # calls, so each one closes the open group and opens its own (a compaction's new history)
            self.items.extend(new)
            if self._group:
                self._log.append(self.folds.fold(self._group))
            self._log.extend(map(_MESSAGE, new))
            self._group = [self._log.pop()]
        return self.items

    def adopt(self, history: list[CodexItem], base: str, messages: list[Message], estimate: int) -> None:
        """Follow `history`, a new list without calls or outputs, as `update` would after starting again
        on it, from what the caller already holds: `messages` are its items' wire messages (the view
        keeps the list) and `estimate` the sum of their estimates. With other base instructions the
        view starts again at its next update instead."""
        if base != self._base or not history:
            self._history = None
            return
        self._history, self._seen, self._last = history, len(history), history[-1]
        self._restart()
        # `update`'s rendering in bulk: for_prompt keeps every item, each message closes the open group
        self.items = list(history)
        self.items_estimate = self.history_estimate = estimate
        if base:
            messages.insert(0, self._log[0])
        self._log = messages
        self._group = [messages.pop()]

    def _add(self, new: list[CodexItem]) -> None:
        """Normalize and render appended items that include calls or outputs, one by one."""
        known_calls, known_outputs, add_item, log_append = self._calls, self._outputs, self.items.append, self._log.append
        fold, group = self.folds.fold, self._group
        history_estimate, items_estimate = self.history_estimate, self.items_estimate
        for item in new:
            history_estimate += item.estimate
            if item.is_tool_output and item.call_id not in known_calls:
                self._orphans.add(item.call_id)
                continue
            entries = (item, self._aborted_output(item)) if item.is_call and item.call_id not in known_outputs else (item,)
            for entry in entries:
                # one normalized item, its message folded as `FoldMemo.merge` does
                add_item(entry)
                items_estimate += entry.estimate
                message = entry.message
                if group and message.role == "assistant" and message.tool_calls and group[0].role == "assistant":
                    group.append(message)
                    continue
                if group:
                    log_append(fold(group))
                group = [message]
        self._group = group
        self.history_estimate, self.items_estimate = history_estimate, items_estimate

    def _aborted_output(self, call: CodexItem) -> CodexItem:
        """The synthetic ``"aborted"`` output `for_prompt` adds after a call without one."""
        self._aborted.add(call.call_id)
        kind = "custom_tool_call_output" if call.type == "custom_tool_call" else "function_call_output"
        return self.make(type=kind, call_id=call.call_id, name=call.name, text=ABORTED_OUTPUT)

    @property
    def normalized_as_is(self) -> bool:
        """Whether `for_prompt` left the history as it is (no synthetic output, no orphan dropped):
        then `messages` is `render(history, base)` itself."""
        return not self._aborted and not self._orphans


class ActiveTerms(_Follower):
    """The history's two terms of `get_total_token_usage` (§1.3), advanced over the appended items:
    the estimates after the last model-generated item (0 without one) and the encrypted reasoning
    before the last user-turn boundary. `TokenAccount.active` with a fresh instance is the
    straightforward computation."""

    #: Up to this many appended items are taken one at a time; more (a new history) by searches from the end.
    STEPWISE = 16

    def _restart(self) -> None:
        self._model_seen = False
        self._tail = 0
        self._reasoning = 0
        self._pending = 0  # encrypted reasoning since the last boundary

    def adopt(self, history: list[CodexItem]) -> None:
        """Follow `history`, a new list that ends with a model-generated item and holds no encrypted
        reasoning (a remote compaction's new history): both terms are 0, as `of` would find them."""
        if not history or not history[-1].is_model_generated:
            self._history = None
            return
        self._history, self._seen, self._last = history, len(history), history[-1]
        self._model_seen, self._tail, self._reasoning, self._pending = True, 0, 0, 0

    def of(self, items: list[CodexItem]) -> tuple[int, int]:
        """(tail, reasoning) of `items`."""
        new = self._appended(items)  # first: it may start anew
        if len(new) <= self.STEPWISE:
            return self._step(new)
        # the last model-generated item and the last user-turn boundary, searched from the end
        model = next((n for n in range(len(new) - 1, -1, -1) if new[n].is_model_generated), None)
        if model is not None:
            self._model_seen, self._tail = True, sum(map(_ESTIMATE, new[model + 1 :]))
        elif self._model_seen:
            self._tail += sum(map(_ESTIMATE, new))
        boundary = next((n for n in range(len(new) - 1, -1, -1) if new[n].is_user_turn_boundary), None)
        if boundary is not None:
            self._reasoning += self._pending + sum(map(_ENCRYPTED_REASONING, islice(new, boundary + 1)))
            self._pending = sum(map(_ENCRYPTED_REASONING, new[boundary + 1 :]))
        else:
            self._pending += sum(map(_ENCRYPTED_REASONING, new))
        return self._tail, self._reasoning

    def _step(self, new: list[CodexItem]) -> tuple[int, int]:
        """`of` one appended item at a time (what a request adds: cheaper than the searches)."""
        model_seen, tail, reasoning, pending = self._model_seen, self._tail, self._reasoning, self._pending
        for item in new:
            if item.is_model_generated:
                model_seen, tail = True, 0
            elif model_seen:
                tail += item.estimate
            pending += item.encrypted_reasoning
            if item.is_user_turn_boundary:
                reasoning += pending
                pending = 0
        self._model_seen, self._tail, self._reasoning, self._pending = model_seen, tail, reasoning, pending
        return tail, reasoning


def remove_first_item(items: list[CodexItem]) -> list[CodexItem]:
    """`remove_first_item` (§2.1): drop the oldest item and its call/output counterpart; returns
    the removed items."""
    first = items.pop(0)
    removed = [first]
    if first.is_call or first.is_tool_output:
        def partner(i: CodexItem) -> bool:
            return (i.is_tool_output if first.is_call else i.is_call) and i.call_id == first.call_id
        removed += [i for i in items if partner(i)]
        items[:] = [i for i in items if not partner(i)]
    return removed


# --------------------------------------------------------------------------- limits (§1.1, §1.2)
@dataclass(frozen=True)
class ContextLimits:
    """A model's window and the limits derived from it (§1.1)."""

    window: int
    effective_percent: int = 95
    auto_compact_percent: int = 90
    configured_limit: int | None = None
    scope: str = "total"
    fallback_buffer: int = 0

    @property
    def usable(self) -> int:
        """`model_context_window()`: window × 95 // 100."""
        return self.window * self.effective_percent // 100

    @property
    def auto_limit(self) -> int:
        """`auto_compact_token_limit()`: min(configured, window×9//10), or window×9//10."""
        ctx_limit = self.window * self.auto_compact_percent // 100
        return min(self.configured_limit, ctx_limit) if self.configured_limit is not None else ctx_limit

    @property
    def scope_limit(self) -> int:
        """In `body_after_prefix` scope the raw configured limit, without the clamp (§1.1)."""
        if self.scope == "body_after_prefix" and self.configured_limit is not None:
            return self.configured_limit
        return self.auto_limit

    @property
    def compact_at(self) -> int | None:
        """The threshold a request and a `ContextLimit` compaction report (`Request.threshold`): the smallest
        active count at which `token_limit_reached` holds. In `total` scope the scope count is the active count
        and both tests are `>=` (§1.2, `context_window.rs` L23-91): `min(auto limit + fallback buffer, usable
        window)`. The buffer is 0 except in token-budget mode with a fallback prompt (§1.1); there the auto limit
        alone would be one buffer too low. None in `body_after_prefix` scope: that test reads the active count less the
        window's prefill baseline, a server count or a local estimate (§1.5), so it does not compare the whole
        context a record's true count measures."""
        if self.scope == "body_after_prefix":
            return None
        return min(self.scope_limit + self.fallback_buffer, self.usable)


@dataclass(frozen=True)
class TokenStatus:
    """`context_window_token_status` (§1.2)."""

    active: int
    scope_tokens: int
    scope_limit: int
    remaining: int
    full_reached: bool
    limit_reached: bool


# --------------------------------------------------------------------------- accountant (§1.3, §1.5)
@dataclass
class TokenAccount:
    """Server usage of the last response plus local estimates (§1.3), the cumulative total used by
    ``fill_to_context_window``, and the body-after-prefix prefill baseline (§1.5)."""

    reasoning_included: bool = False
    last_total: int = 0
    cumulative_total: int = 0
    prefill: int | None = None
    prefill_observed: bool = False

    def observe(self, usage: Usage) -> None:
        """A completed response: replaces `last_token_usage`; the first server sample of a window
        becomes the prefill baseline."""
        self.last_total = usage.total
        self.cumulative_total += usage.total
        if not self.prefill_observed:
            self.prefill = usage.input
            self.prefill_observed = True

    def fill_to_context_window(self, window: int) -> None:
        """`set_total_tokens_full` (§1.3): last = max(window - previous cumulative, 0) (often 0)."""
        self.last_total = max(window - self.cumulative_total, 0)
        self.cumulative_total = window

    def rebase(self, estimate: int) -> None:
        """`recompute_token_usage` after a compaction (§1.5): the local estimate of the new history
        becomes `last_token_usage.total_tokens` and the estimated prefill."""
        self.last_total = estimate
        self.prefill = estimate
        self.prefill_observed = False

    def active(self, items: list[CodexItem], terms: ActiveTerms | None = None) -> int:
        """`get_total_token_usage` (§1.3); `terms` follows the session's history across calls."""
        tail, reasoning = (terms or ActiveTerms()).of(items)
        return self.last_total + tail + (0 if self.reasoning_included else reasoning)

    def status(self, items: list[CodexItem], limits: ContextLimits, terms: ActiveTerms | None = None) -> TokenStatus:
        active = self.active(items, terms)
        if limits.scope == "body_after_prefix":
            baseline = self.prefill if self.prefill is not None else active
            scope_tokens = active - baseline
        else:
            scope_tokens = active
        scope_limit = limits.scope_limit
        full_limit = limits.usable
        remaining = max(0, min(scope_limit - scope_tokens, full_limit - active))
        full = active >= full_limit
        reached = scope_tokens >= scope_limit + limits.fallback_buffer or full
        return TokenStatus(active, scope_tokens, scope_limit, remaining, full, reached)


# --------------------------------------------------------------------------- windows (§1.5)
def window_uuid(seed: str, number: int) -> str:
    """A deterministic id in UUIDv7 layout (version 7, RFC 4122 variant) for window `number`."""
    digest = int.from_bytes(hashlib.sha256(f"{seed}:{number}".encode()).digest()[:16], "big")
    digest = (digest & ~(0xF << 76)) | (0x7 << 76)
    digest = (digest & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=digest))


@dataclass
class ContextWindows:
    """The auto-compaction window counter (`advance_auto_compact_window`, §1.5)."""

    seed: str = "thread"
    number: int = 0
    first_id: str = ""
    current_id: str = ""
    previous_id: str | None = None

    def __post_init__(self) -> None:
        self.first_id = self.current_id = window_uuid(self.seed, 0)

    def advance(self) -> None:
        self.number += 1
        self.previous_id = self.current_id
        self.current_id = window_uuid(self.seed, self.number)

    @property
    def request_id(self) -> str:
        """`x-codex-window-id`: ``{thread_id}:{window_number}``."""
        return f"{self.seed}:{self.number}"


# --------------------------------------------------------------------------- model switch (§1.4)
def comp_hash_for(model: str | None) -> str | None:
    if not model:
        return None
    return next((h for prefix, h in COMP_HASHES if model.startswith(prefix)), None)


@dataclass(frozen=True)
class ModelState:
    """The model of a turn: slug, comp_hash and limits."""

    slug: str | None
    comp_hash: str | None
    limits: ContextLimits


def model_switch_reason(previous: ModelState, new: ModelState, active: int) -> str | None:
    """`maybe_run_previous_model_inline_compact` (§1.4 item 3): ``CompHashChanged``,
    ``ModelDownshift`` or None."""
    if previous.comp_hash and new.comp_hash and previous.comp_hash != new.comp_hash:
        return "CompHashChanged"
    if previous.slug != new.slug and previous.limits.usable > new.limits.usable:
        over_usable = active >= new.limits.usable
        if new.limits.scope == "body_after_prefix":
            reached = over_usable
        else:
            reached = active > new.limits.auto_limit or over_usable  # strict `>` here, unlike §1.2 (see `downshift_at`)
        if reached:
            return "ModelDownshift"
    return None


def downshift_at(new: ContextLimits) -> int:
    """The threshold a `ModelDownshift` compaction reports: the smallest active count at which
    `model_switch_reason` finds the limit reached for the smaller model (§1.4 item 3, `turn.rs` L1061-1153).
    Its auto-limit test is strict, `active > new auto limit`, so one more than that limit; the usable-window
    test is `>=`. In `body_after_prefix` scope only the usable-window test applies, which reads the whole
    active count, so that scope has an exact threshold here too."""
    if new.scope == "body_after_prefix":
        return new.usable
    return min(new.auto_limit + 1, new.usable)


# --------------------------------------------------------------------------- remote helpers
def pretrim_tool_outputs(items: list[CodexItem], estimate: int, usable: int, placeholder: str) -> tuple[list[str], int]:
    """`trim_function_call_history_to_fit_context_window` (§3.1): from the newest item, while the
    estimate exceeds the usable window and the item is a tool output, replace its body with the
    placeholder; stop at the first item that is not a tool output. `estimate` is
    `estimate_history(items, base)`; returns the rewritten ids and the estimate after the rewrite."""
    rewritten: list[str] = []
    for index in range(len(items) - 1, -1, -1):
        if estimate <= usable or not items[index].is_tool_output:
            break
        old = items[index]
        new = replace(old, text=placeholder, images=())
        items[index] = new
        estimate += new.estimate - old.estimate
        rewritten.extend(old.item_ids)
    return rewritten, estimate


def encrypted_length(text: str, overhead_bytes: int) -> int:
    """Length of the emulated opaque compaction item: base64 of (overhead + summary bytes), so
    that §4's size rule ``max(0, len*3/4 - overhead)/4`` counts the summary text itself."""
    return 4 * math.ceil((overhead_bytes + utf8_len(text)) / 3)


def remote_candidates(
    items: Iterable[CodexItem], max_agent_message_tokens: int, final_answer_prefix: str = FINAL_ANSWER_PREFIX
) -> list[CodexItem]:
    """§4.3 steps 1-2: the real user messages, the hook prompts and the non-final agent messages of at most
    `max_agent_message_tokens`, in order. Hook prompts stay (`should_keep_compacted_history_item` keeps
    `TurnItem::UserMessage | TurnItem::HookPrompt`, openai/codex:codex-rs/core/src/compact_remote.rs@3aae5d8
    L341-349, applied before the 64k budget in `build_v2_compacted_history`, compact_remote_v2.rs L445-456); the
    local path's `collect_user_messages` takes user messages alone (`select_user_messages` gets no hook prompt)."""
    candidates = list(filter(_IS_REMOTE_CANDIDATE, items))
    if not all(map(_IS_REAL_USER, candidates)):
        candidates = [
            i for i in candidates
            if i.type != "agent_message" or (not i.text.startswith(final_answer_prefix) and i.estimate <= max_agent_message_tokens)
        ]
    return candidates


class RetainedRun:
    """§4.3's retention (`build_v2_compacted_history` without the compaction item, steps 1-3) carried
    from one remote compaction to the next.

    The candidates (`remote_candidates`) are kept in order in `items`; the retained run is
    `items[start:]`. Along them run absolute sums: `costs[k]` and `estimates[k]` are the retention
    costs and the estimates (§6) of `items[:k]`, `id_starts[k]` the number of their item ids (listed in
    `ids`); `messages` are their wire messages. A suffix's cost is a difference of two sums, so the
    newest-first walk is a bisection, and the next retention (what is left of this run plus what came
    after it) extends these lists by the new candidates instead of starting again.

    `history`, `length`, `last` and `history_ids` describe the history a compaction installed (this
    run, its compaction item and any initial context injected among them, all without calls or
    outputs) and its item ids: `follows` tells whether a history is that list, only appended to since.
    """

    def __init__(self) -> None:
        self._fill([])
        self.forget()

    def _fill(self, candidates: list[CodexItem]) -> None:
        self.items: list[CodexItem] = []
        self.costs, self.estimates, self.id_starts = [0], [0], [0]
        self.ids: list[str] = []
        self.messages: list[Message] = []
        self.start = 0
        self.extend(candidates)

    def forget(self) -> None:
        """No installed history is followed (the next retention starts from the whole history)."""
        self.history: list[CodexItem] | None = None
        self.length = 0
        self.last: CodexItem | None = None
        self.history_ids: list[str] = []

    def follow(self, history: list[CodexItem], history_ids: list[str]) -> None:
        """`history` (item ids `history_ids`) is the installed history: the retained run, its compaction
        item and initial context, without calls or outputs (candidates only among the run)."""
        self.history, self.length, self.history_ids = history, len(history), history_ids
        self.last = history[-1] if history else None

    def follows(self, history: list[CodexItem]) -> bool:
        """Whether `history` is the installed history with items appended (the prompt view's rule)."""
        n = self.length
        return history is self.history and len(history) >= n and (not n or history[n - 1] is self.last)

    def restart(self, candidates: list[CodexItem]) -> None:
        """Start again from `candidates` (the whole history's)."""
        self.forget()
        self._fill(candidates)

    def extend(self, candidates: list[CodexItem]) -> None:
        """The candidates that came after the retained run, in order."""
        self.items += candidates
        for sums, values in (
            (self.costs, map(_RETENTION_COST, candidates)),
            (self.estimates, map(_ESTIMATE, candidates)),
            (self.id_starts, map(len, map(_ITEM_IDS, candidates))),
        ):
            sums += accumulate(values, initial=sums.pop())
        self.ids += chain.from_iterable(map(_ITEM_IDS, candidates))
        self.messages += map(_MESSAGE, candidates)

    @property
    def retained_ids(self) -> list[str]:
        """The item ids of the retained run, in order (a new list)."""
        return self.ids[self.id_starts[self.start] :]

    def retain(self, budget: int) -> list[CodexItem]:
        """§4.3 steps 2-3 over the candidates from `start` on: newest first within `budget`; the crossing
        message is truncated (images kept, empty result discarded) and zeroes the budget; a
        non-message that does not fit is skipped without zeroing it. The kept candidates become the
        retained run; returns them in order (a new list)."""
        items, costs, lo = self.items, self.costs, self.start
        end = first = len(items)
        remaining = budget
        spans: list[tuple[int, int]] = []  # kept ranges of `items`, newest first
        truncated: CodexItem | None = None  # the crossing message truncated (it sits right before the last span)
        while remaining and end > lo:
            # the oldest candidate from which all up to `end` fit in what remains (the costs increase: each is at least 1)
            first = bisect_left(costs, costs[end] - remaining, lo, end)
            spans.append((first, end))
            remaining -= costs[end] - costs[first]
            if not remaining or first == lo:
                break  # nothing more is kept, or nothing is left
            item = items[first - 1]
            if item.type == "message":
                text = truncate_middle(item.text, remaining * 4)
                if text or item.images:
                    truncated = replace(item, text=text)
                remaining = 0
            end = first - 1
        if len(spans) > 1:  # a skipped non-message inside: the kept candidates are no suffix, start again from them
            kept = [*([truncated] if truncated is not None else []), *chain.from_iterable(items[a:b] for a, b in reversed(spans))]
            self._fill(kept)
            return kept
        self.start = first
        if truncated is not None:  # it replaces the crossing candidate; the sums after it stay as they are
            k = self.start = first - 1
            items[k], self.messages[k] = truncated, truncated.message
            self.costs[k] = costs[first] - truncated.retention_cost
            self.estimates[k] = self.estimates[first] - truncated.estimate
        if self.start > 1024 and 2 * self.start > len(items):
            self._drop_before_start()
        return self.items[self.start :]

    def _drop_before_start(self) -> None:
        """Forget the candidates before the retained run (the sums stay absolute; the id offsets move)."""
        s = self.start
        skipped = self.id_starts[s]
        self.items, self.messages, self.ids = self.items[s:], self.messages[s:], self.ids[skipped:]
        self.costs, self.estimates = self.costs[s:], self.estimates[s:]
        self.id_starts = [n - skipped for n in self.id_starts[s:]]
        self.start = 0


def select_user_messages(messages: Sequence[CodexItem], budget: int) -> list[CodexItem]:
    """`build_compacted_history_with_limit` (§2.2 step 3): newest first within `budget`
    ceil(bytes/4) tokens; the crossing message is middle-truncated to the remainder, then stop.
    Images are dropped; chronological order is restored."""
    remaining = budget
    kept: list[CodexItem] = []
    for item in reversed(messages):
        if remaining == 0:
            break
        tokens = item.text_tokens
        if tokens <= remaining:
            # an item without images is kept as it is (its estimate and message are not built again)
            kept.append(replace(item, images=()) if item.images else item)
            remaining -= tokens
        else:
            kept.append(replace(item, text=truncate_middle(item.text, remaining * 4), images=()))
            break
    kept.reverse()
    return kept


def initial_context_index(history: Sequence[CodexItem]) -> int:
    """Where `insert_initial_context` puts the initial context (`compact.rs` L559-614): before the last
    real user message or agent message that is not a `FINAL_ANSWER` completion (§2.2 step 5 names only
    the real user message; upstream, which wins, counts such an agent message too); else before the
    summary; else before the last compaction item; else at the end."""
    for test in (_is_context_anchor, lambda i: i.summary, lambda i: i.type == "compaction"):
        index = next((n for n in range(len(history) - 1, -1, -1) if test(history[n])), None)
        if index is not None:
            return index
    return len(history)


def _is_context_anchor(item: CodexItem) -> bool:
    """A real user message, or an agent message but a `FINAL_ANSWER` completion (`compact.rs` L566-575)."""
    return item.is_real_user or (item.type == "agent_message" and not item.text.startswith(FINAL_ANSWER_PREFIX))


def insert_initial_context(history: list[CodexItem], context: Sequence[CodexItem]) -> list[CodexItem]:
    """`insert_initial_context_before_last_real_user_or_summary` (§2.2 step 5), at `initial_context_index`."""
    index = initial_context_index(history)
    return history[:index] + list(context) + history[index:]


# --------------------------------------------------------------------------- turn context updates
MODEL_SWITCH_TAG = "<model_switch>"


def is_model_switch(item: CodexItem) -> bool:
    """The developer message a model switch adds to the next turn's context."""
    return item.type == "message" and item.role == "developer" and item.text.lstrip().startswith(MODEL_SWITCH_TAG)


def context_slot(item: CodexItem) -> tuple[str | None, str]:
    """Which part of the initial context a contextual message is: its role and leading tag
    (``<environment_context>``, ``<permissions instructions>``...) or, without a tag, its first line."""
    text = item.text.lstrip()
    if text.startswith("<"):
        end = min((i for i in (text.find(">"), text.find(" "), text.find("\n")) if i > 0), default=len(text))
        return item.role, text[:end]
    return item.role, text.split("\n", 1)[0]


#: The contextual fragments that are Codex's initial context and its turn context updates, by the marker their text
#: starts with (stripped, any case). Upstream renders them from the session's world state: in full as the initial
#: context (`build_initial_context_with_world_state`, openai/codex:codex-rs/core/src/session/mod.rs@3aae5d8
#: L3469-3665) and as the changed sections when a turn starts (`record_context_updates_and_set_reference_context_item`,
#: mod.rs L3754-3808, after the pre-turn compaction: session/turn.rs L169-224). The markers are the
#: `matches_legacy_fragment` of each world-state section (core/src/context/world_state/*.rs@3aae5d8; the skills and
#: git-attribution extensions' sections, ext/skills/src/world_state.rs L42, ext/git-attribution/src/world_state.rs
#: L7-8), which are upstream's rollback-trimmable developer prefixes (`CONTEXTUAL_DEVELOPER_PREFIXES`,
#: core/src/event_mapping.rs@3aae5d8 L40-59) but for the reminders among those (`<token_budget>`, the wrapper older
#: versions gave the token-budget reminder, and `<rollout_budget>`, session/rollout_budget.rs L8-20), which a sampling
#: step records when it happens; on the user side AGENTS.md (`UserInstructions`, also its older `<user_instructions>`
#: wrapper), `<environment_context>` (`EnvironmentsState`) and the `<recommended_plugins>` list the full render adds
#: (mod.rs L3500-3525).
#:
#: A client's additional context (`<external_KEY>…</external_KEY>`, `is_turn_input`) is the input of the turn it comes
#: with. Every other contextual fragment (`contextual_user_message.rs@3aae5d8` L18-45: `<user_shell_command>`,
#: `<turn_aborted>`, `<subagent_notification>`, `<skill>`, hook prompts, internal context, warnings), and every
#: synthetic message of another format, is a history item recorded when it happens (`record_conversation_items`, e.g.
#: a `/shell` turn: core/src/tasks/user_shell.rs@3aae5d8 L447-469; a `<turn_aborted>` marker: core/src/tasks/mod.rs
#: L912-925; a sub-agent's notification: core/src/agent/control.rs L563-569 `inject_user_message_without_turn`; hook
#: results drained before the pre-turn compaction: turn.rs L160-161): a compaction takes it with the rest of the
#: history (compact.rs L247-251 `clone_history`).
WORLD_STATE_MARKERS: dict[str, tuple[str, ...]] = {
    "developer": (
        "<permissions instructions>", "approved command prefix saved:", "<model_switch>", "<apps_instructions>",
        "<collaboration_mode>", "<multi_agent_mode>", "<environments_instructions>", "<git_attribution>",
        "<plugins_instructions>", "<realtime_conversation>", "<skills_instructions>", "<tools>", "<personality_spec>",
        "<context_window>", "<context_window_guidance>",
    ),
    "user": ("# agents.md instructions", "<user_instructions>", "<environment_context>", "<recommended_plugins>"),
}


def is_world_state_fragment(item: CodexItem) -> bool:
    """A contextual message that is one of Codex's world-state fragments (`WORLD_STATE_MARKERS`)."""
    head = item.text.lstrip()[:64].lower()
    return item.type == "message" and head.startswith(WORLD_STATE_MARKERS.get(item.role or "", ()))


def is_turn_input(item: CodexItem) -> bool:
    """A client's additional context, `<external_KEY>VALUE</external_KEY>` in a user message
    (`AdditionalContextUserFragment::matches_text`, openai/codex:codex-rs/context-fragments/src/additional_context.rs
    @3aae5d8 L37-49): the input of the turn it comes with, ahead of its user message (`task_input`,
    core/src/session/handlers.rs L249-263), which the turn records after its pre-turn compaction and context updates
    (`run_hooks_and_record_inputs`, session/turn.rs L169-245). It is no initial context: nothing re-injects it."""
    if not (item.contextual and item.type == "message" and item.role == "user"):
        return False
    text = item.text.strip()
    key, closed, rest = text[len("<external_"):].partition(">") if text.startswith("<external_") else ("", "", "")
    return bool(closed) and rest.endswith(f"</external_{key}>")


def is_initial_context(item: CodexItem) -> bool:
    """A contextual message recorded before the first user turn that is part of the initial context: the developer
    bundle (every developer message: its developer instructions have no tag, mod.rs L3486-3493) and the world-state
    user fragments, but a `<model_switch>`, the diff of one turn (`update_context`). Anything else recorded then (a
    `/shell` turn may run before the first prompt, user_shell.rs L459-461) is history: never re-injected after a
    compaction."""
    if not (item.contextual and item.type == "message") or is_model_switch(item):
        return False
    return item.role == "developer" or is_world_state_fragment(item)


def is_context_update(item: CodexItem, context: Sequence[CodexItem]) -> bool:
    """A contextual message recorded after the first user turn that is a context update the next turn records after
    its pre-turn compaction: a world-state fragment, or a restatement of an entry of the initial context (its role
    and `context_slot`; a transcript records the full initial context again after its own compactions, of which the
    Codex importer keeps only the changed entries, scenarios/codex_rollout.py `_RolloutReader.reinjected`)."""
    if not (item.contextual and item.type == "message"):
        return False
    if is_world_state_fragment(item):
        return True
    slot = context_slot(item)
    return any(context_slot(entry) == slot for entry in context)


def update_context(context: Sequence[CodexItem], updates: Sequence[CodexItem]) -> list[CodexItem]:
    """The initial context after a turn's context updates: an update replaces the entry of its slot in place; an
    update of a world-state section the context has no entry for is that section's state from now on, so the full
    render includes it (`build_initial_context_with_world_state`, mod.rs L3469-3665): it joins the entries of its
    role (a developer section the developer bundle, a user one the contextual user message). A `<model_switch>`
    is the model section's diff of that turn alone (core/src/context/world_state/model.rs): never added."""
    out = list(context)
    for update in updates:
        slot = context_slot(update)
        index = next((n for n, item in enumerate(out) if context_slot(item) == slot), None)
        if index is not None:
            out[index] = update
        elif not is_model_switch(update):
            out.insert(_end_of_role(out, update.role), update)
    return out


def _end_of_role(context: Sequence[CodexItem], role: str | None) -> int:
    """Where a new entry of `role` goes: after the context's last entry of that role; a developer entry with none
    before the user entries (the developer bundle comes first, mod.rs L3629-3649), a user entry at the end."""
    last = next((n for n in range(len(context) - 1, -1, -1) if context[n].role == role), None)
    if last is not None:
        return last + 1
    if role == "developer":
        return next((n for n, item in enumerate(context) if item.role != "developer"), len(context))
    return len(context)


def with_window_section(context: Sequence[CodexItem], window: CodexItem, guidance: CodexItem | None) -> list[CodexItem]:
    """Token-budget initial context (§5.1): the developer bundle, then `<context_window>`, then the contextual user
    messages (environment, AGENTS.md). The `<context_window_guidance>` fragment is a section of the developer
    bundle (`ContextWindowGuidanceState`, a world-state section: openai/codex:codex-rs/core/src/session/
    world_state.rs@3aae5d8 L118-128; `build_initial_context_with_world_state` puts world-state developer fragments in
    `developer_sections`, mod.rs L3607-3627), while `<context_window>` requires a message of its own that follows the
    bundle (`separate_developer_sections`, L3563-3604, L3629-3641): the guidance precedes the window (upstream test
    `token_budget_guidance_precedes_standalone_context_window`, core/tests/suite/token_budget.rs L239-285). A
    transcript's bundle may be one item, so the guidance is its own developer message at the bundle's end."""
    developer = [i for i in context if i.role == "developer"]
    bundle = [*developer, guidance] if guidance is not None else developer
    return [*bundle, window, *(i for i in context if i.role != "developer")]

"""Provider-neutral requests: `Message`, `ToolCall` and `Request`, as strategies build them.

A strategy turns its view of the history into a `Request`: messages in one of the roles below,
each carrying the ids of the transcript items it was built from (so every metric can trace which
recorded facts are still in context), plus the strategy's own token estimate at decision time.

Roles: ``system``, ``developer``, ``user``, ``assistant`` (text and/or `tool_calls`), ``tool``
(a tool result, with `tool_call_id`), ``reasoning`` (a model reasoning item, kept by agents that
replay it) and ``compaction`` (an opaque server-side compaction item, Codex remote).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import chain
from operator import attrgetter
from typing import Any

from compaction_bench.log_view import as_messages
from compaction_bench.transcript import Attachment, Item

ROLES = ("system", "developer", "user", "assistant", "tool", "reasoning", "compaction")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True, init=False)
class Message:
    """One message of a request. Frozen and hashable, so token counts memoize per message.

    Its `__init__` is written out: it stores each field through its slot, where the generated one of a
    frozen dataclass looks each name up in `object.__setattr__` and calls `__post_init__` (a replay
    builds tens of thousands of messages; this halves what each costs). The signature is the fields'."""

    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    item_ids: tuple[str, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    name: str | None = None
    is_error: bool = False
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __init__(
        self,
        role: str,
        content: str = "",
        tool_calls: tuple[ToolCall, ...] = (),
        tool_call_id: str | None = None,
        item_ids: tuple[str, ...] = (),
        attachments: tuple[Attachment, ...] = (),
        name: str | None = None,
        is_error: bool = False,
    ) -> None:
        if role not in _ROLE_SET:
            raise ValueError(f"unknown message role {role!r}")
        _set_role(self, role)
        _set_content(self, content)
        _set_tool_calls(self, tool_calls)
        _set_tool_call_id(self, tool_call_id)
        _set_item_ids(self, item_ids)
        _set_attachments(self, attachments)
        _set_name(self, name)
        _set_is_error(self, is_error)
        _set_hash(self, None)

    def __hash__(self) -> int:
        # Messages are dictionary keys on every request (token memo, prefix comparison): hash once.
        cached = self._hash
        if cached is None:
            cached = hash(
                (self.role, self.content, self.tool_calls, self.tool_call_id, self.item_ids, self.attachments, self.name, self.is_error)
            )
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        # Field by field, the most telling first (the generated method builds two tuples per comparison).
        if self is other:
            return True
        if other.__class__ is not Message:
            return NotImplemented
        assert isinstance(other, Message)
        return (
            self.content == other.content
            and self.role == other.role
            and self.item_ids == other.item_ids
            and self.tool_calls == other.tool_calls
            and self.tool_call_id == other.tool_call_id
            and self.attachments == other.attachments
            and self.name == other.name
            and self.is_error == other.is_error
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content, "item_ids": list(self.item_ids)}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.attachments:
            out["attachments"] = [{"mime": a.mime, "name": a.name, "size": a.size} for a in self.attachments]
        if self.is_error:
            out["is_error"] = True
        return out



# The slots' own setters, which `Message.__init__` stores each field with (its instances are frozen).
_ROLE_SET = frozenset(ROLES)


def _slot_setter(name: str) -> Callable[[Message, Any], None]:
    setter: Callable[[Message, Any], None] = getattr(Message, name).__set__
    return setter


_set_role, _set_content, _set_tool_calls, _set_tool_call_id, _set_item_ids, _set_attachments, _set_name, _set_is_error, _set_hash = (
    _slot_setter(f.name) for f in fields(Message)
)

def message_from_item(item: Item) -> Message:
    """The plain wire message for one item (strategies with their own rendering build their own)."""
    if item.kind in ("system",):
        role = "developer" if item.meta.get("role") == "developer" else "system"
        return Message(role=role, content=item.text, item_ids=(item.id,), attachments=item.attachments)
    if item.kind == "user":
        return Message(role="user", content=item.text, item_ids=(item.id,), attachments=item.attachments)
    if item.kind == "assistant":
        return Message(role="assistant", content=item.text, item_ids=(item.id,), attachments=item.attachments)
    if item.kind == "reasoning":
        return Message(role="reasoning", content=item.text, item_ids=(item.id,))
    if item.kind == "tool_call":
        call = ToolCall(id=item.call_id or "", name=item.tool_name or "", arguments=item.arguments or "")
        return Message(role="assistant", tool_calls=(call,), item_ids=(item.id,))
    if item.kind == "tool_result":
        return Message(
            role="tool",
            content=item.text,
            tool_call_id=item.call_id,
            item_ids=(item.id,),
            attachments=item.attachments,
            name=item.tool_name,
            is_error=item.is_error,
        )
    raise ValueError(f"item {item.id!r} of kind {item.kind!r} is not model input")


def merge_assistant(messages: list[Message]) -> list[Message]:
    """Fold consecutive assistant text/tool-call messages of one response into one message.

    Chat-style wire formats carry an assistant's text and its tool calls in one message; the texts
    of the folded messages are joined with a newline.
    """
    out: list[Message] = []
    run: list[Message] = []  # an assistant message and the messages with tool calls that follow it
    for message in messages:
        if run and message.role == "assistant" and message.tool_calls:
            run.append(message)
            continue
        if run:
            out.append(fold_run(run))
            run = []
        if message.role == "assistant":
            run = [message]
        else:
            out.append(message)
    if run:
        out.append(fold_run(run))
    return out


def fold_run(run: Sequence[Message]) -> Message:
    """`merge_assistant`'s fold of one run, built once (a run of n calls folded pairwise copied its calls n times)."""
    if len(run) == 1:
        return run[0]
    return replace(
        run[0],
        content="\n".join(m.content for m in run if m.content),
        tool_calls=tuple(chain.from_iterable(m.tool_calls for m in run)),
        item_ids=tuple(chain.from_iterable(m.item_ids for m in run)),
    )



_ITEM_IDS = attrgetter("item_ids")


def message_item_ids(messages: Iterable[Message]) -> Iterator[str]:
    """The item ids `messages` carry, in order (read in C: no Python call per message)."""
    return chain.from_iterable(map(_ITEM_IDS, messages))


@dataclass(frozen=True)
class Request:
    """What a strategy would send to the model now.

    `kind` is ``turn`` for a normal sampling request, ``summary`` for a compaction request and
    ``final`` for the context probed at the end of a session. `estimate_tokens` is the strategy's
    own count (its heuristic, or provider usage plus heuristic) at decision time: token-accuracy
    metrics compare it with the true count of the messages sent.

    `threshold` is the smallest own count at which the strategy's token rule fires: it would compact
    this context (for a ``summary`` request: it would refuse to send it) once `estimate_tokens` is
    at or above it. A rule written `count >= T` reports `T`; a strict rule, `count > T`, reports
    `T + 1` (counts are whole tokens), so that `true_tokens >= threshold` always reads "the true
    count would have fired the rule". It is reported only where that comparison is exact: None
    when no count fires a compaction (automatic compaction off, the check already spent on this
    request), and None when the rule measures something other than the whole context this request
    sends (a part of it, such as Aider's done messages or Codex's body after the prefill), since a
    verdict on a different quantity could be wrong either way.
    """

    #: any sequence on construction; stored as a tuple, or as the `LogView` it was given
    messages: Sequence[Message]
    estimate_tokens: int | None = None
    threshold: int | None = None
    kind: str = "turn"
    max_output_tokens: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: A fork that reads the cache and leaves no entry of its own tail (Claude Code's `skipCacheWrite`): its one
    #: Anthropic breakpoint is on the message before its last, so it writes what is not cached yet up to that
    #: message and nothing after it. Other providers cache prefixes by themselves; there it changes nothing.
    skip_cache_write: bool = False
    #: False: the request asks for no caching where the API lets it, although the agent's other requests do not (Pi's
    #: summary calls since 9b3a2059, `cacheRetention: "none"`): no Anthropic breakpoint, and on GPT-5.6 and later
    #: `prompt_cache_options` in explicit mode without one; there it reads and writes no cache and leaves no entry.
    #: Providers that cache any prefix by themselves ignore it. An agent that never marks an Anthropic breakpoint
    #: says so once (`Strategy.cache_marks`).
    cache_control: bool = True
    #: Under `CacheMarks.SYSTEM_AND_PREFIX`, the number of leading messages whose end the agent marks besides its system
    #: prompt (Aider's `--cache-prompts` marks the chat-files block that follows its history, so its history too).
    cache_prefix_messages: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", as_messages(self.messages))

    def item_ids(self) -> list[str]:
        return list(message_item_ids(self.messages))


    def text(self) -> str:
        """Everything the model would read, as one string (for presence checks)."""
        parts = []
        for m in self.messages:
            if m.content:
                parts.append(m.content)
            for c in m.tool_calls:
                parts.append(f"{c.name} {c.arguments}")
        return "\n".join(parts)

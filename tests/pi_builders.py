"""Builders for hand-made Pi sessions used by the tests/test_pi_*.py files.

`Entries` builds Pi session entries directly (for the cut-point and context unit tests);
`Session` builds canonical transcript items the way a generic importer would (for replays);
`tool_pair_problems` checks the wire rule every provider enforces: each tool call is answered
by a tool result before the next assistant or user message, and each tool result answers a call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.profiles import get_profile
from compaction_bench.request import Message, ToolCall
from compaction_bench.strategies.pi_session_tree import Entry, PiMessage
from compaction_bench.transcript import Item, Transcript, Usage


@dataclass
class Entries:
    """A root-first path of entries; `chars` sizes give exact chars/4 estimates."""

    path: list[Entry] = field(default_factory=list)

    def _add(self, type_: str, message: PiMessage | None = None, **fields) -> Entry:
        entry = Entry(f"e{len(self.path)}", self.path[-1].id if self.path else None, type_, float(len(self.path) + 1), message=message, **fields)
        self.path.append(entry)
        return entry

    def user(self, chars: int) -> Entry:
        return self._add("message", PiMessage(role="user", texts=("u" * chars,), item_ids=(f"item{len(self.path)}",)))

    def assistant(self, chars: int, calls: Sequence[tuple[str, str, dict]] = (), total: int | None = None, stop: str | None = None) -> Entry:
        tool_calls = tuple(ToolCall(cid, name, json.dumps(args, separators=(",", ":"))) for cid, name, args in calls)
        usage = Usage(input=total, total=total) if total is not None else None
        message = PiMessage(
            role="assistant",
            texts=("a" * chars,),
            tool_calls=tool_calls,
            stop_reason=stop or ("toolUse" if calls else "stop"),
            usage=usage,
            item_ids=(f"item{len(self.path)}",),
        )
        return self._add("message", message)

    def result(self, call_id: str, chars: int) -> Entry:
        return self._add("message", PiMessage(role="toolResult", texts=("r" * chars,), tool_call_id=call_id, item_ids=(f"item{len(self.path)}",)))

    def setting(self) -> Entry:
        return self._add("model_change", data={"provider": "x", "modelId": "y"})

    def compaction(self, first_kept: str, summary: str = "S") -> Entry:
        return self._add("compaction", summary=summary, first_kept_id=first_kept)

    @classmethod
    def with_empty_branch_summary(cls) -> Entries:
        """user, an empty branch summary (from e0), assistant | user, assistant: each message 10 tokens (40 chars)."""
        e = cls()
        e.user(40)
        e._add("branch_summary", summary="", from_id="e0")
        e.assistant(40)
        e.user(40)
        e.assistant(40)
        return e


class Session:
    """Canonical transcript items built in order, with recorded usage where given."""

    def __init__(self, timestamps: bool = True) -> None:
        self.items: list[Item] = []
        self.turn = -1
        self.response = -1
        self.clock = 0
        self.timestamps = timestamps

    def _ts(self) -> str | None:
        self.clock += 1
        if not self.timestamps:
            return None
        return f"2026-01-01T00:{self.clock // 60:02d}:{self.clock % 60:02d}.000Z"

    def _add(self, **kw) -> Item:
        item = Item(id=kw.pop("id", f"i{len(self.items)}"), turn=self.turn if self.turn >= 0 else None, timestamp=self._ts(), **kw)
        self.items.append(item)
        return item

    def user(self, text: str) -> Item:
        self.turn += 1
        return self._add(kind="user", text=text)

    def assistant(self, text: str = "", calls: Sequence[tuple[str, str, dict]] = (), total: int | None = None, **meta) -> list[Item]:
        self.response += 1
        usage = Usage(input=total, total=total) if total is not None else None
        specs = ([{"kind": "assistant", "text": text}] if text or not calls else []) + [
            {"kind": "tool_call", "call_id": cid, "tool_name": name, "arguments": json.dumps(args, separators=(",", ":"))}
            for cid, name, args in calls
        ]
        out = []
        for n, spec in enumerate(specs):
            last = n == len(specs) - 1
            out.append(self._add(response=self.response, usage=usage if last else None, meta=meta if n == 0 else {}, **spec))
        return out

    def result(self, call_id: str, text: str, name: str = "read") -> Item:
        return self._add(kind="tool_result", call_id=call_id, tool_name=name, text=text)

    def transcript(self, name: str = "hand-built") -> Transcript:
        return Transcript(id=name, items=tuple(self.items))


class RecordingSummarizer(LLMClient):
    """The default offline summarizer, remembering the `max_tokens` of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.max_tokens: list[int | None] = []

    def complete(self, messages, *, max_tokens=None, **kw) -> LLMResult:
        self.max_tokens.append(max_tokens)
        return super().complete(messages, max_tokens=max_tokens, **kw)


def small_profile(window: int, max_output: int = 128_000):
    """The 64k profile (GPT-5 tokenizer, OpenAI provider) with another window."""
    return replace(get_profile("64k"), name=f"w{window}", context_window=window, max_output=max_output)


def tool_pair_problems(messages: Sequence[Message]) -> list[str]:
    problems: list[str] = []
    pending: set[str] = set()
    known: set[str] = set()
    for n, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id not in known:
                problems.append(f"message {n}: result {message.tool_call_id} without a call")
            pending.discard(message.tool_call_id or "")
            continue
        if message.role in ("assistant", "user") and pending and (message.role == "user" or message.tool_calls or message.content):
            problems.append(f"message {n}: calls {sorted(pending)} not answered before it")
            pending = set()
        for call in message.tool_calls:
            pending.add(call.id)
            known.add(call.id)
    if pending:
        problems.append(f"end: calls {sorted(pending)} not answered")
    return problems

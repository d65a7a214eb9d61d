"""Helpers of the OpenCode tests: a small session builder and the wire tool-pair check."""

from __future__ import annotations

from collections.abc import Sequence

from compaction_bench.request import Message
from compaction_bench.transcript import Attachment, Item, Transcript, Usage


class Session:
    """Builds a transcript turn by turn; every model response gets the usage it is given."""

    def __init__(self, system: str = "You are a coding agent.") -> None:
        self.items: list[Item] = [Item("sys", "system", system)]
        self.turn = -1
        self.response = 0

    def user(self, uid: str, text: str, attachments: Sequence[Attachment] = ()) -> Session:
        self.turn += 1
        self.items.append(Item(uid, "user", text, turn=self.turn, attachments=tuple(attachments)))
        return self

    def tool(self, cid: str, output: str, *, usage: int = 100, name: str = "bash", args: str = '{"cmd":"ls"}') -> Session:
        """One model response with one tool call, then its result."""
        self.items.append(
            Item(f"call-{cid}", "tool_call", call_id=cid, tool_name=name, arguments=args, response=self.response,
                 turn=self.turn, usage=Usage(input=usage, output=10, total=usage))
        )
        self.items.append(Item(f"result-{cid}", "tool_result", output, call_id=cid, tool_name=name, turn=self.turn))
        self.response += 1
        return self

    def say(self, aid: str, text: str, *, usage: int = 100) -> Session:
        """One model response with text only (ends the turn)."""
        self.items.append(
            Item(aid, "assistant", text, response=self.response, turn=self.turn, usage=Usage(input=usage, output=10, total=usage))
        )
        self.response += 1
        return self

    def transcript(self, name: str = "hand-built") -> Transcript:
        return Transcript(name, self.items)


def pair_problems(messages: Sequence[Message]) -> list[str]:
    """Tool results without an earlier call and calls without a result, in one request."""
    calls: set[str] = set()
    answered: set[str] = set()
    out = []
    for m in messages:
        calls.update(c.id for c in m.tool_calls)
        if m.role == "tool":
            if m.tool_call_id not in calls:
                out.append(f"result without call: {m.tool_call_id}")
            answered.add(m.tool_call_id or "")
    out += [f"call without result: {c}" for c in sorted(calls - answered)]
    return out

"""What `chat_messages` sends obeys the providers' pairing and content rules, whatever the strategy's layout.

The contexts are the ones `tests/test_integrity_rules_providers.py` shows the APIs refuse; the
payload built from each must pass the Chat Completions, Anthropic and Gemini pairing checks (litellm
merges consecutive same-role messages for Anthropic and Gemini as the checker does), with unique valid ids.
"""

from __future__ import annotations

import re

import pytest

from compaction_bench.metrics.integrity import check_anthropic, check_gemini, check_openai_chat
from compaction_bench.request import Message, ToolCall
from compaction_bench.wire import EMPTY_TOOL_OUTPUT, chat_messages


def call(*ids: str) -> Message:
    return Message("assistant", tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids))


def result(call_id: str, content: str = "out") -> Message:
    return Message("tool", content, tool_call_id=call_id)


def user(text: str = "go") -> Message:
    return Message("user", text)


def as_messages(payload: list[dict]) -> list[Message]:
    return [
        Message(
            d["role"] if d["role"] != "developer" else "system",
            d.get("content") or "",
            tool_calls=tuple(ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in d.get("tool_calls") or ()),
            tool_call_id=d.get("tool_call_id"),
        )
        for d in payload
    ]


REFUSED = {
    "result after user": [user(), call("a"), user("wait"), result("a")],
    "parallel result after text": [user(), call("a", "b"), result("a"), user("note"), result("b")],
    "duplicate results": [user(), call("a"), result("a"), result("a")],
    "reused id": [user(), call("a"), result("a"), user(), call("a"), result("a")],
    "orphans after a summary cut": [Message("system", "rules"), user("summary"), result("a"), result("b"), Message("assistant", "x")],
    "call without results": [user(), call("a", "b"), user("summary")],
    "result for an earlier call": [user(), call("a"), user("more"), call("b"), result("a"), result("b")],
    "split by reasoning": [user(), call("a", "b"), result("a"), Message("reasoning", "r"), result("b")],
}


@pytest.mark.parametrize("name", list(REFUSED))
@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_the_payload_of_a_refused_layout_is_valid(name, provider):
    payload = chat_messages(REFUSED[name], provider=provider)
    sent = as_messages(payload)
    assert check_openai_chat(sent) == [] and check_anthropic(sent) == [] and check_gemini(sent) == [], payload
    ids = [c.id for m in sent for c in m.tool_calls]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", i) for i in ids)


@pytest.mark.parametrize("output", ["", " ", "\n\t  \n"])
def test_a_blank_tool_output_is_sent_as_no_output(output):
    """Anthropic: "messages: text content blocks must contain non-whitespace text" (anthropics/claude-code#23440);
    Bedrock Converse refuses the same for a tool result's text (NousResearch/hermes-agent#41985, #67978).
    A whitespace-only output says no more than an empty one."""
    payload = chat_messages([user(), call("a"), result("a", output)], provider="anthropic")
    assert payload[-1] == {"role": "tool", "tool_call_id": "a", "content": EMPTY_TOOL_OUTPUT}


def test_an_output_with_text_is_sent_as_it_is():
    payload = chat_messages([user(), call("a"), result("a", "  indented\n")])
    assert payload[-1]["content"] == "  indented\n"

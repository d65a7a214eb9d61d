"""Claude models before Opus 4.5 and Sonnet 4.6 drop the thinking of earlier assistant turns (docs/specs/
anthropic-context-management.md §3): the replay's provider bills a thinking message there only after the last user
message that is not a tool result, and the cache from the first dropped one on is lost. Claude Code 2.1.112 asks to
keep it (docs/specs/claude-code.md §13). The right answers are the docs' rule applied by hand to hand-built requests."""

from __future__ import annotations

import pytest

import compaction_bench as bench
from compaction_bench.profiles import get_profile, strips_earlier_thinking
from compaction_bench.provider import MESSAGE_OVERHEAD, MessageCounter, SimulatedProvider
from compaction_bench.request import Message, Request
from compaction_bench.strategies.claude_code import ClaudeCode, ClaudeCode21
from compaction_bench.tokens import HiddenTokens
from compaction_bench.transcript import Item, Transcript


@pytest.mark.parametrize(
    ("profile", "strips"),
    [
        ("claude-sonnet", True),  # Sonnet 4.5: "Sonnet 4.5 and earlier" drop it
        ("claude-sonnet@32k", True),  # the same model, shrunk
        ("vertex_ai/claude-sonnet-4-5@20250929", True),  # on another provider, the same model
        ("anthropic.claude-sonnet-4-20250514-v1:0", True),  # Bedrock's Sonnet 4
        ("anthropic/claude-haiku-4-5", True),  # "all Haiku models through 4.5"
        ("claude-opus", False),  # Opus 4.5: "Opus 4.5 and later" keep it
        ("anthropic/claude-opus-4-6", False),
        ("anthropic/claude-sonnet-4-6", False),  # "Sonnet 4.6 and later"
        ("64k", False),  # GPT-5's tokenizer and rules: visible thinking is not Anthropic's
        ("deepseek/deepseek-chat", False),
    ],
)
def test_which_models_drop_earlier_turns_thinking(profile, strips):
    assert strips_earlier_thinking(get_profile(profile)) is strips


def test_claude_code_2_1_asks_to_keep_thinking_on_anthropics_api_only_and_base_does_not():
    """2.1.112 `C85`: `clear_thinking_20251015` keep "all" rides on the context-management beta, which it adds on
    Anthropic's API (and Foundry) for names without "claude-3-", never on Bedrock or Vertex AI (`$Q`, `iO_`); 2.0.57
    sends it only behind a remote flag that is off by default."""
    assert ClaudeCode21.keeps_thinking(get_profile("claude-sonnet"))
    assert not ClaudeCode21.keeps_thinking(get_profile("anthropic.claude-sonnet-4-20250514-v1:0"))  # Bedrock
    assert not ClaudeCode21.keeps_thinking(get_profile("vertex_ai/claude-sonnet-4-5@20250929"))
    assert not ClaudeCode.keeps_thinking(get_profile("claude-sonnet"))


S = Message("system", "You follow the house rules. " * 200)
U1 = Message("user", "Fix the parser.", item_ids=("u1",))
R1 = Message("reasoning", "The parser fails on nested brackets; look at the tokenizer first. " * 20, item_ids=("r1",))
A1 = Message("assistant", "Fixed: the tokenizer now tracks depth.", item_ids=("a1",))
U2 = Message("user", "Now add a test.", item_ids=("u2",))
R2 = Message("reasoning", "A test with three levels of nesting covers it.", item_ids=("r2",))
USERS = frozenset({"u1", "u2"})


def shown(provider: MessageCounter, message: Message) -> int:
    """A message's tokens as sent, by hand: framing, its text and its call id (these messages carry no tool calls)."""
    return MESSAGE_OVERHEAD + provider.counter.count(message.content) + provider.counter.count(message.tool_call_id or "")


def test_earlier_turns_thinking_bills_nothing_and_the_current_turns_bills_all():
    provider = SimulatedProvider(get_profile("claude-sonnet"), hidden=HiddenTokens({}, USERS), strip_thinking=True)
    s, u1, r1, a1, u2, r2 = (shown(provider, m) for m in (S, U1, R1, A1, U2, R2))
    turn1 = provider.send(Request((S, U1, R1, A1)))
    assert turn1.true_tokens == s + u1 + r1 + a1  # r1 is the current turn's: it counts
    turn2 = provider.send(Request((S, U1, R1, A1, U2, R2)))
    assert turn2.true_tokens == s + u1 + a1 + u2 + r2  # r1 is an earlier turn's now: dropped; r2 counts
    # The cache holds the first request as the server saw it, r1 included: the two part where r1 was dropped.
    assert turn2.cache.prefix_tokens == s + u1
    assert provider.count((S, U1, R1)) == s + u1 + r1  # no user message after r1: it counts


def test_a_user_message_the_agent_adds_drops_the_thinking_before_it_and_a_tool_result_does_not():
    """Anthropic's rule is per block: "a non-tool-result user block causes prior thinking blocks to be stripped",
    whoever wrote it (a reminder here: no real user item); a tool result keeps the turn going."""
    provider = SimulatedProvider(get_profile("claude-sonnet"), hidden=HiddenTokens({}, USERS), strip_thinking=True)
    call = Message("tool", "3 tests pass", tool_call_id="c1", item_ids=("t1",))
    reminder = Message("user", "<system-reminder>The todo list is empty.</system-reminder>", item_ids=("m1",))
    s, u1, r1, a1, t1, m1 = (shown(provider, m) for m in (S, U1, R1, A1, call, reminder))
    assert provider.count((S, U1, R1, A1, call)) == s + u1 + r1 + a1 + t1
    assert provider.count((S, U1, R1, A1, call, reminder)) == s + u1 + a1 + t1 + m1


def test_a_model_that_keeps_thinking_bills_it_in_every_turn_and_keeps_the_cache():
    provider = SimulatedProvider(get_profile("claude-opus"), hidden=HiddenTokens({}, USERS))
    s, u1, r1, a1, u2 = (shown(provider, m) for m in (S, U1, R1, A1, U2))
    provider.send(Request((S, U1, R1, A1)))
    turn2 = provider.send(Request((S, U1, R1, A1, U2)))
    assert turn2.true_tokens == s + u1 + r1 + a1 + u2
    assert turn2.cache.prefix_tokens == s + u1 + r1 + a1


def test_two_differing_dropped_thinking_messages_share_no_tokens_inside():
    """A dropped thinking message shows nothing, so the prefix two requests share ends before it, not inside it."""
    provider = SimulatedProvider(get_profile("claude-sonnet"), hidden=HiddenTokens({}, USERS), strip_thinking=True)
    other = Message("reasoning", R1.content + " And the lexer.", item_ids=("r1",))
    provider.send(Request((S, U1, R1, A1, U2)))
    second = provider.send(Request((S, U1, other, A1, U2)))
    assert second.cache.prefix_tokens == shown(provider, S) + shown(provider, U1)


def _session() -> Transcript:
    """Two user turns, each thinking before its answer (Anthropic's visible thinking: no encrypted length)."""
    items = [Item("sys", "system", S.content)]
    for n, (user, thinking, answer) in enumerate([(U1, R1, A1), (U2, R2, Message("assistant", "Added."))]):
        items += [
            Item(f"u{n + 1}", "user", user.content, turn=n),
            Item(f"r{n + 1}", "reasoning", thinking.content, response=n, turn=n),
            Item(f"a{n + 1}", "assistant", answer.content, response=n, turn=n),
        ]
    return Transcript("thinking-session", tuple(items))


def _second_turn(strategy: str, profile: str):
    result = bench.replay(_session(), strategy, profile=profile)
    return next(r for r in result.requests if r.kind == "turn" and r.turn == 1)


def test_the_replay_drops_earlier_thinking_for_an_agent_that_does_not_ask_to_keep_it():
    request = _second_turn("none", "claude-sonnet")
    counter = MessageCounter(get_profile("claude-sonnet"))
    dropped = [m for m in request.messages if m.role == "reasoning"]
    assert [m.item_ids for m in dropped] == [("r1",)]  # the first turn's thinking is sent...
    assert request.true_tokens == counter.count(request.messages) - counter.message_tokens(dropped[0])  # ...and bills nothing


def test_the_replay_keeps_earlier_thinking_for_claude_code_2_1_and_on_claude_opus():
    for strategy, profile in (("claude-code-2.1", "claude-sonnet"), ("none", "claude-opus")):
        request = _second_turn(strategy, profile)
        assert any(m.role == "reasoning" for m in request.messages)
        assert request.true_tokens == MessageCounter(get_profile(profile)).count(request.messages), (strategy, profile)


def _thinking_session(steps: int = 12) -> Transcript:
    """One user turn whose every step thinks, then reads a 5,000-word file: enough to compact at a 64k window."""
    items = [Item("sys", "system", S.content), Item("u1", "user", U1.content, turn=0)]
    for n in range(steps):
        items += [
            Item(f"r{n}", "reasoning", f"Step {n}: the next file to read is part {n}.", response=n, turn=0),
            Item(f"c{n}", "tool_call", call_id=f"c{n}", tool_name="Read", arguments=f'{{"file_path": "/src/part{n}.py"}}',
                 response=n, turn=0),
            Item(f"o{n}", "tool_result", " ".join(f"value_{n}_{k} = {k}" for k in range(1_500)), call_id=f"c{n}", turn=0),
        ]
    return Transcript("thinking-steps", tuple(items))


def test_claude_code_2_1s_own_summary_call_asks_to_keep_no_thinking():
    """2.1.112's own summary call turns thinking off, so it carries no keep-all edit: on Sonnet 4.5 all the thinking
    before its compaction prompt is dropped (the fork, sent as the turn is, keeps it). On Opus 4.5 it stays."""
    options = {"compact_cache_prefix": False}
    for profile, kept in (("claude-sonnet@64k", False), ("claude-opus@64k", True)):
        result = bench.replay(_thinking_session(), "claude-code-2.1", profile=profile, options=options)
        summaries = [r for r in result.requests if r.kind == "summary"]
        assert summaries and result.compactions
        assert all(any(m.role == "reasoning" for m in r.messages) is kept for r in summaries), profile


@pytest.mark.parametrize("steps", [2, 5, 8])
def test_the_next_user_message_reads_what_the_turns_opening_request_wrote(steps):
    """When a user message drops the last turn's thinking, the cache from its first thinking on is lost, and what is
    left to read is the prefix through the turn's own user message: the request that opened the turn wrote it at its
    breakpoint. The replay kept only the two newest entries, so after two tool steps that entry was gone and the read
    fell to the system prompt; and a dropped thinking block still counted towards the 20-block lookback, so after seven
    steps (22 blocks counted, 15 on the wire) it was out of reach."""
    from compaction_bench.request import ToolCall

    provider = SimulatedProvider(get_profile("claude-sonnet"), hidden=HiddenTokens({}, frozenset({"u0", "u1", "u2"})), strip_thinking=True)
    history = [Message("system", "House rules. " * 1500), Message("user", "Earlier task " * 2000, item_ids=("u0",)),
               Message("assistant", "Earlier answer " * 2000), Message("user", "Fix the parser.", item_ids=("u1",))]
    through_u1 = sum(shown(provider, m) for m in history)
    provider.send(Request(tuple(history)))
    for n in range(steps):
        history += [Message("reasoning", f"think {n} " * 300),
                    Message("assistant", "", tool_calls=(ToolCall(f"c{n}", "Read", f'{{"n":{n}}}'),)),
                    Message("tool", f"result {n} " * 200, tool_call_id=f"c{n}")]
        provider.send(Request(tuple(history)))
    history += [Message("reasoning", "final think " * 100), Message("assistant", "Fixed."), Message("user", "Now add a test.", item_ids=("u2",))]
    assert provider.send(Request(tuple(history))).cached_tokens == through_u1

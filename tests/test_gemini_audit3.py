"""`gemini-cli` against upstream `google-gemini/gemini-cli@5411f113` on the gemini audit's five findings (s43): the
history coalesced as `getHistory(true)` gives it (with the placeholder after an unanswered tool turn), a failed
summariser call failing its turn, the §10.4 overflow pre-check, function responses named by their calls, and §3's and
§9's threshold on the UI's lagging count. Each expected value is worked out by hand from upstream's rules."""

from __future__ import annotations

from compaction_bench.replay import replay
from compaction_bench.strategies.gemini_cli import INTERRUPTED_RESPONSE
from compaction_bench.transcript import Attachment
from tests.pi_builders import Session

#: the 1m profile's provider with Gemini CLI's check on a 64,000-token limit: compression at a count of 32,000
LIMIT_64K = {"token_limit": 64_000}


def _threshold_compactions(result):
    return [c for c in result.compactions if c.trigger == "threshold"]


def test_a_user_text_sent_with_tool_results_is_no_split_point():
    """`coalesceConsecutiveRoles` (geminiChat.ts@5411f113 L1722-1749) merges the steering text into the function
    responses' content in the history `compress` reads (`chat.getHistory(true)`, chatCompressionService.ts L249;
    upstream's steering hint is a part of that message anyway, useGeminiStream.ts L2134-2142). The history at the
    check before "next" is [start, call c1, (c1's result + "also update the docs"), call c2, c2's result, "done"]:
    its only clean user content is the first, at 0 characters, below 70 % of the total, and the last content is a
    model text, so `findCompressSplitPoint` compresses everything (§4): split 6, nothing kept. Un-merged, the
    steering text (after c1's 40,000 characters, over 70 % of the total) was the split, keeping 4 contents."""
    s = Session()
    s.user("start")
    s.assistant("", calls=[("c1", "read_file", {"path": "a"})], total=1_000)
    s.result("c1", "r" * 40_000, name="read_file")
    s.user("also update the docs")
    s.assistant("", calls=[("c2", "read_file", {"path": "b"})], total=1_000)
    s.result("c2", "small", name="read_file")
    s.assistant("done", total=40_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded", options=LIMIT_64K)
    [compaction] = _threshold_compactions(result)
    assert (compaction.details["split"], compaction.details["kept_contents"]) == (6, 0)
    assert [m.content for m in compaction.after if m.role == "user"][-1] == "next"  # the pending message only
    # the request that carried the steering text sent it after the result, as before
    step1 = [m for m in result.turn_requests[1].messages if m.role in ("tool", "user")]
    assert [(m.role, m.tool_call_id or m.content) for m in step1[-2:]] == [("tool", "c1"), ("user", "also update the docs")]


def test_a_new_message_after_an_unanswered_tool_turn_follows_the_placeholder_and_stays_a_split_point():
    """A response that brought nothing leaves the history on c1's result; the next user message is no function
    response, so `closeUnansweredToolResponseTurn` (geminiChat.ts@5411f113 L450-458, L768-784, since 56f9688b30) puts
    the model placeholder "[The previous response was interrupted before it completed.]" between them before the
    request is sent. The history at the check before "next" is then [start, call c1, c1's result, placeholder, "try
    again", call c2, c2's result, "done"]: clean user contents 0 and 4, and 4 follows c1's 40,000 characters, over
    70 % of the total: split 4, 4 contents kept (coalescing without the placeholder would merge "try again" into c1's
    result and compress everything; un-merged the split was 3, no placeholder)."""
    s = Session()
    s.user("start")
    s.assistant("", calls=[("c1", "read_file", {"path": "a"})], total=1_000)
    s.result("c1", "r" * 40_000, name="read_file")
    s.assistant("", total=1_000)  # nothing came back
    s.user("try again")
    s.assistant("", calls=[("c2", "read_file", {"path": "b"})], total=1_000)
    s.result("c2", "small", name="read_file")
    s.assistant("done", total=40_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    # the recorded counts throughout (the placeholder makes the context differ from the recording's)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded-always", options=LIMIT_64K)
    sent = result.turn_requests[2].messages
    assert [(m.role, m.content) for m in sent[-2:]] == [("assistant", INTERRUPTED_RESPONSE), ("user", "try again")]
    assert sent[-3].role == "tool" and sent[-3].tool_call_id == "c1"
    [compaction] = _threshold_compactions(result)
    assert (compaction.details["split"], compaction.details["kept_contents"]) == (4, 4)
    assert compaction.after[2].role == "user" and compaction.after[2].content == "try again"


def test_a_message_after_an_interrupted_tool_turn_follows_the_placeholder():
    """The user interrupts a turn (the `aborted` marker) while c2 runs: upstream the cancelled turn's responses are
    added to the history unsent (useGeminiStream.ts@5411f113 L2063-2099), so the next message is a new one after an
    unanswered tool turn and follows the placeholder (geminiChat.ts L450-458, L768-784), not a steering hint merged
    into c1's result. The history at the check before "next" is [start, calls c1 c2, c1's result, placeholder, the
    message, call c3, c3's result, "done"]: split 4 (after c1's 40,000 characters), 4 contents kept."""
    s = Session()
    s.user("start")
    s.assistant("", calls=[("c1", "read_file", {"path": "a"}), ("c2", "run_shell_command", {"command": "sync"})], total=1_000)
    s.result("c1", "r" * 40_000, name="read_file")
    s._add(kind="marker", text="interrupted by the user", meta={"event": "aborted"})
    s.user("I interrupted that sync on purpose")
    s.assistant("", calls=[("c3", "read_file", {"path": "b"})], total=1_000)
    s.result("c3", "small", name="read_file")
    s.assistant("done", total=40_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded-always", options=LIMIT_64K)
    sent = result.turn_requests[1].messages
    assert [(m.role, m.content) for m in sent[-2:]] == [("assistant", INTERRUPTED_RESPONSE), ("user", "I interrupted that sync on purpose")]
    [compaction] = _threshold_compactions(result)
    assert (compaction.details["split"], compaction.details["kept_contents"]) == (4, 4)


def test_a_summary_call_that_does_not_fit_fails_the_turn_and_latches_nothing():
    """The summariser's error is thrown out of `tryCompressChat` and `processTurn` (client.ts@5411f113 L689, L1206;
    baseLlmClient.ts L395-421): the turn fails before its request is sent, and only an inflated result latches
    (L1216-1221). On a 32,000 window, a count of 20,000 (over 0.5 × 32,000) fires before "next"; the history ends on
    a model text, so all of it is summarised, and with the compression prompt the summary request is over the window
    while the turn's request alone would fit. The turn is refused by the agent (not sent, not a provider overflow);
    the final context's check tries again (no latch) and fails the same way."""
    s = Session()
    s.user("start")
    s.assistant("", calls=[("c1", "read_file", {"path": "a"})], total=1_000)
    s.result("c1", "0 1 2 3 4 5 6 7 8 9\n" * 1_590, name="read_file")
    s.assistant("done", total=20_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="32k", usage="recorded")
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert len(summaries) == 2 and all(r.overflow and r.true_tokens > 32_000 for r in summaries)
    turn = result.turn_requests[2]
    assert turn.refused and turn.true_tokens <= 32_000
    assert turn.error["message"].startswith("chat compression failed, the turn is not sent")
    assert result.final.refused
    assert not result.compactions


def test_a_request_estimated_over_what_the_window_has_left_is_not_sent():
    """§10.4 (client.ts@5411f113 L696-715): `remaining = tokenLimit − lastPromptTokenCount` = 64,000 − 60,000 = 4,000
    (the check, at 1.0 × 64,000, does not fire), and the message is estimated (tokenCalculation.ts L83-113):
    "read_file" 9/4 + JSON.stringify({output: n × "x"}) (13 + n)/4, floored. n = 15,978 gives 4,000, not over: sent;
    n = 15,982 gives 4,001: `ContextWindowWillOverflow`, the agent sends nothing (the 1m provider would have served
    it)."""
    options = {**LIMIT_64K, "compression_threshold": 1.0}
    outcomes = {}
    for n in (15_978, 15_982):
        s = Session()
        s.user("start")
        s.assistant("", calls=[("c1", "read_file", {"path": "a"})], total=60_000)
        s.result("c1", "x" * n, name="read_file")
        s.assistant("done", total=1_000)
        turn = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded", options=options).turn_requests[1]
        outcomes[n] = (turn.refused, turn.overflow)
        if turn.refused:
            assert turn.error["message"] == ("ContextWindowWillOverflow: the request's estimated 4,001 tokens are more "
                                             "than the 4,000 the window has left")
    assert outcomes == {15_978: (False, False), 15_982: (True, True)}


def test_a_message_with_a_file_is_counted_by_the_provider_for_the_pre_check():
    """`calculateRequestTokenCount` (tokenCalculation.ts@5411f113 L154-186) asks `countTokens` when a part of the
    message is `inlineData`: a screenshot the local estimate puts at 3,000 tokens (§10.2) is the profile's 765 for the
    1m provider. With 2,000 tokens left the message is sent (the estimate alone, 3,007, would refuse it); with 500 left
    it is refused."""
    image = Attachment("image/png", "screen.png", 40_000)
    options = {**LIMIT_64K, "compression_threshold": 1.0}
    refused = {}
    for remaining in (2_000, 500):
        s = Session()
        s.user("start")
        s.assistant("ok", total=64_000 - remaining)
        s._add(kind="user", text="what is wrong on this screen?", attachments=(image,))
        s.assistant("a typo", total=1_000)
        refused[remaining] = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded", options=options).turn_requests[1].refused
    assert refused == {2_000: False, 500: True}


def test_a_result_without_a_tool_name_is_named_by_its_call():
    """Upstream a function response carries the called tool's name (tool-executor.ts@5411f113 L213-253), and §9
    (L217-290) truncates the shell tool's and an MCP tool's outputs by it. Claude Code's and Codex's results name no
    tool, only their calls: a `Bash` or `mcp__…` output of 60,000 characters is cut to 8,000 + 32,000 (64,000 window,
    threshold min(4 × 64,000, 40,000)), saved by the call id under the tool's name, and the response is named."""
    for tool, saved in (("Bash", "bash_c1.txt"), ("mcp__github__get_file_contents", "mcp__github__get_file_contents_c1.txt")):
        s = Session()
        s.user("look")
        s.assistant("", calls=[("c1", tool, {"q": "x"})])
        s._add(kind="tool_result", call_id="c1", text="x" * 60_000)  # no tool name, as those importers write it
        s.assistant("done")
        result = replay(s.transcript(), "gemini-cli", profile="64k")
        [message] = [m for m in result.turn_requests[1].messages if m.role == "tool"]
        header = message.content.split("\n", 1)[0]
        assert header.startswith("Output too large. Showing first 8,000 and last 32,000 characters.") and header.endswith(saved)
        assert message.name == tool


def test_the_truncation_threshold_reads_the_count_the_last_request_was_sent_with():
    """`getTruncateToolOutputThreshold()` = min(4 × (tokenLimit − uiTelemetryService.getLastPromptTokenCount()), 40,000)
    (config.ts@5411f113 L3794-3801). The UI's count is copied from the chat's on each streamed event of a request
    (client.ts L838), before the response's `promptTokenCount` reaches the chat (geminiChat.ts L1574-1579): it is the
    count the request was sent with. The request answered "run it" was sent at 1,000 and recorded 60,000: when c2's
    shell output (30,000 characters) comes, §9's threshold is 4 × (64,000 − 1,000) → 40,000, so it stays whole (the
    chat's 60,000 would give 16,000); at the next check (60,000 ≥ 32,000) §3 cuts c1 (15,000 tokens, over a 1,000
    budget) to 8,000 + 32,000 characters, not 3,200 + 12,800."""
    s = Session()
    s.user("start")
    s.assistant("ok", total=1_000)
    s.user("background " + "w " * 60_000)
    s.assistant("noted", total=1_000)
    s.user("now look")
    s.assistant("looking", calls=[("c1", "read_file", {"path": "a"})], total=1_000)
    s.result("c1", "r " * 30_000, name="read_file")
    s.assistant("run it", calls=[("c2", "run_shell_command", {"command": "make"})], total=60_000)
    s.result("c2", "s" * 30_000, name="run_shell_command")
    s.assistant("done", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded",
                    options={**LIMIT_64K, "function_response_token_budget": 1_000})
    [compaction] = _threshold_compactions(result)
    tools = {m.tool_call_id: m.content for m in compaction.after if m.role == "tool"}
    assert tools["c1"].startswith("Output too large. Showing first 8,000 and last 32,000 characters.")
    assert tools["c2"] == "s" * 30_000

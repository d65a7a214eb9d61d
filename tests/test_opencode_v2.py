"""`opencode-v2` on hand-built sessions against upstream's newest V2 core
(`anomalyco/opencode:packages/core/src/session/compaction.ts@031a4a9c`, `runner/llm.ts@008d5715`): the trigger
``estimateTokens >= min(limit.input - buffer, context - max(min(limit.output, 32,000), buffer))`` on the last
response's usage (L555-570, L140-185), the tail of whole records from a user message (`findTailStart`, L281-312),
the summary request on the normal history with its template check and one reminder (L397-543), and overflow
recovery only with `auto` on (llm.ts L256). Every expected number is upstream's rule worked out by hand.

Most sessions use `usage="recorded-always"`, so the anchor's usage is the number each response is given here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.opencode_components import Estimator, PartsView, Renderer, SessionStore, part_tokens
from compaction_bench.transcript import Attachment, Item
from tests.test_opencode_helpers import Session, pair_problems

#: output 1,000 and buffer 1,000: the ceiling is context - 1,000; no tool definitions (`[]`: nothing to add)
SMALL = {"output_limit": 1_000, "buffer": 1_000, "tools_json_chars": 2}


def long_session() -> Session:
    # serialized: "[User]: A…" 20,008 chars (5,002 estimated tokens), "[Assistant]: B…" 20,013 (5,003),
    # "[User]: C…" (5,002), "[Assistant]: D…" (5,003), "[User]: E…" 4,008 (1,002)
    return (
        Session()
        .user("u0", "A" * 20_000).say("a0", "B" * 20_000, usage=5_000)
        .user("u1", "C" * 20_000).say("a1", "D" * 20_000, usage=20_000)
        .user("u2", "E" * 4_000).say("a2", "Done.")
    )


def run(session: Session, **options):
    return replay(session.transcript(), "opencode-v2", profile="64k", usage="recorded-always", options={**SMALL, **options})


def turn_requests(result):
    return [r for r in result.requests if r.kind == "turn"]


class ScriptedSummarizer(LLMClient):
    """A stand-in for the summarizing model: answers with the given (text, finish reason) pairs in turn, from
    the first again after the last, and keeps what it was sent."""

    def __init__(self, *replies: tuple[str, str]) -> None:
        super().__init__()
        self.replies = list(replies)
        self.sent: list[list] = []
        self.max_tokens: list[int | None] = []

    def complete(self, messages, *, max_tokens=None, purpose="summary", **kw) -> LLMResult:
        text, finish = self.replies[len(self.sent) % len(self.replies)]
        self.sent.append(list(messages))
        self.max_tokens.append(max_tokens)
        return LLMResult(text=text, model="scripted", purpose=purpose, finish_reason=finish)


# ----------------------------------------------------------------------------- the trigger (L555-570)
@pytest.mark.parametrize(
    ("profile", "ceiling"),
    [
        ("claude-sonnet", 200_000 - max(min(64_000, 32_000), 20_000)),  # 168,000: no input limit
        ("gpt-5", min(272_000 - 20_000, 400_000 - max(min(128_000, 32_000), 20_000))),  # 252,000: the input limit's
        ("128k", 128_000 - max(min(64_000, 32_000), 20_000)),  # 96,000 (output: half the window)
        ("1m", 1_000_000 - max(min(128_000, 32_000), 20_000)),  # 968,000
    ],
)
def test_threshold_is_upstreams_prompt_ceiling(profile, ceiling):
    result = replay(Session().user("u0", "hello").say("a0", "hi").transcript(), "opencode-v2", profile=profile,
                    options={"tools_json_chars": 2})
    assert {r.threshold for r in turn_requests(result)} == {ceiling}
    assert ceiling in (168_000, 252_000, 96_000, 968_000)


def test_compacts_when_the_estimate_reaches_the_ceiling_not_before():
    # The second request: a0's usage 5,000 + 10 output, plus u1's text (400 characters: 100); a0's own text is
    # what the usage measured. 5,110 >= a ceiling of 5,110 compacts (`>=`, L569); one more, and it does not.
    session = Session().user("u0", "hello").say("a0", "hi", usage=5_000).user("u1", "x" * 400).say("a1", "ok")
    at = run(session, context_limit=6_110)
    first, second = turn_requests(at)[:2]
    assert first.estimate_tokens == 6 + 1  # no response yet: the system prompt (23 chars) and "hello"
    ((compaction),) = at.compactions
    assert (compaction.trigger, compaction.step, compaction.estimate_tokens, compaction.threshold) == ("threshold", 1, 5_110, 5_110)
    # the request built from the checkpoint is not checked again ("run the completed checkpoint", L558-560)
    assert second.threshold is None and second.messages[1].content.startswith("<conversation-checkpoint>")
    under = run(session, context_limit=6_111)
    assert under.compactions == [] and turn_requests(under)[1].estimate_tokens == 5_110
    assert turn_requests(under)[1].threshold == 5_111


def test_the_estimate_is_the_anchors_usage_and_the_parts_after_it():
    # a0 answered with a call (usage 1,000 + 10); its result (4,000 chars: 1,000) is not in its usage; then an
    # image (1,500, L40) and "see" (1). The call itself (name and input) is part of a0's measured prompt.
    session = (Session().user("u0", "hello").tool("c0", "x" * 4_000, usage=1_000)
               .user("u1", "see", attachments=[Attachment("image/png", "shot.png", size=300_000)]).say("a1", "ok"))
    requests = turn_requests(run(session, context_limit=100_000))
    assert requests[1].estimate_tokens == 1_010 + 1_000 + 1 + 1_500
    pdf = (Session().user("u0", "hello").say("a0", "hi", usage=1_000)
           .user("u1", "read", attachments=[Attachment("application/pdf", "spec.pdf", size=300_000)]).say("a1", "ok"))
    assert turn_requests(run(pdf, context_limit=100_000))[1].estimate_tokens == 1_010 + 1 + 2_000  # L41


def test_the_tool_definitions_count_toward_the_trigger_and_are_reported_apart():
    # 402 characters of tools: round(400 / 4) = 100 tokens. The count 5,110 + 100 reaches a ceiling of 5,210
    # (context 6,210); both are reported net of the tools: estimate 5,110, threshold 5,110.
    session = Session().user("u0", "hello").say("a0", "hi", usage=5_000).user("u1", "x" * 400).say("a1", "ok")
    fired = run(session, context_limit=6_210, tools_json_chars=402)
    assert [(c.step, c.estimate_tokens, c.threshold) for c in fired.compactions] == [(1, 5_110, 5_110)]
    quiet = run(session, context_limit=6_211, tools_json_chars=402)
    assert quiet.compactions == [] and turn_requests(quiet)[1].threshold == 5_111


# ----------------------------------------------------------------------------- the tail (L281-312)
def test_the_tail_starts_at_a_user_message_and_keeps_whole_records():
    # Step 2: a1's usage 20,000 + 10 + "E"*4,000 (1,000) = 21,010 >= 15,000. Newest first within 15,000: u2
    # (1,002), a1 (6,005), u1 (11,007); a0 would make 16,010. The tail starts at u1, a user message: a1 is kept
    # whole (no cut inside a message), u0 and a0 are summarized.
    result = run(long_session(), context_limit=16_000)
    (compaction,) = result.compactions
    assert (compaction.step, compaction.estimate_tokens, compaction.details["tail"]) == (2, 21_010, "user-boundary")
    assert compaction.summarized_ids == ("u0", "a0")
    checkpoint = result.final.messages[1]
    assert checkpoint.item_ids == ("u1", "a1", "u2")
    recent = "[User]: " + "C" * 20_000 + "\n\n[Assistant]: " + "D" * 20_000 + "\n\n[User]: " + "E" * 4_000
    assert f"<recent-context>\n{recent}\n</recent-context>" in checkpoint.content
    assert compaction.details["recent_tokens"] == 11_007 + 1  # the joins' four characters
    # upstream's layout (runner/to-llm-message.ts): a blank line before <summary> and between the two blocks
    assert checkpoint.content.startswith("<conversation-checkpoint>\n") and "instructions.\n\n<summary>\n" in checkpoint.content
    assert checkpoint.content.endswith(f"</summary>\n\n<recent-context>\n{recent}\n</recent-context>\n</conversation-checkpoint>")


def test_when_everything_fits_only_the_latest_exchange_is_kept():
    # Step 1 (ceiling 10,000): 5,010 + 5,000 for u1. All three records fit in 15,000, back to u0: the latest
    # user message (u1) starts the tail (L302-304)
    result = run(long_session(), context_limit=11_000)
    first = result.compactions[0]
    assert (first.step, first.details["tail"], first.summarized_ids) == (1, "latest-exchange", ("u0", "a0"))
    assert result.requests[first.next_request].messages[1].item_ids == ("u1",)


def test_a_single_user_message_is_summarized_whole_with_nothing_kept():
    # one long turn: the walk goes back to the only user message, which is the first: no earlier prefix to
    # summarize it against, and no checkpoint yet, so everything is summarized and nothing kept (L306-311)
    session = Session().user("u0", "go").tool("c0", "x" * 8_000, usage=9_000).say("a0", "done")
    result = run(session, context_limit=10_000)  # 9,010 + 2,000 >= 9,000 at step 1
    (compaction,) = result.compactions
    assert (compaction.details["tail"], compaction.summarized_ids) == ("none", ("u0", "call-c0", "result-c0"))
    assert "<recent-context>\n\n</recent-context>" in result.requests[compaction.next_request].messages[1].content


# ----------------------------------------------------------------------------- the summary request (L366-553)
def test_the_summary_request_is_the_normal_history_then_the_prompt():
    result = run(long_session(), context_limit=16_000)
    (summary,) = [r for r in result.requests if r.kind == "summary"]
    previous = max((r for r in result.requests if r.kind == "turn" and r.index < summary.index), key=lambda r: r.index)
    # system prompt and head as the turn request sent them (real messages, not serialized text), then the prompt
    assert [m.item_ids for m in summary.messages] == [("sys",), ("u0",), ("a0",), ()]
    assert list(summary.messages[:3]) == list(previous.messages[:3])
    prompt = summary.messages[-1]
    assert prompt.role == "user" and "<template>\n## Objective\n" in prompt.content and "## Additional Context" in prompt.content
    # so all but the prompt is read from the cache the turn request left
    assert summary.cached_tokens >= summary.true_tokens - 600 and summary.cached_tokens > 0


def test_an_update_sends_the_checkpoint_first_and_asks_to_update_it():
    session = long_session().user("u3", "F" * 40_000).say("a3", "ok", usage=30_000).user("u4", "G" * 400).say("a4", "fine")
    result = run(session, context_limit=16_000)
    assert len(result.compactions) >= 2
    second = [r for r in result.requests if r.kind == "summary"][1]
    assert second.messages[1].content.startswith("<conversation-checkpoint>")
    assert "checkpoint that appears earlier" in second.messages[-1].content
    assert result.compactions[1].details["update"] is True
    # the earlier recent tail is summarized now: its ids are among those the second compaction summarized
    assert {"u1", "a1", "u2"} <= set(result.compactions[1].summarized_ids)


def test_a_reply_without_a_template_heading_is_asked_once_more():
    summarizer = ScriptedSummarizer(("Here is a summary of what happened.", "stop"), ("## Objective\n- ship the parser", "stop"))
    result = replay(long_session().transcript(), "opencode-v2", profile="64k", usage="recorded-always",
                    options={**SMALL, "context_limit": 16_000}, summarizer=summarizer)
    (compaction,) = result.compactions
    assert compaction.summary == "## Objective\n- ship the parser" and compaction.details["reminder"] is True
    first, second = summarizer.sent
    assert second[:-1] == first  # the rejected reply is not part of the second request
    assert summarizer.max_tokens == [None, None]  # no output limit of its own: the provider's default
    assert second[-1].role == "user" and "section headings" in second[-1].content


@pytest.mark.parametrize(
    ("replies", "requests"),
    [
        ([("No template.", "stop"), ("Still none.", "stop")], 2),  # no heading after the reminder (L530-542)
        ([("## Objective\n- cut off", "length")], 1),  # cut off at the output limit (L466-467): no reminder
        ([("", "stop"), ("", "stop")], 2),  # nothing at all
    ],
)
def test_a_failed_summary_fails_the_step(replies, requests):
    summarizer = ScriptedSummarizer(*replies)
    result = replay(long_session().transcript(), "opencode-v2", profile="64k", usage="recorded-always",
                    options={**SMALL, "context_limit": 16_000}, summarizer=summarizer)
    assert result.compactions == []
    assert len([r for r in result.requests if r.kind == "summary" and r.step == 2]) == requests
    # runner/llm.ts@008d5715 L213: the step fails with the compaction's error; its request is not sent
    (refused,) = [r for r in turn_requests(result) if r.step == 2]
    assert refused.overflow and refused.meta["failed_in"] == "agent" and "compaction_failed" in refused.meta


# ----------------------------------------------------------------------------- overflow (llm.ts L256-281)
def overflow_session() -> Session:
    # The provider charges 38,000 tokens for an image that OpenCode's estimate counts as 1,500.
    return (Session().user("u0", "Fix the parser").say("a0", "abc " * 4_000)
            .user("u1", "See this", attachments=[Attachment("image/png", "shot.png", size=3_000)]).say("a1", "Seen."))


def test_overflow_compacts_once_and_retries_with_auto_on():
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000, image_tokens=38_000)
    result = replay(overflow_session().transcript(), "opencode-v2", profile=profile, options={"keep_tokens": 1_000})
    assert [c.trigger for c in result.compactions] == ["overflow"]
    retry = result.requests[result.compactions[0].next_request]
    assert (retry.overflow, retry.attempt) == (False, 1)
    assert all(not m.attachments for m in retry.messages)
    assert "[Attached image/png: shot.png]" in retry.messages[1].content


def test_no_compaction_on_overflow_with_auto_off():
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000, image_tokens=38_000)
    result = replay(overflow_session().transcript(), "opencode-v2", profile=profile, options={"auto": False, "keep_tokens": 1_000})
    assert result.compactions == []
    assert [r.overflow for r in turn_requests(result) if r.step == 1] == [True]


def test_a_second_overflow_in_the_step_is_fatal():
    # u1 alone is more than the 40,000 window holds. The overflow compacts (the ceiling, 400,000 - 32,000, is far
    # off): the newest record is always kept (L288), so u1 stays as recent text, and the retry overflows again:
    # the step has no second recovery (L278-281).
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000)
    session = Session().user("u0", "hello").say("a0", "hi").user("u1", "word " * 40_000).say("a1", "On it.")
    result = replay(session.transcript(), "opencode-v2", profile=profile, options={"context_limit": 400_000})
    assert [(c.trigger, c.summarized_ids) for c in result.compactions] == [("overflow", ("u0", "a0"))]
    step1 = [r for r in turn_requests(result) if r.step == 1]
    assert [(r.attempt, r.overflow) for r in step1] == [(0, True), (1, True)]


def test_an_overflow_whose_summary_overflows_too_is_not_recovered():
    # the system prompt alone is over the window, and the summary request sends it too (L397-427): it
    # overflows, the compaction fails, and the step keeps its overflow (no retry)
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000)
    session = Session(system="abc " * 50_000).user("u0", "Fix the parser please").say("a0", "On it.")
    result = replay(session.transcript(), "opencode-v2", profile=profile, options={"context_limit": 400_000})
    assert result.compactions == []
    assert [(r.kind, r.overflow) for r in result.requests if r.step == 0] == [("turn", True), ("summary", True)]


def test_unpaired_results_are_reported_and_pairs_stay_whole():
    session = long_session().user("u3", "Check it").tool("c3", "ok").say("a3", "Checked.")
    session.items.append(Item("stray", "tool_result", "late", call_id="nobody", turn=3))
    result = run(session, context_limit=16_000)
    assert result.compactions
    assert result.final.meta == {"unpaired_results": ["stray"]}
    assert all(pair_problems(r.messages) == [] for r in result.requests)


# ----------------------------------------------------------------------------- the running sums (linear replay)
def test_the_parts_view_follows_created_and_changed_records():
    """`PartsView` keeps the part estimates' running sums as records are created and changed (a tool result
    arriving rewrites its step): every suffix sum and every head equals the computation from scratch."""
    store = SessionStore()
    view = PartsView(store, Renderer(2_000), Estimator(), lambda r: part_tokens(r, 1_500, 2_000))

    def check() -> None:
        view.update()
        for k in range(len(store.records) + 1):
            expected = sum(part_tokens(r, 1_500, 2_000).total for r in store.records[k:])
            assert view.parts_from(k) == expected
            assert view.messages_before(k) == Renderer(2_000).render(store.records[:k])

    store.observe_input(Item("u0", "user", "list the files " * 30, turn=0))
    store.add_response([Item("c0", "tool_call", call_id="k0", tool_name="bash", arguments='{"cmd":"ls"}', response=0)], None)
    check()
    store.observe_input(Item("r0", "tool_result", "a.py b.py " * 50, call_id="k0", turn=0))  # rewrites the step
    store.add_response([Item("a0", "assistant", "Two files.", response=1)], None)
    store.observe_input(Item("u1", "user", "look", turn=1, attachments=(Attachment("image/png", "x.png", 10),)))
    check()
    view.reset(store.records[1:])  # a new sequence: from the second record on
    store.observe_input(Item("u2", "user", "bye", turn=2))
    view.update()
    assert view.parts_from(0) == sum(part_tokens(r, 1_500, 2_000).total for r in store.records[1:])

"""`opencode-v1` on hand-built sessions: tail layouts, projection order, replay, prune, triggers
(docs/specs/opencode.md §1-§5). Expected layouts are worked out by hand from the spec."""

from __future__ import annotations

from dataclasses import replace

from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.opencode_components import COMPACTION_QUESTION, CONTINUE_TEXT, PRUNED_PLACEHOLDER
from compaction_bench.transcript import Attachment, Item
from tests.test_opencode_helpers import Session, pair_problems

BIG = 40_000  # recorded usage above the 64k profile's usable window of 32,000 (64,000 - min(32,000, 32,000))


def layout(request) -> list[str]:
    """Each message as its item ids, or a label for the messages OpenCode writes itself."""
    out = []
    for m in request.messages:
        if m.item_ids:
            out.append("+".join(m.item_ids))
        elif m.content == COMPACTION_QUESTION:
            out.append("Q")
        elif m.content == CONTINUE_TEXT:
            out.append("continue")
        elif m.role == "assistant":
            out.append("summary")
        else:
            out.append(f"?{m.role}")
    return out


def three_turns() -> Session:
    return (
        Session()
        .user("u0", "Fix the parser in src/parser.py").tool("c0", "def parse(): pass").say("a0", "Parser fixed.")
        .user("u1", "Now add tests").tool("c1", "tests/test_parser.py created").say("a1", "Tests added.")
        .user("u2", "Run them").tool("c2", "3 passed").say("a2", "All green.", usage=BIG)
    )


def test_whole_two_turn_tail_and_estimate_reporting():
    result = replay(three_turns().transcript(), "opencode-v1", profile="64k", usage="recorded")
    assert [c.trigger for c in result.compactions] == ["step"]
    compaction = result.compactions[0]
    assert compaction.summarized_ids == ("u0", "call-c0", "result-c0", "a0")
    assert compaction.details["tail"] == "whole-turns" and compaction.details["tail_whole_turns"] == 2
    assert layout(result.final) == [
        "sys", "Q", "summary",
        "u1", "call-c1", "result-c1", "a1", "u2", "call-c2", "result-c2", "a2",
        "continue",
    ]
    # the strategy reports the usage count it compares, and its threshold (usable window)
    turns = result.turn_requests
    assert [r.estimate_tokens for r in turns] == [None, 100, 100, 100, 100, 100]
    assert {r.threshold for r in turns} == {32_000}
    assert compaction.estimate_tokens == BIG and compaction.threshold == 32_000
    # the summary request: compaction system prompt, the head, then the anchored prompt
    summary = next(r for r in result.requests if r.kind == "summary")
    assert layout(summary)[1:-1] == ["u0", "call-c0", "result-c0", "a0"]
    prompt = summary.messages[-1].content
    assert summary.messages[0].role == "system"
    for heading in ("## Objective", "## Important Details", "## Work State", "### Completed", "### Active",
                    "### Blocked", "## Next Move", "## Relevant Files"):
        assert heading in prompt
    assert "<previous-summary>" not in prompt


def test_turn_that_does_not_fit_keeps_its_earliest_fitting_suffix():
    session = (
        Session()
        .user("u0", "Fix the parser").say("a0", "Done.")
        .user("u1", "Read the spec").say("a1", "Read.")
        # the user message alone is ~10,000 estimated tokens, over the 8,000 budget
        .user("u2", "Here is the log:\n" + "y" * 40_000).tool("c2", "ok").say("a2", "Handled.", usage=BIG)
    )
    result = replay(session.transcript(), "opencode-v1", profile="64k", usage="recorded")
    compaction = result.compactions[0]
    assert compaction.details["tail"] == "split-turn" and compaction.details["tail_start_item"] == "call-c2"
    assert compaction.summarized_ids == ("u0", "a0", "u1", "a1", "u2")
    assert layout(result.final) == ["sys", "Q", "summary", "call-c2", "result-c2", "a2", "continue"]


def test_no_tail_when_it_would_start_at_index_zero():
    session = (
        Session()
        .user("u0", "Fix the parser").tool("c0", "ok").say("a0", "Done.")
        .user("u1", "Thanks").say("a1", "You are welcome.", usage=BIG)
    )
    result = replay(session.transcript(), "opencode-v1", profile="64k", usage="recorded")
    compaction = result.compactions[0]
    assert compaction.details["tail"] == "starts-at-index-0"
    assert compaction.summarized_ids == ("u0", "call-c0", "result-c0", "a0", "u1", "a1")
    assert layout(result.final) == ["sys", "Q", "summary", "continue"]


def test_projection_puts_the_summary_before_the_older_tail_and_decides_latest_by_id():
    session = three_turns().user("u3", "Commit it").say("a3", "Committed.")
    result = replay(session.transcript(), "opencode-v1", profile="64k", usage="recorded")
    # a2 (usage 40,000) sits after the summary in the projection, but the newest finished assistant
    # by id is the summary, so the loop-start check does not compact again.
    assert len(result.compactions) == 1
    last_turn = result.turn_requests[-1]
    assert last_turn.estimate_tokens is None
    assert layout(last_turn) == [
        "sys", "Q", "summary",
        "u1", "call-c1", "result-c1", "a1", "u2", "call-c2", "result-c2", "a2",
        "continue", "u3",
    ]
    assert layout(result.final)[-2:] == ["u3", "a3"]


def test_overflow_replays_the_last_user_message_with_media_as_text():
    # An 8,000-token window where an image costs 5,000 tokens: max output = min(4,000, 32,000).
    profile = replace(get_profile("64k"), name="tiny", context_window=8_000, image_tokens=5_000)
    image = Attachment("image/png", "shot.png", size=1_000)
    session = (
        Session()
        .user("u0", "Fix the parser in src/parser.py").tool("c0", "def parse(): pass").say("a0", "Parser fixed.")
        .user("u1", "See this screenshot", attachments=[image]).say("a1", "I see the error.")
    )
    result = replay(session.transcript(), "opencode-v1", profile=profile)
    failed = next(r for r in result.requests if r.overflow)
    assert failed.messages[-1].attachments == (image,)
    compaction = result.compactions[0]
    assert compaction.trigger == "overflow"
    assert compaction.details["replay"] and compaction.details["overflow"]
    assert compaction.summarized_ids == ("u0", "call-c0", "result-c0", "a0")
    retry = result.requests[failed.index + 2]
    assert (retry.kind, retry.overflow, retry.attempt) == ("turn", False, 1)
    assert layout(retry) == ["sys", "Q", "summary", "u1"]
    replayed = retry.messages[-1]
    assert replayed.content == "See this screenshot\n[Attached image/png: shot.png]"
    assert replayed.attachments == ()
    assert all(CONTINUE_TEXT not in m.content for m in retry.messages)


def test_auto_false_turns_every_trigger_off():
    result = replay(three_turns().transcript(), "opencode-v1", profile="64k", usage="recorded", options={"auto": False})
    assert result.compactions == []
    profile = replace(get_profile("64k"), name="tiny", context_window=8_000, image_tokens=5_000)
    session = Session().user("u0", "look", attachments=[Attachment("image/png", "a.png")]).say("a0", "ok")
    result = replay(session.transcript(), "opencode-v1", profile=profile, options={"auto": False})
    assert result.overflows == 1 and result.compactions == []


def prune_session(turns: int) -> Session:
    session = Session()
    for n in range(turns):
        # 40,000 characters: exactly 10,000 estimated tokens of tool output per turn
        session.user(f"u{n}", f"step {n}").tool(f"c{n}", "x" * 40_000).say(f"a{n}", f"done {n}")
    return session


def test_prune_protects_40k_and_needs_more_than_20k():
    # 8 turns: after the newest two, 6 outputs of 10,000: 4 protected (40,000 <= 40,000), 2 candidates
    # summing to 20,000, which is not more than the minimum: nothing pruned.
    result = replay(prune_session(8).transcript(), "opencode-v1", profile="1m", usage="recorded", options={"prune": True})
    assert result.compactions == []
    # 9 turns: 3 candidates (turns 0-2) summing to 30,000 > 20,000: pruned at the end of turn 8.
    result = replay(prune_session(9).transcript(), "opencode-v1", profile="1m", usage="recorded", options={"prune": True})
    assert [(c.trigger, c.turn) for c in result.compactions] == [("prune", 8)]
    details = result.compactions[0].details
    assert (details["pruned_outputs"], details["pruned_tokens"]) == (3, 30_000)
    tools = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    assert [tools[f"c{n}"] == PRUNED_PLACEHOLDER for n in range(9)] == [True] * 3 + [False] * 6
    # the pruned result keeps its call: the pair stays whole on the wire
    assert pair_problems(result.final.messages) == []
    # off by default
    assert replay(prune_session(9).transcript(), "opencode-v1", profile="1m", usage="recorded").compactions == []


def test_prune_breaks_the_cached_prefix():
    session = prune_session(9).user("u9", "one more").say("a9", "done 9")
    with_prune = replay(session.transcript(), "opencode-v1", profile="1m", usage="recorded", options={"prune": True})
    without = replay(session.transcript(), "opencode-v1", profile="1m", usage="recorded")
    after = with_prune.compactions[0].next_request
    assert with_prune.requests[after].cached_tokens < without.requests[after].cached_tokens
    # before the prune both runs sent the same requests and read the same cache
    assert [r.cached_tokens for r in with_prune.requests[:after]] == [r.cached_tokens for r in without.requests[:after]]


def test_hand_built_requests_never_break_tool_pairs():
    session = three_turns()
    # a call whose result never came, and a result whose call is unknown
    session.items.insert(3, Item("call-lost", "tool_call", call_id="lost", tool_name="bash", response=99, turn=0))
    session.items.append(Item("result-stray", "tool_result", "?", call_id="stray", turn=2))
    for options in ({}, {"prune": True}):
        result = replay(session.transcript(), "opencode-v1", profile="64k", usage="recorded", options=options)
        assert result.compactions
        for request in result.requests:
            assert pair_problems(request.messages) == [], request.kind


def test_second_compaction_updates_the_anchor_and_drops_the_first_pair():
    session = three_turns().user("u3", "Commit it").tool("c3", "committed 1a2b3c").say("a3", "Committed.", usage=BIG)
    result = replay(session.transcript(), "opencode-v1", profile="64k", usage="recorded-always")
    first, second = result.compactions
    # the first question/summary pair is not summarized again; its summary is the anchor.
    # The "Continue…" message starts a turn (§2.3), so the two-turn tail is [continue] + [u3 …].
    assert second.summarized_ids == ("u1", "call-c1", "result-c1", "a1", "u2", "call-c2", "result-c2", "a2")
    assert second.details["update"] is True and second.details["tail_whole_turns"] == 2
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert f"<previous-summary>\n{first.summary.strip()}\n</previous-summary>" in summaries[1].messages[-1].content
    assert layout(summaries[1])[1:-1] == ["u1", "call-c1", "result-c1", "a1", "u2", "call-c2", "result-c2", "a2"]
    assert layout(result.final) == ["sys", "Q", "summary", "continue", "u3", "call-c3", "result-c3", "a3", "continue"]
    assert result.final.messages[2].content == second.summary

"""`opencode-v2` on hand-built sessions (docs/specs/opencode.md §6): the split inside a message at
``remaining * 4`` characters, the refusal when the prompt does not fit, the trigger, and the one
compaction plus one retry on a provider overflow."""

from __future__ import annotations

from dataclasses import replace

from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.transcript import Attachment, Item
from tests.test_opencode_helpers import Session, pair_problems


def long_session() -> Session:
    return (
        Session()
        .user("u0", "A" * 20_000)
        .say("a0", "B" * 20_000)
        .user("u1", "C" * 20_000)
        .say("a1", "Done.")
    )


def test_split_inside_a_message_at_remaining_times_four():
    # context 30,000: output limit 15,000 (half the window), threshold 30,000 - max(15,000, 20,000) = 10,000;
    # no tool definitions in the estimate (`[]`), so the first request (u0, about 5,000) does not trigger.
    options = {"context_limit": 30_000, "tools_json_chars": 2}
    result = replay(long_session().transcript(), "opencode-v2", profile="64k", options=options)
    assert [c.trigger for c in result.compactions] == ["threshold"]
    compaction = result.compactions[0]
    # serialized: "[User]: A…" 20,008 chars (5,002), "[Assistant]: B…" 20,013 (5,003), "[User]: C…" (5,002).
    # C fits the 8,000 keep budget; B does not: (8,000 - 5,002) * 4 = 11,992 of its characters stay.
    assert compaction.details["cut_inside_message"] is True
    assert compaction.details["cut_item_ids"] == ["a0"]
    assert compaction.details["cut_at_chars"] == 11_992
    assert compaction.summarized_ids == ("u0", "a0")
    # §6.6 compacts at `estimate > 10,000`: the smallest count that does so is reported
    assert compaction.threshold == 10_001 and compaction.estimate_tokens > 10_000
    checkpoint = result.final.messages[1]
    assert checkpoint.role == "user" and checkpoint.item_ids == ("a0", "u1")
    recent = "B" * 11_992 + "\n\n[User]: " + "C" * 20_000
    assert f"<recent-context>\n{recent}\n</recent-context>" in checkpoint.content
    assert checkpoint.content.startswith("<conversation-checkpoint>")
    assert "<summary>\n" in checkpoint.content
    assert [m.item_ids for m in result.final.messages] == [("sys",), ("a0", "u1"), ("a1",)]
    # the summary request: one user message, no system prompt, output min(15,000 or 4,096, 4,096)
    summary = next(r for r in result.requests if r.kind == "summary")
    assert [m.role for m in summary.messages] == ["user"]
    assert "<conversation-history>" not in summary.messages[0].content  # upstream adds no wrapper tags
    # the head ends with the cut entry's 8,008-character prefix, after the whole entry (spec §6.4 as written)
    assert summary.messages[0].content.endswith("\n\n[User]: " + "A" * 20_000 + "\n\n[Assistant]: " + "B" * 20_000 + "\n\n[Assistant]: " + "B" * 8_008)


def test_refuses_when_the_prompt_does_not_fit():
    # context 12,000: threshold negative (always triggers); the prompt may use 12,000 - 4,096 = 7,904,
    # but the head alone is more than 40,000 characters (> 10,000 estimated tokens).
    result = replay(long_session().transcript(), "opencode-v2", profile="64k", options={"context_limit": 12_000})
    assert result.compactions == []
    assert not any(r.kind == "summary" for r in result.requests)
    refused = [r for r in result.turn_requests if "compaction_refused" in r.meta]
    assert refused and "exceeds 7904" in refused[-1].meta["compaction_refused"]


def test_no_compaction_below_the_threshold_or_with_auto_off():
    assert replay(long_session().transcript(), "opencode-v2", profile="64k").compactions == []
    options = {"context_limit": 30_000, "auto": False}
    assert replay(long_session().transcript(), "opencode-v2", profile="64k", options=options).compactions == []


def test_overflow_compacts_once_and_retries_once():
    # The provider charges 38,000 tokens for an image that OpenCode's estimate sees as a small data URL.
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000, image_tokens=38_000)
    session = (
        Session()
        .user("u0", "Fix the parser").say("a0", "abc " * 4_000)
        .user("u1", "See this", attachments=[Attachment("image/png", "shot.png", size=3_000)]).say("a1", "Seen.")
    )
    result = replay(session.transcript(), "opencode-v2", profile=profile, options={"auto": False, "keep_tokens": 1_000})
    assert [c.trigger for c in result.compactions] == ["overflow"]
    retry = result.requests[result.compactions[0].next_request]
    assert (retry.overflow, retry.attempt) == (False, 1)
    assert all(not m.attachments for m in retry.messages)
    assert "[Attached image/png: shot.png]" in retry.messages[1].content


def test_a_second_overflow_is_fatal():
    profile = replace(get_profile("64k"), name="tiny", context_window=40_000)
    session = Session(system="abc " * 50_000).user("u0", "Fix the parser please").say("a0", "On it.")
    result = replay(session.transcript(), "opencode-v2", profile=profile, options={"keep_tokens": 1, "auto": False})
    assert len(result.compactions) == 1
    step0 = [r for r in result.requests if r.kind == "turn" and r.step == 0]
    assert [(r.attempt, r.overflow) for r in step0] == [(0, True), (1, True)]


def test_unpaired_results_are_reported_and_pairs_stay_whole():
    session = long_session().user("u2", "Check it").tool("c2", "ok").say("a2", "Checked.")
    session.items.append(Item("stray", "tool_result", "late", call_id="nobody", turn=2))
    result = replay(session.transcript(), "opencode-v2", profile="64k", options={"context_limit": 30_000})
    assert result.compactions
    assert result.final.meta == {"unpaired_results": ["stray"]}
    assert all(pair_problems(r.messages) == [] for r in result.requests)

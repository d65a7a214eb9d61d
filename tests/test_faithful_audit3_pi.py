"""Third faithfulness audit of the Pi strategies: what a summarized range holds (docs/specs/pi.md §3.3, §6).

Upstream reads a summarized range through `getMessageFromEntry` (`compaction.ts@83378aad` L79-93,
`branch-summarization.ts@83378aad` L143-167), which turns every `branch_summary` entry into a
branchSummary message; only `buildSessionContext` (`session-manager.ts@83378aad` L378) leaves out a
branch summary whose text is empty. The expected lists below follow from those lines by hand.
"""

from __future__ import annotations

from compaction_bench.strategies.pi_branch import prepare_branch_summary
from compaction_bench.strategies.pi_compaction import BASE, prepare_compaction, serialize_conversation
from compaction_bench.strategies.pi_session_tree import BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX, PathIndex
from tests.pi_builders import Entries


def test_an_empty_branch_summary_is_summarized_with_its_range():
    # keepRecentTokens 20: the walk adds 10 (e4) and 10 (e3), reaching 20 at the user message e3, a valid
    # cut point; e2 before it is a message, so the cut stays at e3 (not split). The history is e0..e2, and
    # getMessageFromEntry makes a branchSummary message of e1 although its summary is "". Since a6f720e6 the newest
    # rules leave an empty branch summary out of the history too (tests/test_pi_audit6.py).
    for rules in (BASE,):
        e = Entries.with_empty_branch_summary()
        prep = prepare_compaction(e.path, rules, keep_recent_tokens=20, index=PathIndex(image_chars=4800, user_images=rules.user_images))
        assert prep is not None and prep.first_kept_id == "e3" and not prep.is_split_turn
        assert [m.role for m in prep.messages_to_summarize] == ["user", "branchSummary", "assistant"]
        assert prep.summarized_entries == ["e0", "e1", "e2"]
        # convertToLlm wraps it like any branch summary, so the summary request shows the empty wrapper
        text = serialize_conversation(prep.messages_to_summarize, 2000)
        assert f"[User]: {BRANCH_SUMMARY_PREFIX}{BRANCH_SUMMARY_SUFFIX}" in text.split("\n\n[Assistant]")[0]


def test_the_context_still_leaves_an_empty_branch_summary_out():
    e = Entries.with_empty_branch_summary()
    index = PathIndex(image_chars=4800, user_images=False).update(e.path)
    assert [m.role for m in index.session_context(nested_compactions=False)] == ["user", "assistant", "user", "assistant"]
    # after a compaction that keeps e0 on, the kept range leaves it out too (BASE and LATER)
    e.compaction("e0")
    e.user(4)
    for nested in (False, True):
        index = PathIndex(image_chars=4800, user_images=False).update(e.path)
        roles = [m.role for m in index.session_context(nested_compactions=nested)]
        assert roles == ["compactionSummary", "user", "assistant", "user", "assistant", "user"]


def test_a_branch_summary_budget_walk_reads_an_empty_branch_summary():
    # prepareBranchEntries (no budget limit): every entry's getMessageFromEntry message, tool results apart.
    e = Entries.with_empty_branch_summary()
    prep = prepare_branch_summary(e.path, budget=0, summary_ratio=0.9, image_chars=4800, user_images=False)
    assert [m.role for m in prep.messages] == ["user", "branchSummary", "assistant", "user", "assistant"]
    assert prep.entries == ["e0", "e1", "e2", "e3", "e4"]

"""Pi's branch summaries: what is summarized when the user navigates the session tree
(docs/specs/pi.md §6, `branch-summarization.ts@83378aad`).

Owns the collection of the abandoned entries (old leaf up to, excluding, the deepest common
ancestor with the navigation target), the message extraction that skips tool results, the
newest-first token budget with the 0.9 rule for summary entries, the file operations seeded from
earlier pi-generated branch summaries, the summary preamble, and the "No content to summarize"
summary of an empty branch (`generateBranchSummary@83378aad`: no model call).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compaction_bench.strategies.pi_compaction import FileOps
from compaction_bench.strategies.pi_session_tree import Entry, PiMessage, SessionTree, entry_message, estimate_tokens

#: The summary of a branch with no message to summarize; no model call is made (§6).
NO_CONTENT = "No content to summarize"
BRANCH_SUMMARY_PREAMBLE = "The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n"


@dataclass
class BranchPreparation:
    messages: list[PiMessage]
    file_ops: FileOps
    entries: list[str]


def entries_to_summarize(tree: SessionTree, old_leaf: str, target: str | None) -> list[Entry]:
    """Old leaf → (excluding) the deepest common ancestor with `target`, oldest first."""
    target_ids = {e.id for e in tree.path(target)} if target is not None else set()
    out = []
    for entry in reversed(tree.path(old_leaf)):
        if entry.id in target_ids:
            break
        out.append(entry)
    return out[::-1]


def prepare_branch_summary(
    entries: Sequence[Entry], *, budget: int, summary_ratio: float, image_chars: int, user_images: bool
) -> BranchPreparation:
    """Messages that fit the budget, newest first (§6); tool results are skipped."""
    ops = FileOps()
    for entry in entries:
        if entry.type == "branch_summary" and not entry.from_hook:
            ops.seed(entry.details)
    kept: list[PiMessage] = []
    ids: list[str] = []
    total = 0
    for entry in reversed(entries):
        message = entry_message(entry, summarized=True)
        if message is None or message.role == "toolResult":
            continue
        ops.add_messages([message])
        tokens = estimate_tokens(message, image_chars=image_chars, user_images=user_images)
        if budget > 0 and total + tokens > budget:  # a budget of 0 or less means no limit
            if message.role in ("compactionSummary", "branchSummary") and total < summary_ratio * budget:
                kept.append(message)
                ids.append(entry.id)
            break
        kept.append(message)
        ids.append(entry.id)
        total += tokens
    return BranchPreparation(kept[::-1], ops, ids[::-1])

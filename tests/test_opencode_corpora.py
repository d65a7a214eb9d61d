"""The OpenCode strategies on the real corpora (`../shared/corpora`): tool-pair integrity of every
request, complete replays with compactions at 64k, and prune's effect on the cached prefix."""

from __future__ import annotations

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from compaction_bench.transcript import Transcript, TranscriptError
from tests.conftest import corpus_files
from tests.test_opencode_helpers import pair_problems

pytestmark = pytest.mark.corpora

FORMATS = ("codex-rollout-jsonl", "pi-session-jsonl", "mini-swe-agent-traj")
#: a prefix long enough for several compactions at 64k, short enough to sweep every file quickly
SWEEP_ITEMS = 300


def importable(paths) -> list[tuple[str, Transcript]]:
    """The first session of every file that imports today (importers land independently)."""
    out = []
    for path in paths:
        try:
            out.append((path.name, load_transcripts(path)[0]))
        except TranscriptError:
            continue
    return out


def test_opencode_v1_never_sends_a_broken_tool_pair():
    corpus = importable(p for fmt in FORMATS for p in corpus_files(fmt))
    assert corpus, "no corpus file of the Codex, Pi or mini-swe-agent formats imports"
    compacted = 0
    for name, transcript in corpus:
        result = replay(transcript.with_items(transcript.items[:SWEEP_ITEMS]), "opencode-v1", profile="64k")
        compacted += bool(result.compactions)
        for request in result.requests:
            assert pair_problems(request.messages) == [], (name, request.index, request.kind)
    assert compacted >= 3


def picked() -> list[tuple[str, Transcript]]:
    names = (
        "rollout-2025-11-13T16-00-16-019a7fa9-a846-7393-8d7a-9997d08b0096.jsonl",
        "large-session.jsonl",
        "deepseek_lite_dev_noparallel__pydicom__pydicom-1413.traj.json",
    )
    corpus = importable(p for fmt in FORMATS for p in corpus_files(fmt) if p.name in names)
    assert corpus, "none of the picked corpus files imports"
    return corpus


@pytest.mark.parametrize(
    ("strategy", "options"),
    [("opencode-v1", {}), ("opencode-v1", {"prune": True}), ("opencode-v2", {})],
)
def test_replays_complete_with_compactions_at_64k(strategy, options):
    for name, transcript in picked():
        result = replay(transcript, strategy, profile="64k", options=options)
        assert result.final.kind == "final", name
        assert len(result.turn_requests) >= len(transcript.steps()), name
        summaries = [c for c in result.compactions if c.trigger != "prune"]
        assert summaries, name
        assert all(c.summary and c.summarized_ids for c in summaries), name
        if strategy == "opencode-v2":
            # the recent text starts at a record, chosen by one of findTailStart's rules (compaction.ts@031a4a9c
            # L281-312; no cut inside a message any more), and a message always follows the checkpoint whole
            assert {c.details["tail"] for c in summaries} <= {"user-boundary", "latest-exchange", "all-since-checkpoint", "none"}
        assert all(pair_problems(r.messages) == [] for r in result.requests), name


def test_prune_changes_the_cached_prefix_on_a_real_session():
    # At 64k the usable window is 32,000, so tool output after the newest summary never reaches the
    # 40,000 + 20,000 estimated tokens prune needs; GPT-5's 272k window leaves room for it.
    candidates = importable(p for p in corpus_files("pi-session-jsonl") if p.name == "large-session.jsonl")
    assert candidates, "large-session.jsonl does not import"
    transcript = candidates[0][1]
    pruned = replay(transcript, "opencode-v1", profile="gpt-5", options={"prune": True})
    plain = replay(transcript, "opencode-v1", profile="gpt-5")
    prunes = [c for c in pruned.compactions if c.trigger == "prune"]
    assert prunes and prunes[0].details["pruned_tokens"] > 20_000
    first = prunes[0].next_request
    assert pruned.requests[first].cached_tokens < plain.requests[first].cached_tokens
    assert [r.cached_tokens for r in pruned.requests[:first]] == [r.cached_tokens for r in plain.requests[:first]]
    assert sum(r.cached_tokens for r in pruned.requests) != sum(r.cached_tokens for r in plain.requests)

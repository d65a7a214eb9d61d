"""The default suite's sessions are shaped like recorded coding sessions (scenarios/synthetic.py, balanced facts).

The reference figures are computed here from the real corpora (`tests.conftest.CORPORA`), not
copied from the generator: every session of a coding-agent format (Aider, Claude Code, Codex, Pi,
mini-swe-agent, SWE-agent, OpenHands) with 50,000 o200k tokens or more of item text and arguments
(18 sessions). Measured the same way on both sides: tool outputs' and tool calls' share of all
tokens, the median tool output, the mean assistant text (all pooled), and real user turns per
session. On those sessions: outputs 49%, calls 32%, median output 42 tokens, assistant texts 124
tokens, user turns median 6.5 (mean 20).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.scenarios.synthetic import Scenario, default_suite, generate
from compaction_bench.tokens import TokenCounter
from compaction_bench.transcript import Transcript
from tests.conftest import corpus_files

pytestmark = pytest.mark.corpora

COUNTER = TokenCounter("o200k_base")
CODING_FORMATS = (
    "aider-chat-history-md", "claude-code-jsonl", "codex-rollout-jsonl", "pi-session-jsonl",
    "mini-swe-agent-traj", "swe-agent-traj", "openhands-events",
)
MIN_SESSION_TOKENS = 50_000
#: How far (relative) a synthetic figure may stray from the corpus figure.
TOLERANCE = 0.3


@dataclass
class Shape:
    """Token counts of a set of sessions, by item kind."""

    total: int
    outputs: int
    calls: int
    output_sizes: list[int]
    assistant_sizes: list[int]
    user_turns: list[int]

    @classmethod
    def of(cls, transcripts: list[Transcript]) -> Shape:
        shape = cls(0, 0, 0, [], [], [])
        for transcript in transcripts:
            for item in transcript.items:
                if item.kind == "marker":
                    continue
                tokens = COUNTER.count(item.text or "") + COUNTER.count(item.arguments or "")
                shape.total += tokens
                if item.kind == "tool_result":
                    shape.outputs += tokens
                    shape.output_sizes.append(tokens)
                elif item.kind == "tool_call":
                    shape.calls += tokens
                elif item.kind == "assistant":
                    shape.assistant_sizes.append(tokens)
            shape.user_turns.append(len(transcript.real_user_messages()))
        return shape

    def figures(self) -> dict[str, float]:
        return {
            "output share": self.outputs / self.total,
            "call share": self.calls / self.total,
            "median output": statistics.median(self.output_sizes),
            "mean assistant text": statistics.mean(self.assistant_sizes),
        }


def session_tokens(transcript: Transcript) -> int:
    return sum(COUNTER.count(i.text or "") + COUNTER.count(i.arguments or "") for i in transcript.items if i.kind != "marker")


@pytest.fixture(scope="module")
def corpus() -> Shape:
    sessions = [
        t for fmt in CODING_FORMATS for path in corpus_files(fmt) for t in load_transcripts(path)
        if session_tokens(t) >= MIN_SESSION_TOKENS
    ]
    assert len(sessions) >= 15, "the corpora hold fewer long coding sessions than expected"
    return Shape.of(sessions)


@pytest.fixture(scope="module")
def suite() -> list[Scenario]:
    return default_suite()


def assert_like_the_corpora(shape: Shape, corpus: Shape, name: str) -> None:
    reference = corpus.figures()
    for figure, value in shape.figures().items():
        expected = reference[figure]
        assert abs(value - expected) <= TOLERANCE * expected, (name, figure, round(value, 3), round(expected, 3))


def test_corpus_reference_figures(corpus):
    """The figures the bands are built on, as measured when the generator was tuned (guards the measuring code)."""
    figures = corpus.figures()
    assert figures["output share"] == pytest.approx(0.494, abs=0.01)
    assert figures["call share"] == pytest.approx(0.322, abs=0.01)
    assert figures["median output"] == 42
    assert figures["mean assistant text"] == pytest.approx(124.4, abs=1)
    assert statistics.median(corpus.user_turns) == 6.5


def test_the_default_suite_is_shaped_like_recorded_sessions(suite, corpus):
    assert_like_the_corpora(Shape.of([s.transcript for s in suite]), corpus, "suite")
    for scenario in suite:
        assert_like_the_corpora(Shape.of([scenario.transcript]), corpus, scenario.name)


def test_user_turns_are_few_but_for_the_short_turns_shape(suite, corpus):
    """Work comes in long tool loops: no more user turns than recorded sessions have on average
    (the planted facts alone take 10 to 13); `short-turns` has as many as the most interactive ones."""
    ceiling = (1 + TOLERANCE) * statistics.mean(corpus.user_turns)
    for scenario in suite:
        turns = len(scenario.transcript.real_user_messages())
        if scenario.transcript.source["shape"] == "short-turns":
            assert ceiling < turns <= max(corpus.user_turns), (scenario.name, turns)
        else:
            assert statistics.median(corpus.user_turns) < turns <= ceiling, (scenario.name, turns)


@pytest.mark.parametrize("seed", [7, 14])
def test_other_seeds_are_shaped_alike(seed, corpus):
    for shape in ("parallel-calls", "huge-output"):  # the extremes of output and call share
        assert_like_the_corpora(Shape.of([generate(shape, seed, balanced_facts=True).transcript]), corpus, f"{shape}-s{seed}")

"""Input texts counted when a replay starts (`Strategy.sends_inputs_verbatim`, `_Engine._count_first`).

A strategy that declares that its requests carry every input item's text whole has those texts
counted before its first request; the declaration must match what its replays of real sessions
send, and counting first must change no number of a replay."""

from __future__ import annotations

import functools
import subprocess
import sys
import uuid
from collections.abc import Sequence
from typing import ClassVar

import pytest

import compaction_bench as bench
from compaction_bench.importing import load_transcripts
from compaction_bench.profiles import get_profile
from compaction_bench.registry import strategy_class, strategy_ids
from compaction_bench.request import Message, Request
from compaction_bench.strategy import Strategy
from compaction_bench.tokens import shared_counter
from compaction_bench.transcript import INPUT_KINDS, Item, Transcript, Usage
from tests.conftest import CORPORA

#: Real sessions of five formats, with tool outputs long and short, that the 32k window compacts.
SESSIONS = (
    "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl",
    "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/351b5d6c-e802-4339-a2c5-33f48865d8bd.jsonl",
    "mini-swe-agent-traj/SWE-agent__mini-swe-agent/astropy__astropy-12907.traj.json",
    "pi-session-jsonl/badlogic__pi-mono/large-session.jsonl",
    "openhands-events/All-Hands-AI__OpenHands/resolver_mock_output.jsonl",
)
#: The least share of input characters a declaring strategy sends whole (a rare text cut by a strategy
#: that sends the others whole costs only its count).
WHOLE = 0.95


@functools.cache
def _sessions() -> tuple[Transcript, ...]:
    return tuple(t for path in SESSIONS for t in load_transcripts(CORPORA / path))


def _whole_share(strategy: str | type[Strategy], transcripts: Sequence[Transcript]) -> float:
    """Of the characters of the input items' texts, the share whose text some request of the replay carries
    as one message's whole content (the lowest over `transcripts`)."""
    shares = []
    for t in transcripts:
        sent = {m.content for r in bench.replay(t, strategy, profile="32k").requests for m in r.messages}
        texts = [i.text for i in t.items if i.kind in INPUT_KINDS and i.text]
        shares.append(sum(len(text) for text in texts if text in sent) / sum(map(len, texts)))
    return min(shares)


@pytest.mark.parametrize("strategy", strategy_ids(builtin_only=True))
def test_a_strategy_declares_that_it_sends_inputs_whole_exactly_when_its_replays_of_real_sessions_do(strategy):
    share = _whole_share(strategy, _sessions())
    if strategy_class(strategy).sends_inputs_verbatim:
        assert share >= WHOLE, f"{strategy} declares that it sends its inputs whole, but sent {share:.1%} of their characters whole"
    else:  # Codex re-encodes tool outputs, OpenHands adds a line to error results, OpenCode V2 serializes some into its checkpoint
        assert share < WHOLE, f"{strategy} sends {share:.1%} of its input characters whole: declare `sends_inputs_verbatim`"


def _marked_session(mark: str) -> Transcript:
    """A hand-built session whose input texts are all new to the process (each holds `mark`)."""
    items = [Item("sys", "system", f"system {mark}"), Item("u0", "user", f"Read the two files. {mark}", turn=0)]
    for k in range(2):
        items.append(Item(f"c{k}", "tool_call", call_id=f"c{k}", tool_name="read", arguments=f'{{"n": {k}}}', response=k, turn=0,
                          usage=Usage(input=100, output=10)))
        items.append(Item(f"r{k}", "tool_result", f"file {k} says {mark}\n" * 40, call_id=f"c{k}", turn=0))
    items.append(Item("a", "assistant", "Both read.", response=2, turn=0))
    return Transcript("marked", tuple(items))


class _FixedPrompt(Strategy):
    """Sends one fixed message whatever it is given, and notes at its first request which of `inputs` the
    token counter already holds (`seen`)."""

    name = "test-fixed-prompt"
    inputs: ClassVar[tuple[str, ...]] = ()
    seen: ClassVar[list[bool] | None] = None

    def on_user_turn(self, item: Item) -> None:
        pass

    def on_input(self, item: Item) -> None:
        pass

    def request(self) -> Request:
        cls = type(self)
        if cls.seen is None:
            memo = shared_counter(get_profile("32k").tokenizer)._memo
            cls.seen = [text in memo for text in cls.inputs]
        return Request((Message("user", "Go on."),))

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        pass


def test_the_inputs_of_a_declaring_strategy_are_counted_before_its_first_request_and_no_others():
    """The fixed prompt sends none of the inputs, so only counting first can have put them in the counter's memo
    by its first request (each text holds a new mark, so no earlier test counted it)."""
    for declared in (True, False):
        mark = uuid.uuid4().hex
        session = _marked_session(mark)
        inputs = tuple(i.text for i in session.items if i.kind in INPUT_KINDS)
        strategy = type("Declared" if declared else "Undeclared", (_FixedPrompt,), {"sends_inputs_verbatim": declared, "inputs": inputs})
        bench.replay(session, strategy, profile="32k")
        assert strategy.seen == [declared] * 4, (declared, strategy.seen)


#: Replays `sys.argv[1]` (a session file) at `32k` with each strategy named after `sys.argv[2]` ("1": as declared,
#: "0": its inputs not counted first) and prints, per strategy, its compactions and a digest of every request's
#: counts, cache outcome and messages and every compaction's summary.
CHILD = """
import hashlib, sys
import compaction_bench as bench
from compaction_bench.importing import load_transcripts
from compaction_bench.registry import strategy_class
session = load_transcripts(sys.argv[1])[0]
for name in sys.argv[3:]:
    cls = strategy_class(name)
    assert cls.sends_inputs_verbatim, name
    if sys.argv[2] == "0":
        cls = type(cls.__name__, (cls,), {"sends_inputs_verbatim": False})
    result = bench.replay(session, cls, profile="32k")
    requests = [(r.kind, r.true_tokens, r.estimate_tokens, r.overflow, r.prefix_tokens, r.cached_tokens, r.cache_write_tokens,
                 r.rebilled_tokens, r.output_tokens, tuple(r.messages)) for r in result.requests]
    summaries = [(c.index, c.summary) for c in result.compactions]
    print(name, len(summaries), hashlib.sha256(repr((requests, summaries)).encode()).hexdigest())
"""


def test_counting_the_inputs_first_changes_no_number_of_a_replay():
    """Each request's counts, cache outcome and messages, and each compaction's summary, are the same whether the
    inputs are counted first or as the requests carry them. Each way runs in a process of its own: what counting
    first leaves in a process's memo cannot reach the replays it is compared with."""
    strategies = ["pi", "claude-code", "gemini-cli", "aider", "opencode-v1"]
    digests = {}
    for declared in ("1", "0"):
        done = subprocess.run([sys.executable, "-c", CHILD, str(CORPORA / SESSIONS[1]), declared, *strategies],
                              capture_output=True, text=True, check=False, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        digests[declared] = done.stdout.split("\n")
    assert all(int(line.split()[1]) for line in digests["1"] if line), "each session must compact at 32k for the comparison to cover summaries"
    assert digests["1"] == digests["0"]

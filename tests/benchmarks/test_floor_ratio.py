"""Replay cost against the tokenization floor, on the largest real transcripts (issue 18).

The floor is the CPU time of counting every distinct message text of a transcript once with the
profile's tiktoken encoding (tiktoken's own `encode_ordinary` of each whole text, no memo: the call the
token counter makes, so the two compare like with like). Each strategy's replay of the same
transcript is measured in CPU time right after its own floor, in the same process state, and
reported as the ratio replay / floor: the two are paired, so the machine's load cancels out of
the ratio as far as it can. The replay starts from a cold token memo too (the process's shared
counter is dropped first), so a strategy is not helped by the texts an earlier one counted. The
floor is short (0.05-0.3 s) and moves most with the load, so it is the median of `FLOOR_ROUNDS`
measurements right before the replay and as many right after it (the machine's speed moves by up to
twice between minutes; a floor measured on both sides follows what the replay ran at); the replay is measured once (a second replay in the same
process would be answered in part from memos the first one filled: the offline models answer a
request they have answered before). The strategy's modules are imported before it (importing is not
replaying), and the garbage collector is settled around it: earlier cells' garbage is collected and
what the benchmark holds is frozen (`gc.freeze`) before the clock starts, and the replay's own garbage
is collected before it stops, so each replay pays for collecting its own objects and none pays for
another's (a full collection that freed an earlier cell's garbage cost 0.1-0.15 s, two to three
floors of the Codex file, in whichever cell it fell). Beside the ratio, each row prints the characters the replay's
token counter sent to tiktoken over the characters of the floor's texts, a count that timing noise
does not touch (the counter's `encode` is wrapped to add them up, well under a microsecond a call). A file
of several sessions (Aider's 1,134) counts as one: the floor over all its distinct texts, the
replays of all its sessions summed. One row per (transcript, strategy, profile) is printed at the
end of the session, with the issue 18 target (≤ 3×) marked; nothing is asserted about time.

    .venv/bin/python -m pytest tests/benchmarks/test_floor_ratio.py -m benchmarks -s -n 0
"""

from __future__ import annotations

import gc
import statistics
import time

import pytest

import compaction_bench as bench
from compaction_bench.importing import load_transcripts
from compaction_bench.profiles import get_profile
from compaction_bench.registry import strategy_class, strategy_ids
from compaction_bench.tokens import TokenCounter, shared_counter
from tests.conftest import CORPORA

TRANSCRIPTS = {
    "claude-code 3.0 MB": "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/b566e56e-94a7-425e-a662-d701321e27ce.jsonl",
    "pi 2.4 MB": "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl",
    "codex 1.9 MB": "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl",
    "aider 4.2 MB": "aider-chat-history-md/Aider-AI__aider/chat-history.md",
}
#: issue 18's bound on replay CPU over the floor
TARGET = 3.0
PROFILES = ("32k", "64k")
#: how many floor measurements are made right before the replay, and again right after it (the paired floor is their median)
FLOOR_ROUNDS = 3
_rows: list[tuple[str, str, str, float, float, float]] = []


def floor_texts(transcripts: list[bench.Transcript]) -> set[str]:
    """Each distinct item text of the transcripts (message texts and tool call arguments)."""
    return {t for transcript in transcripts for item in transcript.items for t in (item.text, item.arguments or "") if t}


def floor_seconds(transcripts: list[bench.Transcript], encoding: str) -> float:
    """CPU seconds to count each distinct item text once with a fresh encoder."""
    texts = floor_texts(transcripts)
    encode = TokenCounter(encoding).encoding.encode_ordinary  # tiktoken itself: the floor is the tokenizer's cost
    started = time.process_time()
    for text in texts:
        encode(text)
    return time.process_time() - started


@pytest.fixture(scope="module", params=list(TRANSCRIPTS))
def transcript(request):
    path = CORPORA / TRANSCRIPTS[request.param]
    if not path.exists():
        pytest.skip(f"{path} is not available")
    return request.param, load_transcripts(path)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("strategy", strategy_ids(builtin_only=True))
def test_replay_over_floor(transcript, strategy, profile):
    label, sessions = transcript
    encoding = get_profile(profile).tokenizer
    strategy_class(strategy)  # the strategy's modules are imported before the measurement: importing them is not replaying
    floors = [floor_seconds(sessions, encoding) for _ in range(FLOOR_ROUNDS)]
    shared_counter.cache_clear()
    encoded = [0]
    encode = TokenCounter.encode

    def counted_encode(self: TokenCounter, text: str) -> list[int]:
        encoded[0] += len(text)
        return encode(self, text)

    TokenCounter.encode = counted_encode
    gc.collect()  # earlier cells' garbage is freed outside the measurement ...
    gc.freeze()  # ... and what the benchmark holds is left out of the collections made during it
    try:
        started = time.process_time()
        for session in sessions:
            bench.replay(session, strategy, profile=profile)
        gc.collect()  # the replay's own garbage is freed inside it
        replay = time.process_time() - started
    finally:
        gc.unfreeze()
        TokenCounter.encode = encode
    floors += [floor_seconds(sessions, encoding) for _ in range(FLOOR_ROUNDS)]
    floor = statistics.median(floors)
    characters = sum(map(len, floor_texts(sessions)))
    _rows.append((label, strategy, profile, floor, replay, encoded[0] / characters))
    print(f"\n{_line(_rows[-1])}", flush=True)


def _line(row: tuple[str, str, str, float, float, float]) -> str:
    t, s, p, f, r, c = row
    ratio = r / f if f > 0 else float("inf")
    return (
        f"{t:<18} {s:<26} {p:>4}  floor {f:6.3f}s  replay {r:7.3f}s  ratio {ratio:6.1f}  characters encoded {c:5.2f}"
        f"{'' if ratio <= TARGET else '  > 3x'}"
    )


def _summary_lines() -> list[str]:
    return [_line(row) for row in _rows]


@pytest.fixture(scope="module", autouse=True)
def _print_rows(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _rows:
        reporter.write_line("")
        reporter.write_line("replay CPU / tokenization floor (same process, paired):")
        for line in _summary_lines():
            reporter.write_line(line)

"""Replay cost against the tokenization floor, on the largest real transcripts (issue 18).

The floor is the CPU time of counting every distinct message text of a transcript once with the
profile's tiktoken encoding (tiktoken's own `encode_ordinary` of each whole text, no memo: the call the
token counter makes, so the two compare like with like). Each cell (transcript, strategy, profile)
runs in a fresh process (`measure_cell`), so its replay starts from cold memos, the token counter's
and the offline models' alike: no strategy is helped by the texts and lines an earlier one read.
In that process the floor is measured `FLOOR_ROUNDS` times right before the replay and as many times
right after it, and the replay once, in CPU time; the cell reports replay / median floor. The two are
paired, so the machine's load cancels out of the ratio as far as it can (its speed moves by up to
twice between minutes; a floor measured on both sides follows what the replay ran at). The strategy's
modules are imported and every offline tiktoken encoding is loaded before the clock starts: importing
and loading a tokenizer file are a process's set-up, paid once per worker in a run, not replaying, and
the floor's own encoding is loaded outside its measurement too (`aider` counts its messages with a
second encoding, cl100k_base, whose 0.1 s load it would otherwise pay alone). The garbage collector
is settled around the replay: the loading's garbage is collected and what the process holds is frozen
(`gc.freeze`) before it, and the replay's own garbage is collected inside its measurement, so a replay
pays for collecting its own objects and nothing else. Beside the ratio, each row prints the
characters the replay's token counter sent to tiktoken over the characters of the floor's texts, a
count that timing noise does not touch (the counter's `encode` is wrapped to add them up, well under
a microsecond a call). A file of several sessions (Aider's 1,134) counts as one: the floor over all
its distinct texts, the replays of all its sessions summed. One row per cell is printed at the end
of the session, with the issue 18 target (≤ 3×) marked; nothing is asserted about time.

    .venv/bin/python -m pytest tests/benchmarks/test_floor_ratio.py -m benchmarks -s -n 0
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time

import pytest

import compaction_bench as bench
from compaction_bench.importing import load_transcripts
from compaction_bench.profiles import get_profile
from compaction_bench.registry import strategy_class, strategy_ids
from compaction_bench.tokens import ENCODING_FILES, TokenCounter, get_encoding
from tests.benchmarks.conftest import ROOT
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


def measure_cell(path: str, strategy: str, profile: str) -> dict[str, float]:
    """One cell, measured in the process that calls it (a fresh one: `test_replay_over_floor`): the floor
    `FLOOR_ROUNDS` times before and after the replay, and the replay, with the characters it tokenized."""
    sessions = load_transcripts(path)
    encoding = get_profile(profile).tokenizer
    strategy_class(strategy)  # the strategy's modules are imported before the measurement: importing them is not replaying
    for name in ENCODING_FILES:  # and every encoding a strategy may count with is loaded, as the floor's own is
        get_encoding(name)
    floors = [floor_seconds(sessions, encoding) for _ in range(FLOOR_ROUNDS)]
    encoded = [0]
    encode = TokenCounter.encode

    def counted_encode(self: TokenCounter, text: str) -> list[int]:
        encoded[0] += len(text)
        return encode(self, text)

    TokenCounter.encode = counted_encode
    gc.collect()  # the loading's garbage is freed outside the measurement ...
    gc.freeze()  # ... and what the process holds (the transcript, the imports) is left out of the collections made during it
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
    return {"floor": statistics.median(floors), "replay": replay, "characters": encoded[0] / sum(map(len, floor_texts(sessions)))}


CHILD = """
import json, sys
from tests.benchmarks.test_floor_ratio import measure_cell
print(json.dumps(measure_cell(*sys.argv[1:4])))
"""


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("strategy", strategy_ids(builtin_only=True))
@pytest.mark.parametrize("label", list(TRANSCRIPTS))
def test_replay_over_floor(label, strategy, profile):
    path = CORPORA / TRANSCRIPTS[label]
    if not path.exists():
        pytest.skip(f"{path} is not available")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), strategy, profile], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cell = json.loads(done.stdout.strip().splitlines()[-1])
    _rows.append((label, strategy, profile, cell["floor"], cell["replay"], cell["characters"]))
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
        reporter.write_line("replay CPU / tokenization floor (a fresh process per cell, paired):")
        for line in _summary_lines():
            reporter.write_line(line)

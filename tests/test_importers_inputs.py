"""What reaches an importer, and what it leaves out: the audit's input defects (foreign lines in a
Claude Code file, a `.zst` cut off inside a frame, FIFOs and devices, a local dataset that touched
the network, a first line longer than the sniffed head, reused tool-call ids, control characters
in names). Each case is a hand-built file or real recorded lines whose right answer is known
without the importer: the lines pasted in, the bytes cut off, the calls and results written."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from compaction_bench.fidelity import fidelity_rows
from compaction_bench.importing import (
    FIRST_LINE_BYTES,
    SNIFF_BYTES,
    ImportFailure,
    detect,
    formats,
    load_transcripts,
    read_input,
    zstd_truncation,
)
from compaction_bench.progress import PlainLines, ProgressEvent, shown
from compaction_bench.scenarios.hf_dataset import is_hub_id
from compaction_bench.transcript import Transcript
from tests.conftest import BENCH, CORPORA

CLAUDE = CORPORA / "claude-code-jsonl/d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
CLAUDE_SKIPS = CORPORA / "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/24a90d02-9724-4548-9f4f-97bcb9f93ef3.jsonl"
CODEX = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"


def lines_of(path: Path, n: int | None = None) -> list[bytes]:
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
    return lines[:n] if n is not None else lines


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def same_items(a: Transcript, b: Transcript) -> bool:
    return [i.to_dict() for i in a.items] == [i.to_dict() for i in b.items]


@pytest.fixture
def no_hang() -> Iterator[None]:
    """A read that blocks (a FIFO with no writer) fails the test after 20 s instead of hanging it."""

    def expired(*_: object) -> None:
        raise TimeoutError("the import blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- 1. lines a Claude Code import does not take
def test_codex_lines_pasted_into_a_claude_code_file_are_each_a_problem(tmp_path):
    codex = lines_of(CODEX, 60)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join(codex + lines_of(CLAUDE)) + b"\n")
    assert detect(mixed).format == "claude-code"
    (alone,) = load_transcripts(CLAUDE)
    (got,) = load_transcripts(mixed)
    assert same_items(got, alone)  # the Claude Code part is imported as it is on its own
    problems = got.meta["problems"]
    assert len(problems) == 60
    for number, (line, problem) in enumerate(zip(codex, problems, strict=True), start=1):
        kind = json.loads(line)["type"]
        assert problem == f"{mixed}:{number}: not a Claude Code line (type {kind!r}); line kept out"


def test_openai_message_lines_in_a_claude_code_file_are_problems(tmp_path):
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join(lines_of(CLAUDE)) + b"\n" + b"".join(json.dumps(m).encode() + b"\n" for m in chat))
    (got,) = load_transcripts(mixed)
    n = len(lines_of(CLAUDE))
    assert got.meta["problems"] == tuple(
        f"{mixed}:{n + k}: not a Claude Code line (no type field; keys role, content); line kept out" for k in (1, 2)
    )


def test_a_run_warns_about_the_pasted_lines(tmp_path, caplog):
    from compaction_bench.runner import file_cases

    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(b"\n".join(lines_of(CODEX, 5) + lines_of(CLAUDE)) + b"\n")
    with caplog.at_level("WARNING"):
        file_cases([str(mixed)], None)
    assert f"{mixed}: 5 import problem(s), e.g. {mixed}:1: not a Claude Code line (type 'session_meta')" in caplog.text


def test_claude_codes_own_non_message_lines_are_skipped_not_problems():
    """A real session with title summaries, file-history snapshots and queue operations."""
    raw = [json.loads(line) for line in lines_of(CLAUDE_SKIPS)]
    own = {"summary", "file-history-snapshot", "queue-operation"}
    expected = {kind: sum(1 for r in raw if r.get("type") == kind) for kind in own}
    assert all(expected.values())
    (got,) = load_transcripts(CLAUDE_SKIPS)
    assert "problems" not in got.meta
    assert got.meta["skipped"] == expected


def cc(uuid: str | None, parent: str | None, kind: str, **extra) -> dict:
    line = {"parentUuid": parent, "type": kind, "isSidechain": False, "sessionId": "s1", "timestamp": "t"}
    return ({"uuid": uuid} if uuid else {}) | line | extra


def test_a_parent_link_through_an_attachment_line_is_followed(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [
        cc("u1", None, "user", message={"role": "user", "content": "fix it"}),
        cc("a1", "u1", "attachment", attachment={"type": "todo"}),
        cc("p1", "a1", "progress", data={"type": "hook_progress"}),
        cc("u2", "p1", "assistant", message={"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "done"}]}),
    ])
    (got,) = load_transcripts(path)
    assert [(i.id, i.kind) for i in got.items] == [("u1", "user"), ("u2", "assistant")]
    assert got.meta["skipped"] == {"attachment": 1, "progress": 1} and "problems" not in got.meta


def test_a_message_line_without_a_uuid_is_a_problem(tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [
        cc("u1", None, "user", message={"role": "user", "content": "fix it"}),
        cc(None, "u1", "user", message={"role": "user", "content": "lost?"}),
    ])
    (got,) = load_transcripts(path)
    assert got.meta["problems"] == (f"{path}:2: a user line without a uuid cannot be placed in the session; line kept out",)


# --------------------------------------------------------------------------- 2. a .zst cut off inside a frame
def test_a_cut_off_last_frame_is_a_problem_and_the_whole_frames_are_kept(tmp_path):
    lines = lines_of(CODEX)
    first, second = b"\n".join(lines[:100]) + b"\n", b"\n".join(lines[100:110]) + b"\n"
    assert len(second) < 128 * 1024  # one block: nothing of the cut frame decompresses
    compressor = zstandard.ZstdCompressor()
    packed = compressor.compress(first) + compressor.compress(second)
    cut = tmp_path / "rollout.jsonl.zst"
    cut.write_bytes(packed[:-30])
    plain = tmp_path / "first.jsonl"
    plain.write_bytes(first)
    start = len(compressor.compress(first))
    (got,) = load_transcripts(cut)
    (expected,) = load_transcripts(plain)
    assert same_items(got, expected)
    assert got.meta["problems"] == (
        f"{cut}: truncated zstd file: frame 2 (from byte {start:,}) is cut off where the file ends (byte {len(packed) - 30:,}); "
        f"the {len(first):,} bytes before the cut are kept, the rest is lost",
    )


def test_a_single_cut_off_frame_is_a_truncated_zstd_error(tmp_path):
    cut = tmp_path / "rollout.jsonl.zst"
    cut.write_bytes(zstandard.ZstdCompressor().compress(CODEX.read_bytes()[:40_000])[:-30])
    with pytest.raises(ImportFailure, match=rf"^{cut}: truncated zstd file: frame 1 \(from byte 0\) is cut off"):
        detect(cut)
    for fmt in ("auto", "codex", "canonical", "openai-messages"):
        with pytest.raises(ImportFailure, match=rf"^{cut}: truncated zstd file: frame 1"):
            load_transcripts(cut, format=fmt)


def test_a_frame_cut_between_blocks_keeps_the_whole_blocks(tmp_path):
    raw = CODEX.read_bytes()
    assert len(raw) > 3 * 128 * 1024  # several 128 KiB blocks in one frame
    packed = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    path = tmp_path / "rollout.jsonl.zst"
    path.write_bytes(packed[: len(packed) // 2])
    data, problems = read_input(path)
    assert 0 < len(data) < len(raw) and raw.startswith(data)  # what the whole blocks before the cut hold
    assert problems == [f"{path}: truncated zstd file: frame 1 (from byte 0) is cut off where the file ends (byte {len(packed) // 2:,}); "
                        f"the {len(data):,} bytes before the cut are kept, the rest is lost"]
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_bytes(data)
    (got,) = load_transcripts(path)
    (expected,) = load_transcripts(prefix)
    assert same_items(got, expected) and got.items
    # the line the cut goes through is reported too, under its number
    assert got.meta["problems"] == (problems[0], *(q.replace(str(prefix), str(path)) for q in expected.meta["problems"]))
    cut_line = data.count(b"\n") + 1
    assert any(q.startswith(f"{path}:{cut_line}: malformed JSON") for q in got.meta["problems"])


def test_the_canonical_reader_refuses_a_cut_off_file(tmp_path):
    (transcript,) = load_transcripts(CLAUDE)
    compressor = zstandard.ZstdCompressor()
    text = transcript.dumps().encode()
    path = tmp_path / "canonical.jsonl.zst"
    path.write_bytes(compressor.compress(text[:2000]) + compressor.compress(text[2000:])[:-10])
    with pytest.raises(ImportFailure, match=rf"^{path}: truncated zstd file: frame 2"):
        load_transcripts(path)


def test_whole_frames_with_checksums_and_skippable_frames_are_not_truncated(tmp_path):
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    first, last = compressor.compress(bytes(range(256)) * 2000), compressor.compress(b"b\n")
    packed = first + skippable + last
    assert zstd_truncation(io.BytesIO(packed), len(packed)) is None
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed), read_across_frames=True).read(10**7) == bytes(range(256)) * 2000 + b"b\n"

    def where(cut: int) -> str | None:
        return zstd_truncation(io.BytesIO(packed[:-cut]), len(packed) - cut)

    start = len(first) + len(skippable)
    for cut in range(1, len(last)):  # anywhere in the last frame, its checksum included
        assert where(cut) == f"frame 3 (from byte {start:,}) is cut off where the file ends (byte {len(packed) - cut:,})", cut
    assert where(len(last)) is None  # the cut falls between whole frames
    assert where(len(last) + 1) == f"frame 2 (from byte {len(first):,}) is cut off where the file ends (byte {start - 1:,})"
    assert where(len(last) + len(skippable)) is None
    assert where(len(last) + len(skippable) + 1).startswith("frame 1 (from byte 0)")


# --------------------------------------------------------------------------- 3. only regular files are read
@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("fmt", ["auto", *sorted(formats())])
def test_a_fifo_is_refused_before_it_is_read(fifo, fmt, no_hang):
    with pytest.raises(ImportFailure, match=rf"^{fifo}: is a named pipe \(FIFO\), not a regular file"):
        load_transcripts(fifo, format=fmt)


def test_a_device_is_refused_before_it_is_read(no_hang):
    for fmt in ("auto", "codex", "openai-messages"):
        with pytest.raises(ImportFailure, match=r"^/dev/zero: is a character device, not a regular file"):
            load_transcripts("/dev/zero", format=fmt)


def test_paths_that_are_no_file_say_what_they_are(tmp_path, fifo, no_hang):
    loop = tmp_path / "loop1"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    broken = tmp_path / "broken.jsonl"
    broken.symlink_to(tmp_path / "gone.jsonl")
    through_file = tmp_path / "file.txt"
    through_file.write_text("x")
    cases = {
        loop: "symlink loop",
        broken: f"broken symlink (it points to {tmp_path / 'gone.jsonl'}, which does not exist)",
        tmp_path / "missing.jsonl": "no such file",
        through_file / "x.jsonl": "no such file (a part of the path is a file, not a folder)",
        tmp_path: "is a directory; pass the files inside it",
    }
    for path, reason in cases.items():
        with pytest.raises(ImportFailure, match="^" + re.escape(f"{path}: {reason}")):
            load_transcripts(path)
    with pytest.raises(ImportFailure, match="named pipe"):
        Transcript.read(fifo)
    with pytest.raises(ImportFailure, match="named pipe"):
        fidelity_rows(fifo)


@pytest.mark.parametrize("args", [["inspect", "{fifo}"], ["inspect", "{fifo}", "--format", "codex"],
                                  ["inspect", "/dev/zero", "--format", "codex"], ["fidelity", "pi", "{fifo}"],
                                  ["fidelity", "claude-code", "{fifo}"]])
def test_the_cli_refuses_a_fifo_or_a_device_with_one_line(fifo, args):
    proc = subprocess.run([*BENCH, *(a.format(fifo=fifo) for a in args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- 4. local datasets stay local
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

AUDITED = """
import socket, sys
attempts = []
sys.addaudithook(lambda event, args: attempts.append((event, args[:2])) if event in ("socket.getaddrinfo", "socket.connect") else None)
from compaction_bench.importing import load_transcripts, ImportFailure
out = []
for arg, fmt in [(a.split("=")[0], a.split("=")[1]) for a in sys.argv[1:]]:
    try:
        out.append(len(load_transcripts(arg, format=fmt)))
    except ImportFailure as exc:
        out.append(str(exc))
import datasets.config, huggingface_hub.constants
print(repr((out, attempts, datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)))
"""


def test_local_dataset_files_never_touch_the_network(tmp_path):
    import pandas as pd

    parquet = tmp_path / "ds.parquet"
    pd.DataFrame({"messages": [CHAT, CHAT[:1]]}).to_parquet(parquet)
    jsonl = write_jsonl(tmp_path / "ds.jsonl", [{"messages": CHAT}, {"messages": CHAT}, {"messages": CHAT[:1]}])
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}
    args = [f"{parquet}=auto", f"{jsonl}=hf-dataset", f"{tmp_path}/nosuch/ds.jsonl=hf-dataset", f"{tmp_path}/typo=hf-dataset"]
    proc = subprocess.run([sys.executable, "-c", AUDITED, *args], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out, attempts, datasets_offline, hub_offline = eval(proc.stdout.strip().splitlines()[-1])
    assert out == [2, 3, f"{tmp_path}/nosuch/ds.jsonl: no such file", f"{tmp_path}/typo: no such file"]
    assert attempts == []
    assert (datasets_offline, hub_offline) == (False, False)  # the offline switches are put back after a local load


def test_what_counts_as_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert is_hub_id("openai/gsm8k") and is_hub_id("HuggingFaceH4/ultrachat_200k") and is_hub_id("bigcode/the-stack-v1.2")
    for text in ("./openai/gsm8k", "/openai/gsm8k", "~/x/y", "gsm8k", "a/b/c", "org/name.jsonl", "org/name.parquet",
                 "../org/name", "org/", "/x", "data/thing.json"):
        assert not is_hub_id(text), text
    (tmp_path / "data" / "thing").write_text("")
    assert not is_hub_id("data/thing")  # it exists locally: a path


def test_a_hub_id_offline_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ImportFailure, match="^org-x/set-y: no such file, and Hugging Face Hub ids cannot be loaded offline"):
        load_transcripts("org-x/set-y", format="hf-dataset")


# --------------------------------------------------------------------------- 5. a first line longer than the sniffed head
def test_a_jsonl_whose_first_line_is_longer_than_the_head_is_detected(tmp_path):
    prompt = "S" * (SNIFF_BYTES + 50_000)
    path = write_jsonl(tmp_path / "big.jsonl", [{"role": "system", "content": prompt}, *CHAT])
    assert detect(path).format == "openai-messages"
    (got,) = load_transcripts(path)
    assert [(i.kind, len(i.text)) for i in got.items] == [("system", len(prompt)), ("user", 2), ("assistant", 5)]
    packed = tmp_path / "big.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes()))
    assert detect(packed).format == "openai-messages"


def test_a_first_line_beyond_the_bound_is_named_in_the_error(tmp_path):
    path = write_jsonl(tmp_path / "huge.jsonl", [{"role": "system", "content": "S" * (FIRST_LINE_BYTES + 10)}, *CHAT])
    with pytest.raises(ImportFailure, match=f"unrecognised transcript format; its first line is longer than {FIRST_LINE_BYTES:,} bytes"):
        detect(path)
    assert load_transcripts(path, format="openai-messages")[0].items[0].kind == "system"


# --------------------------------------------------------------------------- 6. reused tool-call ids, names, duplicates
def call(cid: str, command: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


def result(cid: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def test_a_second_result_for_an_answered_call_is_a_problem(tmp_path):
    path = write_jsonl(tmp_path / "dup.jsonl", [
        {"role": "user", "content": "fix"}, call("c1", "ls"), result("c1", "a.py"), call("c1", "cat a.py"),
        result("c1", "print(1)"), result("c1", "print(2)"), {"role": "assistant", "content": "Done."},
    ])
    (got,) = load_transcripts(path)
    assert [i.id for i in got.items if i.kind == "tool_result"] == ["tool_result-2", "tool_result-4", "tool_result-5"]
    assert got.meta["problems"] == (f"{path}: tool result tool_result-5 answers call id 'c1' again (its call was already answered)",)


def test_two_open_calls_with_one_id_are_a_problem(tmp_path):
    both = {"role": "assistant", "content": "", "tool_calls": [call("c1", "ls")["tool_calls"][0], call("c1", "pwd")["tool_calls"][0]]}
    path = write_jsonl(tmp_path / "dup.jsonl", [{"role": "user", "content": "fix"}, both, result("c1", "a"), result("c1", "b")])
    (got,) = load_transcripts(path)
    assert got.meta["problems"] == (
        f"{path}: tool call c1#2 repeats the call id 'c1' of c1, which is not answered yet; which result answers which call cannot be told",
    )


def test_an_id_reused_after_its_answer_pairs_in_order_and_is_no_problem(tmp_path):
    path = write_jsonl(tmp_path / "reuse.jsonl", [
        {"role": "user", "content": "fix"}, call("c1", "ls"), result("c1", "a.py"), call("c1", "pwd"), result("c1", "/"),
    ])
    (got,) = load_transcripts(path)
    assert "problems" not in got.meta and "orphans" not in got.meta


def test_progress_lines_escape_control_characters_in_names():
    stream = io.StringIO()
    PlainLines(stream)(ProgressEvent("cells", 1, 2, "[bold]ev\x1b[31mil.json · truncate\r\x07"))
    assert stream.getvalue() == "cells 1/2 [bold]ev\\x1b[31mil.json · truncate\\r\\x07\n"
    assert shown("plain · ü name") == "plain · ü name"

"""Nothing lost, nothing hangs, no traceback (issue 17): each case here is one of the issue's defects,
rebuilt by hand or from a real recorded session, with the behaviour the issue asks for."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import zstandard

import compaction_bench as bench
from compaction_bench.importing import ImportFailure, detect, formats, load_transcripts, read_head
from compaction_bench.metrics.grading import PROMPT_DIR as JUDGE_PROMPT_DIR
from compaction_bench.store import StoreError
from compaction_bench.templates import PromptSet, TemplateError
from compaction_bench.transcript import Item, Transcript, TranscriptError
from tests.conftest import BENCH, CORPORA, assert_user_error, bench_cli, write_tiny_session
from tests.model_servers import RefusingHandler

CLAUDE = CORPORA / "claude-code-jsonl/d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"
CODEX = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"


def chat_line(role: str, content: str, **extra) -> str:
    return json.dumps({"role": role, "content": content, **extra})


@pytest.fixture(scope="module")
def tiny_session(tmp_path_factory) -> Path:
    """A hand-built session with one fact, and a probe file asking for it."""
    return write_tiny_session(tmp_path_factory.mktemp("tiny"))


# --------------------------------------------------------------------------- 1: import paths
def tau_container(task_ids: list[str]) -> str:
    runs = [{"task_id": t, "trial": 0, "reward": 1.0, "info": {}, "traj": [json.loads(chat_line("user", f"task {n}")),
             json.loads(chat_line("assistant", "done"))]} for n, t in enumerate(task_ids)]
    return json.dumps(runs)


def test_import_never_writes_outside_the_output_folder_nor_overwrites(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    victim = tmp_path / "a" / "x" / "notes.jsonl"
    victim.parent.mkdir(parents=True)
    victim.write_text("precious\n")
    source = tmp_path / "runs.json"
    # Session ids from the file: a traversal, an absolute path, and the same id twice.
    source.write_text(tau_container(["/../../x/notes", "../../x/notes", "/etc/passwd", "same", "same"]))
    proc = bench_cli("import", str(source), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "precious\n"
    written = sorted(out.iterdir())
    assert len(written) == 5 and all(p.parent == out and p.suffix == ".jsonl" for p in written)
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl")) == sorted([p.name for p in written] + ["notes.jsonl"])
    # Every session is there once: the two "same" runs got distinct ids (`#row<N>`, N their place among the runs)
    # and so distinct file names.
    ids = sorted(Transcript.read(p).id for p in written)
    assert ids == sorted([*(f"runs:task{t}:trial0" for t in ["/../../x/notes", "../../x/notes", "/etc/passwd"]),
                          "runs:tasksame:trial0#row3", "runs:tasksame:trial0#row4"])
    # Importing again into the same folder is an error, not a silent overwrite.
    before = {p: p.read_bytes() for p in written}
    assert_user_error(bench_cli("import", str(source), "-o", str(out)), "already exists; not overwritten")
    assert {p: p.read_bytes() for p in written} == before


def test_openhands_instance_ids_are_sanitized(tmp_path):
    history = [{"id": 0, "action": "message", "source": "user", "args": {"content": "fix it"}},
               {"id": 1, "action": "message", "source": "agent", "args": {"content": "fixed"}}]
    source = tmp_path / "output.jsonl"
    source.write_text("\n".join(json.dumps({"instance_id": i, "history": history}) for i in ("../../evil", "../../evil", "ok")) + "\n")
    out = tmp_path / "out"
    proc = bench_cli("import", str(source), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len(list(out.iterdir())) == 3 and not (tmp_path.parent / "evil.jsonl").exists()


def test_a_single_session_output_file_is_not_overwritten(tiny_session, tmp_path):
    target = tmp_path / "exists.jsonl"
    target.write_text("keep me\n")
    assert_user_error(bench_cli("import", str(tiny_session), "-o", str(target)), f"{target}: already exists")
    assert target.read_text() == "keep me\n"


# --------------------------------------------------------------------------- 3, 10: zstd
def test_every_frame_of_a_multi_frame_zst_is_read(tmp_path):
    raw = CODEX.read_bytes()
    lines = raw.split(b"\n")
    compressor = zstandard.ZstdCompressor()
    frames = b"".join(compressor.compress(b"\n".join(lines[i : i + 40]) + b"\n") for i in range(0, len(lines), 40))
    packed = tmp_path / "rollout.jsonl.zst"
    packed.write_bytes(frames)
    assert len(lines) > 80  # several frames
    plain = load_transcripts(CODEX)[0]
    unpacked = load_transcripts(packed)[0]
    assert len(unpacked.steps()) == len(plain.steps()) and len(unpacked.items) == len(plain.items)
    assert not unpacked.meta.get("problems")


@pytest.fixture(scope="module")
def zstd_bomb(tmp_path_factory) -> Path:
    """73 KB-class file that expands to 2.2 GiB (a valid first line, then blanks)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.jsonl.zst"
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    block = b"\n" * (1 << 20)
    with open(path, "wb") as fh:
        fh.write(compressor.compress(chat_line("user", "hi").encode() + b"\n"))
        for _ in range(2253):
            fh.write(compressor.compress(block))
        fh.write(compressor.flush())
    return path


def test_a_zstd_bomb_is_refused_with_bounded_memory(zstd_bomb):
    assert zstd_bomb.stat().st_size < 200_000
    code = (
        "import sys\n"
        "from compaction_bench.importing import load_transcripts\n"
        "from compaction_bench.errors import BenchError\n"
        "try:\n    load_transcripts(sys.argv[1])\nexcept BenchError as exc:\n    print('refused:', exc)\n"
        # VmHWM is this process image's own peak; ru_maxrss would also carry the forking parent's RSS across exec
        "print('peak', next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(zstd_bomb)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES": str(64 << 20)})
    assert proc.returncode == 0, proc.stderr
    assert f"refused: {zstd_bomb}: decompresses to more than 67,108,864 bytes" in proc.stdout
    assert "COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES" in proc.stdout
    peak_kib = int(proc.stdout.split("peak")[1])
    assert peak_kib < 512 * 1024, f"peak RSS {peak_kib} KiB"


def test_a_bad_decompression_bound_is_a_user_error(tiny_session, tmp_path):
    packed = tmp_path / "tiny.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(tiny_session.read_bytes()))
    assert len(load_transcripts(packed)[0].items) == 4
    proc = bench_cli("inspect", str(packed), env={"COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES": "lots"})
    assert_user_error(proc, "COMPACTION_BENCH_MAX_DECOMPRESSED_BYTES='lots': expected a number of bytes")


# --------------------------------------------------------------------------- 13: hostile JSON
HOSTILE_HEADS = {
    "deep list": "[" * 10_000 + "]" * 10_000,
    "deep object": '{"a":' * 10_000 + "1" + "}" * 10_000,
    "huge integer": '{"type": "session", "cwd": "/", "role": "user", "n": ' + "7" * 5000 + "}",
    "infinity": '{"role": "assistant", "usage": {"prompt_tokens": Infinity}}',
    "lone surrogate": '{"role": "user", "content": "\\udc80", "parentUuid": "\\ud800", "sessionId": "x"}',
    "nan": '{"format": "compaction-bench/transcript", "version": NaN}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADS))
def test_no_sniffer_raises_on_hostile_json(tmp_path, name):
    head = HOSTILE_HEADS[name] + "\n"
    for suffix in (".jsonl", ".json", ".traj", ".md"):
        path = tmp_path / f"hostile{suffix}"
        path.write_text(head)
        for fmt, cls in formats().items():
            try:
                result = cls.sniff(path, head)
            except Exception as exc:  # the defect: RecursionError / ValueError out of a sniffer
                pytest.fail(f"{fmt} sniffer raised {type(exc).__name__} on {name}")
            assert isinstance(result, bool)


def test_a_deeply_nested_line_is_a_problem_not_a_fatal_error(tmp_path):
    lines = CLAUDE.read_bytes().split(b"\n")
    deep = b'{"type": "user", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join([*lines[:5], deep, *lines[5:]]))
    damaged = load_transcripts(path)[0]
    original = load_transcripts(CLAUDE)[0]
    assert f"{path}:6: JSON nested too deeply; line kept out" in damaged.meta["problems"]
    assert len(damaged.items) == len(original.items)
    # A whole file that is one deep document names the file, exit 2, no traceback.
    whole = tmp_path / "deep.json"
    whole.write_text("[" * 10_000 + "]" * 10_000)
    assert_user_error(bench_cli("inspect", str(whole), "--format", "openai-messages"), str(whole), "nested too deeply")
    assert_user_error(bench_cli("inspect", str(whole)), str(whole))


def test_huge_integers_and_infinity_in_usage(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join([
        chat_line("user", "hello"),
        chat_line("assistant", "hi", usage={"prompt_tokens": float("inf"), "completion_tokens": 7}),
        '{"role": "user", "content": "n", "n": ' + "9" * 5000 + "}",
        chat_line("assistant", "bye", usage={"prompt_tokens": 12, "completion_tokens": 3}),
    ]) + "\n")
    transcript = load_transcripts(path)[0]
    assert [u.input for u in transcript.recorded_usage()] == [12]  # Infinity is not a count: that usage is unknown, and named
    assert any(p.startswith(f"{path}:2: line 2: usage field 'prompt_tokens' is Infinity") for p in transcript.meta["problems"])
    assert any(p.startswith(f"{path}:3: unusable JSON") for p in transcript.meta["problems"])
    # In a canonical file, a usage that is not a count is an error naming file and line.
    canonical = tmp_path / "canonical.jsonl"
    lines = Transcript("c", (Item("a", "assistant", "x", response=0),)).dumps().split("\n")
    lines[1] = lines[1][:-1] + ', "usage": {"input": Infinity}}'
    canonical.write_text("\n".join(lines))
    with pytest.raises(TranscriptError, match=rf"{canonical}:2: usage field 'input' is inf"):
        load_transcripts(canonical)
    assert_user_error(bench_cli("inspect", str(canonical)), f"{canonical}:2:")


def test_a_lone_surrogate_is_replaced_and_reported_and_the_session_runs(tmp_path):
    source = tmp_path / "chat.jsonl"
    source.write_text("\n".join([
        chat_line("user", "list files"),
        '{"role": "assistant", "content": "bad \\udc80 byte", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}',
    ]) + "\n")
    transcript = load_transcripts(source)[0]
    assert transcript.items[1].text == "bad \ufffd byte"
    assert transcript.meta["problems"] == (f"{source}:2: lone UTF-16 surrogate escape(s) replaced with U+FFFD",)
    out = tmp_path / "canonical.jsonl"
    proc = bench_cli("import", str(source), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert Transcript.read(out).items[1].text == "bad \ufffd byte"
    proc = bench_cli("inspect", str(source))
    assert proc.returncode == 0 and f"{source}:2: lone UTF-16 surrogate" in proc.stdout
    result = bench.replay(transcript, "truncate", profile="32k")
    assert any("bad \ufffd byte" in str(m.content) for r in result.requests for m in r.messages)
    # A canonical file holding one is refused naming file and line (it was not written by `bench import`).
    bad = tmp_path / "bad.jsonl"
    lines = Transcript("c", (Item("a", "assistant", "x", response=0),)).dumps().split("\n")
    bad.write_text("\n".join([lines[0], lines[1].replace('"x"', '"\\udc80"'), ""]))
    assert_user_error(bench_cli("inspect", str(bad)), f"{bad}:2: a lone UTF-16 surrogate")


def test_a_run_says_which_lines_its_import_kept_out_in_the_terminal_manifest_and_report(tmp_path):
    source = tmp_path / "chat.jsonl"
    source.write_text("\n".join([chat_line("user", "list files"), "{cut in half", chat_line("assistant", "two files")]) + "\n")
    proc = bench_cli("run", str(source), "-s", "none", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr
    problem = f"{source}:2: malformed JSON"
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and problem in warnings[0] and "1 import problem" in warnings[0], proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    (entry,) = json.loads((run / "manifest.json").read_text())["scenarios"]
    assert entry["import_problem_count"] == 1 and entry["import_problems"][0].startswith(problem)
    page = (run / "report.html").read_text()
    assert "Import problems" in page and "chat.jsonl: 1</span>" in page


def test_failed_cells_exit_1_after_the_leaderboard_and_report_of_the_scenarios_every_strategy_finished(tmp_path):
    strategy = tmp_path / "flaky.py"
    strategy.write_text(textwrap.dedent("""
        from compaction_bench.strategies.baselines import Truncate


        class Flaky(Truncate):
            name = "flaky"

            def on_user_turn(self, item):
                if "explode" in item.text:
                    raise RuntimeError("boom")
                return super().on_user_turn(item)
    """))
    calm, wild = tmp_path / "calm.jsonl", tmp_path / "wild.jsonl"
    calm.write_text(chat_line("user", "list files") + "\n" + chat_line("assistant", "two files") + "\n")
    wild.write_text(chat_line("user", "explode now") + "\n" + chat_line("assistant", "done") + "\n")
    # named by a short relative path: the 220-column table keeps every column whatever the temporary folder's name
    proc = bench_cli("run", str(calm), str(wild), "-s", "truncate", "-s", "flaky.py:Flaky", "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: 1 of 4 cells failed")
    # The leaderboard of what finished, both strategies over the one scenario both finished, and why.
    rows = [line for line in proc.stdout.splitlines() if "truncate" in line or "Flaky" in line]
    assert len(rows) == 3 and all(re.search(r"│\s+1\s+│", row) for row in rows[:2]), proc.stdout
    assert "note: left out of the 64k comparison: wild.jsonl, where flaky.py:Flaky did not finish" in proc.stdout
    (run,) = (tmp_path / "runs").iterdir()
    assert "Left out of this comparison: wild.jsonl" in (run / "report.html").read_text()
    # Nothing finished: still exit 1, and the report says there is no verdict and why.
    proc = bench_cli("run", str(wild), "-s", f"{strategy}:Flaky", "--out", str(tmp_path / "none-finished"))
    assert proc.returncode == 1 and "no finished cell to show" in proc.stdout, proc.stderr
    (run,) = (tmp_path / "none-finished").iterdir()
    assert "No verdict: no cell of this run finished (1 failed; see errors.log)." in (run / "report.html").read_text()


# --------------------------------------------------------------------------- 14: markup
def test_inspect_prints_transcript_text_verbatim_never_as_markup(tmp_path):
    path = tmp_path / "session.jsonl"
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": "[/bogus]", "sessionId": "[link=https://evil.example]click[/link]",
         "message": {"role": "user", "content": "hello"}},
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
         "message": {"id": "m1", "model": "[bold red]WARNING[/] \u001b[31mfake", "content": [{"type": "text", "text": "hi"}]}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    proc = bench_cli("inspect", str(path), env={"FORCE_COLOR": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "\x1b]8;" not in proc.stdout  # no terminal hyperlink
    shown = re.sub("\x1b\\[[0-9;]*m", "", proc.stdout)  # colours off: the text as a reader sees it
    assert "parent [/bogus] is not in the file" in shown
    assert "[link=https://evil.example]click[/link]" in shown
    assert "[bold red]WARNING[/]" in shown and "\\x1b[31mfake" in shown  # the recorded escape is shown, not executed
    assert "\x1b[31mfake" not in proc.stdout


# --------------------------------------------------------------------------- 16: damaged runs, full disk
@pytest.fixture(scope="module")
def finished_run(tiny_session, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return bench.run([tiny_session], ["none"], ["32k"], out=out, run_id="ok", jobs=1, probes=str(tiny_session.parent / "probes.yaml"),
                     report=False, progress=False)


@pytest.mark.parametrize("command", ["probes mine", "cache export", "compare --html", "gate --markdown"])
def test_an_output_file_that_exists_is_replaced_only_with_force(finished_run, tiny_session, tmp_path, command):
    target = tmp_path / "mine.out"
    target.write_text("curated by hand\n")
    args = {
        "probes mine": ["probes", "mine", str(tiny_session), "-o", str(target)],
        "cache export": ["cache", "export", str(finished_run), "-o", str(target)],
        "compare --html": ["compare", str(finished_run), str(finished_run), "--html", str(target)],
        # the tiny run's one probe cannot fail a probe rule (untested, exit 2): an integrity rule is a decision
        "gate --markdown": ["gate", "--baseline", str(finished_run), "--candidate", str(finished_run), "--fail-on", "integrity:0",
                            "--markdown", str(target)],
    }[command]
    assert_user_error(bench_cli(*args), f"{target}: already exists; not overwritten (pass --force")
    assert target.read_text() == "curated by hand\n"
    proc = bench_cli(*args, "--force")
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() != "curated by hand\n"  # replaced (an offline run stores no model response to export)


def test_a_run_folder_still_in_use_is_refused_by_the_commands_that_read_it(finished_run, tmp_path):
    import shutil

    from compaction_bench import run_folder

    copy = tmp_path / "busy"
    shutil.copytree(finished_run, copy)
    working = run_folder.claim(tmp_path, "busy", resume=True, new_id="unused")  # as a run working in it holds it
    try:
        for args in (["report", str(copy)], ["score", str(copy)], ["compare", str(copy), str(finished_run)],
                     ["gate", "--baseline", str(finished_run), "--candidate", str(copy), "--fail-on", "presence:0.02"]):
            assert_user_error(bench_cli(*args), f"{copy}: a run is still working in this folder")
    finally:
        working.release()
    assert bench_cli("report", str(copy)).returncode == 0  # once the run lets go


def damaged_copy(run: Path, tmp_path: Path, damage: str) -> Path:
    import shutil

    copy = tmp_path / f"damaged-{damage}"
    shutil.copytree(run, copy)
    if damage == "truncated parquet":
        data = (copy / "summary.parquet").read_bytes()
        (copy / "summary.parquet").write_bytes(data[: len(data) // 2])
    elif damage == "malformed manifest":
        (copy / "manifest.json").write_text('{"run_id": "ok", "config": ')
    elif damage == "manifest not UTF-8":
        (copy / "manifest.json").write_bytes(b'{"run_id": "caf\xe9"}')
    elif damage == "manifest without its scenarios":
        manifest = json.loads((copy / "manifest.json").read_text())
        del manifest["scenarios"]
        (copy / "manifest.json").write_text(json.dumps(manifest))
    elif damage == "manifest with a scenario that is not an object":
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["scenarios"].append("tiny")
        (copy / "manifest.json").write_text(json.dumps(manifest))
    else:
        assert damage == "manifest not an object"
        (copy / "manifest.json").write_text("[1, 2]")
    return copy


MANIFEST_DAMAGES = {"malformed manifest": "malformed JSON", "manifest not UTF-8": "malformed JSON", "manifest not an object": "not a JSON object",
                    "manifest with a scenario that is not an object": "a scenario is not an object with its name"}


@pytest.mark.parametrize("damage", ["truncated parquet", *MANIFEST_DAMAGES])
def test_report_compare_and_gate_on_a_damaged_run_exit_2(finished_run, tmp_path, damage):
    """Each command that reads a run says in one line which file of it is damaged and how (a manifest without its
    scenarios made `bench report` end in a template's traceback, exit 1)."""
    bad = damaged_copy(finished_run, tmp_path, damage)
    what = (f"{bad / 'manifest.json'}: ", MANIFEST_DAMAGES[damage]) if damage in MANIFEST_DAMAGES else (str(bad),)
    commands = [["report", str(bad)], ["compare", str(finished_run), str(bad)],
                ["gate", "--baseline", str(finished_run), "--candidate", str(bad), "--fail-on", "presence:0.02"]]
    for args in commands + ([["score", str(bad)]] if damage in MANIFEST_DAMAGES else []):  # score reads no table of the run
        assert_user_error(bench_cli(*args), *what)
    if damage in MANIFEST_DAMAGES:
        with pytest.raises(StoreError, match=r"manifest\.json: .*" + re.escape(MANIFEST_DAMAGES[damage])):
            bench.load_run(bad)
    else:
        with pytest.raises(StoreError, match=re.escape(f"{bad / 'summary.parquet'}: not a readable table (")):
            bench.load_run(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]  # score left no folder


def test_a_manifest_without_its_scenarios_is_named_by_the_commands_that_show_them(finished_run, tmp_path):
    """The report lists the run's scenarios and score re-imports them: both name the manifest and the missing field (the
    report ended in a template's traceback, exit 1). Compare and gate find the runs measured different scenarios."""
    bad = damaged_copy(finished_run, tmp_path, "manifest without its scenarios")
    for args in (["report", str(bad)], ["score", str(bad)]):
        assert_user_error(bench_cli(*args), f"{bad / 'manifest.json'}: not a run manifest this version reads ('scenarios' is missing)")
    for args in (["compare", str(finished_run), str(bad)], ["gate", "--baseline", str(finished_run), "--candidate", str(bad), "--fail-on", "presence:0.02"]):
        assert_user_error(bench_cli(*args), "are not comparable: scenarios differ")
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]


def test_a_full_output_folder_is_one_error_line(tiny_session, tmp_path):
    def small_files() -> None:  # every write beyond 64 KiB fails (EFBIG), like a full disk (ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    proc = subprocess.run(
        [*BENCH, "run", str(tiny_session), "-s", "none", "-p", "32k", "-o", str(tmp_path / "runs"), "--run-id", "full",
         "--probes", str(tiny_session.parent / "probes.yaml")],
        capture_output=True, text=True, timeout=600, preexec_fn=small_files,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error: ")], proc.stderr
    assert "File too large" in proc.stderr


def test_a_probe_file_with_invalid_utf8_is_one_error_line(tiny_session, tmp_path):
    probes = tmp_path / "probes.yaml"
    probes.write_bytes(b"- id: key\n  question: caf\xe9?\n")
    assert_user_error(bench_cli("run", str(tiny_session), "-s", "none", "-p", "32k", "-o", str(tmp_path), "--probes", str(probes)),
                      str(probes))


# --------------------------------------------------------------------------- 17: templates
def test_a_broken_template_is_named_before_the_run(tiny_session, tmp_path):
    broken = tmp_path / "broken.j2"
    broken.write_text("Summarize.\n{% for item in items %}\n{{ item.text }\n")
    with pytest.raises(TemplateError, match=rf"{broken}:3: prompt template 'codex_summary.j2' does not parse"):
        PromptSet({"codex_summary.j2": broken})
    proc = bench_cli("run", str(tiny_session), "-s", "codex-local", "-p", "32k", "-o", str(tmp_path / "runs"),
                     "--prompt", f"codex_summary.j2={broken}")
    assert_user_error(proc, f"{broken}:3:")
    assert not (tmp_path / "runs").exists()  # refused before any run folder or cell
    with pytest.raises(TemplateError, match="there is no template 'codex_sumary.j2'"):
        PromptSet({"codex_sumary.j2": broken})


@pytest.mark.parametrize("nesting", ["(" * 5_000 + "1" + ")" * 5_000, "[" * 50_000 + "]" * 50_000], ids=["parentheses", "lists"])
def test_a_template_nested_too_deeply_is_named_before_the_run(tiny_session, tmp_path, nesting):
    """Jinja's parser recurses once per level (a RecursionError traceback, exit 1, before)."""
    deep = tmp_path / "deep.j2"
    deep.write_text("{{ " + nesting + " }}\n")
    with pytest.raises(TemplateError, match=rf"{deep}: prompt template 'pi_summary.j2' does not parse: nested too deeply"):
        PromptSet({"pi_summary.j2": deep})
    assert_user_error(bench_cli("run", str(tiny_session), "-s", "pi", "-p", "32k", "-o", str(tmp_path / "runs"), "--prompt",
                                f"pi_summary.j2={deep}"), f"{deep}: prompt template 'pi_summary.j2' does not parse")
    assert not (tmp_path / "runs").exists()


def test_a_template_whose_macro_calls_itself_fails_to_render_as_a_template_error(tmp_path):
    endless = tmp_path / "endless.j2"
    endless.write_text("{% macro again() %}{{ again() }}{% endmacro %}{{ again() }}\n")
    prompts = PromptSet({"pi_summary.j2": endless})
    with pytest.raises(TemplateError, match=rf"{endless}: prompt template 'pi_summary.j2' failed to render: RecursionError"):
        prompts.render("pi_summary.j2")


@pytest.mark.parametrize("directory", [None, JUDGE_PROMPT_DIR], ids=["strategies", "judge"])
def test_every_shipped_template_parses_and_a_broken_one_is_named_by_parse_all(tmp_path, directory):
    shipped = PromptSet(directory=directory)
    assert not shipped._compiled  # the package's templates are parsed when first rendered
    shipped.parse_all()
    names = sorted(p.name for p in shipped.directory.glob("*.j2"))
    assert len(names) >= 2 and sorted(shipped._compiled) == names
    copied = tmp_path / "prompts"
    copied.mkdir()
    for name in names:
        (copied / name).write_text(shipped.source(name))
    (copied / names[-1]).write_text("{% if %}\n")
    with pytest.raises(TemplateError, match=rf"{copied / names[-1]}:1: prompt template '{names[-1]}' does not parse"):
        PromptSet(directory=copied).parse_all()


# --------------------------------------------------------------------------- 18: a failed answerer
class Refusing(RefusingHandler):
    calls = 0


def test_a_run_whose_answerer_always_failed_says_so_and_exits_non_zero(tiny_session, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        args = [str(tiny_session), "-s", "none", "-p", "32k", "-o", str(tmp_path), "--probes", str(tiny_session.parent / "probes.yaml"),
                "--answerer", "openai/gpt-4o-mini", "--api-base", f"http://127.0.0.1:{server.server_address[1]}", "--max-retries", "0",
                "--no-report"]
        env = {"OPENAI_API_KEY": "sk-test-not-a-key"}
        proc = bench_cli("run", *args, "--run-id", "a", env=env)
        assert proc.returncode == 3, proc.stderr
        # Every answer was one refused HTTP call (no retries): the summary counts them all as failed.
        assert Refusing.calls >= 1
        asked = pd.read_parquet(tmp_path / "a" / "probes.parquet")
        assert len(asked) >= 1 and asked["answer_error"].notna().all()
        assert f"metric not computed: answered (the answerer openai/gpt-4o-mini failed on all {len(asked)} calls" in proc.stderr
        assert "invalid api key" in proc.stderr
        proc = bench_cli("run", *args, "--run-id", "b", "--allow-missing-metrics", env=env)
        assert proc.returncode == 0, proc.stderr
        assert "metric not computed: answered" in proc.stderr
    finally:
        server.shutdown()
    # The offline answerer answers: nothing is missing, exit 0.
    proc = bench_cli("run", str(tiny_session), "-s", "none", "-p", "32k", "-o", str(tmp_path), "--run-id", "c",
                     "--probes", str(tiny_session.parent / "probes.yaml"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "metric not computed" not in proc.stderr
    # --no-report: the tables and the summary table are there, no report was rendered.
    assert (tmp_path / "c" / "probes.parquet").is_file() and not (tmp_path / "c" / "report.html").exists()
    assert "report:" not in proc.stdout


# --------------------------------------------------------------------------- 19: BOM, forced formats
def test_a_utf8_bom_does_not_change_the_detected_format(tmp_path):
    from tests.test_importers_fuzz import SEEDS, seed_of

    detected: list[str] = []
    for fmt in sorted(SEEDS):
        suffix, data = seed_of(fmt)
        plain, marked = tmp_path / f"{fmt}-plain{suffix}", tmp_path / f"{fmt}-bom{suffix}"
        plain.write_bytes(data)
        marked.write_bytes(b"\xef\xbb\xbf" + data)
        assert not read_head(marked).startswith("\ufeff")
        try:
            expected = detect(plain).format
        except ImportFailure:  # a seed only its forced format reads (hf-dataset, a minimal opencode export)
            with pytest.raises(ImportFailure, match="unrecognised"):
                detect(marked)
        else:
            assert detect(marked).format == expected, fmt
            detected.append(fmt)
        with_bom = load_transcripts(marked, format=fmt)
        without = load_transcripts(plain, format=fmt)
        assert [len(t.items) for t in with_bom] == [len(t.items) for t in without], fmt
    assert len(detected) >= 8, detected


def test_a_forced_format_that_matches_nothing_is_an_error(tiny_session, tmp_path):
    with pytest.raises(ImportFailure, match="no Aider chat content"):
        load_transcripts(tiny_session, format="aider")
    assert_user_error(bench_cli("inspect", str(tiny_session), "--format", "aider"), str(tiny_session), "no Aider chat content")
    # The real thing still imports when forced.
    aider = tmp_path / "history.md"
    aider.write_bytes(b"\n".join((CORPORA / "aider-chat-history-md/Aider-AI__aider/chat-history.md").read_bytes().split(b"\n")[:60]))
    assert load_transcripts(aider, format="aider")


# --------------------------------------------------------------------------- 11: killed runs
def children_of(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def command_line(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def workers_of(pid: int) -> set[int]:
    """The run's worker processes: its children forked from it (same command line), not a short-lived
    helper it runs, such as the `git rev-parse` that records the code's revision in the manifest."""
    own = command_line(pid)
    return {child for child in children_of(pid) if own is not None and command_line(child) == own}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def key_sorted(frame: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in ("scenario", "strategy", "profile", "repeat", "request", "step", "probe_id", "point") if c in frame.columns]
    return frame.sort_values(columns).reset_index(drop=True)


@pytest.fixture(scope="module")
def three_sessions(tmp_path_factory) -> list[Path]:
    from compaction_bench.scenarios.synthetic import generate

    folder = tmp_path_factory.mktemp("sessions")
    # three different sessions: a run keeps one of identical ones (one scenario, 2 cells), and the tests interrupt it
    # after its first cell while the workers still have others to run (six cells)
    return [generate("parallel-calls", seed=seed, target_tokens=20_000).transcript.write(folder / f"{name}.jsonl")
            for seed, name in ((3, "a"), (4, "b"), (5, "c"))]


def start_run(sessions: list[Path], out: Path, run_id: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*BENCH, "run", *map(str, sessions), "-s", "none", "-s", "truncate", "-p", "32k", "-j", "2", "-o", str(out), "--run-id", run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def interrupt_after_first_cell(proc: subprocess.Popen, run: Path, sig: int) -> set[int]:
    """Wait for the first finished cell (workers busy with the next ones), then send `sig` to the main process."""
    deadline = time.monotonic() + 300
    workers: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        workers |= workers_of(proc.pid)
        if list(run.glob("cells/*.zip")) and workers:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    workers = {p for p in workers | workers_of(proc.pid) if alive(p)}  # the pool's, alive when the signal goes
    os.kill(proc.pid, sig)
    return workers


def wait_gone(pids: set[int], seconds: float = 15) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


@pytest.mark.slow
def test_a_killed_run_leaves_no_worker_and_resumes_to_the_same_tables(three_sessions, tmp_path):
    proc = start_run(three_sessions, tmp_path, "k")
    workers = interrupt_after_first_cell(proc, tmp_path / "k", signal.SIGKILL)
    proc.wait(timeout=30)
    survivors = wait_gone(workers)
    for pid in survivors:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert len(workers) == 2 and not survivors, f"workers {sorted(survivors)} outlived their killed parent"
    done = len(list((tmp_path / "k").glob("cells/*.zip")))
    assert 1 <= done < 6
    resumed = bench_cli("run", *map(str, three_sessions), "-s", "none", "-s", "truncate", "-p", "32k", "-j", "2", "-o", str(tmp_path),
                        "--resume", "--run-id", "k", "--no-report")
    assert resumed.returncode == 0, resumed.stderr
    whole = bench_cli("run", *map(str, three_sessions), "-s", "none", "-s", "truncate", "-p", "32k", "-j", "2", "-o", str(tmp_path),
                      "--run-id", "whole", "--no-report")
    assert whole.returncode == 0, whole.stderr
    assert pd.read_parquet(tmp_path / "whole" / "summary.parquet")["scenario"].nunique() == 3  # six cells to interrupt
    for name in ("requests", "compactions", "probes", "summary"):
        got = pd.read_parquet(tmp_path / "k" / f"{name}.parquet").drop(columns=["answer_cached"], errors="ignore")
        expected = pd.read_parquet(tmp_path / "whole" / f"{name}.parquet").drop(columns=["answer_cached"], errors="ignore")
        pd.testing.assert_frame_equal(key_sorted(got), key_sorted(expected), obj=name)


@pytest.mark.slow
def test_the_report_drawing_workers_end_with_a_killed_run():
    """With -j > 1 the report's figures are drawn in a second pool of forked workers (`Drawings`);
    a run killed with SIGKILL while they exist leaves none of them behind, as with the cells' pool."""
    script = """
import sys
import pandas as pd
from compaction_bench.reports.drawings import Drawings
rows = [dict(scenario=s, profile="32k", strategy="none", repeat=0, kind="turn", request=n, step=n, true_tokens=1000 * n,
             overflow=False) for s in ("a", "b") for n in range(5)]
drawings = Drawings(pd.DataFrame(rows), pd.DataFrame(), pd.DataFrame(), {"profiles": {"32k": {"context_window": 32000}}}, jobs=3)
print("drawing", flush=True)
sys.stdin.read()
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "drawing"
        workers: set[int] = set()
        deadline = time.monotonic() + 10
        while len(workers) < 2 and time.monotonic() < deadline:  # /proc's children lists can miss a child at one read
            workers |= workers_of(proc.pid)
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    survivors = wait_gone(workers)
    for pid in survivors:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert len(workers) == 2 and not survivors, f"drawing workers {sorted(survivors)} outlived their killed parent"


@pytest.mark.slow
def test_sigterm_stops_the_run_cleanly_keeping_finished_cells(three_sessions, tmp_path):
    proc = start_run(three_sessions, tmp_path, "t")
    workers = interrupt_after_first_cell(proc, tmp_path / "t", signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted; finish the run with `bench run --resume`" in stderr and "Traceback" not in stderr
    assert not wait_gone(workers, 5)
    cells = list((tmp_path / "t").glob("cells/*.zip"))
    assert 1 <= len(cells) < 6


def session_members(session: int) -> list[bytes | None]:
    """The command lines of the live processes of a session (a run started with `start_new_session`)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):  # gone since the listing
                if os.getsid(int(entry.name)) == session and alive(int(entry.name)):
                    members.append(command_line(int(entry.name)))
    return members


@pytest.mark.slow
def test_sigterm_stops_a_ray_run_cleanly_and_leaves_no_ray_process(three_sessions, tmp_path):
    """With `--executor ray` the driver replaces Ray's own SIGTERM handler (which printed a crash
    report and ended the run with status 15) while cells run: the run stops as with Ctrl-C, the
    local cluster it started is shut down, and the cells written so far stay for `--resume`."""
    proc = subprocess.Popen(
        [*BENCH, "run", *map(str, three_sessions), "-s", "none", "-s", "truncate", "-p", "32k", "--executor", "ray", "-j", "2",
         "-o", str(tmp_path), "--run-id", "r", "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not list(tmp_path.glob("r/cells/*.zip")):
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted; finish the run with `bench run --resume`" in stderr and "Traceback" not in stderr
    assert "SIGTERM received" not in stderr  # Ray's handler did not run
    deadline = time.monotonic() + 15
    while session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_members(proc.pid) == []
    assert 1 <= len(list(tmp_path.glob("r/cells/*.zip"))) < 6


def run_module(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """Run `source` as `python -m` runs `bench` (CPython treats a module run so specially at exit)."""
    (tmp_path / "stopper.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "stopper"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})


def test_sigterm_inside_code_run_from_a_string_still_exits_130(tmp_path):
    """SIGTERM can arrive while the main thread runs code compiled from a string (a dataclass or named
    tuple being defined). CPython then marks a `python -m` process to die by SIGINT whenever the
    exception is exactly `KeyboardInterrupt`, even though `main` caught it and chose 130: the run
    exited -2 (seen once in CI). The executors' stop is a subclass, so the status stays 130."""
    proc = run_module(tmp_path, """
        import sys
        from compaction_bench.executors import execute

        def cell(shared, n):
            exec("import os, signal\\nos.kill(os.getpid(), signal.SIGTERM)\\nfor _ in range(10**6): pass")

        try:
            for _ in execute(cell, [(0,), (1,)], jobs=1):
                print("a cell finished", flush=True)
        except KeyboardInterrupt:
            sys.exit(130)
        """)
    assert proc.returncode == 130, proc.stderr
    assert "a cell finished" not in proc.stdout


def test_sigterm_dropped_inside_a_finalizer_still_stops_before_the_next_cell(tmp_path):
    """Python prints and drops an exception raised in `__del__`; a SIGTERM whose handler ran there
    must still stop the run at the next cell instead of letting every cell finish."""
    proc = run_module(tmp_path, """
        import os, signal, sys
        from compaction_bench.executors import execute

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10**6): pass

        def cell(shared, n):
            Finalized()
            return n

        try:
            for index, _ in execute(cell, [(0,), (1,), (2,)], jobs=1):
                print("finished", index, flush=True)
        except KeyboardInterrupt:
            sys.exit(130)
        """)
    assert proc.returncode == 130, proc.stderr
    assert "Exception ignored in" in proc.stderr  # the handler did run inside the finalizer
    assert proc.stdout.split("\n")[:-1] == ["finished 0"]

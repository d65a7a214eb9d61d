"""Small input and output slips an audit found, each checked against what the user typed.

`bench import F -o newdir/` wrote a file named `newdir`; `-o ""` wrote into the current folder; `probes mine
-o probes.JSONL` wrote YAML; a 300 KB file of one line was said to have a first line longer than 8 MiB; a
setting given twice kept its last value silently; and an empty probe file ran a run that measured nothing."""

from __future__ import annotations

import json

from compaction_bench.probes import load_probes
from tests.conftest import CORPORA, assert_user_error, bench_cli

SESSION = CORPORA / "claude-code-jsonl" / "d-kimuson__claude-code-viewer" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


def test_an_output_typed_as_a_folder_is_made_a_folder(tmp_path):
    proc = bench_cli("import", str(SESSION), "-o", "newdir/", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "newdir").is_dir() and [p.name for p in (tmp_path / "newdir").iterdir()] == [SESSION.name]
    assert_user_error(bench_cli("import", str(SESSION), "-o", "", cwd=tmp_path), "-o is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newdir"]


def test_a_jsonl_suffix_in_capitals_writes_jsonl(tmp_path):
    out = tmp_path / "probes.JSONL"
    proc = bench_cli("probes", "mine", str(SESSION), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
    assert len(load_probes(out)) == len(lines)


def test_a_short_file_of_one_line_is_not_said_to_exceed_the_detection_limit(tmp_path):
    one_line = tmp_path / "one_line.txt"
    one_line.write_text("x" * 300_000)
    line = assert_user_error(bench_cli("inspect", str(one_line)), f"{one_line}: unrecognised transcript format")
    assert "longer than" not in line


def test_a_setting_given_twice_and_an_empty_probe_file_are_refused(tmp_path):
    """`--import-option KEY=` and `--option S.KEY=` given twice kept the last value without a word, and a probe
    file of no probe ran a whole run that measured no retention."""
    assert_user_error(bench_cli("inspect", str(SESSION), "--import-option", "a=1", "--import-option", "a=2"),
                      "--import-option a: given twice ('1' and '2')")
    runs = tmp_path / "runs"
    assert_user_error(bench_cli("run", str(SESSION), "-s", "pi", "--option", "pi.reserve_tokens=1", "--option", "pi.reserve_tokens=2",
                                "-o", str(runs)), "--option pi.reserve_tokens: given twice ('1' and '2')")
    empty = tmp_path / "empty.yaml"
    empty.write_text("[]\n")
    assert_user_error(bench_cli("run", str(SESSION), "-s", "none", "--probes", str(empty), "-o", str(runs)), f"--probes {empty}: holds no probe")
    assert not runs.exists()


def test_a_resume_may_spell_out_the_default_probes(tmp_path):
    """`--probes auto` is the default: a run started without it was refused on `--resume --probes auto`
    ("probes: null then, "auto" now")."""
    runs = tmp_path / "runs"
    first = bench_cli("run", str(SESSION), "-s", "none", "-p", "32k", "-o", str(runs), "--run-id", "r", "--no-report")
    assert first.returncode == 0, first.stderr
    again = bench_cli("run", str(SESSION), "-s", "none", "-p", "32k", "-o", str(runs), "--run-id", "r", "--no-report", "--resume", "--probes", "auto")
    assert again.returncode == 0, again.stderr


def test_a_format_forced_on_another_formats_file_is_refused_not_read_as_markers():
    """`--format openai-messages` on a Claude Code file read its 29 lines as markers (roles it does not know) and
    exited 0: a transcript with nothing in it but what the importer could not read."""
    proc = bench_cli("inspect", str(SESSION), "--format", "openai-messages")
    assert_user_error(proc, f"{SESSION}: nothing in the file is openai-messages content (forced with --format openai-messages)")


def test_a_single_file_output_typed_as_a_folder_is_refused_and_nothing_written(tmp_path):
    """`probes mine -o out/` wrote a file named `out` (pathlib drops the slash), `-o ""` and an existing folder
    with `--force` failed only at the write. The four options that name one file refuse all three first."""
    (tmp_path / "existing").mkdir()
    runs = tmp_path / "none"  # the run folders are never reached: the output is refused first
    commands = {
        "--output": ["probes", "mine", str(SESSION)],
        "--out": ["cache", "export", str(runs)],
        "--markdown": ["gate", "--baseline", str(runs), "--candidate", str(runs), "--fail-on", "integrity:0"],
        "--html": ["compare", str(runs), str(runs)],
    }
    for option, command in commands.items():
        for typed, message in (("out/", "names a folder"), ("existing", "names a folder"), ("", "is empty")):
            shown = f"{option} {typed}: {message}" if typed else f"{option} {message}"
            assert_user_error(bench_cli(*command, option, typed, "--force", cwd=tmp_path), shown)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"] and not any((tmp_path / "existing").iterdir())


def test_a_symlink_loop_is_one_error_line_and_exit_2(tmp_path):
    """pathlib's resolve() of a link loop raised RuntimeError (Python < 3.13): a traceback and exit 1, which
    `bench gate` uses for "the candidate regressed"."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    loop = str(tmp_path / "loop1")
    assert_user_error(bench_cli("probes", "mine", str(SESSION), "-o", loop), "loop1")
    assert_user_error(bench_cli("run", loop, "-s", "none", "-o", str(tmp_path / "runs")), "loop1")
    runs = str(tmp_path / "none")  # the output is checked first
    assert_user_error(bench_cli("gate", "--baseline", runs, "--candidate", runs, "--fail-on", "integrity:0", "-o", loop), "loop1")


def test_probes_mine_never_writes_over_the_transcript_it_reads_and_run_refuses_an_empty_out(tmp_path):
    """`probes mine S -o S --force` replaced the transcript with YAML; `run -o ""` wrote its run into the
    current folder (pathlib reads "" as ".")."""
    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(SESSION.read_bytes())
    assert_user_error(bench_cli("probes", "mine", str(transcript), "-o", str(transcript), "--force"), "is the transcript this command reads")
    assert transcript.read_bytes() == SESSION.read_bytes()
    assert_user_error(bench_cli("run", str(transcript), "-s", "none", "-o", "", cwd=tmp_path), "--out is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.jsonl"]


def test_a_probe_file_for_other_sessions_is_refused_as_an_empty_one_is(tmp_path):
    """Probes written for another transcript were each skipped with a warning, and the run went on to a leaderboard
    with no retention, exit 0; an empty file is refused for that reason. `probes check` passed an empty file."""
    other = tmp_path / "other.yaml"
    other.write_text("- id: p1\n  kind: recall\n  question: Which port?\n  answer: '48213'\n  source_text: port 48213\n")
    runs = tmp_path / "runs"
    proc = bench_cli("run", str(SESSION), "-s", "none", "--probes", str(other), "-o", str(runs))
    *warnings, line = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not runs.exists()
    assert len(warnings) == 1 and "probe 'p1' skipped" in warnings[0]  # why, before the refusal
    assert line.startswith(f"error: --probes {other}: none of its 1 probe(s) applies to these sessions") and "no retention" in line
    empty = tmp_path / "empty.yaml"
    empty.write_text("[]\n")
    checked = bench_cli("probes", "check", str(SESSION), "--probes", str(empty))
    assert checked.returncode == 1 and "holds no probe" in checked.stdout and "0 probes checked: 1 problem(s)" in checked.stdout


def test_fidelity_refuses_a_file_named_twice_and_calibrate_names_a_file_of_this_folder_alone(tmp_path):
    """`fidelity claude-code F F` printed every row twice (run and calibrate refuse the same file twice), and
    calibrate labelled a file of the current folder "/name"."""
    line = assert_user_error(bench_cli("fidelity", "claude-code", str(SESSION), str(SESSION)), "given twice")
    assert str(SESSION) in line
    assert_user_error(bench_cli("fidelity", "cache", str(SESSION), str(SESSION)), "given twice")
    local = tmp_path / SESSION.name
    local.write_bytes(SESSION.read_bytes())
    proc = bench_cli("calibrate", SESSION.name, cwd=tmp_path)
    assert f"/{SESSION.name}" not in proc.stdout + proc.stderr, proc.stdout


def test_a_folder_or_pipe_given_as_an_input_file_is_called_what_it_is(tmp_path):
    """A folder or a named pipe given to --probes, --prompt or --responses was reported as "no such file"."""
    import os

    folder, pipe = tmp_path / "folder", tmp_path / "pipe"
    folder.mkdir()
    os.mkfifo(pipe)
    runs = str(tmp_path / "runs")
    for given, said in ((folder, "is a folder, not a file"), (pipe, "is not a regular file")):
        assert_user_error(bench_cli("run", str(SESSION), "-s", "none", "--probes", str(given), "-o", runs), f"{given}: {said}")
        assert_user_error(bench_cli("run", str(SESSION), "-s", "none", "--prompt", f"codex_summary.j2={given}", "-o", runs), said)
        assert_user_error(bench_cli("run", str(SESSION), "-s", "none", "--responses", str(given), "-o", runs), said)

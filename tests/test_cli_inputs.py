"""Bad input refused at the start (exit 2, one line naming the place), errors that name the right
file, and help and output that say what the command does: the defects of the CLI audit."""

from __future__ import annotations

import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import compaction_bench as bench
from compaction_bench.errors import json_problem
from compaction_bench.strategy import OptionError, Range, Strategy, check_value
from compaction_bench.templates import PromptSet, TemplateError
from compaction_bench.transcript import Item, Transcript, TranscriptError
from tests.conftest import BENCH, CORPORA, assert_user_error, bench_cli, write_tiny_session
from tests.model_servers import RefusingHandler

CLAUDE = CORPORA / "claude-code-jsonl/d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """A hand-built session with one fact, and a probe file asking for it."""
    return write_tiny_session(tmp_path_factory.mktemp("session"))


def run_args(session: Path, out: Path, *extra: str) -> list[str]:
    return ["run", str(session), "-s", "truncate", "-p", "32k", "-j", "1", "-o", str(out), "--probes", str(session.parent / "probes.yaml"),
            "--no-report", *extra]


@pytest.fixture(scope="module")
def finished_run(session, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return bench.run([session], ["none"], ["32k"], out=out, run_id="ok", jobs=1, probes=str(session.parent / "probes.yaml"),
                     report=False, progress=False)


# --------------------------------------------------------------------------- 2: refused at the start
@pytest.mark.parametrize("flags, named", [
    (["--probes", "probes.yaml"], "--probes applies"),
    (["--format", "codex"], "--format applies"),
    (["--import-option", "branch=tree", "--probes", "auto"], "--probes, --import-option apply"),
])
def test_import_settings_without_transcript_files_are_refused(tmp_path, flags, named):
    """The synthetic suite has its own probes and is not imported: the flags would be recorded and do nothing."""
    proc = bench_cli("run", "-s", "truncate", "-j", "1", "-o", str(tmp_path / "runs"), *flags)
    assert_user_error(proc, named, "transcript files only", "the synthetic suite brings its own probes")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag, message", [
    (["--option", "truncate.trigger_ratio=nan"], "option truncate.trigger_ratio=nan: not a finite number"),
    (["--option", "truncate.trigger_ratio=-1"], "option truncate.trigger_ratio=-1.0: out of range; expected a value in (0, 1] (a ratio)"),
    (["--option", "truncate.target_ratio=5"], "option truncate.target_ratio=5.0: out of range; expected a value in (0, 1]"),
    (["-s", "pi", "--option", "pi.keep_recent_tokens=-100000"], "option pi.keep_recent_tokens=-100000: out of range; expected a value ≥ 0"),
    (["-s", "opencode-v2@tools_json_chars=-100"], "option opencode-v2.tools_json_chars=-100: out of range; expected a value ≥ 0"),
    # Past 2**53 a count is no count the tables hold: 10**22 tokens failed every cell after its replay.
    (["-s", "pi", "--option", "pi.reserve_tokens=" + "9" * 22], "option pi.reserve_tokens=" + "9" * 22 + ": too large; a number option is at most 2**53"),
    (["-s", "pi", "--option", "pi.reserve_tokens=" + "9" * 400], "option pi.reserve_tokens=" + "9" * 28 + "...9"),  # cut short
    (["-s", "pi", "--option", f"pi.reserve_tokens={2**53 + 1}"], "at most 2**53 = 9,007,199,254,740,992 either way"),
    (["-s", "pi", "--option", "pi.reserve_tokens=" + "1" * 5000], "option pi.reserve_tokens: expected int, got '" + "1" * 27 + "...1"),  # past int()'s 4,300 digits
    (["-s", "aider", "--option", "aider.max_chat_history_tokens=1e300"], "aider.max_chat_history_tokens=1e+300: too large"),
    # Ranges the option fields declare (tests/test_option_ranges.py): these failed every cell (an IndexError, a division
    # by zero, the API's minimum trigger checked only as the cell ran) or never compacted (a threshold past the window).
    (["-s", "openhands-v0", "--option", "openhands-v0.keep_first=-1"],
     "option openhands-v0.keep_first=-1: out of range; expected a value ≥ 0 (a number of events)"),
    (["-s", "aider@window_divisor=0"], "option aider.window_divisor=0: out of range; expected a value ≥ 1 (a divisor)"),
    (["-s", "anthropic-compact", "--option", "anthropic-compact.trigger=1000"],
     "option anthropic-compact.trigger=1000: out of range; expected a value ≥ 50000 (a number of input tokens; the API accepts no fewer, §4.1)"),
    (["-s", "gemini-cli", "--option", "gemini-cli.compression_threshold=2"],
     "option gemini-cli.compression_threshold=2.0: out of range; expected a value in (0, 1] (a fraction of the window)"),
    # a strategy whose name has a dot: split at the last dot before '=' (it read strategy "claude-code-2", key "1.ptl_retries")
    (["-s", "claude-code-2.1", "--option", "claude-code-2.1.ptl_retries=-1"], "option claude-code-2.1.ptl_retries=-1: out of range"),
    (["--model-timeout", "nan"], "--model-timeout must be a finite number of seconds, got nan"),
    (["--model-timeout", "inf"], "--model-timeout must be a finite number of seconds, got inf"),
])
def test_option_values_out_of_range_are_refused_before_the_run(session, tmp_path, flag, message):
    proc = bench_cli(*run_args(session, tmp_path / "runs", *flag))
    assert_user_error(proc, message)
    assert not (tmp_path / "runs").exists()


def test_every_built_in_default_is_in_its_range_and_ranges_come_from_names_or_fields() -> None:
    from dataclasses import dataclass, field, fields

    from compaction_bench.registry import strategies
    from compaction_bench.strategy import option_range

    ranged = 0
    for name, cls in strategies().items():
        for spec in fields(cls.Options):
            allowed = option_range(spec.name, spec)
            ranged += allowed is not None
            if isinstance(spec.default, (int, float)):
                check_value(f"{name}.{spec.name}", spec.default, allowed)  # the upstream defaults are valid
    assert ranged > 50
    ratio = Range(0, 1, low_open=True)
    assert 1 in ratio and 0.5 in ratio and 0 not in ratio and 1.01 not in ratio
    assert str(ratio) == "in (0, 1]" and str(Range(0)) == "≥ 0" and str(Range(0, 1, True, True)) == "in (0, 1)"

    @dataclass(frozen=True)
    class DeclaredOptions:
        window_divisor: int = field(default=16, metadata={"range": Range(1, what="a divisor")})
        scale: float = 1.0
        label: str = "x"

    class Declared(Strategy):
        name = "declared"
        Options = DeclaredOptions

    assert Declared.parse_options({"window_divisor": "3", "scale": "-2.5", "label": "nan"}) == DeclaredOptions(3, -2.5, "nan")
    with pytest.raises(OptionError, match=r"declared.window_divisor=0: out of range; expected a value ≥ 1 \(a divisor\)"):
        Declared.parse_options({"window_divisor": "0"})
    with pytest.raises(OptionError, match="declared.scale=inf: not a finite number"):
        Declared.parse_options({"scale": "inf"})
    with pytest.raises(OptionError, match="not a finite number"):
        Declared.parse_options({"scale": math.nan})  # from Python, not only from the command line


def test_a_prompt_with_an_undefined_variable_is_refused_naming_file_line_and_variable(session, tmp_path):
    template = tmp_path / "mine.j2"
    template.write_text("Summarize the conversation.\n{% for x in range(2) %}{{ x }}{% endfor %}\nFocus on {{ focus_area }}.\n")
    with pytest.raises(TemplateError, match=rf"{template}:3: prompt template 'codex_summary.j2' uses the undefined variable 'focus_area'"):
        PromptSet({"codex_summary.j2": template})
    # `truncate` never renders it, so a run would never have said so: refused before the run all the same.
    proc = bench_cli(*run_args(session, tmp_path / "runs", "-s", "codex-local", "--prompt", f"codex_summary.j2={template}"))
    assert_user_error(proc, f"{template}:3:", "'focus_area'", "codex_summary.j2 with these variables: none")
    assert not (tmp_path / "runs").exists()
    # The variables the stock template uses (and the template's own, and jinja2's globals) are fine.
    fine = tmp_path / "fine.j2"
    fine.write_text("{% set n = 2 %}{% if update %}Update{% else %}Write{% endif %} the summary in {{ n }} parts. {{ range(1)|list }}\n")
    assert PromptSet({"pi_summary.j2": fine}).render("pi_summary.j2", update=True) == "Update the summary in 2 parts. [0]"
    with pytest.raises(TemplateError, match="'instructions'.*pi_summary.j2 with these variables: update"):
        template.write_text("{{ instructions }}")
        PromptSet({"pi_summary.j2": template})


def test_the_strategies_render_each_template_with_exactly_the_variables_its_stock_version_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the check of an override relies on: every render passes the stock template's variables, no other."""
    import jinja2
    from jinja2 import meta

    from compaction_bench.llm import LLMClient
    from compaction_bench.registry import strategy_ids
    from compaction_bench.scenarios.synthetic import generate

    passed: dict[str, set[frozenset[str]]] = {}
    render = PromptSet.render

    def recording(self, name, **variables):
        passed.setdefault(name, set()).add(frozenset(variables))
        return render(self, name, **variables)

    monkeypatch.setattr(PromptSet, "render", recording)
    transcript = generate("parallel-calls", seed=3, target_tokens=60_000).transcript
    for strategy in strategy_ids(builtin_only=True):
        bench.replay(transcript, strategy, profile="32k", summarizer=LLMClient("offline/extractive"))
    stock = PromptSet()
    env = jinja2.Environment()
    assert len(passed) >= 15
    for name, seen in passed.items():
        assert seen == {frozenset(meta.find_undeclared_variables(env.parse(stock.source(name))))}, name


@pytest.mark.parametrize("repeat", ["0", "1001", "100000000"])
def test_a_repeat_count_out_of_range_is_refused_before_any_folder(session, tmp_path, repeat):
    """A mistyped `--repeat 100000000` filled the memory with cell keys (1.8 GB within 20 s) instead of refusing."""
    proc = bench_cli(*run_args(session, tmp_path / "runs", "--repeat", repeat))
    assert_user_error(proc, f"--repeat {repeat}: expected 1 to 1,000 (each repeat replays every cell again)")
    assert not (tmp_path / "runs").exists()


def test_a_malformed_responses_file_is_refused_at_the_start_naming_its_line(session, tmp_path):
    responses = tmp_path / "responses.jsonl"
    good = json.dumps({"key": "k1", "text": "a summary", "model": "openai/m"})
    for lines, message in (([good, "not json"], f"--responses {responses}:2: not a stored response, not JSON (Expecting value at column 1); write the file with"),
                           ([good, "", '{"a": 1}'], f"--responses {responses}:3: not a stored response (expected a JSON object with 'key', 'text' and 'model' as strings)"),
                           (['{"key": "k", "text": 3, "model": "m"}'], f"--responses {responses}:1: not a stored response")):
        responses.write_text("\n".join(lines) + "\n")
        # offline models never read it: the run is refused all the same, before any folder
        proc = bench_cli(*run_args(session, tmp_path / "runs", "--responses", str(responses)))
        assert_user_error(proc, message)
        assert not (tmp_path / "runs").exists()
    # invalid UTF-8 (a traceback before) is named by its line; a record whose text holds U+2028 or NEL as they are
    # (as `bench cache export` writes them) is one line, not two
    separators = json.dumps({"key": "k2", "text": "one\u2028two\x85three", "model": "openai/m"}, ensure_ascii=False)
    responses.write_bytes(f"{good}\n{separators}\n".encode() + b'{"key": "caf\xe9", "text": "t", "model": "m"}\n')
    assert_user_error(bench_cli(*run_args(session, tmp_path / "runs", "--responses", str(responses))),
                      f"--responses {responses}:3: not a stored response, not UTF-8 (byte 13 of the line)")
    assert not (tmp_path / "runs").exists()


def test_json_problems_read_whole():
    for text, expected in (('{"a": "b', "Unterminated string starting at column 7"), ("", "Expecting value at column 1"),
                           ('{"a": 1} x', "Extra data at column 10")):
        with pytest.raises(json.JSONDecodeError) as caught:
            json.loads(text)
        assert json_problem(caught.value) == expected


# --------------------------------------------------------------------------- 3: score says what it could not compute
class Refusing(RefusingHandler):
    calls = 0


def test_score_with_a_failing_answerer_warns_and_exits_3_as_run_does(finished_run, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["config"].update(api_base=f"http://127.0.0.1:{server.server_address[1]}", max_retries=0)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    env = {"OPENAI_API_KEY": "sk-test-not-a-key", "COMPACTION_BENCH_CACHE": str(tmp_path / "cache")}
    try:
        proc = bench_cli("score", str(copy), "--answerer", "openai/gpt-4o-mini", "--out", str(tmp_path / "scored"), env=env)
        assert proc.returncode == 3, proc.stderr
        assert re.search(r"^warning: metric not computed: answered \(the answerer openai/gpt-4o-mini failed on all \d+ calls", proc.stderr, re.M)  # after the progress lines
        assert "invalid api key" in proc.stderr
        proc = bench_cli("score", str(copy), "--answerer", "openai/gpt-4o-mini", "--out", str(tmp_path / "scored2"),
                         "--allow-missing-metrics", env=env)
        assert proc.returncode == 0 and "metric not computed: answered" in proc.stderr, proc.stderr
    finally:
        server.shutdown()
    # The run's own answerer (offline) grades: nothing missing, exit 0, no warning.
    proc = bench_cli("score", str(finished_run), "--out", str(tmp_path / "scored3"))
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- 4: errors naming the right place
READ_ONLY = """
import errno, sys, tempfile
from compaction_bench import cli

def read_only(*args, dir=None, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")

tempfile.mkstemp = read_only  # every output file of the project is written through mkstemp beside it
sys.argv = ["bench", *sys.argv[1:]]
cli.main()
"""


def test_an_output_in_a_read_only_folder_is_named_not_the_run_folders(finished_run, tmp_path):
    script = tmp_path / "read_only.py"
    script.write_text(READ_ONLY)
    for args, named in ((["compare", str(finished_run), str(finished_run), "--html", str(tmp_path / "ro" / "c.html")], tmp_path / "ro" / "c.html"),
                        (["score", str(finished_run), "--out", str(tmp_path / "ro" / "s")], tmp_path / "ro" / "s" / "probes"),
                        (["cache", "export", str(finished_run), "-o", str(tmp_path / "ro" / "x.jsonl")], tmp_path / "ro" / "x.jsonl")):
        proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
        if args[0] == "score":  # its files are written once every cell is measured: the progress lines come first
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            line = proc.stderr.splitlines()[-1]
            assert line.startswith(f"error: {named}") and "cannot write (Read-only file system)" in line, proc.stderr
        else:
            line = assert_user_error(proc, f"error: {named}", "cannot write (Read-only file system)")
        assert "unusable run folder" not in line and str(finished_run) not in line


def test_a_full_disk_names_the_file_it_could_not_write(session, tmp_path):
    import resource

    def small_files() -> None:  # every write beyond 64 KiB fails (EFBIG), like a full disk (ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    args = [arg for arg in run_args(session, tmp_path / "runs", "--run-id", "full") if arg != "--no-report"]
    proc = subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=600, preexec_fn=small_files)
    assert proc.returncode == 2, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and error[0].startswith(f"error: {tmp_path / 'runs' / 'full'}/") and ": cannot write (" in error[0], proc.stderr


@pytest.mark.parametrize("command", [[], ["probes"], ["list"], ["fidelity"], ["cache"]])
def test_a_group_without_a_command_prints_its_help_and_no_empty_error(command):
    proc = bench_cli(*command)
    assert proc.returncode == 2
    assert "Usage: " in proc.stdout and "Commands" in proc.stdout
    assert proc.stderr.strip() == "", proc.stderr


INTERRUPT = """
import sys
from compaction_bench import cli, importing, runner

def stop(*args, **kwargs):
    raise KeyboardInterrupt

where = sys.argv.pop(1)
if where == "import":
    importing.load_transcripts = stop  # Ctrl-C while a transcript is read
    runner.load_transcripts = stop
else:
    runner.execute = stop  # Ctrl-C while the cells run
sys.argv = ["bench", *sys.argv[1:]]
cli.main()
"""


def test_only_an_interrupted_run_with_a_folder_to_finish_is_told_to_resume(session, tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT)

    def interrupted(where: str, *args: str) -> str:
        proc = subprocess.run([sys.executable, str(script), where, *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr.strip().splitlines()[-1]  # after the progress lines of a run

    assert interrupted("import", "inspect", str(session)) == "interrupted"
    assert interrupted("import", "fidelity", "cache", str(session)) == "interrupted"
    assert interrupted("import", *run_args(session, tmp_path / "runs", "--run-id", "early")) == "interrupted"  # no folder yet
    assert not (tmp_path / "runs" / "early").exists()
    said = interrupted("cells", *run_args(session, tmp_path / "runs", "--run-id", "late"))
    assert said == (f"interrupted; finish the run with `bench run --resume` and the same arguments "
                    f"(--run-id late -o {tmp_path / 'runs'})")
    resumed = bench_cli(*run_args(session, tmp_path / "runs", "--run-id", "late", "--resume"))
    assert resumed.returncode == 0, resumed.stderr


# --------------------------------------------------------------------------- 5: help and output as they are
def test_the_leaderboard_points_at_a_report_only_when_one_was_written(session, tmp_path):
    proc = bench_cli(*run_args(session, tmp_path, "--run-id", "tables", "-s", "none"), env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "tables"
    assert not (root / "report.html").exists()
    left_out = [line for line in proc.stdout.splitlines() if line.startswith("not shown at this width")]
    assert left_out and left_out[0].endswith(f"(every column: `bench report {root}` renders report.html)"), proc.stdout


def test_fidelity_help_and_strategies_say_what_is_replayed(tmp_path):
    help_text = " ".join(bench_cli("fidelity", "pi", "--help").stdout.split())
    assert "`pi`, `pi-2026-03` and `pi-2025-12` replays" in help_text
    assert_user_error(bench_cli("fidelity", "claude-code", str(CLAUDE), "-s", "pi"),
                      "--strategy 'pi' is not a Claude Code strategy; `bench fidelity claude-code` replays one of: claude-code, claude-code-2.1")


def test_fidelity_cache_checks_the_profile_first_and_names_a_bare_file(session, tmp_path):
    proc = bench_cli("fidelity", "cache", str(session), "--profile", "no-such-profile")
    assert_user_error(proc, "no-such-profile")
    assert proc.stdout == ""  # no table header before the refusal
    (tmp_path / "here.jsonl").write_bytes(session.read_bytes())
    proc = bench_cli("fidelity", "cache", "here.jsonl", "--profile", "32k", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].startswith("| here.jsonl | 32k | "), proc.stdout


# --------------------------------------------------------------------------- 6: gate, cache export
def test_a_gate_whose_every_rule_is_untested_exits_2(finished_run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(finished_run, copy)
    # `none` never summarizes: no probe point has a summarized source to test
    proc = bench_cli("gate", "--baseline", str(finished_run), "--candidate", str(copy), "--fail-on", "summarized_source:0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gate: untested" in proc.stdout and "untested: none 32k summarized_source" in proc.stdout
    assert proc.stderr.startswith("error: summarized_source:0 could not be tested on these runs") and proc.stderr.count("\n") == 1
    # Another rule tested is no pass of this one: still untested, naming it.
    proc = bench_cli("gate", "--baseline", str(finished_run), "--candidate", str(copy), "--fail-on", "summarized_source:0",
                     "--fail-on", "integrity:0")
    assert proc.returncode == 2 and "gate: untested (summarized_source:0 could not be applied" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: summarized_source:0 could not be tested on these runs")
    proc = bench_cli("gate", "--baseline", str(finished_run), "--candidate", str(copy), "--fail-on", "integrity:0")
    assert proc.returncode == 0 and "gate: passed" in proc.stdout, proc.stdout + proc.stderr


def test_cache_export_waits_for_the_run_and_names_a_half_written_line(finished_run, tmp_path):
    from compaction_bench import run_folder

    copy = tmp_path / "busy"
    shutil.copytree(finished_run, copy)
    stored = copy / "responses" / "responses-1.jsonl"
    stored.parent.mkdir(exist_ok=True)
    stored.write_text(json.dumps({"key": "k1", "text": "t", "model": "m"}) + "\n" + '{"key": "k2", "text": "a half')
    working = run_folder.claim(tmp_path, "busy", resume=True, new_id="unused")  # as a run working in it holds it
    try:
        assert_user_error(bench_cli("cache", "export", str(copy), "-o", str(tmp_path / "x.jsonl")), f"{copy}: a run is still working")
    finally:
        working.release()
    assert not (tmp_path / "x.jsonl").exists()
    assert_user_error(bench_cli("cache", "export", str(copy), "-o", str(tmp_path / "x.jsonl")),
                      f"{stored}:2: not a stored response, not JSON (Unterminated string starting at column 23)")
    assert not (tmp_path / "x.jsonl").exists()
    # a run killed while writing a character of its last line: named, as a half-written line is
    separators = json.dumps({"key": "k0", "text": "one\u2028two\x85three", "model": "m"}, ensure_ascii=False)
    stored.write_bytes(f"{separators}\n".encode() + '{"key": "k2", "text": "é'.encode()[:-1])
    assert_user_error(bench_cli("cache", "export", str(copy), "-o", str(tmp_path / "x.jsonl")),
                      f"{stored}:2: not a stored response, not UTF-8 (byte 24 of the line); remove the line to export the rest")
    stored.write_text(json.dumps({"key": "k1", "text": "t", "model": "m"}) + "\n" + json.dumps({"key": 2}) + "\n")
    assert_user_error(bench_cli("cache", "export", str(copy), "-o", str(tmp_path / "x.jsonl")),
                      f"{stored}:2: not a stored response (expected a JSON object with 'key' as a string); remove the line to export the rest")
    stored.write_text(json.dumps({"key": "k1", "text": "t", "model": "m"}) + "\n")
    proc = bench_cli("cache", "export", str(copy), "-o", str(tmp_path / "x.jsonl"))
    assert proc.returncode == 0 and "1 responses written" in proc.stdout, proc.stderr


def test_a_file_given_twice_is_refused_and_names_never_start_with_a_slash(session, tmp_path, monkeypatch):
    # The same file twice would be two scenarios of one session (each probe counted twice).
    again = Path(os.path.relpath(session, tmp_path))
    proc = bench_cli("run", str(session), str(again), "-s", "truncate", "-o", str(tmp_path / "runs"), "--no-report", cwd=tmp_path)
    assert_user_error(proc, f"{again}: given twice (the same file as {session}); pass each file once")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # Two files of one name in different folders: the second is named after its folder, even when given as a bare name.
    from compaction_bench.runner import scenario_name

    other = tmp_path / "b" / session.name
    other.parent.mkdir()
    shutil.copy(session, other)
    transcript = Transcript.read(session)
    monkeypatch.chdir(other.parent)
    assert scenario_name(Path(session.name), transcript, 0, 1, {session.name}) == f"b/{session.name}"


def test_an_error_line_escapes_control_characters_of_a_path(tmp_path):
    proc = bench_cli("inspect", str(tmp_path / "x\x1b[31my.jsonl"))
    line = assert_user_error(proc, "no such file")
    assert "\x1b" not in line and "\\x1b[31my.jsonl" in line


def test_a_malformed_line_says_where_in_whole_words(tmp_path):
    path = tmp_path / "cut.jsonl"
    Transcript("t", (Item("u0", "user", "hi", turn=0),)).write(path)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"id": "u1", "kind": "user", "text": "unterminated\n')
    with pytest.raises(TranscriptError) as caught:
        Transcript.read(path)
    assert "Unterminated string starting at column" in str(caught.value) and "at at" not in str(caught.value)


def test_a_prompt_override_is_rendered_in_a_sandbox(tmp_path):
    """A loop over range(10**12) in a `--prompt` file hung the run; the sandbox stops ranges at 100,000 items
    and keeps Python's internals out of reach."""
    looping = tmp_path / "loop.j2"
    looping.write_text("{% for i in range(10**12) %}x{% endfor %}\n")
    with pytest.raises(TemplateError, match="failed to render: OverflowError: Range too big"):
        PromptSet({"pi_summary.j2": looping}).render("pi_summary.j2", update=False)
    prying = tmp_path / "pry.j2"
    prying.write_text("{{ update.__class__.__mro__ }}\n")
    with pytest.raises(TemplateError, match="failed to render: SecurityError"):
        PromptSet({"pi_summary.j2": prying}).render("pi_summary.j2", update=False)


@pytest.mark.parametrize("option, value, message", [
    ("observation-masking.placeholder", "{nope}", "not a pattern of {lines} (KeyError"),
    ("hybrid.placeholder", "{0}", "not a pattern of {lines} (IndexError"),
    ("observation-masking.placeholder", "[{lines} lines {", "not a pattern of {lines} (ValueError"),
    ("codex-local.summary_template", "/etc/hostname", "names no prompt template"),
    ("codex-local.summary_template", "codex_sumary.j2", "names no prompt template (did you mean 'codex_summary.j2'?)"),
])
def test_a_pattern_or_template_option_is_checked_before_the_run(session, tmp_path, option, value, message):
    """These failed every cell as it ran (exit 1, a run folder made), and a template option naming a path read
    that file as the prompt, past the checks `--prompt` gets."""
    strategy = option.split(".")[0]
    assert_user_error(bench_cli(*run_args(session, tmp_path / "runs", "-s", strategy, "--option", f"{option}={value}")), message)
    assert not (tmp_path / "runs").exists()

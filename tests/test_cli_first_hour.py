"""A new user's first hour with `bench`: misspelled names answered with the registered one, an `--out`
that is itself a run refused, output meant for pipes and scripts printed whole, `--version`, and the
README's `bench run` options and defaults as the command line has them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest
import typer.main

import compaction_bench as bench
from compaction_bench import cli, registry
from compaction_bench.errors import BenchError
from compaction_bench.transcript import Item, Transcript
from tests.conftest import assert_user_error, bench_cli, write_tiny_session

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return write_tiny_session(tmp_path_factory.mktemp("session"))


@pytest.fixture(scope="module")
def finished_run(session, tmp_path_factory) -> Path:
    return bench.run([session], ["none"], ["32k"], out=tmp_path_factory.mktemp("runs"), run_id="done", jobs=1,
                     probes=str(session.parent / "probes.yaml"), report=False, progress=False)


def error_of(lookup: Callable[[str], object], name: str) -> str:
    """The message of the error the library raises for a bad name (the text `bench` prints after `error: `)."""
    with pytest.raises(BenchError) as caught:
        lookup(name)
    return str(caught.value)


# --------------------------------------------------------------------------- did you mean
@pytest.mark.parametrize("args, said", [
    (["-s", "codex-locl"], "unknown strategy 'codex-locl' (did you mean 'codex-local'?); known: none,"),
    (["-s", "opencode-v3@prune=true"], "unknown strategy 'opencode-v3' (did you mean "),
    (["-p", "64K"], "unknown profile '64K' (did you mean '64k'?); known: gpt-5,"),
    (["-p", "openai/gpt-5-mni"], "unknown profile 'openai/gpt-5-mni' (did you mean 'openai/gpt-5-mini'?)"),
    (["-s", "codex-local", "--option", "codex-local.auto_compact_prcent=80"],
     "unknown option(s) for strategy 'codex-local': auto_compact_prcent (did you mean auto_compact_percent?); valid: "),
    (["-s", "codex-local", "--option", "codx-local.auto_compact_percent=80"],
     "--option names strategies that are not in this run: codx-local (did you mean codex-local?)"),
    (["--format", "claude"], "unknown format 'claude' (did you mean 'claude-code'?); known: canonical,"),
    (["--prompt", "codex_sumary.j2=mine.j2"], "no template named 'codex_sumary.j2' (did you mean 'codex_summary.j2'?); templates: "),
])
def test_a_misspelled_name_is_answered_with_the_registered_one(session, tmp_path, args, said):
    proc = bench_cli("run", str(session), "-j", "1", "-o", str(tmp_path / "runs"), *args)
    assert_user_error(proc, said)
    assert not (tmp_path / "runs").exists()


def test_a_name_like_no_known_one_gets_no_guess(session, tmp_path):
    line = assert_user_error(bench_cli("run", str(session), "-s", "zzzzzz", "-o", str(tmp_path)), "unknown strategy 'zzzzzz'; known: ")
    assert "did you mean" not in line


def test_every_registered_strategy_and_format_typed_in_capitals_is_suggested_as_itself():
    """The registry is the answer: each id, upper-cased, is unknown (ids are lower case) and folds back to itself."""
    from compaction_bench.importing import formats

    for name in registry.strategy_ids():
        assert f"unknown strategy {name.upper()!r} (did you mean {name!r}?); known: " in error_of(registry.strategy_class, name.upper())
    for name in formats():
        assert f"unknown format {name.upper()!r} (did you mean {name!r}?); known: " in error_of(registry.importer_class, name.upper())


def test_the_gate_suggests_a_metric_it_has(finished_run):
    proc = bench_cli("gate", "--baseline", str(finished_run), "--candidate", str(finished_run), "--fail-on", "retension:0.02")
    assert_user_error(proc, "unknown metric 'retension' (did you mean 'retention'?); metrics: retention,")


# --------------------------------------------------------------------------- --out a run
def test_an_out_that_is_itself_a_run_is_refused_saying_how_to_name_the_run(session, finished_run):
    before = sorted(p.name for p in finished_run.iterdir())
    args = ["run", str(session), "-s", "none", "-p", "32k", "-j", "1", "--probes", str(session.parent / "probes.yaml"), "--no-report"]
    assert_user_error(bench_cli(*args, "-o", str(finished_run)),
                      f"--out {finished_run}: is itself a run folder (it holds manifest.json)",
                      f"for a new run, pass -o {finished_run.parent}", f"--resume --run-id done -o {finished_run.parent}")
    assert_user_error(bench_cli(*args, "-o", str(finished_run), "--resume"),
                      f"to finish it, pass --resume --run-id done -o {finished_run.parent}")
    assert sorted(p.name for p in finished_run.iterdir()) == before  # no run made inside the run


def test_the_library_refuses_a_run_folder_as_out_too(finished_run):
    """`bench.run(out=...)` from Python is refused before anything is imported or written, as the CLI is."""
    import compaction_bench as bench
    from compaction_bench.errors import BenchError

    before = sorted(p.name for p in finished_run.iterdir())
    with pytest.raises(BenchError, match="is itself a run folder"):
        bench.run(strategies=["none"], profiles=["32k"], out=finished_run, jobs=1, report=False, progress=False)
    assert sorted(p.name for p in finished_run.iterdir()) == before


# --------------------------------------------------------------------------- output for pipes and scripts
def test_piped_lines_are_whole_however_long(session, tmp_path):
    """Piped output is 220 columns wide; a message longer than that (the offline note, a deep --out) stays one line."""
    from compaction_bench.reports.leaderboard import offline_note

    deep = tmp_path / ("d" * 120) / ("e" * 120)
    proc = bench_cli("run", str(session), "-s", "none", "-p", "32k", "-j", "1", "-o", str(deep), "--run-id", "long",
                     "--probes", str(session.parent / "probes.yaml"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    note = offline_note(deep / "long")
    assert note and len(note) > 220 and note in lines
    report_line = f"report: {deep / 'long' / 'report.html'}"
    assert len(report_line) > 220 and report_line in lines


def test_probes_mine_prints_the_yaml_it_would_write(tmp_path):
    """stdout is the file `-o probes.yaml` writes, byte for byte, with a file name longer than the 220 columns of a pipe."""
    created = "src/" + "deeply_nested_" * 20 + "module.py"  # one word of 288 characters: YAML cannot fold it
    transcript = Transcript("long-name", (
        Item("u0", "user", "Create the module.", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name="write_file", arguments=json.dumps({"path": created, "content": "x = 1"}),
             response=0, turn=0),
        Item("r0", "tool_result", "File created successfully.", call_id="c0", turn=0),
        Item("a0", "assistant", "Done.", response=1, turn=0),
    ))
    path = transcript.write(tmp_path / "long.jsonl")
    written = bench_cli("probes", "mine", str(path), "-o", str(tmp_path / "probes.yaml"))
    assert written.returncode == 0, written.stderr
    text = (tmp_path / "probes.yaml").read_text()
    assert f"answer: {created}\n" in text
    printed = bench_cli("probes", "mine", str(path))
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == text


def test_a_path_with_brackets_is_printed_as_written(finished_run, tmp_path):
    """Paths are not Rich markup: `[bold]` in a file name is part of the name."""
    out = tmp_path / "responses[bold].jsonl"
    proc = bench_cli("cache", "export", str(finished_run), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and proc.stdout.strip().endswith(f"responses written to {out}")


def test_version_is_the_installed_distribution_s():
    proc = bench_cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"compaction-bench {version('compaction-bench')}\n", "")


# --------------------------------------------------------------------------- README and --help agree
def _run_paragraph() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("`bench run` options:")
    return text[start:text.index("\n\n", start)]


def _run_options() -> dict[str, object]:
    """Every flag of `bench run` (both spellings of a pair such as --report/--no-report) and its parameter."""
    command = typer.main.get_command(cli.app).commands["run"]  # type: ignore[attr-defined]
    return {flag: param for param in command.params for flag in (*param.opts, *param.secondary_opts) if flag.startswith("-")}


def test_every_bench_run_option_the_readme_names_exists_and_every_one_is_named():
    # a flag is written in backticks, a short and a long spelling joined by a slash: `-s/--strategy`, `--seed`
    named = {flag for pair in re.findall(r"`(-[a-zA-Z]|--[a-z][a-z-]*)(?:/(--[a-z][a-z-]*))?", _run_paragraph()) for flag in pair if flag}
    options = _run_options()
    assert named - set(options) == set()
    # the CLI's own: every option is in the paragraph by one of its spellings (--no-report for --report, --resume for --no-resume)
    unnamed = {param.name for flag, param in options.items() if flag != "--help"} - {options[f].name for f in named if f in options}
    assert unnamed == set()


def test_the_defaults_the_readme_states_are_the_command_line_s():
    paragraph, options = _run_paragraph(), _run_options()
    assert "`-p/--profile` (repeatable; default\n`64k`)" in paragraph and options["--profile"].default is None  # None: 64k
    from compaction_bench.profiles import DEFAULT_PROFILE

    assert DEFAULT_PROFILE == "64k"
    assert "defaults `offline/extractive`,\n`offline/reader`, none" in paragraph
    assert (options["--summarizer"].default, options["--answerer"].default, options["--judge"].default) == ("offline/extractive", "offline/reader", None)
    assert "`--model-timeout SECONDS` (default 60;" in paragraph and options["--model-timeout"].default == 60
    assert "`-j/--jobs N` (worker processes; 0 = one per core;" in paragraph and options["--jobs"].default == 0

"""`bench gate` through the installed console script: exit 1 on a real regression, 0 on a pass,
2 on a usage error or on runs that cannot be compared (naming the difference).

The runs are real: a synthetic session (its first ~300 items, its probes and the mined ones)
replayed through `codex-local`, `pi` and `opencode-v1` at 32k. The summary-prompt tests use a summarizer served on 127.0.0.1
(`tests/model_servers.py`) whose replies follow the prompt: an empty summary when the prompt says
to drop everything, the conversation's salient lines otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.metrics.retention import source_position
from compaction_bench.offline_models import extractive_summary
from compaction_bench.runner import Case, run
from compaction_bench.scenarios.mining import mine_probes
from tests.model_servers import Call, ModelServer

pytestmark = pytest.mark.slow
BENCH = str(Path(sys.executable).with_name("bench"))
STRATEGIES = ["codex-local", "pi", "opencode-v1"]
TEMPLATES = ("codex_summary.j2", "pi_summary.j2", "pi_turn_prefix.j2", "opencode_summary.j2")
DROP = "Drop everything: reply with an empty summary, keep no fact at all."
#: Repeats of every run: the gate's unit is the summary draw (one session in one repeat, s45 G1), and one session in
#: one repeat is one draw, which can fail no probe rule; eight give the sign-flip test 0.5^8, below 0.05 / 6 (Holm over
#: the drop gate's six probe rows).
REPEATS = 8


def follow_the_prompt(call: Call) -> str:
    """A summarizer that does what the prompt says: nothing when told to drop everything."""
    if "drop everything" in call.text.lower():
        return "(empty)"
    messages = ([{"role": "system", "content": call.system}] if call.system else []) + [
        {"role": role if role in ("user", "assistant", "tool") else "user", "content": text} for role, text in call.turns
    ]
    return extractive_summary(messages, call.max_tokens)


@pytest.fixture(scope="module")
def case() -> Case:
    from compaction_bench.scenarios.synthetic import default_suite

    scenario = next(s for s in default_suite() if s.name.startswith("synthetic-parallel"))
    full = scenario.transcript
    cut = next(p for p in (full.position(u.id) for u in full.real_user_messages()) if p >= 300)
    transcript = full.with_items(full.items[:cut])
    # The suite's own probes plus the mined ones (tool output, assistant plans): enough probes for the test to have power.
    probes = tuple(p for p in scenario.probes if source_position(full, p) < cut) + tuple(mine_probes(transcript))
    return Case(scenario.name, transcript, probes)


def _run(root: Path, name: str, case: Case, **kw) -> Path:
    kw.setdefault("answerer", "")
    kw.setdefault("repeats", REPEATS)
    return run(cases=[case], strategies=STRATEGIES, profiles=["32k"], out=root, run_id=name, jobs=1, report=False, progress=False, **kw)


def _templates(folder: Path, text_of) -> dict[str, str]:
    from compaction_bench.templates import default_prompt_dir

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in TEMPLATES:
        path = folder / name
        path.write_text(text_of((default_prompt_dir() / name).read_text(encoding="utf-8")), encoding="utf-8")
        out[name] = str(path)
    return out


@pytest.fixture(scope="module")
def offline_runs(case, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("offline")
    edited = _templates(root / "edited", lambda text: text.replace("##", "### Section:"))
    return {
        "baseline": _run(root, "baseline", case),
        "templates": _run(root, "templates", case, prompts=edited),
        "answered": _run(root, "answered", case, answerer="offline/reader"),
    }


@pytest.fixture(scope="module")
def served_runs(case, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served")
    server = ModelServer("openai", reply=follow_the_prompt)
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "sk-local")
    try:
        served = {"summarizer": "openai/prompt-follower", "api_base": server.base_url}
        runs = {
            "baseline": _run(root, "baseline", case, **served),
            # the templates beside the runs, not in the folder a run claims (which must hold nothing else)
            "drop": _run(root, "drop", case, prompts=_templates(root / "drop-prompts", lambda text: DROP), **served),
            "whitespace": _run(root, "whitespace", case, prompts=_templates(root / "ws", lambda text: text + "\n\n   \n"), **served),
        }
    finally:
        mp.undo()
        server.close()
    return runs


def gate(baseline: Path, candidate: Path, *rules: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    fail_on = [a for r in (rules or ("retention:0.02", "summarized_source:0.05", "integrity:0")) for a in ("--fail-on", r)]
    return subprocess.run(
        [BENCH, "gate", "--baseline", str(baseline), "--candidate", str(candidate), *fail_on, *extra],
        capture_output=True, text=True, timeout=300,
    )


def test_identical_runs_pass(offline_runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(offline_runs["baseline"], copy)
    out = gate(offline_runs["baseline"], copy)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gate: passed" in out.stdout
    assert "| codex-local | 32k | retention |" in out.stdout and "min. draws" in out.stdout


def test_a_summary_prompt_that_drops_everything_fails_the_summary_dependent_metric(served_runs):
    out = gate(served_runs["baseline"], served_runs["drop"])
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if "| summarized_source |" in line}
    assert set(rows) == set(STRATEGIES) and all(float(line.split("|")[6]) < 0 for line in rows.values())  # every one dropped
    # pi and opencode-v1 lose about half their summarized facts: they fail. The served summarizer is deterministic, so the
    # eight repeats are eight equal draws: every row whose draws all drop beyond the tolerance fails at Holm's 6 × 0.5^8
    # (codex-local's 8 of 21 lost too, where the tests' unit was the probe and its 6 of 31 did not fail).
    assert {"pi", "opencode-v1"} <= {name for name, line in rows.items() if "**fail**" in line}
    assert "Flipped probes" in out.stdout and "lost" in out.stdout
    base = pd.read_parquet(served_runs["baseline"] / "summary.parquet").set_index("strategy")
    drop = pd.read_parquet(served_runs["drop"] / "summary.parquet").set_index("strategy")
    for strategy in STRATEGIES:  # the summary part of retention is what went: the kept part is the strategy's own
        assert drop.loc[strategy, "retention_summary"] < base.loc[strategy, "retention_summary"]


def test_a_whitespace_only_template_edit_passes(served_runs):
    out = gate(served_runs["baseline"], served_runs["whitespace"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gate: passed" in out.stdout


def test_an_offline_summarizer_cannot_gate_a_template_change(offline_runs):
    out = gate(offline_runs["baseline"], offline_runs["templates"])
    assert out.returncode == 2
    assert "differ only in summary templates" in out.stderr and "does not read instruction wording" in out.stderr
    assert "--allow-offline-summarizer" in out.stderr
    allowed = gate(offline_runs["baseline"], offline_runs["templates"], extra=("--allow-offline-summarizer",))
    assert allowed.returncode in (0, 1) and "allowed:" in allowed.stdout


def test_a_missing_cell_is_a_usage_error_naming_it(offline_runs, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(offline_runs["baseline"], partial)
    summary = pd.read_parquet(partial / "summary.parquet")
    summary[summary["strategy"] != "pi"].to_parquet(partial / "summary.parquet")
    out = gate(offline_runs["baseline"], partial)
    assert out.returncode == 2
    assert "candidate is missing 1 cell(s)" in out.stderr and "pi" in out.stderr


def test_a_strategy_without_probe_rows_is_a_usage_error_not_a_silent_pass(offline_runs, tmp_path):
    # Before, the retention rule skipped codex-local (no shared probe point) and the gate passed.
    partial = tmp_path / "no-probes"
    shutil.copytree(offline_runs["baseline"], partial)
    probes = pd.read_parquet(partial / "probes.parquet")
    probes[probes["strategy"] != "codex-local"].to_parquet(partial / "probes.parquet")
    out = gate(offline_runs["baseline"], partial, "retention:0.02")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "codex-local · 32k: the probes with rows differ" in out.stderr


def test_different_answerers_are_a_usage_error_naming_them(offline_runs):
    out = gate(offline_runs["baseline"], offline_runs["answered"])
    assert out.returncode == 2
    assert "answerer differs" in out.stderr and "offline/reader" in out.stderr
    assert out.stderr.count("\n") == 1  # one line, no traceback


def test_rules_need_a_tolerance(offline_runs):
    out = gate(offline_runs["baseline"], offline_runs["baseline"], "presence")
    assert out.returncode == 2 and "needs a tolerance" in out.stderr
    out = gate(offline_runs["baseline"], offline_runs["baseline"], "retention:-1")
    assert out.returncode == 2
    out = gate(offline_runs["baseline"], offline_runs["baseline"], "retention:2")  # meant as 2 points: could never fail
    assert out.returncode == 2 and "0.02 for 2 points" in out.stderr


def test_python_dash_m_keeps_the_exit_status(served_runs):
    out = subprocess.run(
        [sys.executable, "-m", "compaction_bench.cli", "gate", "--baseline", str(served_runs["baseline"]),
         "--candidate", str(served_runs["drop"]), "--fail-on", "summarized_source:0.05"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--prompt", "codex_sumary.j2=new.j2"], "no template named 'codex_sumary.j2' (did you mean 'codex_summary.j2'?); templates: "),
        (["-j", "-1"], "greater than or equal to 0"),
    ],
)
def test_run_refuses_a_misspelled_template_and_negative_jobs(tmp_path, arguments, message):
    (tmp_path / "new.j2").write_text("Summarize.", encoding="utf-8")
    out = subprocess.run([BENCH, "run", "-s", "none", "-o", str(tmp_path), *arguments], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 2 and message in out.stderr
    if "templates" in message:
        assert "codex_summary.j2" in out.stderr  # the list names the real ones
    assert not any(tmp_path.glob("*/manifest.json"))


def test_the_manifest_records_what_the_gate_compares(offline_runs):
    manifest = json.loads((offline_runs["templates"] / "manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["config"]["prompts"]) == set(TEMPLATES)


def test_compare_refuses_runs_that_are_not_comparable(offline_runs):
    out = subprocess.run([BENCH, "compare", str(offline_runs["baseline"]), str(offline_runs["answered"])], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "answerer differs" in out.stderr
    allowed = subprocess.run(
        [BENCH, "compare", str(offline_runs["baseline"]), str(offline_runs["answered"]), "--allow-different-inputs"],
        capture_output=True, text=True, timeout=300,
    )
    assert allowed.returncode == 0 and "allowed difference: answerer differs" in allowed.stderr


def test_the_metrics_outside_the_probes_are_tested_per_summary_draw_when_a_model_summarizes(offline_runs, served_runs):
    """integrity: with the offline summarizer the runs repeat exactly, so it is compared exactly and a change is the
    change's; with a model summarizer its summaries are sampled (a summary's length moves later compactions, overflows
    and costs), so it is tested per summary draw, and the comment says so. The served runs are real `bench run`
    folders of one session × 8 repeats: 8 draws. The gate's own function, on the module's runs (the terminal test
    below shares them)."""
    from compaction_bench.reports.gate import Rule
    from compaction_bench.reports.gate import gate as run_gate

    rules = [Rule.parse("integrity:0")]
    exact = run_gate(offline_runs["baseline"], offline_runs["baseline"], rules)
    assert "integrity: the runs' sums or means over the same cells; compared exactly (no test): with a deterministic summarizer" in " ".join(exact.basis)
    assert exact.table["draws"].isna().all()
    sampled = run_gate(served_runs["baseline"], served_runs["whitespace"], rules)
    assert "the summaries of openai/prompt-follower are sampled" in " ".join(sampled.basis)
    assert "they are tested per summary draw" in " ".join(sampled.basis)
    assert set(sampled.table["draws"]) == {8} and set(sampled.table["status"]) == {"ok"}


def test_the_terminal_says_when_a_figure_measures_an_offline_heuristic(offline_runs, served_runs):
    from compaction_bench.reports.leaderboard import offline_note

    note = offline_note(offline_runs["baseline"])  # no answerer
    assert note is not None and "heuristic" in note and "offline/extractive" in note and "answered" not in note
    assert offline_note(served_runs["baseline"]) is None
    both = offline_note(offline_runs["answered"])
    assert both is not None and "offline/extractive" in both and "'answered' was graded with offline/reader, a deterministic heuristic" in both

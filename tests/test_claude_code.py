"""`claude-code` and `claude-code-2.1` against the rules of docs/specs/claude-code.md, on hand-built
sessions with recorded usage and on the recorded Claude Code corpus (§9)."""

from __future__ import annotations

import json
import random
import re

import pytest

from compaction_bench.metrics.integrity import check
from compaction_bench.replay import replay
from compaction_bench.strategies.claude_code import (
    CLEARED_RESULT,
    CONTINUE_SENTENCE,
    SUMMARY_PREFIX,
    SUMMARY_PREFIX_LATER,
    auto_compact_threshold,
    env_max_output,
    format_summary,
    model_output_cap,
)
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
SECTIONS = (
    "Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections", "Errors and fixes",
    "Problem Solving", "All user messages", "Pending Tasks", "Current Work", "Optional Next Step",
)


def _pair_errors(result) -> int:
    return sum(len(v) for r in result.requests for v in check(r.messages).values())


def test_threshold_rules_of_base():
    # §2.1: W − min(env, cap) − 13,000; env unset → 32,000, capped at 64,000; the PCT override only lowers.
    assert env_max_output(None) == 32_000 and env_max_output(0) == 32_000 and env_max_output(100_000) == 64_000
    assert model_output_cap("claude-opus-4-5-20251101") == 64_000
    assert model_output_cap("claude-opus-4-1") == 32_000
    assert model_output_cap("claude-3-5-sonnet") == 8_192
    assert model_output_cap("claude-sonnet-4-20250514") == 64_000
    assert 200_000 - min(64_000, 64_000) - 13_000 == auto_compact_threshold(200_000 - 64_000, 13_000, None) == 123_000
    assert auto_compact_threshold(200_000 - 32_000, 13_000, None) == 155_000
    assert auto_compact_threshold(200_000 - 8_192, 13_000, None) == 178_808
    assert auto_compact_threshold(136_000, 13_000, 50) == 68_000
    assert auto_compact_threshold(136_000, 13_000, 95) == 123_000  # cannot raise T
    assert auto_compact_threshold(136_000, 13_000, 0) == 123_000  # 0 is not a valid override


def _session(totals: list[int]) -> Session:
    s = Session()
    s.user("Please fix the parser in src/parse.py; never touch the tests.")
    for n, total in enumerate(totals):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"echo {n}"})], total=total)
        s.result(f"c{n}", f"output {n}", name="Bash")
    s.assistant("done", total=1_000)
    return s


def test_fires_at_the_threshold_and_not_before():
    # §2.2/§2.3: the check before each request reads the newest response's usage; `≥` T fires.
    result = replay(_session([100_000, 122_999, 123_000, 50_000]).transcript(), "claude-code", profile="claude-opus",
                    usage="recorded", options=OPUS)
    turns = [r for r in result.requests if r.kind == "turn"]
    assert [r.threshold for r in turns] == [123_000] * len(turns)
    assert [r.estimate_tokens for r in turns[:4]] == [0, 100_000, 122_999, 123_000]
    assert [(c.trigger, c.step) for c in result.compactions] == [("auto", 3)]
    assert result.compactions[0].details["count"] == 123_000
    assert turns[4].estimate_tokens < 123_000


def test_unset_env_gives_155k_and_nothing_fires_below():
    result = replay(_session([150_000, 154_999]).transcript(), "claude-code", profile="claude-opus", usage="recorded",
                    options={"model": "claude-opus-4-5"})
    assert {r.threshold for r in result.requests if r.kind == "turn"} == {155_000}
    assert result.compactions == []


def test_summary_request_and_new_context():
    s = Session()
    s.user("Build the report generator; the output must stay under 80 columns.")
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/repo/report.py"})], total=10_000)
    s.result("r1", "     1→def report():\n     2→    return 'x'\n", name="Read")
    todos = [{"content": "write tests", "status": "pending", "activeForm": "Writing tests"}]
    s.assistant("planning", calls=[("t1", "TodoWrite", {"todos": todos})], total=124_000)
    s.result("t1", "Todos have been modified successfully.", name="TodoWrite")
    s.assistant("next", total=40_000)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert [c.trigger for c in result.compactions] == ["auto"]
    summary_requests = [r for r in result.requests if r.kind == "summary"]
    assert len(summary_requests) == 1
    request = summary_requests[0]
    assert request.messages[0].role == "system" and "summar" in request.messages[0].content
    prompt = request.messages[-1]
    assert prompt.role == "user" and "<analysis>" in prompt.content and "<summary>" in prompt.content
    positions = [prompt.content.index(f"{n}. {label}") for n, label in enumerate(SECTIONS, start=1)]
    assert positions == sorted(positions)
    # Everything since the (absent) previous boundary goes in, the user's request included.
    assert any("80 columns" in m.content for m in request.messages[1:-1])
    compaction = result.compactions[0]
    after = compaction.after
    assert after[0].role == "user" and after[0].content.startswith(SUMMARY_PREFIX + "\n")
    assert after[0].content.endswith(CONTINUE_SENTENCE)
    # No verbatim tail: every transcript item before the compaction is gone (summarized).
    assert compaction.kept_ids == ()
    restored = "\n".join(m.content for m in after[1:])
    assert '"file_path": "/repo/report.py"' in restored and "def report()" in restored
    assert "<system-reminder>" in restored and "write tests" in restored
    assert compaction.details["restored_files"] == ["/repo/report.py"]
    assert _pair_errors(result) == 0


def test_restored_file_budgets():
    # §4.2: ≤ 5 newest files, ≤ 5,000 tokens each (else a path-only note).
    s = Session()
    s.user("look at the files")
    for n in range(7):
        s.assistant(f"read {n}", calls=[(f"r{n}", "Read", {"file_path": f"/repo/f{n}.py"})], total=1_000 + n)
        size = 30_000 if n == 6 else 100
        s.result(f"r{n}", f"content of f{n} " + "y" * size, name="Read")
    s.assistant("over", total=130_000)
    s.user("continue")
    s.assistant("ok", total=10)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    after = "\n".join(m.content for m in result.compactions[0].after)
    assert "f6.py was read before the conversation was summarized" in after  # 30,000 chars > 5,000 tokens
    assert result.compactions[0].details["restored_files"] == ["/repo/f5.py", "/repo/f4.py", "/repo/f3.py", "/repo/f2.py"]
    assert "content of f1" not in after and "content of f0" not in after


def _marker(id_: str, trigger: str, pre: int) -> Item:
    return Item(id=id_, kind="marker", text="Conversation compacted", meta={"event": "compaction", "trigger": trigger, "preTokens": pre})


def test_manual_compact_where_recorded():
    s = Session()
    s.user("first request")
    s.assistant("answer", total=60_000)
    s.items.append(_marker("m1", "manual", 60_000))
    s.user("after the compaction")
    s.assistant("fine", total=30_000)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert [(c.trigger, c.details["recorded"]["id"]) for c in result.compactions] == [("manual", "m1")]
    summary = result.compactions[0].after[0].content
    assert summary.startswith(SUMMARY_PREFIX) and CONTINUE_SENTENCE not in summary
    off = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded",
                 options=OPUS | {"manual_compact_at_recorded": False})
    assert off.compactions == []


def test_microcompact_clears_oldest_eligible_results_keeping_three():
    # §5: 8 Read results of ~10,000 estimated tokens (40,000 chars) each = 80,000; keep 40,000 → clear the
    # oldest 4 (40,000 ≥ 20,000 freed); the newest 3 are protected; only at the warning line T − 20,000.
    s = Session()
    s.user("read everything")
    for n in range(8):
        s.assistant(f"r{n}", calls=[(f"r{n}", "Read", {"file_path": f"/repo/m{n}.txt"})], total=104_000)
        s.result(f"r{n}", ("lorem ipsum " * 3_334)[:40_000], name="Read")
    s.assistant("summary of reads", total=104_000)
    s.user("go on")
    s.assistant("ok", total=104_000)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    # Before step 6: r0..r5 = 60,000, r3..r5 protected → clear r0, r1 (20,000 freed). Before step 7: 50,000 left,
    # clearing r2 frees only 10,000 → cancelled. Before step 8: r2..r7 = 60,000 → clear r2, r3.
    micro = [(c.step, c.details["cleared_calls"]) for c in result.compactions if c.trigger == "microcompact"]
    assert micro == [(6, ["r0", "r1"]), (8, ["r2", "r3"])]
    final = result.final.messages
    cleared = [m.tool_call_id for m in final if m.role == "tool" and m.content == CLEARED_RESULT]
    assert cleared == ["r0", "r1", "r2", "r3"]
    assert _pair_errors(result) == 0
    # Below the warning line (103,000) nothing is cleared.
    low = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS | {"model": "claude-3-5-haiku"})
    assert [c for c in low.compactions if c.trigger == "microcompact"] == []


def test_format_summary():
    text = "<analysis>\nlooked at\n\n\n\nthings\n</analysis>\n\n<summary>\n1. Primary Request and Intent:\n  fix it\n</summary>"
    assert format_summary(text) == "Analysis:\nlooked at\n\nthings\n\nSummary:\n1. Primary Request and Intent:\n  fix it"
    assert format_summary(text, keep_analysis=False) == "Summary:\n1. Primary Request and Intent:\n  fix it"


def test_format_summary_is_the_regular_expressions():
    # §4.1 `format()` as upstream writes it, one `re.sub` per block; `format_summary` finds the blocks by searching.
    analysis = re.compile(r"<analysis>(.*?)</analysis>", re.S)
    summary = re.compile(r"<summary>(.*?)</summary>", re.S)

    def upstream(text: str, keep_analysis: bool) -> str:
        text = analysis.sub(lambda m: f"Analysis:\n{m.group(1).strip()}" if keep_analysis else "", text, count=1)
        text = summary.sub(lambda m: f"Summary:\n{m.group(1).strip()}", text, count=1)
        return re.sub(r"\n\n+", "\n\n", text).strip()

    texts = [
        "no blocks at all", "<summary> quoted, never closed", "</summary> before <summary>x</summary>",
        "<summary>a</summary><summary>b</summary>", "<summary><summary>nested</summary></summary>",
        "x <analysis>\n think \n</analysis> y <summary>\n s \n</summary> z", "<analysis>open only <summary>s</summary>",
        "write it inside <summary> tags.\n\n\n<summary>\n1. Intent\n</summary>\n", "<summary></summary>",
    ]
    pieces = ["<analysis>", "</analysis>", "<summary>", "</summary>", "\n", "\n\n\n", " x ", "<summ", "ary>", "</"]
    generator = random.Random(18)
    texts += ["".join(generator.choice(pieces) for _ in range(generator.randint(0, 10))) for _ in range(3_000)]
    for text in texts:
        for keep in (True, False):
            assert format_summary(text, keep_analysis=keep) == upstream(text, keep), text


def test_later_rules():
    # §8.1: reserve min(max output, 20,000) → T = 200,000 − 20,000 − 13,000; §8.2 tail estimate; §8.5 wrapper.
    s = Session()
    s.user("a task")
    s.assistant("step", calls=[("c1", "Bash", {"command": "ls"})], total=160_000)
    s.result("c1", "x" * 40_000, name="Bash")  # 10,000 estimated tokens after the response
    s.assistant("done", total=20_000)
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    turns = [r for r in result.requests if r.kind == "turn"]
    assert turns[0].threshold == 167_000
    assert turns[1].estimate_tokens == 160_000 + 10_000
    assert [c.trigger for c in result.compactions] == ["auto"]
    summary = result.compactions[0].after[0].content
    assert summary.startswith(SUMMARY_PREFIX_LATER) and "Analysis:" not in summary
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert [r.estimate_tokens for r in base.requests if r.kind == "turn"][1] == 160_000  # BASE adds no tail estimate

SMARTAGENT = CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure"


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_fidelity_reproduces_all_eight_recorded_compactions():
    from compaction_bench.fidelity import claude_code_fidelity_rows

    rows = [
        row
        for name in ("b566e56e-94a7-425e-a662-d701321e27ce", "703e4528-dfb0-4257-a888-e10b7d3e39a8",
                     "24a90d02-9724-4548-9f4f-97bcb9f93ef3", "d6a37ffc-384d-4d2a-832a-78cdd493af69")
        for row in claude_code_fidelity_rows(SMARTAGENT / f"{name}.jsonl", options={"max_output_tokens_env": 64_000})
    ]
    # §9: six auto boundaries fire where recorded (no replay compaction anywhere else), two manual ones are manual.
    assert [(r.recorded_trigger, r.replay_trigger) for r in rows].count(("auto", "auto")) == 6
    assert [(r.recorded_trigger, r.replay_trigger) for r in rows].count(("manual", "manual")) == 2
    assert all(r.line is not None for r in rows), "a replay compaction without a recorded boundary"
    for row in rows:
        assert row.threshold == 123_000
        assert (row.count >= 123_000) == (row.recorded_trigger == "auto")
        # preTokens is the count, or exceeds it by the output the JSONL line did not record (§1.1).
        assert row.gap == 0 or (row.recorded_output is not None and row.recorded_output <= 2 and 0 < row.gap < 1_000)
        if row.recorded_trigger == "auto":
            assert row.previous_check < 123_000  # the check before did not fire
    assert sorted(r.line for r in rows) == [165, 233, 241, 313, 346, 496, 712, 882]
    assert sorted(r.gap for r in rows if r.gap) == [186, 653]


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_corpus_session_keeps_pairs_and_restores_files():
    path = SMARTAGENT / "703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl"
    result = replay(path, "claude-code", profile="claude-opus", usage="recorded", options={"max_output_tokens_env": 64_000})
    assert [c.trigger for c in result.compactions] == ["auto"]
    assert len(result.compactions[0].details["restored_files"]) == 5
    assert _pair_errors(result) == 0
    assert json.dumps(result.compactions[0].details)


def test_failed_compactions_base_retries_every_request_later_breaks_after_three(tmp_path):
    # A summary prompt too long for any summary request: every compaction fails (§3.4). BASE tries again
    # before every request (no breaker, §2.3 step 6); 2.1 retries each failure with the oldest rounds
    # dropped (§8.3) and stops auto-compacting after 3 consecutive failures.
    prompt = tmp_path / "huge.j2"
    prompt.write_text("padding " * 190_000)
    s = Session()
    s.user("a long task")
    for n in range(8):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"ls {n}"})], total=170_000)
        s.result(f"c{n}", f"out {n}", name="Bash")
    s.assistant("end", total=1_000)
    prompts = {"claude_code_summary.j2": prompt}
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS, prompts=prompts)
    assert base.compactions == []
    assert sorted({r.step for r in base.requests if r.kind == "summary"}) == list(range(1, 9))
    later = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS, prompts=prompts)
    assert later.compactions == []
    assert sorted({r.step for r in later.requests if r.kind == "summary"}) == [1, 2, 3]
    assert sum(1 for r in later.requests if r.kind == "summary" and r.step == 3) > 1  # retried with rounds dropped


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_fidelity_cli_prints_the_table():
    import subprocess
    import sys

    path = SMARTAGENT / "703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl"
    command = [sys.executable, "-m", "compaction_bench.cli", "fidelity", "claude-code"]
    out = subprocess.run([*command, str(path), "--max-output-tokens", "64000"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "| 703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl | line 233 | auto | 123,096 |" in out.stdout
    assert "fires (123,096 ≥ 123,000)" in out.stdout
    pi = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono" / "before-compaction.jsonl"
    bad = subprocess.run([*command, str(pi)], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Claude Code" in bad.stderr


def test_later_rapid_refill_breaker_stops_after_three_refills():
    # §8.3: a compaction whose context is back at the threshold within < 3 query-loop turns is a refill;
    # after 3 in a row auto-compaction stops. Window 40,000, reserve min(32,000, 20,000) → T = 7,000; every
    # tool result adds ~8,000 estimated tokens, so the count is over T again right after each compaction.
    s = Session()
    s.user("scan the logs")
    for n in range(8):
        s.assistant(f"scan {n}", calls=[(f"c{n}", "Bash", {"command": f"cat log{n}"})])
        s.result(f"c{n}", ("lorem ipsum dolor " * 2_000)[:32_000], name="Bash")
    s.assistant("done")
    result = replay(s.transcript(), "claude-code-2.1", profile=small_profile(40_000))
    turns = [r for r in result.requests if r.kind == "turn" and r.attempt == 0]
    assert turns[0].threshold == 7_000
    assert [c.step for c in result.compactions if c.trigger == "auto"] == [1, 2, 3, 4]
    assert all(r.estimate_tokens >= 7_000 for r in turns if r.step >= 5)  # over T, but the breaker holds

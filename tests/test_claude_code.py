"""`claude-code` and `claude-code-2.1` against the rules of docs/specs/claude-code.md, on hand-built
sessions with recorded usage and on the recorded Claude Code corpus (§9)."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import replace

import pytest

from compaction_bench.metrics.integrity import check
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.replay import replay
from compaction_bench.strategies.claude_code import (
    CLEARED_RESULT,
    CONTINUE_LATER,
    CONTINUE_SENTENCE,
    PTL_RETRY_MARKER,
    SUMMARY_PREFIX,
    SUMMARY_PREFIX_LATER,
    TRANSCRIPT_NOTE,
    ClaudeCode,
    ClaudeCode21,
    auto_compact_threshold,
    env_max_output,
    format_summary,
    model_output_cap,
    number_lines,
)
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA
from tests.pi_builders import RecordingSummarizer, Session, small_profile

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
SECTIONS = (
    "Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections", "Errors and fixes",
    "Problem Solving", "All user messages", "Pending Tasks", "Current Work", "Optional Next Step",
)


#: A reminder after a Read result's numbered lines, as the Read tool appends one (in this test's own words)
REMINDER = "\n\n<system-reminder>\nA note the Read tool appends to every file it shows.\n</system-reminder>\n"


def _read(text: str) -> str:
    """What 2.0.57's Read tool returns for a whole file of `text`: its numbered lines, then its reminder."""
    return number_lines(text) + REMINDER


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
    # the request the check compacted goes out unchecked: no threshold (tests/test_estimates_claude.py)
    assert [r.threshold for r in turns] == [123_000] * 3 + [None] + [123_000] * (len(turns) - 4)
    assert [r.meta["count"] for r in turns[:4]] == [0, 100_000, 122_999, 123_000]
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
    s.result("r1", _read("def report():\n    return 'x'"), name="Read")
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
    # §4.2 upstream writes the re-read's input with `JSON.stringify`, which puts no space after ":" (this test
    # asserted Python's spaced `{"file_path": "..."}` before; cc@2.0.57 cli.js L4256 `DSA`).
    assert 'Called the Read tool with the following input: {"file_path":"/repo/report.py"}' in restored
    assert "Result of calling the Read tool: " + json.dumps(_read("def report():\n    return 'x'"), ensure_ascii=False) in restored
    assert '[{"content":"write tests","status":"pending","activeForm":"Writing tests"}]' in restored
    assert "<system-reminder>" in restored and "write tests" in restored
    assert compaction.details["restored_files"] == ["/repo/report.py"]
    assert _pair_errors(result) == 0


def test_restored_file_budgets():
    # §4.2: ≤ 5 newest files, ≤ 5,000 tokens each (else a path-only note).
    s = Session()
    s.user("look at the files")
    for n in range(7):
        s.assistant(f"read {n}", calls=[(f"r{n}", "Read", {"file_path": f"/repo/f{n}.py"})], total=1_000 + n)
        text = " ".join(str(k) for k in range(7_000)) if n == 6 else "y" * 100  # f6: over 5,000 tokens by count
        s.result(f"r{n}", _read(f"content of f{n} " + text), name="Read")
    s.assistant("over", total=130_000)
    s.user("continue")
    s.assistant("ok", total=10)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    after = "\n".join(m.content for m in result.compactions[0].after)
    assert "f6.py was read before the conversation was summarized" in after  # its count is over 5,000 tokens
    assert result.compactions[0].details["restored_files"] == ["/repo/f5.py", "/repo/f4.py", "/repo/f3.py", "/repo/f2.py"]
    assert "content of f1" not in after and "content of f0" not in after


@pytest.mark.parametrize("strategy", ["claude-code", "claude-code-2.1"])
def test_restored_files_are_the_newest_by_modification_time(strategy):
    """§4.2 "sort by timestamp, newest first": the read cache's timestamp is the file's modification time, which
    Read, Edit and Write all store (2.0.57 `RD`: `Math.ceil(statSync(path).mtimeMs)`; 2.1.112 `Av`/`Math.floor`),
    and a Read does not change. So a file written early and read by nothing since outranks five files read after
    it, and a file edited after being read outranks one read after that edit. Right answer: the Write (/r/a.py)
    and the Edit (/r/b.py) first, the later edit first; then three of the files only read (their order on disk is
    unknown; the replay puts the last read first). Before, the five newest reads or writes were kept and /r/a.py
    dropped."""
    s = Session()
    s.user("set up the module")
    s.assistant("writing", calls=[("w", "Write", {"file_path": "/r/a.py", "content": "A = 1\n"})], total=1_000)
    s.result("w", "File created successfully at: /r/a.py", name="Write")
    s.assistant("reading", calls=[("rb", "Read", {"file_path": "/r/b.py"})], total=1_100)
    s.result("rb", _read("B = 1"), name="Read")
    s.assistant("editing", calls=[("e", "Edit", {"file_path": "/r/b.py", "old_string": "B = 1", "new_string": "B = 2"})], total=1_200)
    s.result("e", "The file /r/b.py has been updated.", name="Edit")
    for name in "cdefg":
        s.assistant(f"read {name}", calls=[(f"r{name}", "Read", {"file_path": f"/r/{name}.py"})], total=1_300)
        s.result(f"r{name}", _read(f"{name.upper()} = 1"), name="Read")
    s.assistant("over", total=190_000)
    s.user("continue")
    s.assistant("ok", total=10)
    result = replay(s.transcript(), strategy, profile="claude-opus", usage="recorded", options=OPUS)
    assert result.compactions[0].details["restored_files"] == ["/r/b.py", "/r/a.py", "/r/g.py", "/r/f.py", "/r/e.py"]


def test_an_unchanged_read_stub_is_not_the_files_content():
    """2.1.86+ answers a Read of a file read before and unchanged since with a stub (2.1.112 `z44`: "File unchanged
    since last read. …"), and a compaction re-reads the file from disk (§4.2). Right answer: the restored file is
    the content of the first Read, not the stub."""
    stub = ("File unchanged since last read. The content from the earlier Read tool_result in this conversation is "
            "still current — refer to that instead of re-reading.")
    s = Session()
    s.user("check b")
    for n, text in enumerate(["     1→def b(): return 42\n", stub]):
        s.assistant(f"read {n}", calls=[(f"r{n}", "Read", {"file_path": "/r/b.py"})], total=1_000)
        s.result(f"r{n}", text, name="Read")
    s.assistant("over", total=190_000)
    s.user("continue")
    s.assistant("ok", total=10)
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    restored = "\n".join(m.content for m in result.compactions[0].after[1:])
    assert "def b(): return 42" in restored and "File unchanged" not in restored


def test_summary_dollar_patterns_and_the_percentage_override_follow_javascript():
    """Upstream puts the summary into the replacement string of `String.prototype.replace` (2.0.57 `tF5`, 2.1.112
    `d0z`), so `$$`, `$&`, `` $` `` and `$'` are read as patterns; a `$1` (the expression has no group) stays. The
    expected text is what node prints for upstream's two replace calls on this input. The percentage override is
    `Math.floor(E * (p / 100))`: node gives 125,999 for E = 180,000 and p = 70, 62,999 for p = 35."""
    text = "<analysis>a $$ b</analysis> x <summary>cost $$5 and $& and $` and $' end $1</summary> tail"
    assert format_summary(text) == (
        "Analysis:\na $ b x Summary:\ncost $5 and <summary>cost $$5 and $& and $` and $' end $1</summary> and "
        "Analysis:\na $ b x  and  tail end $1 tail"
    )
    assert format_summary("<summary>echo $HOME costs $5</summary>") == "Summary:\necho $HOME costs $5"
    assert [auto_compact_threshold(180_000, 13_000, p) for p in (70, 35, 50)] == [125_999, 62_999, 90_000]


def test_later_summarisers_own_request_sends_images_as_text_and_the_fork_as_they_are():
    """2.1.112 `ALK`: the standard summary call strips images (`Ar1`: an image block becomes the text block
    "[image]"), the fork (`rP`) sends the messages as the turn does. Right answer: with the fork off, the summary
    request holds "[image]" where the screenshot was and no image; the fork's request holds the image itself."""
    from compaction_bench.transcript import Attachment

    s = Session()
    s.turn += 1
    s._add(kind="user", text="the page looks wrong", attachments=(Attachment("image/png", "shot.png", 90_000),))
    s.assistant("checking", calls=[("b1", "Bash", {"command": "ls"})], total=190_000)
    s.result("b1", "index.html", name="Bash")
    s.assistant("ok", total=10)
    for fork in (False, True):
        result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded",
                        options={**OPUS, "compact_cache_prefix": fork})
        (request,) = [r for r in result.requests if r.kind == "summary"]
        user = next(m for m in request.messages if m.item_ids == ("i0",))
        if fork:
            assert request.meta == {"fork": "compact"}
            assert (user.content, [a.name for a in user.attachments]) == ("the page looks wrong", ["shot.png"])
        else:
            assert (user.content, user.attachments) == ("the page looks wrong\n[image]", ())


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


def _eight_reads() -> Session:
    """8 Read results of ~10,000 estimated tokens (40,000 chars) each, each request at 104,000 tokens, then a user turn."""
    s = Session()
    s.user("read everything")
    for n in range(8):
        s.assistant(f"r{n}", calls=[(f"r{n}", "Read", {"file_path": f"/repo/m{n}.txt"})], total=104_000)
        s.result(f"r{n}", ("lorem ipsum " * 3_334)[:40_000], name="Read")
    s.assistant("summary of reads", total=104_000)
    s.user("go on")
    return s


def test_microcompact_clears_oldest_eligible_results_keeping_three():
    # §5: 8 Read results of ~10,000 estimated tokens (40,000 chars) each = 80,000; keep 40,000 → clear the
    # oldest 4 (40,000 ≥ 20,000 freed); the newest 3 are protected; only at the warning line T − 20,000.
    s = _eight_reads()
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
    # DISABLE_COMPACT does not move the line (2.0.57 `L1A` reads the `autoCompactEnabled` setting alone): the same
    # clearing; with that setting off, the line is the effective window's (136,000 − 20,000), which 104,000 is under.
    disabled = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS | {"disable_compact": True})
    assert [(c.step, c.details["cleared_calls"]) for c in disabled.compactions if c.trigger == "microcompact"] == micro
    off = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS | {"auto_compact": False})
    assert [c for c in off.compactions if c.trigger == "microcompact"] == []


def test_microcompact_clears_every_result_of_a_cleared_id():
    """§5 step 5: the ids a pass cleared are remembered for the session and the edit matches results by `tool_use_id`,
    so a later Read that reuses a cleared id (a recording that reuses ids) has its result cleared too, and is no
    candidate of a later pass (step 1 leaves cleared ids out). The session of the test above, then a ninth Read with
    the id `r0`, which the pass at step 6 cleared: its result is the placeholder, and the passes are the same (before,
    only the first `r0` result was replaced and the new one was sent whole)."""
    s = _eight_reads()
    s.assistant("again", calls=[("r0", "Read", {"file_path": "/repo/again.txt"})], total=104_000)
    s.result("r0", "the file read again", name="Read")
    s.assistant("ok", total=104_000)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    micro = [(c.step, c.details["cleared_calls"]) for c in result.compactions if c.trigger == "microcompact"]
    assert micro == [(6, ["r0", "r1"]), (8, ["r2", "r3"])]
    cleared = [m.tool_call_id for m in result.final.messages if m.role == "tool" and m.content == CLEARED_RESULT]
    assert cleared == ["r0", "r1", "r2", "r3", "r0"]


def test_microcompact_drops_a_file_from_the_read_cache_as_2_0_57_does():
    """§5 (2.0.57 `$i`): a pass drops a path from the read cache when it cleared a Read of that path and no other
    Read of it is in the messages; a Read an earlier pass cleared still counts (its call stays), an Edit or a Write
    keeps nothing. Right answers, two sessions that microcompact (six 10,000-token reads at the warning line):
    - config.py read, then edited, then its Read cleared: dropped (before: kept, as its newest text came from the
      Edit), so it is not restored;
    - f.py read twice, the first Read cleared by one pass and the second by the next: kept (before: dropped, as its
      newest source was cleared), so it is restored."""
    big = "x" * 40_000

    edited = Session()
    edited.user("tune the config, then read the data files")
    edited.assistant("read config", calls=[("rc", "Read", {"file_path": "/r/config.py"})], total=104_000)
    edited.result("rc", _read("LIMIT = 1"), name="Read")
    edited.assistant("edit config", calls=[("ec", "Edit", {"file_path": "/r/config.py", "old_string": "LIMIT = 1", "new_string": "LIMIT = 2"})],
                     total=104_000)
    edited.result("ec", "The file /r/config.py has been updated.", name="Edit")
    for n in range(6):
        edited.assistant(f"read d{n}", calls=[(f"d{n}", "Read", {"file_path": f"/r/d{n}.txt"})], total=104_000)
        edited.result(f"d{n}", _read(big), name="Read")
    edited.assistant("over", total=130_000)
    edited.user("continue")
    edited.assistant("ok", total=10)
    result = replay(edited.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert any("rc" in c.details["cleared_calls"] for c in result.compactions if c.trigger == "microcompact")
    (auto,) = [c for c in result.compactions if c.trigger == "auto"]
    assert "/r/config.py" not in auto.details["restored_files"]

    twice = Session()
    twice.user("read f and the data files")
    reads = [("f1", "/r/f.py", "F = 1"), *((f"d{n}", f"/r/d{n}.txt", big) for n in range(3)), ("f2", "/r/f.py", "F = 1"),
             *((f"d{n}", f"/r/d{n}.txt", big) for n in range(3, 8))]
    for call_id, path, text in reads:
        twice.assistant(f"read {call_id}", calls=[(call_id, "Read", {"file_path": path})], total=104_000)
        twice.result(call_id, _read(text), name="Read")
    twice.assistant("over", total=130_000)
    twice.user("continue")
    twice.assistant("ok", total=10)
    result = replay(twice.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    passes = [c.details["cleared_calls"] for c in result.compactions if c.trigger == "microcompact"]
    assert passes == [["f1", "d0", "d1"], ["d2", "f2", "d3"]]
    (auto,) = [c for c in result.compactions if c.trigger == "auto"]
    assert "/r/f.py" in auto.details["restored_files"]


def test_a_file_read_in_part_is_restored_as_a_reference():
    """§4.2: the restore re-reads the whole file (2.0.57 `FV5` calls the Read tool without offset or limit), so a
    Read of lines 900–901 does not show what it would: the file is named for reading again, not restored as that
    slice (before, the slice was restored as if it were the file)."""
    s = Session()
    s.user("look at the end of the parser")
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/r/parse.py", "offset": 900, "limit": 2})], total=1_000)
    s.result("r1", "   900→def tail():\n   901→    return 1\n", name="Read")
    s.assistant("over", total=190_000)
    s.user("continue")
    s.assistant("ok", total=10)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    after = "\n".join(m.content for m in result.compactions[0].after[1:])
    assert result.compactions[0].details["restored_files"] == [] and "/r/parse.py was read before" in after
    assert "def tail()" not in after


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
    # The estimate starts after the response's first line ("step"), so its tool_use block counts too:
    # round(len("Bash" + '{"command":"ls"}') / 4) = 5 (this test asserted 160,000 + 10,000 before, §8.2).
    assert turns[1].meta["count"] == 160_000 + 5 + 10_000
    assert [c.trigger for c in result.compactions] == ["auto"]
    summary = result.compactions[0].after[0].content
    assert summary.startswith(SUMMARY_PREFIX_LATER) and "Analysis:" not in summary
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert [r.meta["count"] for r in base.requests if r.kind == "turn"][1] == 160_000  # BASE adds no tail estimate

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
    prompt.write_text("padding " * 210_000)
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


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_fidelity_reads_past_lines_the_importer_keeps_out(tmp_path):
    """A line nested deeper than Python's JSON parser recurses, and one of invalid UTF-8, were a RecursionError and a
    UnicodeDecodeError traceback in the fidelity table's line numbering: they are problems the importer reports, and
    the recorded boundaries keep their lines."""
    from compaction_bench.fidelity import claude_code_fidelity_rows

    path = SMARTAGENT / "703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl"
    damaged = tmp_path / path.name
    damaged.write_bytes(path.read_bytes() + b"[" * 200_000 + b"]" * 200_000 + b'\n{"note": "caf\xff"}\n')
    options = {"max_output_tokens_env": 64_000}
    assert [(r.line, r.recorded_trigger, r.replay_trigger) for r in claude_code_fidelity_rows(damaged, options=options)] == [
        (r.line, r.recorded_trigger, r.replay_trigger) for r in claude_code_fidelity_rows(path, options=options)] == [(233, "auto", "auto")]


def _scan_session(turns: int = 1) -> Session:
    s = Session()
    for turn in range(turns):
        s.user(f"scan the logs, part {turn}")
        for n in range(8):
            s.assistant(f"scan {turn}.{n}", calls=[(f"c{turn}{n}", "Bash", {"command": f"cat log{n}"})])
            s.result(f"c{turn}{n}", ("lorem ipsum dolor " * 2_000)[:32_000], name="Bash")
        s.assistant("done")
    return s


#: Window 40,000, CLAUDE_CODE_MAX_OUTPUT_TOKENS 20,000 (the requests ask for 20,000, as with the old reserve) →
#: reserve min(20,000, 20,000), T = 40,000 − 20,000 − 13,000 = 7,000.
REFILL = {"max_output_tokens_env": 20_000}
#: The blocking limit out of the way (§8.1: at 64,000, E − 3,000 = 41,000 refuses the request after a failed
#: compaction, whose response then brings no usage, and the final context's check compacts again).
UNBLOCKED = {**REFILL, "blocking_limit_override": 10**6}


def test_later_rapid_refill_breaker_stops_after_three_refills():
    # §8.3 / 2.1.112 `QkK`: every tool result adds ~8,000 estimated tokens, so the count is over T again right
    # after each compaction. The refill count is taken before compacting: 0 at step 1, 1 at step 2, 2 at step 3,
    # and at step 4 it would be 3, so nothing is compacted and the query ends with the "Autocompact is
    # thrashing" error. This test asserted compactions at [1, 2, 3, 4] before: one compaction too many.
    result = replay(_scan_session().transcript(), "claude-code-2.1", profile=small_profile(40_000), options=REFILL)
    turns = [r for r in result.requests if r.kind == "turn" and r.attempt == 0]
    assert turns[0].threshold == 7_000
    assert [c.step for c in result.compactions if c.trigger == "auto"] == [1, 2, 3]
    # The query ends before the model is called (2.1.112 cli.js L4538): the request is refused, not sent. The recording
    # goes on in that prompt; upstream's state stays as it was, so every later request, still over T, trips the same
    # check again and is refused too (this test asserted them sent uncompacted before: upstream sends none of them).
    assert [(r.step, r.meta.get("autocompact_thrashing")) for r in turns if r.meta.get("autocompact_thrashing")] == [
        (4, 3), (5, 3), (6, 3), (7, 3), (8, 3)]
    assert all(r.refused and not r.sent and r.estimate_tokens >= 7_000 for r in turns if r.step >= 4)


def test_later_breakers_start_over_with_each_user_prompt(tmp_path):
    # 2.1.112 `vXY` starts every user prompt's query with `autoCompactTracking: void 0`: the failure count and
    # the refill count do not outlive the prompt. Two prompts of 4 tool steps at 170,000 (T = 167,000) with a
    # summary prompt too long for any request: 3 failed attempts in each prompt (steps 1-3 and 5-7; the first
    # request, step 0, has no usage yet), not 3 for the whole replay.
    prompt = tmp_path / "huge.j2"
    prompt.write_text("padding " * 210_000)
    s = Session()
    for turn in range(2):
        s.user(f"task {turn}")
        for n in range(4):
            s.assistant(f"step {turn}.{n}", calls=[(f"c{turn}{n}", "Bash", {"command": "ls"})], total=170_000)
            s.result(f"c{turn}{n}", "out", name="Bash")
        s.assistant("end", total=170_000)
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS,
                    prompts={"claude_code_summary.j2": prompt})
    assert result.compactions == []
    assert sorted({r.step for r in result.requests if r.kind == "summary"}) == [1, 2, 3, 5, 6, 7]
    # The rapid-refill breaker too: the second prompt (steps 9-17, already over T at its first request) compacts
    # three times again before it trips; the requests the breaker refuses end with each prompt.
    refill = replay(_scan_session(turns=2).transcript(), "claude-code-2.1", profile=small_profile(40_000), options=REFILL)
    assert [c.step for c in refill.compactions if c.trigger == "auto"] == [1, 2, 3, 9, 10, 11]
    thrashing = [r.step for r in refill.requests if r.kind == "turn" and r.meta.get("autocompact_thrashing")]
    assert thrashing == [4, 5, 6, 7, 8, 12, 13, 14, 15, 16, 17]


def test_later_manual_compact_leaves_the_breakers_alone(tmp_path):
    # 2.1.112 changes the breaker state only in the auto path (`QkK`); a manual /compact calls the compaction
    # (`vI6`) directly. Three failing manual compactions inside a prompt must not count as the auto path's three
    # consecutive failures: the auto attempts still come at steps 1, 2 and 3.
    prompt = tmp_path / "huge.j2"
    prompt.write_text("padding " * 210_000)
    s = Session()
    s.user("a long task")
    s.assistant("step 0", calls=[("c0", "Bash", {"command": "ls"})], total=170_000)
    s.result("c0", "out", name="Bash")
    for n in range(3):
        s.items.append(_marker(f"m{n}", "manual", 170_000))
    for n in range(1, 6):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": "ls"})], total=170_000)
        s.result(f"c{n}", "out", name="Bash")
    s.assistant("end", total=1_000)
    # "recorded-always": the recorded usage at every step (the recording's own compactions end `recorded`'s).
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded-always", options=OPUS,
                    prompts={"claude_code_summary.j2": prompt})
    assert result.compactions == []
    assert sorted({r.step for r in result.requests if r.kind == "summary"}) == [0, 1, 2, 3]  # step 0: the manual ones


def test_later_count_estimates_the_newest_responses_own_later_blocks():
    # §8.2 / 2.1.112 `vJ`: the estimate covers every line after the newest response's *first* line, so the
    # response's other content blocks count, here a Write call whose input holds 40,000 characters. Each
    # block is estimated as `round(len(name + JSON.stringify(input)) / 4)`, JSON without spaces even when the
    # recording kept the input with them (the Claude Code importer does).
    args = {"file_path": "/r/a.txt", "content": "x" * 40_000}
    s = Session()
    s.user("write the file")
    s.assistant("writing", calls=[("w1", "Write", args)], total=100_000)
    s.result("w1", "ok", name="Write")
    s.assistant("done", total=1_000)
    call = len("Write" + json.dumps(args, separators=(",", ":")))  # 40,042 characters → 10,010.5 → 10,011
    expected = 100_000 + math.floor(call / 4 + 0.5) + 1  # `Math.round` rounds half up; "ok": round(0.5) = 1
    assert call == 40_042 and expected == 110_012
    spaced = [replace(i, arguments=json.dumps(args)) if i.kind == "tool_call" else i for i in s.items]
    for items in (s.items, spaced):
        t = Transcript(id="t", items=tuple(items))
        turns = [r for r in replay(t, "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS).requests if r.kind == "turn"]
        assert turns[1].estimate_tokens == expected
    # A response whose first line is the call itself: the call is that line, so only the result is added.
    only = Session()
    only.user("write the file")
    only.assistant(calls=[("w1", "Write", args)], total=100_000)
    only.result("w1", "ok", name="Write")
    only.assistant("done", total=1_000)
    turns = [r for r in replay(only.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS).requests
             if r.kind == "turn"]
    assert turns[1].estimate_tokens == 100_000 + 1


class _MaxTokens(ClaudeCode21):
    """`claude-code-2.1` noting the `max_tokens` of every request it builds."""

    seen: list[int | None] = []

    def request(self):
        request = super().request()
        self.seen.append(request.max_output_tokens)
        return request


def test_later_requests_ask_for_the_models_whole_max_output():
    # 2.1.112 sends `max_tokens = Z97(model) = lc(model)` on a normal turn (the flag `tengu_otk_slot_v1` is off
    # by default); the 20,000 cap is only the threshold's reserve and the summary's limit (§8.1, §8.4).
    # `lc`: CLAUDE_CODE_MAX_OUTPUT_TOKENS capped at the model's upper limit, else its default (upstream `wa`):
    # opus-4-5 32,000 / 64,000, sonnet-4-6 32,000 / 128,000.
    s = _session([100_000, 170_000])
    summarizer = RecordingSummarizer()
    cases = [(OPUS, 64_000), ({"model": "claude-opus-4-5"}, 32_000), ({"model": "claude-sonnet-4-6", "max_output_tokens_env": 100_000}, 100_000)]
    for options, expected in cases:
        _MaxTokens.seen = []
        result = replay(s.transcript(), _MaxTokens, profile="claude-opus", usage="recorded", options=options, summarizer=summarizer)
        assert set(_MaxTokens.seen) == {expected}
        assert {r.threshold for r in result.requests if r.kind == "turn" and not r.meta["count"] >= 167_000} == {200_000 - 20_000 - 13_000}
    assert set(summarizer.max_tokens) == {20_000}
    # BASE sends its reserve, which the env sets and 64,000 caps (§2.1).
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded",
                  options={"model": "claude-sonnet-4-6", "max_output_tokens_env": 100_000})
    assert {r.threshold for r in base.requests if r.kind == "turn" and not r.meta["count"] >= 123_000} == {200_000 - 64_000 - 13_000}


def test_later_summary_is_first_asked_of_a_fork_that_reads_the_turns_cache():
    """§8.4 (2.1.112 `ALK`; the remote flag `tengu_compact_cache_prefix`, on by default): the summary is first
    asked of a fork of the request the turn would send (the same messages, then the compaction prompt) with
    `skipCacheWrite`, which puts its one cache breakpoint on the message before the prompt
    (`addCacheBreakpoints`). Right answers, on claude-opus: the fork's messages are the last turn request's,
    then the response and tool result after it, then the prompt; it reads the whole last turn request from
    the cache and writes only the two messages after it (the prompt is past its breakpoint); its answer is the
    summary, so no other summary request is sent. With the flag off, the summariser's own request is sent
    (its own system prompt first: nothing to read from the cache, all of it written)."""
    s = Session()
    s.user("Build the report generator; the output must stay under 80 columns.")
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/repo/report.py"})], total=10_000)
    s.result("r1", "def report():\n" + "    width = 80\n" * 2_000, name="Read")  # over opus's 4,096-token cache minimum
    s.assistant("testing", calls=[("b1", "Bash", {"command": "pytest"})], total=170_000)
    s.result("b1", "3 passed", name="Bash")
    s.assistant("next", total=40_000)
    summarizer = RecordingSummarizer()
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS, summarizer=summarizer)
    assert [c.trigger for c in result.compactions] == ["auto"]
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert len(summaries) == 1
    assert summarizer.max_tokens == [20_000]  # min(20,000, lc(opus-4-5) = 64,000)
    fork = summaries[0]
    turn = [r for r in result.requests if r.kind == "turn" and r.index < fork.index][-1]
    assert fork.meta == {"fork": "compact"}
    assert tuple(fork.messages[: len(turn.messages)]) == tuple(turn.messages)
    assert [(m.role, m.content) for m in fork.messages[len(turn.messages) : -1]] == [("assistant", "testing"), ("tool", "3 passed")]
    prompt = fork.messages[-1]
    assert prompt.role == "user" and "<summary>" in prompt.content
    assert fork.cached_tokens == turn.true_tokens
    prompt_tokens = SimulatedProvider(get_profile("claude-opus")).message_tokens(prompt)
    assert fork.cache_write_tokens == fork.true_tokens - turn.true_tokens - prompt_tokens > 0

    own = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options={**OPUS, "compact_cache_prefix": False})
    (request,) = [r for r in own.requests if r.kind == "summary"]
    assert request.messages[0].role == "system" and "summary of the conversation" in request.messages[0].content
    assert request.messages[-1] == prompt
    assert (request.cached_tokens, request.cache_write_tokens) == (0, request.true_tokens)


def test_later_falls_back_to_the_summarisers_request_when_the_fork_does_not_fit():
    """§8.4: a fork answered "Prompt is too long" (its request did not fit) gives no summary; the summariser's
    own request follows, with the same prompt and the history after the system prompt. The fork here carries
    the session's long system prompt (a recorded `system` item), the summariser's request does not: at a
    window the turn still fits in, the fork's request (the turn's, the prompt and 20,000 output tokens) is
    over it and the summariser's is not (Claude Code's blocking limit is not modelled: the turn is sent)."""
    s = Session()
    s._add(kind="system", text="You are a careful agent. " + "Follow the house rules. " * 8_700)
    s.user("Build the report generator.")
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/repo/report.py"})], total=10_000)
    s.result("r1", "def report(): pass", name="Read")
    s.assistant("testing", calls=[("b1", "Bash", {"command": "pytest"})], total=60_000)
    s.result("b1", "3 passed", name="Bash")
    s.assistant("next", total=2_000)
    result = replay(s.transcript(), "claude-code-2.1", profile=small_profile(64_000), usage="recorded", options=REFILL)
    turn, fork, own = [r for r in result.requests if not r.overflow or r.kind == "summary"][1:4]
    assert turn.kind == "turn" and not turn.overflow and turn.true_tokens + 20_000 <= 64_000 < fork.true_tokens + 20_000
    assert fork.meta == {"fork": "compact"} and fork.overflow and fork.messages[0].content.startswith("You are a careful agent.")
    assert tuple(fork.messages[: len(turn.messages)]) == tuple(turn.messages)
    assert own.kind == "summary" and not own.overflow and "summary of the conversation" in own.messages[0].content
    assert own.messages[1:-1] == fork.messages[1:-1] and own.messages[-1] == fork.messages[-1]
    assert result.compactions[0].summary is not None and result.compactions[0].step == own.step


def test_later_blocking_limit_refuses_what_the_check_did_not_compact():
    """§8.1 (2.1.112 `UM6`: `E − 3,000`; the query loop refuses with "Prompt is too long", terminal reason
    `blocking_limit`, whether auto-compact is on or off). On claude-opus with the env max output 64,000:
    R = min(64,000, 20,000) = 20,000, E = 180,000, the limit 177,000. With auto-compact off, a request whose
    count is 176,999 is sent and one at 177,000 is refused by the agent: it reaches no model (the provider would
    have taken it: Claude 4.5 refuses only input over 200,000). 2.0.57 has no such limit (§7.1: 2.0.77+), and
    CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE moves it."""
    s = _session([100_000, 176_950, 177_000, 50_000])
    options = {**OPUS, "auto_compact": False}
    result = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=options)
    turns = [r for r in result.requests if r.kind == "turn"]
    counts = [r.meta["count"] for r in turns]  # the usage, plus chars/4 of what followed the response's first block
    assert counts[2] < 177_000 <= counts[3]
    # the refused request gets no usage (its step's 50,000 is never read), so the next check reads the same count: refused too
    assert [r.overflow for r in turns] == [False, False, False, True, True]
    refused = turns[3]
    assert refused.error == {"provider": "agent", "status": 0, "code": "refused_by_agent", "message": "Prompt is too long"}
    assert refused.meta["failed_in"] == "agent" and refused.meta["blocking_limit"] == 177_000
    assert (refused.cached_tokens, refused.cache_write_tokens, refused.usage) == (0, 0, None)
    # reached no model, refused by the agent (not the provider); so is the final context, which it would not send either
    final = result.requests[-1]
    assert refused.refused and final.kind == "final" and final.overflow and final.refused
    assert result.overflows == 0
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=options)
    assert not any(r.overflow for r in base.requests)
    moved = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded",
                   options={**options, "blocking_limit_override": 178_000})
    assert not any(r.overflow for r in moved.requests)
    # The effective window is the auto-compact window's (`Yn(Jn())`): at 100,000 the limit is 100,000 − 20,000 − 3,000.
    windowed = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded",
                      options={**options, "auto_compact_window": 100_000})
    turns = [r for r in windowed.requests if r.kind == "turn"]
    assert turns[2].meta["blocking_limit"] == 77_000 and [r.overflow for r in turns] == [False, True, True, True, True]


def _files_and_todos() -> Session:
    s = Session()
    s.user("Build the report generator; the output must stay under 80 columns.")
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/repo/report.py"})], total=10_000)
    s.result("r1", _read("def report():"), name="Read")
    todos = [{"content": "write tests", "status": "pending", "activeForm": "Writing tests"}]
    s.assistant("planning", calls=[("t1", "TodoWrite", {"todos": todos})], total=170_000)
    s.result("t1", "Todos have been modified successfully.", name="TodoWrite")
    s.assistant("next", total=40_000)
    return s


def test_later_new_context_has_the_files_but_no_todo_list():
    # §8.5 / 2.1.112 `vI6`: files, task statuses, plan, plan mode, skills and tool announcements follow the
    # summary, no todo list (BASE's `VV5` is gone). 2.1.112 also writes a string Read result as it is after
    # "Result of calling the Read tool:" and a line break (`h98`), where BASE writes its JSON string.
    s = _files_and_todos()
    later = replay(s.transcript(), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    (compaction,) = later.compactions
    attachments = [m.content for m in compaction.after[1:]]
    assert attachments == [
        '<system-reminder>\nCalled the Read tool with the following input: {"file_path":"/repo/report.py"}\n</system-reminder>',
        "<system-reminder>\nResult of calling the Read tool:\n" + _read("def report():") + "\n</system-reminder>",
    ]
    assert compaction.details["todos"] == 0
    base = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    assert any("write tests" in m.content for m in base.compactions[0].after[1:])
    assert base.compactions[0].details["todos"] == 1


def test_later_summary_message_names_the_transcript():
    # §8.5 / 2.1.112 `b18`: prefix, a blank line, the summary without its analysis, a blank line and the paragraph
    # naming the session's transcript (`bY()` always gives a path, so it is always there), then for auto only a
    # single line break and the continuation paragraph. The path is where Claude Code keeps the replayed
    # session's transcript: `<config>/projects/<AP(cwd)>/<session id>.jsonl`.
    s = _files_and_todos()
    result = replay(s.transcript("sess-1"), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    summary = result.compactions[0].after[0].content
    head, _ = summary.split("\n\n", 1)
    assert head == SUMMARY_PREFIX_LATER and "Analysis:" not in summary
    note = TRANSCRIPT_NOTE.format(path="~/.claude/projects/-/sess-1.jsonl")
    assert summary.endswith(f"\n\n{note}\n{CONTINUE_LATER}")
    options = OPUS | {"cwd": "/Users/me/my proj", "config_dir": "/home/me/.claude"}
    named = replay(s.transcript("sess-1"), "claude-code-2.1", profile="claude-opus", usage="recorded", options=options)
    assert TRANSCRIPT_NOTE.format(path="/home/me/.claude/projects/-Users-me-my-proj/sess-1.jsonl") in named.compactions[0].after[0].content
    # A manual compaction ends with the paragraph (no continuation).
    manual = Session()
    manual.user("first request")
    manual.assistant("answer", total=60_000)
    manual.items.append(_marker("m1", "manual", 60_000))
    manual.user("after the compaction")
    manual.assistant("fine", total=30_000)
    result = replay(manual.transcript("sess-2"), "claude-code-2.1", profile="claude-opus", usage="recorded", options=OPUS)
    assert result.compactions[0].after[0].content.endswith("\n\n" + TRANSCRIPT_NOTE.format(path="~/.claude/projects/-/sess-2.jsonl"))


def _attempts(result) -> list:
    """The summary inputs of 2.1's prompt-too-long attempts (§8.3), checking that each attempt asked the fork of
    the same messages first (§8.4; no system item: its messages are the input, then the prompt) and that the fork
    did not fit either (the prompt is padded past every window)."""
    summaries = [r for r in result.requests if r.kind == "summary"]
    forks, own = summaries[0::2], summaries[1::2]
    assert len(forks) == len(own)
    for fork, request in zip(forks, own, strict=True):
        assert fork.meta == {"fork": "compact"} and fork.overflow and "fork" not in request.meta
        assert tuple(fork.messages[:-1]) == tuple(request.messages[1:-1]) and fork.messages[-1] == request.messages[-1]
    return [r.messages[1:-1] for r in own]


def test_later_prompt_too_long_retries_drop_rounds_each_time(tmp_path):
    # §8.3 / 2.1.112 `KLK`: a retry first takes the previous retry's marker off, then drops the oldest 20% of
    # the API rounds (at least one; the OpenAI-style error reports no token counts) and puts the marker back in
    # front. When the count first reaches T (window 64,000: T = 31,000) the body is the user's request and five
    # rounds, six groups: every retry drops one group (the request's first, then a round each time), never
    # sending the same body again (without the marker taken off, the second retry dropped the marker alone).
    prompt = tmp_path / "huge.j2"
    prompt.write_text("padding " * 60_000)
    s = Session()
    s.user("a long task")
    for n in range(5):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"ls {n}"})], total=50_000 if n == 4 else 10_000)
        s.result(f"c{n}", f"out {n}", name="Bash")
    s.assistant("end", total=1_000)
    result = replay(s.transcript(), "claude-code-2.1", profile=small_profile(64_000), usage="recorded", options=UNBLOCKED,
                    prompts={"claude_code_summary.j2": prompt})
    assert {r.step for r in result.requests if r.kind == "summary"} == {5}
    bodies = _attempts(result)
    assert len(bodies) == 4  # the request and 3 retries
    assistants = [[m.content for m in body if m.role == "assistant"] for body in bodies]
    assert assistants == [[f"step {n}" for n in range(first, 5)] for first in (0, 0, 1, 2)]
    assert bodies[0][0].content == "a long task"
    for body in bodies[1:]:
        assert body[0].content == PTL_RETRY_MARKER and sum(m.content == PTL_RETRY_MARKER for m in body) == 1
        assert body[1].role == "assistant"


def test_base_todo_list_as_the_tool_stored_it():
    # 2.0.57 TodoWrite stores [] when every item is completed, so the post-compaction restore (`VV5`) adds
    # nothing; it stores the items as its schema parsed them (content, status, activeForm; other keys dropped),
    # and a call that failed (an error result) changes nothing.
    def session(todos: list[dict], failed: list[dict] | None = None) -> Session:
        s = Session()
        s.user("go")
        s.assistant("planning", calls=[("t1", "TodoWrite", {"todos": todos})], total=10_000)
        s.result("t1", "Todos have been modified successfully.", name="TodoWrite")
        if failed is not None:
            s.assistant("again", calls=[("t2", "TodoWrite", {"todos": failed})], total=10_000)
            s._add(kind="tool_result", call_id="t2", tool_name="TodoWrite", text="InputValidationError", is_error=True)
        s.assistant("finishing", total=130_000)
        s.assistant("next", total=40_000)
        return s

    done = [{"content": "a", "status": "completed", "activeForm": "A"}, {"content": "b", "status": "completed", "activeForm": "B"}]
    result = replay(session(done).transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    (compaction,) = result.compactions
    assert compaction.details["todos"] == 0 and not any("todo list" in m.content for m in compaction.after[1:])
    mixed = [{"id": "1", "status": "in_progress", "activeForm": "A-ing", "content": "a"}, {"content": "b", "status": "completed", "activeForm": "B"}]
    result = replay(session(mixed, failed=done).transcript(), "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
    todo = next(m.content for m in result.compactions[0].after[1:] if "todo list" in m.content)
    assert '\n\n[{"content":"a","status":"in_progress","activeForm":"A-ing"},{"content":"b","status":"completed","activeForm":"B"}]. ' in todo


def test_manual_compact_sends_the_typed_instructions():
    # §2.4: the text after `/compact` is trimmed and becomes the custom instructions, appended to the prompt
    # under "Additional Instructions:" (§3.2). The recording writes the command's line after the boundary and
    # the summary (§1.2 item 3), as d6a37ffc does; the importer puts its text on the boundary's marker
    # (`test_recorded_manual_compactions_carry_their_instructions` reads a real recording end to end).
    s = Session()
    s.user("first request")
    s.assistant("answer", total=60_000)
    marker = _marker("m1", "manual", 60_000)
    s.items.append(replace(marker, meta={**marker.meta, "instructions": "  keep the parser plan  "}))
    s._add(kind="user", text="Caveat: The messages below were generated by the user while running local commands.", synthetic=True)
    s.user("<command-name>/compact</command-name>\n            <command-message>compact</command-message>\n"
           "            <command-args>  keep the parser plan  </command-args>")
    s.user("<local-command-stdout>Compacted (ctrl+o to see full summary)</local-command-stdout>")
    s.user("go on")
    s.assistant("fine", total=30_000)
    for strategy in ("claude-code", "claude-code-2.1"):
        result = replay(s.transcript(), strategy, profile="claude-opus", usage="recorded", options=OPUS)
        (summary,) = [r for r in result.requests if r.kind == "summary"]
        assert "\n\nAdditional Instructions:\nkeep the parser plan" in summary.messages[-1].content
        assert result.compactions[0].details["instructions"] == "keep the parser plan"


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_recorded_manual_compactions_carry_their_instructions():
    # d6a37ffc's two manual boundaries (lines 165, 313) are followed by the `/compact` lines that typed
    # instructions (lines 168, 316): both summary requests carry them.
    path = SMARTAGENT / "d6a37ffc-384d-4d2a-832a-78cdd493af69.jsonl"
    result = replay(path, "claude-code", profile="claude-opus", usage="recorded", options={"max_output_tokens_env": 64_000})
    assert [c.details.get("instructions") for c in result.compactions] == [
        "merke dir das letzte summary hier, die todo listen und unseren plan",
        "MERKE dir alle details zu unserem self improvement loop plan dem status und den todos.",
    ]
    prompts = [r.messages[-1].content for r in result.requests if r.kind == "summary"]
    assert len(prompts) == 2 and all("Additional Instructions:\n" in p for p in prompts)


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_recorded_summaries_are_the_base_wrapper():
    # §4.1 against the 8 recorded summaries (2.0.57/2.0.58, ground truth for BASE): the prefix and the formatted
    # summary one line break apart, a "." after it, and for auto only a line break and the continuation
    # sentence; no transcript paragraph (2.1.6+). Wrapping the recorded summary body again gives the recording.
    rows = []
    for path in sorted(SMARTAGENT.glob("*.jsonl")):
        trigger = None
        for line in path.read_text(encoding="utf-8").split("\n"):
            data = json.loads(line) if line.strip() else {}
            if data.get("subtype") == "compact_boundary":
                trigger = data["compactMetadata"]["trigger"]
            elif data.get("isCompactSummary"):
                rows.append((trigger, data["message"]["content"]))
    assert [t for t, _ in rows].count("auto") == 6 and [t for t, _ in rows].count("manual") == 2
    strategy = _base_strategy()
    for trigger, recorded in rows:
        auto = trigger == "auto"
        body = recorded.removeprefix(SUMMARY_PREFIX + "\n").removesuffix("\n" + CONTINUE_SENTENCE if auto else "")
        assert body.endswith(".") and "read the full transcript" not in recorded
        assert strategy.wrap_summary(body[:-1], auto=auto) == recorded


def _base_strategy() -> ClaudeCode:
    from types import SimpleNamespace

    from compaction_bench.profiles import get_profile

    return ClaudeCode(SimpleNamespace(profile=get_profile("claude-opus"), session={"id": "s"}))


def test_restored_memory_files_are_the_four_upstream_ones():
    # §4.2 / 2.0.57 `KV5` leaves out the User (`<config>/CLAUDE.md`), Project (`<cwd>/CLAUDE.md`), Local
    # (`<cwd>/CLAUDE.local.md`) and Managed memory files, the todo file and the plan file: a sub-folder's
    # CLAUDE.md is restored like any file. With the working directory unknown every CLAUDE.md counts as one.
    # 2.1.112 (`xDY`) leaves out the same memory files, the plan and the auto-memory file, not the todo file.
    paths = ["/repo/docs/CLAUDE.md", "/repo/CLAUDE.md", "/repo/CLAUDE.local.md", "/home/u/.claude/CLAUDE.md",
             "/etc/claude-code/CLAUDE.md", "/home/u/.claude/todos/hand-built-agent-hand-built.json",
             "/home/u/.claude/projects/-repo/memory/MEMORY.md", "/repo/a.py"]
    s = Session()
    s.user("go")
    for n, path in enumerate(paths):
        s.assistant(f"r{n}", calls=[(f"r{n}", "Read", {"file_path": path})], total=10_000)
        s.result(f"r{n}", _read(f"text {n}"), name="Read")
    s.assistant("over", total=170_000)
    s.assistant("next", total=40_000)

    def restored(strategy: str, **options) -> list[str]:
        result = replay(s.transcript(), strategy, profile="claude-opus", usage="recorded", options=OPUS | options)
        return sorted(result.compactions[0].details["restored_files"])

    assert restored("claude-code", cwd="/repo") == ["/home/u/.claude/projects/-repo/memory/MEMORY.md", "/repo/a.py", "/repo/docs/CLAUDE.md"]
    assert restored("claude-code") == ["/home/u/.claude/projects/-repo/memory/MEMORY.md", "/repo/a.py"]
    assert restored("claude-code-2.1", cwd="/repo") == [
        "/home/u/.claude/todos/hand-built-agent-hand-built.json", "/repo/a.py", "/repo/docs/CLAUDE.md",
    ]


def _reads(paths: list[str], source: dict[str, str]) -> Transcript:
    s = Session()
    s.user("go")
    for n, path in enumerate(paths):
        s.assistant(f"r{n}", calls=[(f"r{n}", "Read", {"file_path": path})], total=10_000)
        s.result(f"r{n}", _read(f"text {n}"), name="Read")
    s.assistant("over", total=170_000)
    s.assistant("next", total=40_000)
    return Transcript(id="s1", items=tuple(s.items), source=source)


def test_only_the_current_sessions_plan_and_todo_files_stay_out():
    """Gap: every file under `plans/` and `todos/` was left out of the restored files. Upstream leaves out only
    the current agent's own plan and todo file (2.0.57 `FV5` filters with `KV5(filename, ctx.agentId)`,
    cc@2.0.57 cli.js L1921):

        function KV5(A,Q){let B=gl(A);try{let G=gl(Ci(Q));if(B===G)return!0}catch{}
          try{let G=gl(bU(Q));if(B===G)return!0}catch{} ... memory files ... return!1}
        function Ci(A){let Q=`${G0()}-agent-${A}.json`;return S21(r10(),Q)}            // <config>/todos/
        function bU(A){let Q=A??G0(),B=G0(),G=o95(B);if(Q===B)return DLA(vU(),`${G}.md`);
          return DLA(vU(),`${G}-agent-${Q}.md`)}                                       // <config>/plans/

    where `G0()` is the session id, the main thread's `agentId` is the session id, and `o95` the session's
    slug, which every 2.0.x transcript line records (`slug:Y`, `insertMessageChain`). 2.1.112 (`Nx8` with
    `xDY`, cc@2.1.112 cli.js L4994) leaves out the same plan file (`eW(agentId)`: `<slug>.md` for the main
    thread) and no todo file. So another session's plan (`other-plan.md`, read in the corpus session b566e56e)
    and another session's todo file are restored; a sub-agent leaves out `<slug>-agent-<agent id>.md`."""
    plans = "/home/u/.claude/plans/"
    todos = "/home/u/.claude/todos/"
    paths = [f"{plans}brave-new-plan.md", f"{plans}other-plan.md", f"{plans}brave-new-plan-agent-a1.md",
             f"{todos}s1-agent-s1.json", f"{todos}s0-agent-s0.json"]
    main = _reads(paths, {"session_id": "s1", "slug": "brave-new-plan"})

    def restored(transcript: Transcript, strategy: str) -> list[str]:
        result = replay(transcript, strategy, profile="claude-opus", usage="recorded", options=OPUS)
        return sorted(result.compactions[0].details["restored_files"])

    assert restored(main, "claude-code") == [f"{plans}brave-new-plan-agent-a1.md", f"{plans}other-plan.md", f"{todos}s0-agent-s0.json"]
    assert restored(main, "claude-code-2.1") == [
        f"{plans}brave-new-plan-agent-a1.md", f"{plans}other-plan.md", f"{todos}s0-agent-s0.json", f"{todos}s1-agent-s1.json",
    ]
    sub = _reads(paths, {"session_id": "s1", "slug": "brave-new-plan", "agent_id": "a1"})
    assert restored(sub, "claude-code") == [
        f"{plans}brave-new-plan.md", f"{plans}other-plan.md", f"{todos}s0-agent-s0.json", f"{todos}s1-agent-s1.json",
    ]
    # No slug recorded: upstream's plan file gets a new name (`o95`), so no file read is the plan file.
    assert f"{plans}brave-new-plan.md" in restored(_reads(paths, {"session_id": "s1"}), "claude-code")


def test_the_importer_records_the_slug_and_the_sub_agents_id():
    # 2.0.57 `insertMessageChain` writes `agentId:B, slug:Y` on every line (cc@2.0.57 cli.js L4260).
    corpus = CORPORA / "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure"
    if not corpus.exists():
        pytest.skip("shared corpora not available")
    from compaction_bench.scenarios.claude_code import ClaudeCodeImporter

    (main,) = ClaudeCodeImporter().load(corpus / "703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl")
    assert main.source["slug"] == "gleaming-twirling-wilkes" and "agent_id" not in main.source
    (sub,) = ClaudeCodeImporter().load(corpus / "agent-dee347d2.jsonl")
    assert (sub.source["slug"], sub.source["agent_id"]) == ("whimsical-forging-fog", "dee347d2")


def test_wire_messages_are_one_assistant_message_per_response():
    """Gap: the generic fold (`ItemHistory`) folded a tool call into the assistant message before it whatever
    response that was, and left a text that follows a tool call of the same response in a message of its own.
    Upstream's normaliser (2.0.57 `BZ`, cc@2.0.57 cli.js L4125) merges an assistant line into the message of
    its own `message.id` and stops at another id:

        case"assistant":{... for(let Y=G.length-1;Y>=0;Y--){let J=G[Y];if(J.type!=="assistant"&&!yy3(J))break;
          if(J.type==="assistant"){if(J.message.id===I.message.id){G[Y]=ky3(J,I);return}break}}G.push(I);return}
        function ky3(A,Q){return{...A,message:{...A.message,content:[...A.message.content,...Q.message.content]}}}

    (2.1.112 `K0`, cc@2.1.112 cli.js L5262, the same with `continue` past another id.) So a text-only
    response followed at once by a tool-call-only response is two assistant messages, and a response whose
    text comes after its tool call is one message, which its result then follows. The request's true count
    is the count of those messages (one message more or fewer is its framing more or fewer)."""
    from compaction_bench.profiles import get_profile
    from compaction_bench.provider import MessageCounter

    s = Session()
    s.user("Fix the date parser.")
    s.assistant("I will look at the parser first.")  # response 0: a text only, no call
    s.assistant(calls=[("c1", "Read", {"file_path": "/repo/parse.py"})])  # response 1, right after it
    s.result("c1", "     1→def parse(): ...\n", name="Read")
    s.response += 1  # response 2: a tool call, then a text block of the same response
    s._add(kind="tool_call", response=s.response, call_id="c2", tool_name="Bash", arguments='{"command":"pytest"}')
    s._add(kind="assistant", response=s.response, text="Running the tests now.")
    s.result("c2", "1 passed", name="Bash")
    s.assistant("Done.")
    for strategy in ("claude-code", "claude-code-2.1"):
        result = replay(s.transcript(), strategy, profile="claude-opus")
        last = [r for r in result.requests if r.kind == "turn"][-1]
        shape = [(m.role, m.content, tuple(c.id for c in m.tool_calls), m.tool_call_id) for m in last.messages]
        assert shape == [
            ("user", "Fix the date parser.", (), None),
            ("assistant", "I will look at the parser first.", (), None),
            ("assistant", "", ("c1",), None),
            ("tool", "     1→def parse(): ...\n", (), "c1"),
            ("assistant", "Running the tests now.", ("c2",), None),
            ("tool", "1 passed", (), "c2"),
        ]
        assert last.true_tokens == MessageCounter(get_profile("claude-opus")).count(last.messages)
        assert _pair_errors(result) == 0
    # 2.1.112's merge (`HNY`) also drops a whitespace-only text block when something else is left; 2.0.57's keeps it.
    blank = Session()
    blank.user("go")
    blank.assistant("  ", calls=[("c1", "Bash", {"command": "ls"})])
    blank.result("c1", "a.py", name="Bash")
    blank.assistant("ok")
    texts = {}
    for strategy in ("claude-code", "claude-code-2.1"):
        last = [r for r in replay(blank.transcript(), strategy, profile="claude-opus").requests if r.kind == "turn"][-1]
        texts[strategy] = [(m.content, len(m.tool_calls)) for m in last.messages if m.role == "assistant"]
    assert texts == {"claude-code": [("  ", 1)], "claude-code-2.1": [("", 1)]}


def test_later_retry_rounds_split_at_each_response(tmp_path):
    """Gap: the prompt-too-long retry (2.1.112 `KLK`) cut the summary input into API rounds where an assistant
    message followed a non-assistant one, so two responses in a row were one round (and, with the generic fold,
    one message). Upstream's rounds (`AR6`, cc@2.1.112 cli.js L2271) start at each assistant line of another
    `message.id`:

        function AR6(q){let K=[],_=[],z;for(let Y of q){if(Y.type==="assistant"&&Y.message.id!==z&&_.length>0)
          K.push(_),_=[Y];else _.push(Y);if(Y.type==="assistant")z=Y.message.id}if(_.length>0)K.push(_);return K}

    and each retry drops the oldest 20% of them (at least one) when the error gives no token counts. The input
    here: the request, a text-only response r0 and right after it a call-only response r1, then r2, r3: five
    rounds. Retries drop [request], [r0], [r1 + result] in turn (before: four rounds, r0 and r1 dropped
    together at the second retry and r2 at the third)."""
    prompt = tmp_path / "huge.j2"
    prompt.write_text("padding " * 60_000)
    s = Session()
    s.user("a long task")
    s.assistant("let me think", total=10_000)
    s.assistant(calls=[("c1", "Bash", {"command": "ls 1"})], total=10_000)
    s.result("c1", "out 1", name="Bash")
    for n in (2, 3):
        s.assistant(f"step {n}", calls=[(f"c{n}", "Bash", {"command": f"ls {n}"})], total=50_000 if n == 3 else 10_000)
        s.result(f"c{n}", f"out {n}", name="Bash")
    s.assistant("end", total=1_000)
    result = replay(s.transcript(), "claude-code-2.1", profile=small_profile(64_000), usage="recorded", options=UNBLOCKED,
                    prompts={"claude_code_summary.j2": prompt})
    bodies = _attempts(result)
    assert len(bodies) == 4  # the request and 3 retries
    rounds = [[m.content or m.tool_calls[0].id for m in body if m.role == "assistant"] for body in bodies]
    assert rounds == [["let me think", "c1", "step 2", "step 3"], ["let me think", "c1", "step 2", "step 3"],
                      ["c1", "step 2", "step 3"], ["step 2", "step 3"]]
    assert [body[0].content for body in bodies] == ["a long task", PTL_RETRY_MARKER, PTL_RETRY_MARKER, PTL_RETRY_MARKER]


def _line(uuid: str, parent: str | None, kind: str, second: int, **fields) -> dict:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/repo", "sessionId": "s1", "version": "2.0.57",
            "type": kind, "uuid": uuid, "timestamp": f"2025-12-01T00:00:{second:02d}.000Z", **fields}


def _reply(uuid: str, parent: str, second: int, text: str, input_tokens: int, output_tokens: int) -> dict:
    usage = {"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": output_tokens}
    message = {"id": f"m{second}", "role": "assistant", "model": "claude-opus-4-5-20251101", "content": [{"type": "text", "text": text}], "usage": usage}
    return _line(uuid, parent, "assistant", second, message=message)


def test_fidelity_states_the_relation_a_manual_compaction_over_the_threshold_had(tmp_path):
    """A user's `/compact` after a response of 125,000 tokens, over the 123,000 threshold (200,000 − 64,000 output
    − 13,000): the table printed "does not fire → manual (125,000 < 123,000)", a false inequality."""
    from compaction_bench.fidelity import claude_code_fidelity_rows

    summary = "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\nSummary:\nx."
    lines = [
        _line("u1", None, "user", 1, message={"role": "user", "content": "Please refactor the parser."}),
        _reply("u2", "u1", 2, "Working on it.", 100_000, 500),
        _line("u3", "u2", "user", 3, message={"role": "user", "content": "Now add tests."}),
        _reply("u4", "u3", 4, "Tests added.", 124_000, 1_000),
        _line("u5", None, "system", 5, subtype="compact_boundary", content="Conversation compacted", isMeta=False, level="info",
              logicalParentUuid="u4", compactMetadata={"trigger": "manual", "preTokens": 125_000}),
        _line("u6", "u5", "user", 6, isCompactSummary=True, isVisibleInTranscriptOnly=True, message={"role": "user", "content": summary}),
        _line("u7", "u6", "user", 7, message={"role": "user", "content": "<command-name>/compact</command-name>\n<command-message>compact</command-message>\n<command-args></command-args>"}),
        _line("u8", "u7", "user", 8, message={"role": "user", "content": "<local-command-stdout>Compacted (ctrl+o to see full summary)</local-command-stdout>"}),
        _line("u9", "u8", "user", 9, message={"role": "user", "content": "continue"}),
        _reply("u10", "u9", 10, "ok", 30_000, 10),
    ]
    path = tmp_path / "manual-over.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (row,) = claude_code_fidelity_rows(path, strategies=("claude-code",), options={"max_output_tokens_env": 64_000})
    assert row.replay_trigger == "manual" and row.count == 125_000
    assert row.decision == "over the threshold → manual (125,000 ≥ 123,000)"


def _restored_after_edit(edit_args: dict, first: tuple[str, dict], result_text: str) -> list[str]:
    """The contents of the compaction's messages after a session that reads or writes /repo/config.py, edits it and
    crosses the 123,000 threshold of claude-opus with a 64,000-token output."""
    s = Session()
    s.user("Set the retry limit in /repo/config.py to 7.")
    s.assistant("first", calls=[("r1", first[0], first[1])], total=10_000)
    s.result("r1", result_text, name=first[0])
    s.assistant("editing", calls=[("e1", edit_args.pop("tool", "Edit"), {"file_path": "/repo/config.py", **edit_args})], total=11_000)
    s.result("e1", "The file /repo/config.py has been updated.", name="Edit")
    s.assistant("done", total=170_000)
    s.user("next")
    s.assistant("ok", total=40_000)
    result = replay(s.transcript(), "claude-code", profile="claude-opus", usage="recorded",
                    options={"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000})
    (compaction,) = [c for c in result.compactions if c.trigger == "auto"]
    return [m.content for m in compaction.after[1:]]


def test_a_restored_file_shows_its_contents_after_an_edit_or_is_named_for_reading_again():
    """§4.2: the restore re-reads each file from disk through the Read tool, so after an Edit it shows the edited
    text as a Read does: numbered lines, then the tool's reminder (2.0.57 `ml` + `J45`). The read cache keeps the
    file's own text, read back from a Read result's numbered lines, so an edit that adds a line applies too (it was
    named for reading again), and a file the session wrote shows as a Read shows it (it was its bare text)."""
    read = ("Read", {"file_path": "/repo/config.py"})
    shown = _read("RETRY_LIMIT = 3\nTIMEOUT = 30")
    after = _restored_after_edit({"old_string": "RETRY_LIMIT = 3", "new_string": "RETRY_LIMIT = 7"}, read, shown)
    assert any(json.dumps(_read("RETRY_LIMIT = 7\nTIMEOUT = 30"), ensure_ascii=False) in text for text in after)
    assert not any("RETRY_LIMIT = 3" in text for text in after)
    grown = _restored_after_edit({"old_string": "RETRY_LIMIT = 3", "new_string": "RETRY_LIMIT = 7\nBACKOFF = 2"}, read, shown)
    assert any(json.dumps(_read("RETRY_LIMIT = 7\nBACKOFF = 2\nTIMEOUT = 30"), ensure_ascii=False) in text for text in grown)
    # an edit whose text is not in the file leaves what a re-read shows unknown: the file is named for reading again
    missed = _restored_after_edit({"old_string": "RETRIES = 3", "new_string": "RETRIES = 7"}, read, shown)
    assert any("/repo/config.py was read before the conversation was summarized" in text for text in missed)
    # a file the session wrote: its text, numbered as the Read tool numbers it (the trailing line break makes an
    # empty last line, as `ml` splits the text); no Read result in this session showed the reminder, so none
    write = ("Write", {"file_path": "/repo/config.py", "content": "RETRY_LIMIT = 3\nTIMEOUT = 30\n"})
    written = _restored_after_edit({"tool": "MultiEdit", "edits": [{"old_string": "RETRY_LIMIT = 3\n", "new_string": "RETRY_LIMIT = 7\nBACKOFF = 2\n"}]},
                                   write, "File created successfully at: /repo/config.py")
    expected = "     1→RETRY_LIMIT = 7\n     2→BACKOFF = 2\n     3→TIMEOUT = 30\n     4→"
    assert any(json.dumps(expected, ensure_ascii=False) in text for text in written)


@pytest.mark.skipif(not SMARTAGENT.is_dir(), reason="shared corpora not present")
def test_a_reread_shows_a_file_as_the_recorded_read_tool_did():
    """The restore shows a file as 2.0.57's Read tool shows a whole file (`ml` numbering, then the reminder the
    session's Read results end with, `J45`): read back to its text and shown again, every whole-file Read result of
    the recorded 2.0.57 sessions is the same text, byte for byte (86 of them)."""
    import glob

    from compaction_bench.importing import load_transcript
    from compaction_bench.strategies.claude_code import TRAILING_REMINDER, plain_text

    results = []
    for path in sorted(glob.glob(str(SMARTAGENT / "*.jsonl"))):
        transcript = load_transcript(path)
        calls = {i.call_id: i for i in transcript.items if i.kind == "tool_call" and i.tool_name == "Read"}
        for item in transcript.items:
            call = calls.get(item.call_id) if item.kind == "tool_result" else None
            reminder = TRAILING_REMINDER.search(item.text) if call is not None else None
            if reminder is not None and not {"offset", "limit"} & set(json.loads(call.arguments or "{}")):
                results.append((item.text, reminder.group(0)))
    assert len(results) == 86
    assert all(number_lines(plain_text(text) or "") + reminder == text for text, reminder in results)

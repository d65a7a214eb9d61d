"""`gemini-cli` against docs/specs/gemini-cli.md: the upstream split vectors, the estimator, the
truncation format, the threshold, the two summariser calls, the inflation latch and masking."""

from __future__ import annotations

from compaction_bench.metrics.integrity import ANY_KIND, check, recorded_orphans
from compaction_bench.replay import replay
from compaction_bench.strategies.gemini_cli import (
    ACK,
    Content,
    Part,
    estimate_parts,
    find_split_point,
    format_truncated_output,
)
from tests.pi_builders import Session


def strategy_pair_errors(result) -> int:
    """Pair violations in every request that the recording itself did not have (metrics/integrity.py)."""
    recorded = recorded_orphans(result.transcript)
    return sum(
        1
        for r in result.requests
        for v in check(r.messages).values()
        for x in v
        if (x.kind, x.call_id) not in recorded and (ANY_KIND, x.call_id) not in recorded
    )


def _u(text: str) -> Content:
    return Content("user", [Part("text", text=text)])


def _m(text: str) -> Content:
    return Content("model", [Part("text", text=text)])


def test_split_point_upstream_vectors():
    # chatCompressionService.test.ts vectors quoted in §4.
    texts = ["This is the first message.", "This is the second message.", "This is the third message.",
             "This is the fourth message.", "This is the fifth message."]
    five = [_u(texts[0]), _m(texts[1]), _u(texts[2]), _m(texts[3]), _u(texts[4])]
    assert find_split_point([], 0.5) == 0
    assert find_split_point(five, 0.5) == 4
    assert find_split_point(five, 0.9) == 4
    assert find_split_point(five[:4], 0.8) == 4
    with_call = [*five[:3], Content("model", [Part("call", name="tool", call_id="c", args={})])]
    assert find_split_point(with_call, 0.99) == 2
    assert find_split_point([_u(texts[0])], 0.5) == 0
    assert find_split_point([_u(texts[0]), Content("model", [Part("data", mime="text/plain")]), _u(texts[1])], 0.5) == 2


def test_estimator():
    # §10.2: 0.25 per ASCII, 1.5 per other UTF-16 unit, floored once; len/4 above 100,000 chars.
    assert estimate_parts([Part("text", text="abc")]) == 0
    assert estimate_parts([Part("text", text="abcd"), Part("text", text="abcd")]) == 2
    assert estimate_parts([Part("text", text="éééé")]) == 6
    assert estimate_parts([Part("text", text="x" * 100_004)]) == 25_001
    assert estimate_parts([Part("data", mime="image/png")]) == 3_000


def test_truncated_output_format():
    text = "a" * 10_000 + "b" * 40_000
    out = format_truncated_output(text, "/tmp/out.txt", 40_000)
    first, rest = out.split("\n", 1)
    assert first == "Output too large. Showing first 8,000 and last 32,000 characters. For full output see: /tmp/out.txt"
    assert rest == "a" * 8_000 + "\n\n... [10,000 characters omitted] ...\n\n" + "b" * 32_000
    assert format_truncated_output("short", "/p", 40_000) == "short"


def _chat(turns: int, chars: int, totals: list[int]) -> Session:
    s = Session()
    for n in range(turns):
        s.user(f"request {n}: please handle item {n}. " + "w " * (chars // 2))
        s.assistant(f"answer {n} " + "v " * (chars // 2), total=totals[n] if n < len(totals) else 1_000)
    return s


def test_threshold_and_two_summariser_calls():
    # 0.5 × 64,000 = 32,000: a previous prompt count of 31,999 does not compress, 32,000 does (§2.2).
    s = _chat(8, 2_000, [10_000, 31_999, 32_000])
    result = replay(s.transcript(), "gemini-cli", profile="64k", usage="recorded")
    turns = [r for r in result.requests if r.kind == "turn"]
    assert [r.estimate_tokens for r in turns[:4]] == [0, 10_000, 31_999, 32_000]
    threshold = [c for c in result.compactions if c.trigger == "threshold"]
    assert [c.step for c in threshold] == [3]
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert len(summaries) == 2  # the snapshot request and the verification pass (§5.4)
    first, second = summaries
    system = first.messages[0].content
    tags = ["<overall_goal>", "<active_constraints>", "<key_knowledge>", "<artifact_trail>", "<file_system_state>",
            "<recent_actions>", "<task_state>"]
    assert "<state_snapshot>" in system and [system.index(t) for t in tags] == sorted(system.index(t) for t in tags)
    assert "new <state_snapshot>" in first.messages[-1].content
    assert second.messages[-2].role == "assistant" and second.messages[-1].role == "user"
    assert second.messages[1:-2] == first.messages[1:-1]  # the same slice
    after = threshold[0].after
    assert after[0].role == "user" and after[1].role == "assistant" and after[1].content == ACK
    # 8 turns of equal size with 3 in history when it fired: the kept tail starts at a clean user message.
    assert after[2].role == "user" and after[2].content.startswith("request")
    assert strategy_pair_errors(result) == 0


def test_inflation_check_latches_and_then_only_truncates():
    # A recorded count of 32,000 (0.5 × a 64,000 limit) against a history whose own estimate is larger: the
    # kept 30 % alone (u2 and the tool loop, 170,000 chars ≈ 42,500 estimated tokens) exceeds the count, so
    # the attempt fails as inflated and latches (§6, §2.3); the next check only truncates, no call (§7).
    s = Session()
    s.user("start")
    s.assistant("ok", total=1_000)
    s.user("background: " + "w " * 150_000)
    s.assistant("noted", total=1_000)
    s.user("now the task: " + "q " * 50_000)
    s.assistant("look", calls=[("c2", "read_file", {"path": "a"})], total=1_000)
    s.result("c2", "r " * 35_000, name="read_file")
    s.assistant("more", calls=[("c3", "read_file", {"path": "b"})], total=32_000)
    s.result("c3", "small", name="read_file")
    s.assistant("done", total=40_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded", options={"token_limit": 64_000})
    triggers = [(c.trigger, c.step) for c in result.compactions]
    assert triggers[0] == ("inflated", 4)
    assert result.compactions[0].details["new_tokens"] > 32_000
    assert sum(1 for r in result.requests if r.kind == "summary") == 2  # only the failed attempt's two calls
    assert all(t in ("inflated", "truncate") for t, _ in triggers)


def test_masking_after_fifty_thousand_protected_tokens():
    # Six 80,000-char outputs (≈ 20,000 tokens each). Before step 5 the history holds r0..r3 (r4 is pending,
    # the newest content is the model call): r3, r2 protected (≈ 40,000), r1 closes the window and is
    # prunable, r0 too: ≈ 40,000 ≥ 30,000 (§8). Before step 6 only r2 would be prunable (< 30,000); before
    # the final request r3 and r2.
    s = Session()
    s.user("collect the logs")
    for n in range(7):
        s.assistant(f"read {n}", calls=[(f"r{n}", "read_file", {"path": f"log{n}.txt"})])
        if n < 6:
            s.result(f"r{n}", f"log {n}\n" + "z" * 80_000, name="read_file")
    result = replay(s.transcript(), "gemini-cli", profile="1m", options={"token_limit": 1_048_576})
    masking = [c for c in result.compactions if c.trigger == "masking"]
    assert [(c.step, c.details["masked"]) for c in masking] == [(5, ["r1", "r0"]), (7, ["r3", "r2"])]
    final = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    assert final["r0"].startswith("<tool_output_masked>\n") and final["r0"].endswith("</tool_output_masked>")
    assert "Output too large. Full output available at: " in final["r0"]
    assert "[TRUNCATED]" in final["r0"]
    assert not final["r4"].startswith("<tool_output_masked>") and not final["r5"].startswith("<tool_output_masked>")
    assert strategy_pair_errors(result) == 0

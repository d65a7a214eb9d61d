"""Second faithfulness audit of `claude-code` and `claude-code-2.1` (docs/specs/claude-code.md): the summary
prompt's numbering per version (§3.2, §7.2) and the one-step-stale count of 2.0.57 (§2.2), which the
recorded sessions show Claude Code itself sending requests above its threshold with (§9)."""

from __future__ import annotations

import json
import re

from compaction_bench.importing import load_transcripts
from compaction_bench.replay import replay
from tests.conftest import CORPORA
from tests.pi_builders import Session

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
LABELS = (
    "Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections", "Errors and fixes",
    "Problem Solving", "All user messages", "Pending Tasks", "Current Work", "Optional Next Step",
)
PAI = CORPORA / "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure"
#: §9: CLAUDE_CODE_MAX_OUTPUT_TOKENS=64000 on claude-opus-4-5 ⇒ T = 200,000 − 64,000 − 13,000
T = 123_000


def _summary_prompt(strategy: str, total: int) -> str:
    s = Session()
    s.user("Port the exporter to the new API and keep the CLI flags.")
    s.assistant("reading", calls=[("c1", "Bash", {"command": "ls"})], total=total)
    s.result("c1", "exporter.py", name="Bash")
    s.assistant("done", total=1_000)
    result = replay(s.transcript(), strategy, profile="claude-opus", usage="recorded", options=OPUS)
    (request,) = [r for r in result.requests if r.kind == "summary"]
    return request.messages[-1].content


def _numbers(text: str) -> list[int]:
    """The number in front of each of the nine section labels, in the order the labels come."""
    found = [(m.start(), int(m.group(1)), m.group(2)) for m in re.finditer(rf"^\s*(\d+)\. ({'|'.join(LABELS)}):", text, re.M)]
    assert [label for _, _, label in sorted(found)] == list(LABELS)
    return [n for _, n, _ in sorted(found)]


def test_summary_prompt_numbers_its_sections_as_each_version_does():
    # §3.2 "BASE quirk": 2.0.57's instruction list numbers "All user messages" and "Pending Tasks" both 6
    # (1–6, 6, 7, 8) while its example answer uses 1–9; fixed between 2.1.20 and 2.1.63 (§7.2), so 2.1.112
    # numbers both lists 1–9. Before this audit both strategies sent 1–9 in both.
    for strategy, total, instructions in (
        ("claude-code", 124_000, [1, 2, 3, 4, 5, 6, 6, 7, 8]),
        ("claude-code-2.1", 168_000, list(range(1, 10))),
    ):
        prompt = _summary_prompt(strategy, total)
        listed, example = prompt.split("\n<summary>\n", 1)  # the instruction list, then the example answer
        assert _numbers(listed) == instructions, strategy
        assert _numbers(example) == list(range(1, 10)), strategy


def _lines(path) -> list[dict]:
    """The JSON lines of a Claude Code session file (split at "\n" only: texts hold other line breaks)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _lagging_requests(path) -> list[tuple[str, int, str]]:
    """From the JSONL alone (§9's method): each main-chain response whose own request was at or above T
    (input + cache creation + cache read) while the check before it read the previous response's full
    usage (with output) below T, and no boundary came between; with the message id of the response before."""
    usage: dict[str, dict] = {}
    order: list[str | None] = []
    for data in _lines(path):
        if data.get("type") == "system" and data.get("subtype") == "compact_boundary":
            order.append(None)
        message = data.get("message") or {}
        if data.get("type") != "assistant" or data.get("isSidechain") or not message.get("usage") or message.get("model") == "<synthetic>":
            continue
        if message["id"] not in usage:
            order.append(message["id"])
        usage[message["id"]] = message["usage"]  # the last copy of a response's usage
    found, previous, previous_id = [], 0, None
    for key in order:
        if key is None:
            previous, previous_id = 0, None
            continue
        u = usage[key]
        sent = u["input_tokens"] + u.get("cache_creation_input_tokens", 0) + u.get("cache_read_input_tokens", 0)
        if sent >= T > previous:
            found.append((key, previous, previous_id))
        previous, previous_id = sent + u["output_tokens"], key
    return found


def test_recorded_requests_over_the_threshold_go_out_uncompacted_as_claude_code_sent_them():
    # §2.2: 2.0.57's count is the newest response's usage, nothing added for the tool results and user text
    # after it, so a request that those push over T goes out uncompacted and the next check fires. The corpus
    # shows Claude Code doing so: 4 recorded requests of 125,309–127,940 input tokens were sent after a check
    # that read 95,131–122,647, and the boundary came one request later. The replay must do the same (these
    # are the missed triggers the accuracy metric counts for `claude-code`: upstream's, not the replay's).
    seen = 0
    for path in sorted(PAI.glob("*.jsonl")):
        lagging = _lagging_requests(path)
        if not lagging:
            continue
        (transcript,) = load_transcripts(path, format="claude-code")
        result = replay(transcript, "claude-code", profile="claude-opus", usage="recorded", options=OPUS)
        response_of = {}  # message.id of each step's response, from its first item's line
        lines = {data.get("uuid"): data for data in _lines(path)}
        for step in transcript.steps():
            first = next((i for i in step.items if i.id in lines and lines[i.id].get("type") == "assistant"), None)
            if first is not None:
                response_of[step.index] = lines[first.id]["message"]["id"]
        turns = [r for r in result.requests if r.kind == "turn" and r.attempt == 0]
        auto_steps = {c.step for c in result.compactions if c.trigger == "auto"}
        for key, previous, previous_id in lagging:
            n = next(k for k, r in enumerate(turns) if response_of.get(r.step) == key)
            request, following = turns[n], turns[n + 1]
            assert response_of.get(turns[n - 1].step) == previous_id
            assert request.meta["count"] == previous < T and request.step not in auto_steps
            # the response it got back is the count of the next check, which fires there
            assert following.meta["count"] >= T and following.step in auto_steps
            seen += 1
    assert seen == 4

"""The Pi session importer (docs/specs/pi.md §1, §8) and branch summaries on an imported tree (§6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.importing import ImportFailure, detect, load_transcript
from compaction_bench.replay import replay
from compaction_bench.scenarios.pi_session import PiSessionImporter
from compaction_bench.strategies.pi_branch import BRANCH_SUMMARY_PREAMBLE
from compaction_bench.strategies.pi_session_tree import BRANCH_SUMMARY_PREFIX
from tests.pi_builders import RecordingSummarizer, small_profile

USAGE = {"input": 10, "output": 5, "cacheRead": 100, "cacheWrite": 20, "totalTokens": 135}


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def msg(role: str, **fields) -> dict:
    return {"role": role, "timestamp": 1767261601000, **fields}


def v1_session(tmp_path: Path) -> Path:
    return write(
        tmp_path / "v1.jsonl",
        [
            {"type": "session", "id": "s1", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p", "provider": "anthropic", "modelId": "claude-opus-4-5"},
            {"type": "message", "timestamp": "2026-01-01T10:00:01.000Z", "message": msg("user", content=[{"type": "text", "text": "fix "}, {"type": "text", "text": "bug"}])},
            {
                "type": "message",
                "timestamp": "2026-01-01T10:00:02.000Z",
                "message": msg(
                    "assistant",
                    content=[
                        {"type": "thinking", "thinking": "hmm"},
                        {"type": "text", "text": "reading"},
                        {"type": "toolCall", "id": "tc1", "name": "read", "arguments": {"path": "src/a.ts"}},
                    ],
                    usage=USAGE,
                    stopReason="toolUse",
                    provider="anthropic",
                    model="claude-opus-4-5",
                ),
            },
            {"type": "message", "timestamp": "2026-01-01T10:00:03.000Z", "message": msg("toolResult", toolCallId="tc1", toolName="read", content=[{"type": "text", "text": "file"}], isError=False)},
            "this line is broken",
            {"type": "message", "timestamp": "2026-01-01T10:00:04.000Z", "message": msg("bashExecution", command="ls", output="a\nb", exitCode=1, cancelled=False, truncated=False)},
            {"type": "compaction", "timestamp": "2026-01-01T10:00:05.000Z", "summary": "## Goal", "firstKeptEntryIndex": 3, "tokensBefore": 171234},
            {"type": "message", "timestamp": "2026-01-01T10:00:06.000Z", "message": msg("user", content="next")},
        ],
    )


def test_v1_migration_ids_parents_and_first_kept_index(tmp_path):
    path = v1_session(tmp_path)
    path.write_text(path.read_text().replace('"this line is broken"', "{broken"))
    assert detect(path) is PiSessionImporter
    t = load_transcript(path)
    entries = [(i.meta["entry"], i.meta["parent"]) for i in t.items if i.meta.get("entry") and not i.id.endswith((".1", ".2"))]
    assert entries == [("00000001", None), ("00000002", "00000001"), ("00000003", "00000002"), ("00000004", "00000003"), ("00000005", "00000004"), ("00000006", "00000005")]
    (compaction,) = t.markers("compaction")
    # legacy index 3 counts the header as entry 0: the third entry after it, the tool result
    assert compaction.meta["firstKeptEntryId"] == "00000003" and compaction.meta["tokensBefore"] == 171234
    assert t.by_id["00000003"].kind == "tool_result"
    assert t.meta["version"] == 1 and len(t.meta["problems"]) == 1 and ":5:" in t.meta["problems"][0]


def test_message_mapping(tmp_path):
    t = load_transcript(v1_session(tmp_path))
    user, thinking, text, call, result, bash = t.items[:6]
    assert user.kind == "user" and user.text == "fix bug" and user.turn == 0
    assert (thinking.kind, text.kind, call.kind) == ("reasoning", "assistant", "tool_call")
    assert thinking.id == "00000002.0" and call.id == "00000002.2" and call.arguments == '{"path":"src/a.ts"}'
    assert call.usage is not None and thinking.usage is None
    # Anthropic usage: cache reads and writes go into input; totalTokens is kept
    assert (call.usage.input, call.usage.cached_input, call.usage.cache_write, call.usage.output, call.usage.total) == (130, 100, 20, 5, 135)
    assert thinking.meta["stopReason"] == "toolUse" and thinking.response == call.response == 0
    assert result.kind == "tool_result" and result.call_id == "tc1"
    assert bash.kind == "user" and bash.synthetic and bash.text == "Ran `ls`\n```\na\nb\n```\n\nCommand exited with code 1"


def tree_session(tmp_path: Path) -> Path:
    def entry(id_, parent, type_="message", **fields):
        return {"type": type_, "id": id_, "parentId": parent, "timestamp": f"2026-01-01T10:00:{int(id_[1:]):02d}.000Z", **fields}

    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}
    return write(
        tmp_path / "tree.jsonl",
        [
            {"type": "session", "version": 3, "id": "s2", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
            entry("e1", None, message=msg("user", content="start the project")),
            entry("e2", "e1", message=msg("assistant", content=[{"type": "text", "text": "started"}], usage=usage, stopReason="stop")),
            entry("e3", "e2", message=msg("user", content="try approach A")),
            entry("e4", "e3", message=msg("assistant", content=[{"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "x.py"}}], usage=usage, stopReason="toolUse")),
            entry("e5", "e4", message=msg("toolResult", toolCallId="t1", toolName="read", content=[{"type": "text", "text": "SECRET-TOOL-OUTPUT"}], isError=False)),
            entry("e6", "e5", message=msg("assistant", content=[{"type": "text", "text": "approach A fails"}], usage=usage, stopReason="stop")),
            entry("e7", "e2", "branch_summary", fromId="e2", summary="recorded branch summary", details={"readFiles": ["x.py"], "modifiedFiles": []}),
            entry("e8", "e7", message=msg("user", content="try approach B")),
            entry("e9", "e8", message=msg("assistant", content=[{"type": "text", "text": "B works"}], usage=usage, stopReason="stop")),
        ],
    )


def test_active_path_by_default_and_branch_option(tmp_path):
    path = tree_session(tmp_path)
    active = load_transcript(path)
    assert [i.meta["entry"] for i in active.items if i.kind != "reasoning"] == ["e1", "e2", "e7", "e8", "e9"]
    assert active.meta["leaves"] == ("e6", "e9")
    other = load_transcript(path, branch="e6")
    assert [i.meta["entry"] for i in other.items] == ["e1", "e2", "e3", "e4", "e5", "e6"]
    with pytest.raises(ImportFailure, match="branch='nope'"):
        load_transcript(path, branch="nope")


def test_tree_replay_marks_navigation_and_summarizes_the_abandoned_branch(tmp_path):
    tree = load_transcript(tree_session(tmp_path), branch="tree")
    (move,) = tree.markers("branch")
    assert move.meta["from"] == "e6" and move.meta["to"] == "e2"
    summarizer = RecordingSummarizer()
    result = replay(tree, "pi", profile=small_profile(200_000), summarizer=summarizer)
    (branch,) = [c for c in result.compactions if c.trigger == "branch"]
    assert branch.details["generated"] and branch.details["fromId"] == "e2"
    assert branch.summary.startswith(BRANCH_SUMMARY_PREAMBLE)
    assert branch.summary.endswith("\n\n<read-files>\nx.py\n</read-files>")
    assert summarizer.max_tokens == [2048]
    # tool results are skipped; the abandoned user and assistant messages are summarized
    assert set(branch.summarized_ids) == {"e3", "e4.0", "e6.0"}
    prompt = [r for r in result.requests if r.kind == "summary"][0].messages[1].content
    assert "SECRET-TOOL-OUTPUT" not in prompt and "## Next Steps" in prompt and "## Critical Context" not in prompt
    final = result.final
    assert not {"e3", "e4.0", "e5", "e6.0"} & set(final.item_ids())
    assert any(m.content.startswith(BRANCH_SUMMARY_PREFIX + BRANCH_SUMMARY_PREAMBLE) for m in final.messages)


def test_active_path_replay_keeps_the_recorded_branch_summary(tmp_path):
    result = replay(load_transcript(tree_session(tmp_path)), "pi-2026-03", profile=small_profile(200_000))
    assert any(m.content == BRANCH_SUMMARY_PREFIX + "recorded branch summary</summary>" for m in result.final.messages)


def test_bad_header_is_one_clear_error(tmp_path):
    path = write(tmp_path / "bad.jsonl", [{"type": "message", "id": "x"}])
    with pytest.raises(ImportFailure, match=r"bad.jsonl:1: .*not a Pi session header"):
        PiSessionImporter().load(path)


def test_an_unreadable_header_line_is_named_not_the_next_line(tmp_path):
    """A cut first line: the error names line 1 and its JSON problem, not line 2 (a valid entry) as "not a header"."""
    path = tmp_path / "cut.jsonl"
    path.write_text('{"type": "session", "version": 3, "id": "s", "cwd": "/re\n'
                    + json.dumps({"type": "message", "id": "m1", "parentId": None, "message": {"role": "user", "content": "hi"}}) + "\n")
    with pytest.raises(ImportFailure, match=r"cut.jsonl:1: malformed JSON \(.*\), where a Pi session has its header"):
        PiSessionImporter().load(path)


def test_v2_hook_message_becomes_custom(tmp_path):
    path = write(
        tmp_path / "v2.jsonl",
        [
            {"type": "session", "version": 2, "id": "s3", "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/p"},
            {"type": "message", "id": "a", "parentId": None, "timestamp": "2026-01-01T10:00:01.000Z", "message": msg("hookMessage", customType="x", content="injected")},
        ],
    )
    (item,) = load_transcript(path).items
    assert item.meta["role"] == "custom" and item.synthetic and item.text == "injected"


def test_canonical_round_trip(tmp_path):
    from compaction_bench.transcript import Transcript

    for t in (load_transcript(v1_session(tmp_path)), load_transcript(tree_session(tmp_path), branch="tree")):
        again = Transcript.loads(t.dumps())
        assert again.items == t.items and again.meta == t.meta

"""Codex follow-ups of audit s41: what a `compacted` line records, the summary response a local compaction writes
before it, and the estimate of an encrypted `agent_message`.

The expectations are upstream's (openai/codex@3aae5d8), not the code's; every rollout is built by hand:
- a `compacted` line (`CompactedItem`, protocol.rs L3247-3263; docs/specs/codex.md §7.2) records the
  `replacement_history`; the real user messages in it are the user messages that are no contextual fragment and
  not the summary (`collect_user_messages`, core/src/compact.rs L520-547);
- a local compaction records each output item of its summary request into the rollout as it is done
  (`drain_to_completed`, compact.rs L692-752, `record_conversation_items` since 1c7832ffa), then one `token_count`
  at `response.completed` (`update_token_usage_info`, core/src/session/mod.rs L3830-3841), then the `compacted` line
  whose `message` is `SUMMARY_PREFIX + "\\n" +` the visible text of the last assistant message (compact.rs L342-346,
  memory citations stripped: `last_assistant_message_from_item`, core/src/stream_events_utils.rs L468-482), then,
  mid-turn, `world_state` and `turn_context` (`replace_compacted_history`, mod.rs L3311-3357), then the
  `token_count` of `recompute_token_usage` (mod.rs L3878-3915: the cumulative total unchanged). Remote compactions
  write no output item and an empty `message` (compact_remote.rs L286-295, compact_remote_v2.rs L312-321);
- an agent message's encrypted content counts ceil(len*9/16) bytes in its estimate (spec §6;
  core/src/context_manager/history.rs L515-517, L759-795).
`PREFIX` stands in for upstream's `SUMMARY_PREFIX` (a prompt text the project does not reproduce).
"""

from __future__ import annotations

import json
from pathlib import Path

from compaction_bench.calibrate import calibrate, compactions, spans
from compaction_bench.importing import load_transcript
from compaction_bench.strategies.codex_components import ItemConverter, estimate_history
from compaction_bench.transcript import Transcript

PREFIX = "<SUMMARY_PREFIX stand-in: another model worked on this task and left the summary below.>"
ASK = "Fix the failing parser test. Never modify setup.cfg."
SUMMARY = "The parser test failed on an empty line; parser.py now skips empty lines and the test passes."

Line = tuple[str, dict]


def user(*texts: str) -> Line:
    return "response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t} for t in texts]}


def developer(text: str) -> Line:
    return "response_item", {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}


def assistant(text: str) -> Line:
    return "response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def reasoning(encrypted: str) -> Line:
    return "response_item", {"type": "reasoning", "summary": [], "encrypted_content": encrypted}


def event(kind: str) -> Line:
    return "event_msg", {"type": kind}


def token_count(total: int, last: int) -> Line:
    def usage(n: int) -> dict[str, int]:
        return {"input_tokens": n - 10, "cached_input_tokens": 0, "output_tokens": 10, "reasoning_output_tokens": 0, "total_tokens": n}

    return "event_msg", {"type": "token_count", "info": {"total_token_usage": usage(total), "last_token_usage": usage(last)}}


def compacted(message: str, history: list[Line] | None) -> Line:
    payload: dict[str, object] = {"message": message, "window_number": 1}
    if history is not None:
        payload["replacement_history"] = [body for _, body in history]
    return "compacted", payload


def write(tmp_path: Path, *lines: Line) -> Path:
    rows = [("session_meta", {"id": "sess-s41", "cwd": "/repo", "cli_version": "0.147.0"}),
            ("turn_context", {"model": "gpt-5.5"}), *lines]
    path = tmp_path / "rollout-2026-08-08T10-00-00-sess-s41.jsonl"
    path.write_text("".join(json.dumps({"timestamp": "2026-08-08T10:00:00.000Z", "type": t, "payload": p}) + "\n" for t, p in rows),
                    encoding="utf-8")
    return path


def load(tmp_path: Path, *lines: Line) -> Transcript:
    return load_transcript(write(tmp_path, *lines))


def texts(t: Transcript, kind: str) -> list[str]:
    return [i.text for i in t.items if i.kind == kind]


# --------------------------------------------------------------------------- 1. the replacement history in the marker
ENVIRONMENT = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"


def test_the_marker_keeps_the_real_user_messages_of_the_replacement_history(tmp_path):
    """Of a recorded history (developer text, a context message, two typed messages, the summary), the typed ones;
    a message's text parts joined with "" as the importer joins a user message's. A line without a history: None."""
    history = [developer("<permissions instructions>p</permissions instructions>"), user(ENVIRONMENT), user(ASK),
               user("Then run ", "the linter."), user(f"{PREFIX}\n{SUMMARY}")]
    t = load(tmp_path, user(ASK), assistant("On it."), compacted(f"{PREFIX}\n{SUMMARY}", history),
             user("Next."), assistant("Done."), compacted("an older writer's summary", None))
    first, legacy = t.markers("compaction")
    assert list(first.meta["replacement_user_messages"]) == [ASK, "Then run the linter."]
    assert first.meta["replacement_items"] == 5
    assert legacy.meta["replacement_user_messages"] is None


def test_calibrate_takes_the_kept_messages_from_the_marker_not_from_the_file(tmp_path):
    """Two typed messages; the recorded history kept only the newer (as Codex's budget could). Codex's 20k rule
    would keep both, so a calibrate that no longer finds the history reads the wrong answer. The file is gone
    after the import: the transcript alone must say what Codex kept."""
    newer = "Also never commit the .env file."
    path = write(tmp_path, user(ASK), assistant("Working on it."), user(newer), assistant("Noted."),
                 compacted(f"{PREFIX}\n{SUMMARY}", [user(newer), user(f"{PREFIX}\n{SUMMARY}")]))
    t = load_transcript(path)
    path.unlink()
    (compaction,) = compactions(t)
    newer_id = next(i.id for i in compaction.items if i.kind == "user" and i.text == newer)
    assert dict(compaction.kept) == {newer_id: newer}


# --------------------------------------------------------------------------- 2. the summary response before `compacted`
def pre_turn_compaction(summary_text: str = SUMMARY) -> list[Line]:
    """A turn, then a pre-turn local compaction in upstream's order, then the next turn."""
    return [
        user(ASK), assistant("Fixed test_parse in parser.py."), token_count(1000, 1000), event("task_complete"),
        event("task_started"),
        reasoning("E" * 800), assistant(summary_text), token_count(1600, 600),  # the summary request's response
        compacted(f"{PREFIX}\n{SUMMARY}", [user(ASK), user(f"{PREFIX}\n{SUMMARY}")]),
        token_count(1600, 420),  # recompute_token_usage: the cumulative total unchanged
        user("Now run the linter."), assistant("The linter is clean."), token_count(2300, 700),
    ]


def test_the_summary_response_before_a_compacted_line_is_the_compactions_not_the_conversations(tmp_path):
    t = load(tmp_path, *pre_turn_compaction())
    assert SUMMARY not in texts(t, "assistant")  # a replay never shows the real summary as a turn
    assert texts(t, "assistant") == ["Fixed test_parse in parser.py.", "The linter is clean."]
    assert not [i for i in t.items if i.kind == "reasoning"]  # the summary request's reasoning is its own
    (marker,) = t.markers("compaction")
    # lines 1-2 are session_meta and turn_context: the response is lines 8-10 (reasoning, message, token_count)
    assert [entry["line"] for entry in marker.meta["summary_response"]] == [8, 9, 10]
    assert marker.meta["summary_response"][1]["rollout"]["payload"]["content"][0]["text"] == SUMMARY
    assert dict(marker.meta["summary_usage"]) == {"input": 590, "cached_input": 0, "cache_write": 0, "output": 10, "reasoning": 0,
                                                  "total": 600}
    # each conversation response keeps its own usage; the summary request's is nobody's
    assert [s.usage.total for s in t.steps()] == [1000, 700]
    assert "unattached_token_counts" not in t.meta and "problems" not in t.meta


def test_calibrate_gives_the_summarizer_the_span_without_the_summary(tmp_path):
    path = write(tmp_path, *pre_turn_compaction())
    ((span, summary),) = spans(load_transcript(path))
    assert [i.text for i in span] == [ASK, "Fixed test_parse in parser.py."]
    assert summary == f"{PREFIX}\n{SUMMARY}"
    (row,) = calibrate([path])
    assert row.span_items == 2


def test_a_mid_turn_summary_with_a_memory_citation_is_recognised(tmp_path):
    """Mid-turn (after a tool output), the world_state and turn_context lines after `compacted`; Codex strips
    `<oai-mem-citation>` blocks from the text it takes."""
    cited = SUMMARY.replace("parser.py", "parser.py<oai-mem-citation>MEMORY.md:3</oai-mem-citation>", 1)
    t = load(tmp_path,
             user(ASK), assistant("Running the tests."),
             ("response_item", {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": "{\"command\":[\"pytest\"]}"}),
             token_count(1000, 1000),
             ("response_item", {"type": "function_call_output", "call_id": "c1", "output": "1 failed"}),
             assistant(cited), token_count(1500, 500),
             compacted(f"{PREFIX}\n{SUMMARY}", [developer("<permissions instructions>p</permissions instructions>"), user(ASK),
                                                 user(f"{PREFIX}\n{SUMMARY}")]),
             ("world_state", {"full": True}), ("turn_context", {"model": "gpt-5.5"}), token_count(1500, 300),
             assistant("The fix is in."), token_count(1900, 400))
    assert texts(t, "assistant") == ["Running the tests.", "The fix is in."]
    (marker,) = t.markers("compaction")
    assert [entry["line"] for entry in marker.meta["summary_response"]] == [8, 9]
    assert [s.usage.total for s in t.steps()] == [1000, 400]


def test_an_older_assistant_message_codex_took_for_a_summary_stays_in_the_conversation(tmp_path):
    """A summary request that gave no assistant message: Codex takes the last one of the history, the previous
    response's (compact.rs L342-346), which is a conversation item; two token_counts (that response's and the
    summary request's) lie between it and the `compacted` line."""
    final = "All tests pass now."
    t = load(tmp_path, user(ASK), assistant(final), token_count(1000, 1000), token_count(1300, 300),
             compacted(f"{PREFIX}\n{final}", [user(ASK), user(f"{PREFIX}\n{final}")]))
    assert texts(t, "assistant") == [final]
    assert "summary_response" not in t.markers("compaction")[0].meta


def test_a_remote_compaction_writes_no_summary_response(tmp_path):
    """Remote v1/v2 record `message: ""`: the assistant message before the line is the conversation's."""
    t = load(tmp_path, user(ASK), assistant(SUMMARY), token_count(1000, 1000), compacted("", [user(ASK)]))
    assert texts(t, "assistant") == [SUMMARY]
    assert "summary_response" not in t.markers("compaction")[0].meta


def test_a_last_assistant_message_other_than_the_summary_is_kept(tmp_path):
    """The summary text must be what the `message` ends with: an unrelated last message (an older writer whose
    summary came from elsewhere) stays a conversation item."""
    t = load(tmp_path, user(ASK), assistant("Something else entirely."), token_count(1000, 1000),
             compacted(f"{PREFIX}\n{SUMMARY}", [user(ASK)]))
    assert texts(t, "assistant") == ["Something else entirely."]


# --------------------------------------------------------------------------- 3. the estimate of an encrypted agent_message
HEADER = "Message Type: NEW_TASK\nTask name: /root/worker\nSender: /root\nPayload:\n"
PAYLOAD = "gAAAAB" + "x" * 994  # 1,000 characters


def test_an_encrypted_agent_message_counts_its_payload_at_nine_sixteenths(tmp_path):
    """The item `to_model_input_item` builds (protocol.rs L817-850): a header and an encrypted payload of 1,000
    bytes. Its estimate is ceil((JSON bytes + ceil(1000*9/16)) / 4), the JSON being this module's form of an agent
    message, written out here: 35 bytes before the header, the header's 70 characters with its four line breaks
    escaped (74), 2 after it: 111 bytes, + 563 = 674 bytes, 169 tokens. The user message before it: 91 bytes, 23
    tokens."""
    t = load(tmp_path, user("Spawn a worker."),
             ("response_item", {"type": "agent_message", "author": "/root", "recipient": "/root/worker",
                                "content": [{"type": "input_text", "text": HEADER},
                                            {"type": "encrypted_content", "encrypted_content": PAYLOAD}]}))
    converter = ItemConverter()
    items = [converter.convert(i) for i in t.items if i.kind == "user"]
    agent_json = '{"type":"agent_message","message":"Message Type: NEW_TASK\\nTask name: /root/worker\\nSender: /root\\nPayload:\\n"}'
    user_json = '{"type":"message","role":"user","content":[{"type":"input_text","text":"Spawn a worker."}]}'
    assert (len(agent_json), -(-1000 * 9 // 16), len(user_json)) == (111, 563, 91)
    assert [i.estimate for i in items] == [23, 169]  # ceil(91/4), ceil((111 + 563)/4)
    assert estimate_history(items) == 192


def test_an_inter_agent_communication_with_an_encrypted_payload_is_estimated_the_same_way(tmp_path):
    """The rollout's `inter_agent_communication` line is the same item (§7.3 step 3)."""
    t = load(tmp_path, ("inter_agent_communication", {"author": "/root", "recipient": "/root/worker", "other_recipients": [],
                                                      "content": "", "trigger_turn": True, "encrypted_content": PAYLOAD}))
    (item,) = [ItemConverter().convert(i) for i in t.items if i.kind == "user"]
    assert (item.type, item.encrypted_len, item.estimate) == ("agent_message", 1000, 169)

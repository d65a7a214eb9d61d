"""The importers audit of session 44 (five findings), each on a hand-built file whose right answer comes from the
upstream agent's own code, and on the corpus files the finding touched:

1. SWE-agent: a text-protocol message's text is the `thought` SWE-agent's parser left beside the action
   (sweagent/tools/parsing.py@3ea751c087 L168-218 for `<command>` tags), so an XML-tagged command is counted once;
2. tau-bench: one damaged run is a problem naming run N, and the file keeps its other runs;
3. Codex: a plain-text output Codex sends as a failed call (`success: Some(false)`) is `is_error`; one it sends
   with `success: None` (the 0.3x apply_patch `error: …`) is not;
4. OpenCode: an errored assistant message OpenCode never re-sends (message-v2.ts@007a9409 `toModelMessagesEffect`)
   is its marker alone, and a pending or running tool call gets the `[Tool execution was interrupted]` error;
5. detection: a JSON list of chat messages whose first message puts `content` before `role` and is long."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_bench.importing import ImportFailure, detect, load_transcripts
from compaction_bench.transcript import Transcript
from tests.conftest import CORPORA, corpus_files


def kinds(transcript: Transcript) -> list[str]:
    return [i.kind for i in transcript.items]


# --------------------------------------------------------------------------- 1. SWE-agent thought
def xml_thought_action(message: str) -> tuple[str, str]:
    """SWE-agent's XMLThoughtActionParser (parsing.py@3ea751c087 L205-218), restated: the action is the text between
    the last `<command>` and the last `</command>`, the thought everything else, both stripped."""
    start, end = message.rfind("<command>"), message.rfind("</command>")
    return (message[:start] + message[end + len("</command>"):]).strip(), message[start + len("<command>"):end].strip()


XML_MESSAGE = "Let me look at the file first.\n<command>\nopen src/app.py\n</command>\nThen I will edit it."


def swe_history(assistant: dict) -> dict:
    return {"history": [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}, assistant,
                        {"role": "user", "content": "[File: src/app.py]"}], "trajectory": [], "info": {}}


def test_an_xml_tagged_swe_agent_command_leaves_the_message_text(tmp_path: Path):
    thought, action = xml_thought_action(XML_MESSAGE)
    assert (thought, action) == ("Let me look at the file first.\n\nThen I will edit it.", "open src/app.py")
    path = tmp_path / "xml.traj"
    path.write_text(json.dumps(swe_history({"role": "assistant", "content": XML_MESSAGE, "thought": thought, "action": action})))
    (t,) = load_transcripts(path)
    assert kinds(t) == ["system", "user", "assistant", "tool_call", "tool_result"]
    assert t.items[2].text == thought and "open src/app.py" not in t.items[2].text
    assert json.loads(t.items[3].arguments) == {"command": "open src/app.py"}


def test_a_command_that_is_the_whole_message_has_no_text_beside_it(tmp_path: Path):
    """The `action` and `identity` parsers return the whole message as thought and action (parsing.py L92, L368);
    a model that writes the command as its discussion and again in the fenced block (the corpus's
    ctf__crypto__eps) wrote it twice, and the fenced parser's thought keeps the first (L160-163)."""
    path = tmp_path / "identity.traj"
    path.write_text(json.dumps(swe_history({"role": "assistant", "content": "ls -la\n", "thought": "ls -la\n", "action": "ls -la\n"})))
    (t,) = load_transcripts(path)
    assert kinds(t) == ["system", "user", "tool_call", "tool_result"]
    assert json.loads(t.items[2].arguments) == {"command": "ls -la\n"}
    twice = {"role": "assistant", "content": "ls -la\n```\nls -la\n```", "thought": "ls -la\n", "action": "ls -la\n"}
    path.write_text(json.dumps(swe_history(twice)))
    (t,) = load_transcripts(path)
    assert kinds(t) == ["system", "user", "assistant", "tool_call", "tool_result"] and t.items[2].text == "ls -la"


@pytest.mark.corpora
@pytest.mark.parametrize("path", [p for p in corpus_files("swe-agent-traj") if "xml_sys-env" in p.name], ids=lambda p: p.name[:60])
def test_recorded_xml_swe_agent_commands_are_counted_once(path: Path):
    history = json.loads(path.read_text(encoding="utf-8"))["history"]
    written = [m for m in history if m.get("role") == "assistant" and isinstance(m.get("action"), str) and m["action"].strip()
               and not m.get("tool_calls")]
    (t,) = load_transcripts(path)
    texts = {i.response: i.text for i in t.items if i.kind == "assistant"}
    calls = [i for i in t.items if i.kind == "tool_call" and (i.call_id or "").startswith("action-")]
    assert len(calls) == len(written) > 10
    for message, call in zip(written, calls, strict=True):
        thought, action = xml_thought_action(message["content"])
        assert action == message["action"].strip() and thought == message["thought"].strip()
        assert texts.get(call.response, "") == thought and "<command>" not in thought


# --------------------------------------------------------------------------- 2. tau-bench damaged run
CHAT = [{"role": "system", "content": "policy"}, {"role": "user", "content": "change my flight"},
        {"role": "assistant", "content": "Done."}]


def test_a_damaged_tau_bench_run_is_a_problem_naming_it_and_the_other_runs_are_kept(tmp_path: Path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 0, "trial": 0, "reward": 1.0, "info": {}, "traj": CHAT},
                                {"task_id": 1, "trial": 0, "reward": 0.0, "info": {}, "traj": None},
                                {"task_id": 2, "trial": 0, "reward": 1.0, "info": {}, "traj": CHAT}]))
    assert detect(path).format == "openai-messages"
    ts = load_transcripts(path)
    assert [t.id for t in ts] == ["runs:task0:trial0", "runs:task2:trial0"]
    assert [t.source["entry"] for t in ts] == [0, 2]
    assert all(kinds(t) == ["system", "user", "assistant"] for t in ts)
    for t in ts:
        assert list(t.meta["problems"]) == [f"{path}: run 1: traj is a JSON null, not a list of messages; run left out"]


def test_a_tau_bench_file_without_a_readable_run_is_an_error_naming_the_run(tmp_path: Path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 0, "trial": 0, "traj": {"role": "user"}}]))
    with pytest.raises(ImportFailure, match=r"run 0: traj is a JSON object, not a list of messages"):
        load_transcripts(path, format="openai-messages")


@pytest.mark.corpora
def test_one_damaged_run_of_the_recorded_tau_bench_file_costs_that_run_alone(tmp_path: Path):
    (source,) = corpus_files("tau-bench-traj")
    runs = json.loads(source.read_text(encoding="utf-8"))
    runs[57]["traj"] = None
    path = tmp_path / source.name
    path.write_text(json.dumps(runs))
    ts = load_transcripts(path)
    assert len(ts) == len(runs) - 1 == 199 and 57 not in {t.source["entry"] for t in ts}
    assert not any(i.kind == "marker" for t in ts for i in t.items)
    assert list(ts[0].meta["problems"]) == [f"{path}: run 57: traj is a JSON null, not a list of messages; run left out"]


# --------------------------------------------------------------------------- 3. Codex failures in the output text
def rollout_line(type_: str, payload: dict) -> str:
    return json.dumps({"timestamp": "2025-11-01T10:00:00.000Z", "type": type_, "payload": payload})


#: call id -> (output kind, output, whether Codex sent it with `success: Some(false)`)
CODEX_OUTPUTS = {
    # codex.rs handle_sandbox_error (0.3x): both built with success: Some(false)
    "c1": ("function_call_output", 'failed in sandbox LinuxSeccomp with execution error: Denied { output: "touch: denied" }', True),
    "c2": ("function_call_output", "command timed out after 10000 milliseconds", True),
    # 0.3x apply_patch CorrectnessError: success: None
    "c3": ("function_call_output", "error: Failed to find expected lines in src/a.py:\nfoo", False),
    # handlers/apply_patch.rs: FunctionCallError::RespondToModel, sent with success: Some(false)
    "c4": ("custom_tool_call_output", "apply_patch verification failed: Failed to find expected lines in src/a.py", True),
    # the freeform exec formatter (tools/mod.rs): ToolEmitter::finish errs on a non-zero exit code only
    "c5": ("function_call_output", "Exit code: 1\nWall time: 1.2 seconds\nOutput:\n1 failed", True),
    "c6": ("function_call_output", "Exit code: 0\nWall time: 0.1 seconds\nOutput:\nok", False),
    "c7": ("function_call_output", "Plan updated", False),
    "c8": ("function_call_output", json.dumps({"output": "x", "metadata": {"exit_code": 2, "duration_seconds": 0.1}}, separators=(",", ":")), True),
    "c9": ("function_call_output", "The output says: failed in sandbox LinuxSeccomp with execution error: no", False),
}


def test_codex_outputs_are_failures_where_codex_sent_them_as_failed_calls(tmp_path: Path):
    lines = [rollout_line("session_meta", {"id": "s", "cwd": "/r", "cli_version": "0.58.0"}),
             rollout_line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]})]
    for call_id, (kind, output, _) in CODEX_OUTPUTS.items():
        call = ({"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch", "call_id": call_id}
                if kind == "custom_tool_call_output" else {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": call_id})
        lines += [rollout_line("response_item", call), rollout_line("response_item", {"type": kind, "call_id": call_id, "output": output})]
    path = tmp_path / "rollout-2025-11-01T10-00-00-x.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (t,) = load_transcripts(path)
    flags = {i.call_id: i.is_error for i in t.items if i.kind == "tool_result"}
    assert flags == {call_id: failed for call_id, (_, _, failed) in CODEX_OUTPUTS.items()}


@pytest.mark.corpora
def test_recorded_codex_sandbox_and_patch_failures_are_failed_calls():
    """Counted from the raw lines: a plain-text output that starts with one of Codex's failure wordings, or a JSON exec
    envelope with a non-zero exit code; the 0.3x apply_patch `error: …` outputs stay successes."""
    expected: dict[str, tuple[int, int]] = {}
    got: dict[str, tuple[int, int]] = {}
    for path in sorted((CORPORA / "codex-rollout-jsonl").glob("*/*.jsonl")):
        failed = 0
        for raw in path.read_text(encoding="utf-8").splitlines():
            payload = json.loads(raw).get("payload") or {}
            output = payload.get("output") if str(payload.get("type", "")).endswith("_call_output") else None
            if not isinstance(output, str):
                continue
            envelope = json.loads(output) if output.startswith('{"output":') else None
            failed += bool(envelope and envelope["metadata"]["exit_code"] != 0
                           or output.startswith(("failed in sandbox ", "apply_patch verification failed: ")))
        expected[path.name[:40]] = (failed, 0)
        (t,) = load_transcripts(path)
        results = [i for i in t.items if i.kind == "tool_result"]
        got[path.name[:40]] = (sum(i.is_error for i in results), sum(i.is_error for i in results if i.text.startswith("error: ")))
    assert got == expected
    assert sorted(n for n, _ in expected.values()) == [7, 8, 10, 15, 27]


# --------------------------------------------------------------------------- 4. OpenCode errored messages
SESSION = "ses_demo"
TOKENS = {"total": 1100, "input": 100, "output": 50, "reasoning": 0, "cache": {"read": 950, "write": 0}}


def oc_message(mid: str, role: str, created: int, parts: list[dict], **info: object) -> dict:
    parts = [{"id": f"{mid}.p{n}", "sessionID": SESSION, "messageID": mid, **p} for n, p in enumerate(parts)]
    return {"info": {"id": mid, "sessionID": SESSION, "role": role, "time": {"created": created}, **info}, "parts": parts}


def assistant(mid: str, created: int, parts: list[dict], **info: object) -> dict:
    return oc_message(mid, "assistant", created, [{"type": "step-start"}, *parts,
                                                  {"type": "step-finish", "reason": "stop", "tokens": TOKENS}],
                      modelID="claude-sonnet-4-5", providerID="anthropic", tokens=TOKENS, **info)


def test_opencode_errored_messages_and_interrupted_tools_are_what_opencode_sends(tmp_path: Path):
    cut_off = "Here is the whole file rewritten: " + "x = 1\n" * 2000
    running = {"type": "tool", "callID": "toolu_y", "tool": "bash", "state": {"status": "running", "input": {"command": "pytest"}}}
    export = {"info": {"id": SESSION, "title": "t", "directory": "/r", "version": "1.16.2"}, "messages": [
        oc_message("msg_1", "user", 1000, [{"type": "text", "text": "Fix the parser test"}]),
        # cut off at the output limit: OpenCode never sends it again
        assistant("msg_2", 1001, [{"type": "text", "text": cut_off}], error={"name": "MessageOutputLengthError", "data": {}}),
        # aborted after its text: an abort with real content is sent again
        assistant("msg_3", 1002, [{"type": "text", "text": "Running the tests"}, running],
                  error={"name": "MessageAbortedError", "data": {"message": "aborted"}}),
        # aborted while reasoning, before its step finished: nothing but step-start and reasoning, so skipped
        oc_message("msg_4", "assistant", 1003, [{"type": "step-start"}, {"type": "reasoning", "text": "Maybe the lexer"}],
                   modelID="claude-sonnet-4-5", error={"name": "MessageAbortedError", "data": {"message": "aborted"}}),
        oc_message("msg_5", "user", 1004, [{"type": "text", "text": "go on"}]),
    ]}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    (t,) = load_transcripts(path)
    assert [(i.kind, i.response) for i in t.items] == [
        ("user", None), ("marker", None),
        ("assistant", 0), ("tool_call", 0), ("tool_result", None), ("marker", None),
        ("marker", None), ("user", None),
    ]
    skipped, aborted, reasoning_only = (i for i in t.items if i.kind == "marker")
    assert (skipped.meta["event"], skipped.meta["name"]) == ("error", "MessageOutputLengthError")
    assert [p["type"] for p in skipped.meta["parts"]] == ["text", "step-finish"] and skipped.meta["parts"][0]["text"] == cut_off
    assert skipped.meta["tokens"] == TOKENS
    assert dict(aborted.meta) == {"event": "error", "name": "MessageAbortedError"}
    assert [p["type"] for p in reasoning_only.meta["parts"]] == ["reasoning"] and "tokens" not in reasoning_only.meta
    assert cut_off not in [i.text for i in t.items]
    result = t.items[4]
    assert (result.call_id, result.text, result.is_error) == ("toolu_y", "[Tool execution was interrupted]", True)
    assert [i.usage is not None for i in t.items if i.response is not None] == [False, True]
    assert Transcript.loads(t.dumps()).items == t.items


# --------------------------------------------------------------------------- 5. detection
def test_a_content_first_message_list_with_a_long_first_message_is_detected(tmp_path: Path):
    prompt = "You are a helpful assistant. " * 200
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"content": prompt, "role": "system"}, {"content": "hi", "role": "user"},
                                {"content": "hello", "role": "assistant"}]))
    assert detect(path).format == "openai-messages"
    (t,) = load_transcripts(path)
    assert kinds(t) == ["system", "user", "assistant"] and t.items[0].text == prompt


def test_a_list_of_other_objects_with_a_long_first_one_is_no_chat(tmp_path: Path):
    path = tmp_path / "notes.json"
    path.write_text(json.dumps([{"content": "note " * 1200, "kind": "note"}, {"content": "x", "role_hint": "user"}]))
    with pytest.raises(ImportFailure, match="unrecognised transcript format"):
        detect(path)

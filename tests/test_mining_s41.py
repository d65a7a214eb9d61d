"""Two defects of probe mining and its evaluation an outside audit found (forty-first pass).

- An edit or write tool's receipt (Pi's `Successfully replaced text in f. Changed 12 characters to 18
  characters.`, Claude Code's `File created successfully at: f`, Codex's `Success. Updated the following
  files:` and `M f`, SWE-agent's `create`) was mined as a recall fact, though all it says besides the tool's
  fixed words is what the call's own arguments state: 10 of the 15 recall probes of Pi's
  `before-compaction.jsonl`, 12 of `large-session.jsonl`, 7 of Claude Code's `b566e56e`. The wording of each
  receipt is cited in `scenarios/mining.py` (`RECEIPTS`); the counts below are JavaScript's `length` of the
  call's strings, as Pi computes them (`"🎉".length` is 2).
- `bench probes eval --labelled`: a labelled set of three or more members was never recalled, even by a mined
  probe with the very same members (the members were joined into one string that no member covers half of).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from compaction_bench.importing import load_transcripts
from compaction_bench.probes import Probe
from compaction_bench.scenarios.mining import PER_BUCKET, mine_probes
from compaction_bench.scenarios.probe_eval import asks_for
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA, bench_cli

#: What a receipt of the corpora's agents looks like (a recall answer matching one is a receipt).
RECEIPT = re.compile(
    r"^(?:Successfully replaced text in |Successfully wrote \d+ bytes to |File created successfully at: "
    r"|Success\. Updated the following files:|[AMD] \S+$|\[File: \S+ \(1 lines total\)\]\s+1:$)"
)
PI = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono"
B566 = CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure" / "b566e56e-94a7-425e-a662-d701321e27ce.jsonl"
S351 = CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure" / "351b5d6c-e802-4339-a2c5-33f48865d8bd.jsonl"


def _pi_session(path: Path, calls: list[tuple[str, dict, str]]) -> Path:
    """A Pi session file (the recorded format: a `session` line, then `message` lines) in which one user request
    is answered by one assistant message per call, each with its tool result, then a closing message."""
    stamp = iter(f"2025-11-20T10:{n // 60:02d}:{n % 60:02d}.000Z" for n in range(3600))
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}

    def message(body: dict) -> dict:
        return {"type": "message", "timestamp": next(stamp), "message": body}

    lines = [{"type": "session", "id": "s41", "timestamp": next(stamp), "cwd": "/w", "provider": "anthropic", "modelId": "m"}]
    lines.append(message({"role": "user", "content": [{"type": "text", "text": "Bump the constant and note it."}]}))
    for n, (name, args, output) in enumerate(calls):
        call = {"type": "toolCall", "id": f"call{n}", "name": name, "arguments": args}
        lines.append(message({"role": "assistant", "content": [call], "usage": usage, "stopReason": "toolUse"}))
        lines.append(message({"role": "toolResult", "toolCallId": f"call{n}", "toolName": name,
                              "content": [{"type": "text", "text": output}], "isError": False}))
    lines.append(message({"role": "assistant", "content": [{"type": "text", "text": "Done."}], "usage": usage, "stopReason": "stop"}))
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def _recall_answers(transcript: Transcript) -> list[str]:
    return [p.answer for p in mine_probes(transcript) if p.kind == "recall" and isinstance(p.answer, str)]


def test_pi_edit_and_write_receipts_are_no_recall_facts_and_other_outputs_are(tmp_path):
    old, new = "const a = 1;", "const a = 2; // 🎉"  # JavaScript lengths 12 and 18
    session = _pi_session(tmp_path / "pi.jsonl", [
        ("bash", {"command": "wc -l src/app.ts"}, "344 src/app.ts"),
        ("edit", {"path": "src/app.ts", "oldText": old, "newText": new},
         "Successfully replaced text in src/app.ts. Changed 12 characters to 18 characters."),
        ("write", {"path": "notes.md", "content": "bumped a\n"}, "Successfully wrote 9 bytes to notes.md"),
        ("edit", {"path": "src/b.ts", "oldText": "x", "newText": "y"}, "Successfully replaced text in src/b.ts."),  # Pi since 8c43a9fb
        ("bash", {"command": "git rev-parse --short HEAD"}, "a1b2c3d"),
        # counts the call does not imply: the output states something of its own, so it is asked
        ("edit", {"path": "src/c.ts", "oldText": "p", "newText": "q"},
         "Successfully replaced text in src/c.ts. Changed 40 characters to 41 characters."),
    ])
    (transcript,) = load_transcripts(session)
    recall = _recall_answers(transcript)
    assert "344 src/app.ts" in recall and "a1b2c3d" in recall
    assert "Successfully replaced text in src/c.ts. Changed 40 characters to 41 characters." in recall
    assert not [a for a in recall if a.startswith("Successfully") and "src/c.ts" not in a], recall
    # the file written is still asked as an artifact (the two edits share a question, so neither is asked)
    assert "notes.md" in {p.answer for p in mine_probes(transcript) if p.kind == "artifact"}


def _session(calls: list[tuple[str, dict, str]]) -> Transcript:
    items = [Item("sys", "system", "You are a coding agent."), Item("u1", "user", "Set the project up.", turn=0)]
    for n, (name, args, output) in enumerate(calls):
        items.append(Item(f"c{n}", "tool_call", call_id=f"k{n}", tool_name=name, arguments=json.dumps(args), response=n, turn=0))
        items.append(Item(f"r{n}", "tool_result", output, call_id=f"k{n}", turn=0))
    return Transcript("hand", tuple(items))


def test_claude_code_codex_openhands_and_swe_agent_receipts_are_no_recall_facts_unless_they_say_more():
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x = 1\n+x = 2\n*** Add File: src/new.py\n+y = 3\n*** End Patch"
    transcript = _session([
        ("Write", {"file_path": "/p/docs/a.md", "content": "# A\n"}, "File created successfully at: /p/docs/a.md"),
        ("Edit", {"file_path": "/p/b.md", "old_string": "x", "new_string": "y"}, "The file /p/b.md has been updated successfully."),
        ("Edit", {"file_path": "/p/c.md", "old_string": "x", "new_string": "y", "replace_all": True},
         "The file /p/c.md has been updated. All occurrences were successfully replaced."),
        ("apply_patch", {"input": patch}, "Success. Updated the following files:\nA src/new.py\nM src/a.py\n"),
        ("str_replace_editor", {"command": "create", "path": "/workspace/app.py", "file_text": "print(1)\n"},
         "File created successfully at: /workspace/app.py"),
        ("create", {"command": "create reproduce.py\n"},
         "[File: /repo/reproduce.py (1 lines total)]\n1:\n(Open file: /repo/reproduce.py)\n(Current directory: /repo)\nbash-$"),
        ("Bash", {"command": "cat VERSION"}, "2.4.1"),
        # a receipt that says more than the call: a snippet of the file around the edit
        ("Edit", {"file_path": "/p/d.md", "old_string": "b", "new_string": "c"},
         "The file /p/d.md has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n     1→a\n     2→c"),
        # and one that does not: bash's warning for a here-document without its delimiter (the command ran; session 42:
        # before, the warning made the receipt a recall fact, 5 of the corpus's Codex probes)
        ("shell", {"command": ["bash", "-lc", f"apply_patch <<'PATCH'\n{patch}"]},
         "bash: line 9: warning: here-document at line 1 delimited by end-of-file (wanted `PATCH')\n"
         "Success. Updated the following files:\nM src/a.py"),
    ])
    recall = _recall_answers(transcript)
    assert "2.4.1" in recall
    assert [a for a in recall if RECEIPT.search(a.split("\n")[0])] == [], recall
    assert any(a.startswith("The file /p/d.md has been updated. Here's") for a in recall), recall
    assert not any("here-document" in a for a in recall), recall


@pytest.mark.corpora
@pytest.mark.parametrize("path", [PI / "before-compaction.jsonl", PI / "large-session.jsonl", B566], ids=lambda p: p.name[:20])
def test_recorded_sessions_mine_no_receipt_as_a_recall_fact_and_keep_fifteen(path):
    """The three files of the audit: their recall probes are facts, and there are as many as before (3 x PER_BUCKET):
    the family takes the next short outputs in their place, as for any other output it leaves out."""
    (transcript,) = load_transcripts(path)
    recall = _recall_answers(transcript)
    assert [a for a in recall if RECEIPT.search(a)] == []
    assert len(recall) == 3 * PER_BUCKET


@pytest.mark.corpora
def test_a_codex_patch_summary_line_is_no_recall_fact():
    """`M opk/cli/__main__.py` of `Success. Updated the following files:` was asked as a line with a file name."""
    for path in sorted((CORPORA / "codex-rollout-jsonl").glob("*/*.jsonl")):
        for transcript in load_transcripts(path):
            assert not [a for a in _recall_answers(transcript) if re.fullmatch(r"[AMD] \S+", a)], path.name


def _set(answer: list[str]) -> Probe:
    return Probe("m", "artifact", "Which files?", answer, match="set", source_text="x")


def test_a_labelled_set_is_asked_for_by_a_probe_asking_for_half_of_its_members_or_more():
    three = ["/u/.claude/settings.json", "/u/.claude/hooks/initialize-session.ts", "/u/.claude/hooks/load-core-context.ts"]
    labelled = Probe("l", "artifact", "Which files did the assistant read?", three, match="set", source_text="x")
    assert asks_for([_set(three)], labelled)  # the very same set
    assert asks_for([_set([*three, "/u/other.md"])], labelled)  # a set that needs all of them
    assert asks_for([_set(three[:2])], labelled)  # two of three
    assert not asks_for([_set(three[:1])], labelled)  # one of three
    assert not asks_for([_set(three[:1]), _set(three[1:2])], labelled)  # one each: no probe asks for the set
    assert not asks_for([_set(["/u/a.md", "/u/b.md"])], labelled)
    pair = Probe("l", "artifact", "Which files?", ["a.py", "b/c.py"], match="set", source_text="x")
    assert asks_for([Probe("m", "artifact", "Q?", "b/c.py", source_text="x")], pair)  # one of two, as half a string


@pytest.mark.corpora
def test_the_audits_labelled_set_of_three_is_recalled_on_its_recorded_session(tmp_path):
    """The three files the assistant read for the request that begins 'Also ich habe eben gesehen, …' of Claude
    Code session 351b5d6c: the miner asks for exactly that set, so its recall is 100% (it read 0%)."""
    labels = tmp_path / "labelled.yaml"
    labels.write_text(yaml.safe_dump([{
        "id": "lab-artifact-02", "kind": "artifact", "match": "set", "source": "toolu_01YWtoknJN9YjEmdU2r8m6Kz",
        "question": "Which files did the assistant read while working on the request that begins 'Also ich habe eben gesehen…'?",
        "answer": ["/Users/pretor/.claude/settings.json", "/Users/pretor/.claude/hooks/initialize-session.ts",
                   "/Users/pretor/.claude/hooks/load-core-context.ts"],
    }]), encoding="utf-8")
    proc = bench_cli("probes", "eval", "--labelled", str(labels), str(S351), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["labelled_by_kind"]["artifact"] == 1 and data["recalled_by_kind"]["artifact"] == 1 and data["recall"] == 1.0


# --------------------------------------------------------------------------- s41, second pass: fixed acknowledgements
# of tools that edit nothing, and results paired with the call that made them

#: The fixed acknowledgements `RECEIPTS` now leaves out besides the edit and write receipts.
FIXED = re.compile(r"^(?:Transfer successful|Your thought has been logged\.|\(no output\)|.*Successfully played audio file: )")
TAU = CORPORA / "tau-bench-traj" / "sierra-research__tau-bench" / "gpt-4o-airline.json"


def _tau_call(call_id: str, name: str, args: dict) -> dict:
    function = {"arguments": json.dumps(args), "name": name}
    return {"content": None, "role": "assistant", "tool_calls": [{"function": function, "id": call_id, "type": "function"}]}


def _tau_result(call_id: str, name: str, output: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": output}


def _tau_file(path: Path, steps: list[tuple[str, str, dict, str]]) -> Path:
    """A tau-bench results file (the recorded format: a list of tasks, each with its `traj` of OpenAI chat messages)
    in which one user request is answered by a call per step, each with its result."""
    traj: list[dict] = [{"role": "system", "content": "# Airline Agent Policy\n\nYou can help users with their reservations."},
                        {"role": "user", "content": "My flight HAT045 was delayed and I want compensation, user id mei_brown_7075."}]
    for call_id, name, args, output in steps:
        traj += [_tau_call(call_id, name, args), _tau_result(call_id, name, output)]
    traj.append({"role": "assistant", "content": "Is there anything else I can help you with?"})
    path.write_text(json.dumps([{"task_id": 37, "reward": 0.0, "info": {}, "traj": traj, "trial": 0}]), encoding="utf-8")
    return path


def test_tau_bench_transfer_acknowledgement_is_no_recall_fact_and_a_certificate_it_made_is(tmp_path):
    """`transfer_to_human_agents` returns `Transfer successful` whatever it is given (tau-bench
    transfer_to_human_agents.py); `send_certificate` names the certificate it made, which the call did not say."""
    (transcript,) = load_transcripts(_tau_file(tmp_path / "tau.json", [
        ("call_1", "calculate", {"expression": "50 * 4"}, "200.0"),
        ("call_2", "send_certificate", {"user_id": "mei_brown_7075", "amount": 200},
         "Certificate certificate_3221322 added to user mei_brown_7075 with amount 200."),
        ("call_3", "transfer_to_human_agents", {"summary": "Delayed flight HAT045; the user wants a refund instead."},
         "Transfer successful"),
    ]))
    recall = _recall_answers(transcript)
    assert "Transfer successful" not in recall, recall
    assert "Certificate certificate_3221322 added to user mei_brown_7075 with amount 200." in recall, recall
    assert "200.0" in recall, recall


def test_openhands_think_acknowledgement_is_no_recall_fact_but_a_program_printing_such_words_is():
    """OpenHands' `think` answers every thought with `Your thought has been logged.`; the words are the
    acknowledgement only of the tool that words it so: a shell command's `Transfer successful` is what that program
    reported, and is asked."""
    transcript = _session([
        ("think", {"thought": "The match on a one-element tuple must not be treated as a tuple."}, "Your thought has been logged."),
        ("execute_bash", {"command": "ponyc --version"}, "0.58.9-cabe71e [release]"),
        ("Bash", {"command": "./bank transfer --to bob --amount 20"}, "Transfer successful"),
    ])
    recall = _recall_answers(transcript)
    assert "Your thought has been logged." not in recall, recall
    assert "0.58.9-cabe71e [release]" in recall and "Transfer successful" in recall, recall


def test_pi_bash_without_output_is_no_recall_fact(tmp_path):
    """Pi's `bash` says `(no output)` when the command printed nothing and exited 0 (bash.ts), as SWE-agent says
    `Your command ran successfully and did not produce any output.`, which `BOILERPLATE` already leaves out."""
    (transcript,) = load_transcripts(_pi_session(tmp_path / "pi.jsonl", [
        ("bash", {"command": "mkdir -p packages/coding-agent/docs"}, "(no output)"),
        ("bash", {"command": "git rev-parse --short HEAD"}, "a1b2c3d"),
    ]))
    recall = _recall_answers(transcript)
    assert "(no output)" not in recall, recall
    assert "a1b2c3d" in recall, recall


def _mcp(text: str, wrapped: bool = False) -> str:
    """An MCP `TextContent` as Claude Code records the ElevenLabs server's (the corpora's `Smartagent-so` sessions)."""
    content = {"type": "text", "text": text, "annotations": None, "_meta": None}
    return json.dumps({"result": content} if wrapped else content, separators=(",", ":"))


def test_elevenlabs_play_audio_acknowledgement_is_no_recall_fact_and_the_file_text_to_speech_made_is():
    made = "/Users/u/Desktop/tts_Hello_20251203_115233.mp3"
    transcript = _session([
        ("mcp__elevenlabs__text_to_speech", {"text": "Hello there", "voice_name": "Some brit Assistant"},
         _mcp(f"Success. File saved as: {made}. Voice used: Some brit Assistant", wrapped=True)),
        ("mcp__elevenlabs__play_audio", {"input_file_path": made}, _mcp(f"Successfully played audio file: {made}")),
        # a relative path is resolved (handle_input_file): still the file the call named
        ("mcp__elevenlabs__play_audio", {"input_file_path": "tts_Bye_20251203_120000.mp3"},
         _mcp("Successfully played audio file: /Users/u/Desktop/tts_Bye_20251203_120000.mp3")),
        # a file the call did not name: the output says something of its own
        ("mcp__elevenlabs__play_audio", {"input_file_path": "/Users/u/Desktop/a.mp3"},
         _mcp("Successfully played audio file: /Users/u/Desktop/b.mp3")),
    ])
    recall = _recall_answers(transcript)
    assert [a for a in recall if "Successfully played audio file" in a] == [_mcp("Successfully played audio file: /Users/u/Desktop/b.mp3")]
    assert any(made in a and "Success. File saved as" in a for a in recall), recall


def test_a_reused_call_id_pairs_each_result_with_its_own_call(tmp_path):
    """tau-bench's gpt-4o trajectories reuse a call id once its call is answered (71 times in gpt-4o-airline.json).
    Each result is asked about the call that made it, not every call with its id."""
    (transcript,) = load_transcripts(_tau_file(tmp_path / "tau.json", [
        ("call_a", "get_reservation_details", {"reservation_id": "MUGYUB"}, "Error: reservation not found"),
        ("call_b", "get_user_details", {"user_id": "mei_brown_7075"}, '{"membership": "gold", "reservations": ["MUGYUB"]}'),
        ("call_a", "calculate", {"expression": "1625 - (53 + 71 + 65)"}, "1436.0"),
    ]))
    asked = {p.answer: p.question for p in mine_probes(transcript) if p.kind == "recall"}
    assert "`calculate`" in asked.get("1436.0", ""), asked
    assert "`get_user_details`" in asked.get('{"membership": "gold", "reservations": ["MUGYUB"]}', ""), asked


def test_a_result_is_asked_about_the_call_it_answers_not_an_aborted_one_of_its_id():
    """A call left without a result (aborted: the user interrupted it) whose id a later response reuses: the result
    answers the later call, as the wire pairs them (`answered_call`), so the probe on it names that call. Paired
    first-in-first-out, it named the aborted `npm test -- --watch`, which never output anything."""
    items = (
        Item("sys", "system", "You are a coding agent."),
        Item("u1", "user", "Run the payments service's tests and tell me how many pass.", turn=0),
        Item("c2", "tool_call", call_id="cy", tool_name="Bash", arguments=json.dumps({"command": "npm test -- --watch"}), response=0, turn=0),
        Item("u3", "user", "That hangs in watch mode; run it once instead.", turn=1),
        Item("c4", "tool_call", call_id="cy", tool_name="Bash", arguments=json.dumps({"command": "npm test -- --runInBand"}), response=1, turn=1),
        Item("r5", "tool_result", "PASS src/ledger.test.ts\nTests: 41 passed, 41 total\nTime: 6.82 s", call_id="cy", turn=1),
        Item("a6", "assistant", "All 41 tests pass.", response=2, turn=1),
    )
    (recall,) = [p for p in mine_probes(Transcript("hand", items)) if p.kind == "recall"]
    assert recall.source == "r5"
    assert recall.question == "What did the `Bash` call `npm test -- --runInBand` output?"


@pytest.mark.corpora
def test_tau_bench_recall_probes_name_the_call_of_their_output_and_ask_no_transfer():
    """Of the recorded tau-bench airline file: 48 recall probes were `Transfer successful`, and 6 named another call
    than the one whose output they ask (`get_reservation_details` on `MUGYUB` "output" `Transfer successful`)."""
    for transcript in load_transcripts(TAU):
        for probe in mine_probes(transcript):
            source = transcript.by_id[probe.source]
            if probe.kind == "recall" and source.kind == "tool_result":
                assert probe.answer != "Transfer successful", transcript.id
                assert f"`{source.tool_name}`" in probe.question, (transcript.id, probe.question, source.tool_name)


@pytest.mark.corpora
@pytest.mark.parametrize("path", [
    CORPORA / "openhands-events" / "All-Hands-AI__OpenHands" / "multi_swe_bench_examples_output.jsonl",
    CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure" / "24a90d02-9724-4548-9f4f-97bcb9f93ef3.jsonl",
    CORPORA / "claude-code-jsonl" / "Smartagent-so__Personal_AI_Infrastructure" / "703e4528-dfb0-4257-a888-e10b7d3e39a8.jsonl",
], ids=lambda p: p.name[:20])
def test_recorded_sessions_ask_no_fixed_acknowledgement(path):
    """OpenHands' `think` (2 probes) and the ElevenLabs `play_audio` (9) in the sessions that held them."""
    for transcript in load_transcripts(path):
        assert [a for a in _recall_answers(transcript) if FIXED.match(a)] == [], transcript.id

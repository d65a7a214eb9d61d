"""`openhands` and `openhands-v0` tool messages settled against upstream in the faithfulness audit
(`OpenHands/software-agent-sdk@611629e6`, `All-Hands-AI/OpenHands@156d0686`): the SDK's 50,000-character
clip of a tool message's text and its error header, and V0's error-observation line and tool-result images."""

from __future__ import annotations

from compaction_bench.replay import replay
from compaction_bench.strategies.openhands import SDK_CLIP, Event, event_preview
from compaction_bench.transcript import Attachment, Item
from tests.pi_builders import Session, small_profile

HEADER = "[An error occurred during execution.]\n"  # `Observation.ERROR_MESSAGE_HEADER`, tool/schema.py L366


def _session(big: str, meta: dict | None = None) -> Session:
    """A failed call and a call with a large output, answered in one step, then a final reply."""
    s = Session()
    s.user("look around")
    s.assistant("checking", calls=[("c1", "bash", {"command": "cat missing"}), ("c2", "bash", {"command": "cat big"})])
    s.items.append(Item(id="r1", kind="tool_result", call_id="c1", tool_name="bash", text="no such file", is_error=True,
                        meta=meta or {}))
    s.result("c2", big, name="bash")
    s.assistant("done")
    return s


def _tool_texts(result) -> dict[str, str]:
    last = [r for r in result.requests if r.kind == "turn"][-1]
    return {m.tool_call_id: m.content for m in last.messages if m.role == "tool"}


def test_sdk_tool_message_is_clipped_at_50000_and_an_error_has_its_header():
    # message.py L360-365 / L471-479: each text content of a tool message over DEFAULT_TEXT_CONTENT_LIMIT
    # (50,000) goes through `maybe_truncate(text, 50_000)`: 50,000 - 113 (the notice) = 49,887 characters of
    # room, head 24,944 (rounded up), tail 24,943. schema.py L411-424: an error observation's content is the
    # header's text content, then its own.
    big = "a" * 30_000 + "b" * 30_000
    texts = _tool_texts(replay(_session(big).transcript(), "openhands", profile=small_profile(1_000_000)))
    assert texts["c1"] == HEADER + "no such file"
    assert texts["c2"] == "a" * 24_944 + SDK_CLIP + "b" * 24_943


def test_sdk_error_observation_preview_starts_with_the_header():
    # observation.py L74-83: `"".join(content_to_str(self.observation.to_llm_content))`, cut at 500.
    failed = Event(id=1, kind="observation", text="no such file", tool_name="bash", source="environment", is_error=True)
    assert event_preview(failed) == "ObservationEvent (environment)\n  Tool: bash\n  Result: " + HEADER + "no such file"


def test_v0_error_observation_gets_its_line_after_the_clip():
    # conversation_memory.py L514-517: `text = truncate_content(obs.content, max_message_chars)` then
    # `text += '\n[Error occurred in processing last action]'`; a command's output (L388-400) gets no such line.
    big = "x" * 40_000
    texts = _tool_texts(replay(_session(big).transcript(), "openhands-v0", profile=small_profile(1_000_000)))
    assert texts["c1"] == "no such file\n[Error occurred in processing last action]"
    assert texts["c2"] == "x" * 15_000 + "\n[... Observation truncated due to length ...]\n" + "x" * 15_000
    # An OpenHands recording names the observation: a failed command (`run`, a non-zero exit code) is no
    # `ErrorObservation`, whatever the error flag.
    recorded = _tool_texts(replay(_session(big, {"observation": "run"}).transcript(), "openhands-v0",
                                  profile=small_profile(1_000_000)))
    assert recorded["c1"] == "no such file"


def test_v0_sends_tool_images_only_for_ipython_and_the_interactive_browser():
    # conversation_memory.py: an IPythonRunCellObservation adds `ImageContent(image_urls=valid)` (L420-429), a
    # BrowserOutputObservation of `browse_interactive` one image (set of marks, else screenshot, L454-482); every
    # other observation's message is one text content (e.g. CmdOutputObservation L388-400, MCPObservation
    # L401-404), and the tool message keeps that content (L672-679).
    png = Attachment(mime="image/png", name="plot.png")
    jpg = Attachment(mime="image/jpeg", name="shot.jpg")
    s = Session()
    s.user("plot and look")
    s.assistant("running", calls=[("c1", "execute_ipython_cell", {"code": "plot()"}), ("c2", "browser", {"code": "goto()"}),
                                  ("c3", "str_replace_editor", {"command": "view"})])
    for call_id, tool in (("c1", "execute_ipython_cell"), ("c2", "browser"), ("c3", "str_replace_editor")):
        s.items.append(Item(id=f"r{call_id}", kind="tool_result", call_id=call_id, tool_name=tool, text="out",
                            attachments=(png, jpg)))
    s.assistant("seen")
    result = replay(s.transcript(), "openhands-v0", profile=small_profile(1_000_000))
    last = [r for r in result.requests if r.kind == "turn"][-1]
    images = {m.tool_call_id: m.attachments for m in last.messages if m.role == "tool"}
    assert images == {"c1": (png, jpg), "c2": (png,), "c3": ()}


def test_v0_renders_a_recorded_command_with_its_metadata_and_cuts_it_whole():
    # commands.py L196-204 `to_agent_observation`: prefix + content + suffix, then the working directory, the
    # Python interpreter when set, and the exit code unless -1; conversation_memory.py L399 cuts the whole text.
    metadata = {"exit_code": 1, "working_dir": "/workspace/repo", "py_interpreter_path": "", "prefix": "",
                "suffix": "\n[The command completed with exit code 1.]"}
    meta = {"observation": "run", "command_metadata": metadata}
    texts = _tool_texts(replay(_session("ok", meta).transcript(), "openhands-v0", profile=small_profile(1_000_000)))
    assert texts["c1"] == ("no such file\n[The command completed with exit code 1.]\n[Current working directory: /workspace/repo]"
                           "\n[Command finished with exit code 1]")
    assert texts["c2"] == "ok"  # no metadata recorded: the content alone
    unknown = {"observation": "run", "command_metadata": {**metadata, "exit_code": -1, "py_interpreter_path": "/usr/bin/python"}}
    texts = _tool_texts(replay(_session("ok", unknown).transcript(), "openhands-v0", profile=small_profile(1_000_000)))
    assert texts["c1"].endswith("[Current working directory: /workspace/repo]\n[Python interpreter: /usr/bin/python]")
    # The 30,000-character cut keeps 15,000 of each end of the rendered text: the metadata lines are the tail's.
    long = {"observation": "run", "command_metadata": metadata}
    s = _session("ok", long)
    s.items[-3] = Item(id="r1", kind="tool_result", call_id="c1", tool_name="bash", text="y" * 40_000, is_error=True, meta=long)
    text = _tool_texts(replay(s.transcript(), "openhands-v0", profile=small_profile(1_000_000)))["c1"]
    assert text.endswith("[Command finished with exit code 1]") and text.startswith("y" * 15_000)
    assert len(text) == 30_000 + len("\n[... Observation truncated due to length ...]\n")


def test_the_importer_keeps_a_recorded_commands_metadata():
    import json

    from compaction_bench.importing import load_transcripts
    from tests.conftest import CORPORA

    path = CORPORA / "openhands-events/All-Hands-AI__OpenHands/multi_swe_bench_examples_output.jsonl"
    raw = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for event in json.loads(line).get("history") or []:
            if event.get("observation") == "run" and isinstance((event.get("extras") or {}).get("metadata"), dict):
                raw.append(event["extras"]["metadata"])
    kept = [i.meta["command_metadata"] for t in load_transcripts(path) for i in t.items if "command_metadata" in i.meta]
    assert raw and len(kept) == len(raw)
    # all of `CmdOutputMetadata`'s fields (commands.py@156d0686 L25-35): V0's `str(event)` shows them all
    fields = ("exit_code", "pid", "username", "hostname", "working_dir", "py_interpreter_path", "prefix", "suffix")
    assert all(k == {f: m[f] for f in fields if f in m} for k, m in zip(kept, raw, strict=True))
    assert any(k.get("hostname") for k in kept) and any(k.get("username") for k in kept)


def test_a_think_calls_text_is_the_responses_content_not_the_joined_thought():
    # V0 sends a tool call's assistant text from the model response's `content`; a `think` action's recorded
    # `args.thought` is that content and the tool's own thought joined (`combine_thought`,
    # function_calling.py@156d0686 L49-56): event 47 of the corpus's ponyc-4595 run
    import json

    from compaction_bench.importing import load_transcripts
    from tests.conftest import CORPORA

    path = CORPORA / "openhands-events/All-Hands-AI__OpenHands/multi_swe_bench_examples_output.jsonl"
    sessions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    transcripts = load_transcripts(path)
    assert len(transcripts) == len(sessions)
    checked = 0
    for session, transcript in zip(sessions, transcripts, strict=True):
        items = {i.id: i for i in transcript.items}
        for event in session.get("history") or []:
            if event.get("action") == "think":
                content = event["tool_call_metadata"]["model_response"]["choices"][0]["message"]["content"]
                assert event["args"]["thought"].startswith(content + "\n")
                assert items[f"event-{event['id']}:thought"].text == content
                checked += 1
    assert checked == 2

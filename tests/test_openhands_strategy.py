"""`openhands` (SDK preset 80/4) and `openhands-v0` (V0 server pipeline) against docs/specs/openhands.md."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from compaction_bench.llm import LLMResult
from compaction_bench.profiles import ModelProfile, get_profile
from compaction_bench.provider import ProviderError
from compaction_bench.replay import replay
from compaction_bench.strategies.openhands import (
    SDK_CLIP,
    Event,
    OpenHands,
    OpenHandsV0,
    event_preview,
    manipulation_indices,
    sdk_max_output,
    sdk_truncate,
    v0_max_output,
)
from compaction_bench.templates import PromptSet
from compaction_bench.transcript import Attachment, Item, Transcript
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile
from tests.test_gemini_cli import strategy_pair_errors


def _ev(n: int, kind: str, **kw) -> Event:
    return Event(id=n, kind=kind, **kw)


def test_manipulation_indices_keep_batches_calls_and_thinking_loops():
    # §4.4: two parallel calls of one response, then their observations.
    view = [_ev(0, "system"), _ev(1, "message", source="user"), _ev(2, "action", response=1, call_id="a"),
            _ev(3, "action", response=1, call_id="b"), _ev(4, "observation", call_id="a"), _ev(5, "observation", call_id="b"),
            _ev(6, "message")]
    assert manipulation_indices(view) == [0, 1, 2, 6, 7]
    thought = (Item(id="t", kind="reasoning", text="hm"),)
    loop = [_ev(0, "message", source="user"), _ev(1, "action", response=1, call_id="a", thinking=thought),
            _ev(2, "observation", call_id="a"), _ev(3, "action", response=2, call_id="b"), _ev(4, "observation", call_id="b"),
            _ev(5, "action", response=3, call_id="c", thinking=thought), _ev(6, "observation", call_id="c"), _ev(7, "message")]
    assert manipulation_indices(loop) == [0, 1, 5, 7, 8]


def _steps(n: int, chars: int = 40) -> Session:
    s = Session()
    s.user("Refactor the billing module; keep the public API unchanged.")
    for k in range(n):
        s.assistant(f"step {k}", calls=[(f"c{k}", "execute_bash", {"command": f"run-secret-arg-{k}"})])
        s.result(f"c{k}", f"result {k} " + "r" * chars, name="execute_bash")
    s.assistant("finished")
    return s


def test_sdk_events_trigger_window_and_preview_prompt():
    # 1 user + 2 events per step: 81 > 80 events before step 40. events_from_tail = 80//2 - 4 - 1 = 35, so the
    # naive end 46 moves to the next valid index 47 and the start 4 to 5 (an action starts at every odd index).
    result = replay(_steps(45, chars=700).transcript(), "openhands", profile="64k")
    first = result.compactions[0]
    assert first.step == 40 and first.details["reasons"] == ["EVENTS"]
    assert first.details["forgotten_events"] == 42 and first.details["summary_offset"] == 5
    assert len(first.after) == 81 - 42 + 1
    assert first.after[5].role == "user" and first.after[5].content == first.summary
    assert [m.role for m in first.after[:5]] == ["user", "assistant", "tool", "assistant", "tool"]
    request = next(r for r in result.requests if r.kind == "summary")
    assert len(request.messages) == 1 and request.messages[0].role == "user"
    prompt = request.messages[0].content
    assert prompt.count("<EVENT>") == 42 and "<EVENT id=" not in prompt
    assert "ActionEvent (agent)" in prompt and "run-secret-arg-3" not in prompt  # previews carry no arguments
    # 500-character previews: "result 3 " and 491 r's, then upstream's "..." (`observation.py@611629e6 L78-82`;
    # the spec's "[...]" was the wrong marker)
    assert ("r" * 501) not in prompt and "  Result: result 3 " + "r" * 491 + "...\n</EVENT>" in prompt
    assert strategy_pair_errors(result) == 0


def test_sdk_tokens_reason_is_hard_and_targets_half():
    # max_tokens 3,000: TOKENS fires (HARD); the forgotten prefix is the shortest one whose removal
    # reduces the view by more than total - 1,500 tokens (§4.3).
    result = replay(_steps(12, chars=1_200).transcript(), "openhands", profile="64k", options={"max_tokens": 3_000})
    first = result.compactions[0]
    assert "TOKENS" in first.details["reasons"]
    assert first.tokens_after < first.tokens_before
    assert first.tokens_before > 3_000
    assert strategy_pair_errors(result) == 0


def test_v0_count_only_cut_loses_call_and_result_halves():
    # 121 > 120 events before step 60. head = view[:4] = user, a0, o0, a1; tail = 120//2 - 4 - 1 = 55 events,
    # so the kept tail starts at o32 whose action a32 was forgotten, and a1's observation o1 was forgotten (§5.1).
    result = replay(_steps(62).transcript(), "openhands-v0", profile="64k")
    first = result.compactions[0]
    assert first.step == 60 and first.trigger == "condensation"
    assert first.details["orphaned_calls"] == ["c1"] and first.details["orphaned_results"] == ["c32"]
    # V0 message building drops both halves silently (§7): no wire error, but the items are lost.
    after = first.after
    assert not any(m.tool_call_id == "c32" for m in after)
    assert not any(c.id == "c1" for m in after for c in m.tool_calls)
    call_1 = next(i.id for i in result.transcript.items if i.kind == "tool_call" and i.call_id == "c1")
    result_32 = next(i.id for i in result.transcript.items if i.kind == "tool_result" and i.call_id == "c32")
    assert call_1 in first.dropped_ids and result_32 in first.dropped_ids
    # The summary sits at keep_first in the view; a1 (pending forever) is not emitted, so it is message 3.
    assert [m.role for m in after[:4]] == ["user", "assistant", "tool", "user"] and after[3].content == first.summary
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    assert "<PREVIOUS SUMMARY>\nNo events summarized\n</PREVIOUS SUMMARY>" in prompt and "<EVENT id=" in prompt
    assert strategy_pair_errors(result) == 0


def test_v0_conversation_window_on_overflow():
    # A context-window error → CondensationRequestAction → ConversationWindowCondenser: system and first user
    # message kept, the newest half of the rest, leading observations skipped, no summary (§2.3, §5.2).
    result = replay(_steps(30, chars=2_000).transcript(), "openhands-v0", profile=small_profile(8_000))
    window = [c for c in result.compactions if c.trigger == "conversation-window"]
    assert window and all(c.summary is None for c in window)
    assert window[0].after[0].content.startswith("Refactor the billing module")
    assert window[0].after[1].role == "assistant"
    assert strategy_pair_errors(result) == 0


def test_preview_forms():
    # SDK `str(event)` at 611629e6. Action and observation keep 500 characters and add "..." (action.py L150-154,
    # observation.py L78-82; this test asserted the spec's "[...]", which upstream does not write).
    action = Event(id=1, kind="action", text="t" * 600, tool_name="execute_bash", arguments='{"command":"ls"}')
    assert event_preview(action) == "ActionEvent (agent)\n  Thought: " + "t" * 500 + "...\n  Action: execute_bash"
    result = Event(id=2, kind="observation", text="o" * 501, tool_name="execute_bash", source="environment")
    assert event_preview(result) == "ObservationEvent (environment)\n  Tool: execute_bash\n  Result: " + "o" * 500 + "..."
    # Messages and the generic form (summaries) cut only a text over 500 characters, to 497 and "..." (message.py
    # L135-136, base.py L98-99): 500 characters stay whole.
    summary = Event(id=3, kind="summary", text="s" * 600, source="environment")
    assert event_preview(summary) == "CondensationSummaryEvent (environment)\n  user: " + "s" * 497 + "..."
    assert event_preview(replace(summary, text="s" * 500)).endswith("user: " + "s" * 500)
    user = Event(id=4, kind="message", text="u" * 500, source="user")
    assert event_preview(user) == "MessageEvent (user)\n  user: " + "u" * 500
    # A model message with thinking names the count of blocks after its text (L142-146); one without text
    # content shows "[no text content]" and no count (L151-152).
    thought = (Item(id="t1", kind="reasoning", text="hm"), Item(id="t2", kind="reasoning", text="so"))
    reply = Event(id=5, kind="message", text="done", thinking=thought)
    assert event_preview(reply) == "MessageEvent (agent)\n  assistant: done [Thinking blocks: 2]"
    assert event_preview(replace(reply, text="")) == "MessageEvent (agent)\n  assistant: [no text content]"
    # The system prompt event: source "agent", its text cut like an action's, and its tool count (system.py L87-104).
    system = Event(id=0, kind="system", text="p" * 501, source="environment")
    assert event_preview(system, tools=3) == "SystemPromptEvent (agent)\n  System: " + "p" * 500 + "...\n  Tools: 3 available"


def test_sdk_truncate_follows_maybe_truncate():
    # `maybe_truncate` (utils/truncate.py@611629e6 L74-117): no limit (None or 0) keeps the text; a limit the
    # 113-character notice fills returns the notice cut to the limit; else head (rounded up) + notice + tail.
    text = "abcdefghij" * 20
    assert len(SDK_CLIP) == 113
    assert sdk_truncate(text, None) == text and sdk_truncate(text, 0) == text and sdk_truncate(text, 200) == text
    assert sdk_truncate(text, 50) == SDK_CLIP[:50]
    assert sdk_truncate(text, 113) == SDK_CLIP
    assert sdk_truncate(text, 120) == "abcd" + SDK_CLIP + "hij"  # 7 characters of room: head 4, tail 3


def test_sdk_on_a_real_session_with_thinking_keeps_pairs():
    path = CORPORA / "pi-session-jsonl" / "badlogic__pi-mono" / "large-session.jsonl"
    if not path.exists():
        return
    result = replay(path, "openhands", profile="64k")
    assert result.compactions
    assert strategy_pair_errors(result) == 0


def test_sdk_hard_reset_when_one_thinking_loop_spans_the_view():
    # §4.4/§4.6: the first action carries thinking, so every later action and observation belongs to one tool
    # loop and no cut exists after keep_first; TOKENS is HARD, so everything is summarised at offset 0. An Anthropic
    # model: only its thinking blocks make a loop (`test_only_anthropic_thinking_blocks_make_a_tool_loop`).
    s = Session()
    s.user("Migrate the database schema.")
    s.response += 1
    s._add(kind="reasoning", text="think first", response=s.response)
    s._add(kind="tool_call", call_id="c0", tool_name="execute_bash", arguments='{"command":"ls"}', response=s.response)
    s.result("c0", "out 0 " + "w " * 1_000, name="execute_bash")
    for k in range(1, 8):
        s.assistant(calls=[(f"c{k}", "execute_bash", {"command": f"step {k}"})])
        s.result(f"c{k}", f"out {k} " + "w " * 1_000, name="execute_bash")
    s.assistant("done")
    result = replay(s.transcript(), "openhands", profile="claude-sonnet", options={"max_tokens": 3_000})
    first = result.compactions[0]
    assert first.trigger == "hard-reset" and first.details["summary_offset"] == 0
    assert "TOKENS" in first.details["reasons"]
    assert [m.role for m in first.after][0] == "user" and first.after[0].content == first.summary
    assert first.kept_ids == ()
    assert strategy_pair_errors(result) == 0


# ---------------------------------------------------------------- driven directly, with hand-built events
@dataclass
class _Context:
    """The engine's side of the protocol: summaries are "S1", "S2", …; tokens are characters / 4."""

    profile: ModelProfile = field(default_factory=lambda: get_profile("64k"))
    prompts: list[str] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    _templates: PromptSet = field(default_factory=PromptSet)

    def summarize(self, request: Any, *, purpose: str = "summary", instructions: str | None = None) -> LLMResult:
        self.prompts.append(request.messages[0].content)
        return LLMResult(text=f"S{len(self.prompts)}", model="test")

    def record_compaction(self, **kw: Any) -> None:
        self.compactions.append(kw)

    def render_prompt(self, template: str, **variables: Any) -> str:
        return self._templates.render(template, **variables)

    def count_tokens(self, messages: Any) -> int:
        return sum(len(m.content) // 4 for m in messages)


_OVERFLOW = ProviderError("openai", 400, "context_length_exceeded", "context length exceeded")


def _feed(strategy: Any, steps: int, system: bool = False, response: int = 0) -> None:
    """(system prompt,) a user message, then `steps` responses of one call each and their results."""
    if system:
        strategy.on_input(Item(id="sys", kind="system", text="You are an agent."))
    strategy.on_user_turn(Item(id="u", kind="user", text="Investigate the flaky test."))
    for k in range(steps):
        strategy.on_response([Item(id=f"t{k}", kind="assistant", text=f"step {k}", response=response + k),
                              Item(id=f"c{k}", kind="tool_call", call_id=f"c{k}", tool_name="bash", arguments="{}",
                                   response=response + k)], None, True)
        strategy.on_input(Item(id=f"r{k}", kind="tool_result", call_id=f"c{k}", tool_name="bash", text=f"out {k}"))


def test_sdk_request_on_a_short_view_goes_to_the_hard_reset():
    # §4.3 / llm_summarizing_condenser.py@611629e6 L269-308: REQUEST's events_from_tail = len(view)//2 - 4 - 1 is
    # not clamped. 9 events (user + 4 steps): -1, so the naive end 10 lies past the view, `find_next` raises,
    # get_condensation fails, and REQUEST is HARD: the hard context reset summarises all 9 events at offset 0.
    ctx = _Context()
    sdk = OpenHands(ctx)
    _feed(sdk, 4)
    assert sdk.on_overflow(_OVERFLOW)
    request = sdk.request()
    [reset] = ctx.compactions
    assert reset["trigger"] == "hard-reset" and reset["details"] == {"reasons": ["REQUEST"], "forgotten_events": 9, "summary_offset": 0}
    assert ctx.prompts[0].count("<EVENT>") == 9
    assert [(m.role, m.content) for m in request.messages] == [("user", "S1")]
    # 10 events (system prompt + user + 4 steps): events_from_tail 0, the end is the view's end, the start the
    # first valid index from 4 (before the second action), so a normal condensation of the 6 events after it.
    ctx = _Context()
    sdk = OpenHands(ctx)
    _feed(sdk, 4, system=True)
    sdk.on_overflow(_OVERFLOW)
    request = sdk.request()
    [condensation] = ctx.compactions
    assert condensation["trigger"] == "condensation"
    assert condensation["details"] == {"reasons": ["REQUEST"], "forgotten_events": 6, "summary_offset": 4}
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "user"]


def test_sdk_system_prompt_preview_in_a_hard_reset():
    # The hard reset summarises the system prompt event too, in its `System:`/`Tools:` form; the replay knows the
    # tools the log called (here one, "bash").
    ctx = _Context()
    sdk = OpenHands(ctx)
    _feed(sdk, 3, system=True)  # 8 events: 8//2 - 5 < 0
    sdk.on_overflow(_OVERFLOW)
    sdk.request()
    assert ctx.compactions[0]["trigger"] == "hard-reset"
    assert "<EVENT>\nSystemPromptEvent (agent)\n  System: You are an agent.\n  Tools: 1 available\n</EVENT>" in ctx.prompts[0]


def test_v0_parallel_batch_split_by_the_cut_is_sent_whole():
    # V0 keeps the whole model response as the pending assistant message (conversation_memory.py@156d0686
    # L258-270: text and every tool call of the response) and sends it with all results once every call has
    # one (L140-150). Ids: user 0; steps c0..c31 at 1..64; the parallel response's actions x1 65, x2 66 and
    # results 67, 68; steps d0..d25 at 69..120. At 121 events the cut forgets view[4:66] (ids 4..65, so x1's
    # action) and keeps the 55 newest events from x2's action on (§5.1).
    s = Session()
    s.user("Compare the two config files.")
    for k in range(32):
        s.assistant(f"step {k}", calls=[(f"c{k}", "read", {"path": f"f{k}"})])
        s.result(f"c{k}", f"content {k}")
    s.assistant("two reads", calls=[("x1", "read", {"path": "a.toml"}), ("x2", "read", {"path": "b.toml"})])
    s.result("x1", "r1")
    s.result("x2", "r2")
    for k in range(26):
        s.assistant(f"more {k}", calls=[(f"d{k}", "read", {"path": f"g{k}"})])
        s.result(f"d{k}", f"more content {k}")
    s.assistant("finished")
    result = replay(s.transcript(), "openhands-v0", profile="64k")
    first = result.compactions[0]
    assert first.details["forgotten_range"] == [4, 65]
    # the head's c1 (its result was forgotten) is lost; nothing of the split batch is
    assert first.details["orphaned_calls"] == ["c1"] and first.details["orphaned_results"] == []
    after = first.after
    n = next(i for i, m in enumerate(after) if m.tool_calls and m.tool_calls[0].id == "x1")
    assert after[n].content == "two reads" and [c.id for c in after[n].tool_calls] == ["x1", "x2"]
    assert [(m.role, m.tool_call_id, m.content) for m in after[n + 1: n + 3]] == [("tool", "x1", "r1"), ("tool", "x2", "r2")]
    x1_call = next(i.id for i in result.transcript.items if i.kind == "tool_call" and i.call_id == "x1")
    assert x1_call in after[n].item_ids and x1_call not in first.dropped_ids
    assert strategy_pair_errors(result) == 0


def test_v0_batch_with_a_forgotten_result_is_lost_whole():
    # The same rule the other way: when one call of the response has no result in the view, the pending message
    # never completes, so the kept call and its kept result are not sent either (L140-150).
    ctx = _Context()
    v0 = OpenHandsV0(ctx)
    v0.on_user_turn(Item(id="u", kind="user", text="go"))
    v0.on_response([Item(id="t", kind="assistant", text="two reads", response=0),
                    Item(id="k1", kind="tool_call", call_id="c1", tool_name="read", arguments="{}", response=0),
                    Item(id="k2", kind="tool_call", call_id="c2", tool_name="read", arguments="{}", response=0)], None, True)
    v0.on_input(Item(id="r1", kind="tool_result", call_id="c1", tool_name="read", text="r1"))
    v0.on_input(Item(id="r2", kind="tool_result", call_id="c2", tool_name="read", text="r2"))
    view = v0.view()
    assert [(e.kind, e.call_id) for e in view] == [("message", ""), ("action", "c1"), ("action", "c2"),
                                                  ("observation", "c1"), ("observation", "c2")]
    whole = [(m.role, m.content, [c.id for c in m.tool_calls], m.tool_call_id) for m in v0.messages(view)]
    assert whole == [("user", "go", [], None), ("assistant", "two reads", ["c1", "c2"], None),
                     ("tool", "r1", [], "c1"), ("tool", "r2", [], "c2")]
    # x1's action forgotten, both results kept: the whole response is sent, text and both calls
    assert [(m.role, m.content, [c.id for c in m.tool_calls]) for m in v0.messages([view[0], view[2], view[3], view[4]])][1] == \
        ("assistant", "two reads", ["c1", "c2"])
    # c1's action and result forgotten: c2's action and result are lost with them
    assert [m.role for m in v0.messages([view[0], view[2], view[4]])] == ["user"]


def _browsing(steps: int) -> Session:
    s = Session()
    s.user("Find the release date on the project site.")
    for k in range(steps):
        s.assistant(calls=[(f"c{k}", "browser", {"url": f"http://x/{k}"})])
        s.result(f"c{k}", f"page {k} " + "p" * 50, name="browser")
    s.assistant("done")
    return s


def test_v0_masked_browser_outputs_are_not_summarised():
    # V0 pipeline (§5.9): BrowserOutputCondenser(2) turns all but the two newest browser outputs into
    # AgentCondensationObservations before LLMSummarizingCondenser runs, which leaves those out of the forgotten
    # events and their id range and takes one at view[keep_first] as the previous summary
    # (llm_summarizing_condenser.py@156d0686 L59-69). Ids: user 0, action k at 1+2k, output k at 2+2k. At 121
    # events the middle is view[4:66], ids 4..65: masked outputs 1..31 and actions 2..32.
    result = replay(_browsing(62).transcript(), "openhands-v0", profile="64k")
    first = next(c for c in result.compactions if c.trigger == "condensation")
    prompt = next(r for r in result.requests if r.kind == "summary").messages[0].content
    assert "<PREVIOUS SUMMARY>\nVisited URL http://x/1\nContent omitted\n</PREVIOUS SUMMARY>" in prompt
    assert prompt.count("<EVENT id=") == 31 and prompt.count("Content omitted") == 1
    assert "<EVENT id=5>" in prompt and "<EVENT id=65>" in prompt and "<EVENT id=4>" not in prompt
    assert first.details["forgotten_range"] == [5, 65]
    # Output 1 (id 4) stays, masked, after the summary at keep_first. Every masked output is a user message and its
    # call is never answered, so the head is the task, masked output 0, the summary, masked output 1, each user
    # message after the first with V0's "\n\n" before a user message that follows one (conversation_memory.py
    # L167-182).
    after = first.after
    assert [(m.role, m.content) for m in after[:4]] == [
        ("user", "Find the release date on the project site."), ("user", "\n\nVisited URL http://x/0\nContent omitted"),
        ("user", "\n\n" + first.summary), ("user", "\n\nVisited URL http://x/1\nContent omitted")]
    assert strategy_pair_errors(result) == 0


def test_v0_user_message_after_a_user_message_gets_a_blank_line():
    # `_apply_user_message_formatting` (conversation_memory.py@156d0686 L167-182): "\n\n" before the text of a
    # user message whose previous message is a user message; not before the first, nor after another role.
    s = Session()
    s.user("First instruction.")
    s.user("Second instruction.")
    s.assistant("ok")
    s.user("Third.")
    s.assistant("ok again")
    result = replay(s.transcript(), "openhands-v0", profile="64k")
    first, last = [r.messages for r in result.requests if r.kind == "turn"][:2]
    assert [(m.role, m.content) for m in first] == [("user", "First instruction."), ("user", "\n\nSecond instruction.")]
    assert [(m.role, m.content) for m in last][2:] == [("assistant", "ok"), ("user", "Third.")]


def test_v0_conversation_window_skips_a_leading_summary_with_the_observations():
    # conversation_window_condenser.py@156d0686 L114-124: the recent slice's leading Observations are dropped, and
    # the summary is an AgentCondensationObservation. max_size 12 (keep_first 4 < 12//2): ids system 0, user 1,
    # step k's action 2+2k and result 3+2k. At 14 events (after step 5) the summariser keeps view[:4] and the
    # 12//2 - 4 - 1 = 1 newest event, r5 (id 13): view = system, user, a0, r0, summary, r5. An overflow then
    # runs the window: essentials system and user, num_recent = (6 - 2)//2 = 2, the slice is [summary, r5],
    # both skipped: a0, r0 and r5 are forgotten and the view is system, user, summary (at min(4, 2)).
    ctx = _Context()
    v0 = OpenHandsV0(ctx, OpenHandsV0.parse_options({"max_size": 12}))
    _feed(v0, 6, system=True)
    v0.request()
    assert [e.id for e in v0.view()] == [0, 1, 2, 3, -1, 13]
    v0.on_overflow(_OVERFLOW)
    request = v0.request()
    window = ctx.compactions[-1]
    assert window["trigger"] == "conversation-window" and window["summary"] is None
    assert [e.id for e in v0.view()] == [0, 1, -1] and request.meta["view_events"] == 3
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You are an agent."), ("user", "Investigate the flaky test."), ("user", "\n\nS1")]


def test_v0_user_images_are_sent_after_image_labels():
    """V0 sends a user message's images (All-Hands-AI/OpenHands@156d0686):

    - `ConversationMemory._process_action` (openhands/memory/conversation_memory.py L303-322)::

          content = [TextContent(text=action.content or '')]
          if action.image_urls:
              if role == 'user':
                  for idx, url in enumerate(action.image_urls):
                      # Only add descriptive text if vision is active
                      if vision_is_active:
                          content.append(TextContent(text=f'Image {idx + 1}:'))
                      content.append(ImageContent(image_urls=[url]))

    - `Message._list_serializer` (openhands/core/message.py L97-129) sends an ImageContent when `vision_enabled`,
      and `Session.dispatch` (openhands/server/session/session.py L355-371) refuses a user message with images
      unless `llm.vision_is_active()`: a message with images that is in the history always goes with vision on;
    - `MessageAction.__str__` (openhands/events/action/message.py L31-40), what the summariser reads of a
      forgotten message, adds "\\nIMAGE_URL: {url}" per image; its source, an `EventSource` member in an
      f-string, shows as "EventSource.USER" (Python 3.12, which OpenHands 0.62 runs on).

    The web client puts image files in `image_urls` and uploads other files (chat-interface.tsx L186-211), so a
    PDF attachment is no image of the message. Expected: text, "Image 1:", "Image 2:" (joined as V0's string form
    joins text parts), the two images attached; the PDF not."""
    png, jpeg = Attachment("image/png", "data:image/png;base64,AAA", 4_000), Attachment("image/jpeg", "b.jpg", 9_000, "file:///b.jpg")
    pdf = Attachment("application/pdf", "spec.pdf", 20_000)
    ctx = _Context()
    v0 = OpenHandsV0(ctx, OpenHandsV0.parse_options({"max_size": 12}))
    v0.on_user_turn(Item(id="u", kind="user", text="Investigate the flaky test."))
    v0.on_user_turn(Item(id="shots", kind="user", text="It fails like this:", attachments=(png, pdf, jpeg)))
    [user, shots] = v0.request().messages
    assert (user.content, user.attachments) == ("Investigate the flaky test.", ())
    # a user message after a user message gets "\n\n" in its first text part (conversation_memory.py L167-182)
    assert shots.content == "\n\nIt fails like this:\nImage 1:\nImage 2:" and shots.attachments == (png, jpeg)
    assert shots.item_ids == ("shots",)
    # Forgotten by the summariser (12 events: keep_first 4, then the middle): its <EVENT> names both images' URLs.
    for k in range(6):
        v0.on_response([Item(id=f"c{k}", kind="tool_call", call_id=f"c{k}", tool_name="bash", arguments="{}", response=k)], None, True)
        v0.on_input(Item(id=f"r{k}", kind="tool_result", call_id=f"c{k}", tool_name="bash", text=f"out {k}"))
    v0.on_user_turn(Item(id="more", kind="user", text="And this one:", attachments=(png,)))
    for k in range(6, 12):
        v0.on_response([Item(id=f"c{k}", kind="tool_call", call_id=f"c{k}", tool_name="bash", arguments="{}", response=k)], None, True)
        v0.on_input(Item(id=f"r{k}", kind="tool_result", call_id=f"c{k}", tool_name="bash", text=f"out {k}"))
    v0.request()
    assert ("<EVENT id=14>\n**MessageAction** (source=EventSource.USER)\nCONTENT: And this one:\nIMAGE_URL: data:image/png;base64,AAA\n</EVENT>"
            in ctx.prompts[0])


def _reasoning_session(reasoning: bool) -> Transcript:
    """60 tool steps, a reasoning item on every sixth response when `reasoning`."""
    items = [Item(id="u", kind="user", text="task", turn=0)]
    for k in range(60):
        if reasoning and k % 6 == 0:
            items.append(Item(id=f"t{k}", kind="reasoning", text="thinking...", response=k + 1, turn=0))
        items.append(Item(id=f"c{k}", kind="tool_call", call_id=f"c{k}", tool_name="execute_bash", arguments='{"command":"ls"}',
                          response=k + 1, turn=0))
        items.append(Item(id=f"o{k}", kind="tool_result", call_id=f"c{k}", tool_name="execute_bash", text="out " * 20, turn=0))
    items.append(Item(id="end", kind="assistant", text="done", response=61, turn=0))
    return Transcript(id="x", items=tuple(items))


def test_only_anthropic_thinking_blocks_make_a_tool_loop():
    """The SDK's `ToolLoopAtomicityProperty` keys on `thinking_blocks`, which litellm fills only for Anthropic models;
    an OpenAI model's reasoning forms no loop. Every reasoning item started one here, moving the cut on OpenAI profiles
    (42 events forgotten without reasoning, 36 with)."""
    def first(reasoning: bool, profile: str) -> tuple[int, int]:
        (compaction, *_) = replay(_reasoning_session(reasoning), "openhands", profile=profile).compactions
        return compaction.details["forgotten_events"], compaction.details["summary_offset"]

    assert first(True, "64k") == first(False, "64k")  # gpt-5 at 64k: reasoning changes nothing
    claude = get_profile("claude-sonnet").with_window("claude-64k", 64_000, "Claude at a 64k window")
    assert first(True, claude) != first(False, claude)  # Anthropic thinking blocks do hold a loop together


def test_every_request_asks_for_the_max_output_litellms_map_gives():
    """Both send the LLM's `max_output_tokens` on every call, the condenser's copy too; unset, it comes from the
    model's entry in litellm's map. SDK (`llm.py@611629e6 L2402-2497`): 64,000 for claude-3-7-sonnet,
    claude-sonnet-4* and kimi-k2-thinking; else the map's max output, halved when it is at least the input window;
    none for a model the map does not describe; at most 100,000 for o3. V0 (`llm.py@156d0686 L513-535`): its own
    64,000 list, else the map's max output. A study window stands for a model on a server of its own, which the
    map does not describe: nothing is sent, as before."""
    opus_41 = get_profile("anthropic.claude-opus-4-1-20250805-v1:0")  # 200,000 window, 32,000 output
    cases = {
        "64k": (None, None), "anthropic.claude-sonnet-4-20250514-v1:0": (64_000, 64_000), "openai/o3-mini": (100_000, 100_000),
        "deepseek/deepseek-chat": (8_192, 8_192), "gpt-5": (128_000, 128_000),
    }
    for name, expected in cases.items():
        assert (sdk_max_output(get_profile(name)), v0_max_output(get_profile(name))) == expected, name
    assert (sdk_max_output(opus_41), v0_max_output(opus_41)) == (32_000, 32_000)
    half = replace(opus_41, context_window=32_000)  # its max output is not below its input window: the SDK halves it
    assert (sdk_max_output(half), v0_max_output(half)) == (16_000, 32_000)
    # On Claude Opus 4.1 (input + max_tokens over the window is refused) shrunk to 40,000: a request of more than
    # 8,000 tokens asking for 32,000 does not fit, the SDK condenses on the error (REQUEST, §2.3) and sends again.
    small = replace(opus_41, context_window=40_000)
    for strategy in ("openhands", "openhands-v0"):
        result = replay(_steps(30, chars=2_000).transcript(), strategy, profile=small)
        refused = [r for r in result.requests if r.kind == "turn" and r.overflow]
        assert refused and all(r.true_tokens <= 40_000 < r.true_tokens + 32_000 for r in refused), strategy
        assert result.compactions and strategy_pair_errors(result) == 0
        configured = replay(_steps(30, chars=2_000).transcript(), strategy, profile=small, options={"max_output_tokens": 1_000})
        assert not any(r.overflow and r.true_tokens < 39_000 for r in configured.requests), strategy
    study = replay(_steps(30, chars=2_000).transcript(), "openhands", profile=small_profile(40_000))
    assert not any(r.overflow for r in study.requests)

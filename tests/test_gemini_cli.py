"""`gemini-cli` against docs/specs/gemini-cli.md: the upstream split vectors, the estimator, the
truncation format, the threshold, the two summariser calls, the inflation latch and masking."""

from __future__ import annotations

import re
from types import SimpleNamespace

from compaction_bench.metrics.integrity import ANY_KIND, check, recorded_orphans
from compaction_bench.profiles import get_profile
from compaction_bench.replay import replay
from compaction_bench.strategies.gemini_cli import (
    ACK,
    Content,
    GeminiCli,
    Part,
    estimate_parts,
    find_split_point,
    format_truncated_output,
    project_slug,
    saved_output_name,
    shell_preview,
)
from compaction_bench.transcript import Attachment, Item, Transcript
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


def test_estimator_media_and_javascript_lengths():
    # tokenCalculation.ts: `text.length` is UTF-16 units, so 50,001 emoji (100,002 units) take the len/4 shortcut
    # (L41-42): 25,000.5 → 25,000, not 1.5 per unit (150,003).
    assert estimate_parts([Part("text", text="😀" * 50_001)]) == 25_000
    # a PDF is any type starting "application/pdf" (L71); any other media part is JSON.stringify(part).length / 4
    # (L136-143): '{"inlineData":{"mimeType":"audio/wav"}}' is 39 characters → 9.75.
    assert estimate_parts([Part("data", mime="application/pdf;name=spec.pdf")]) == 25_800
    assert estimate_parts([Part("data", mime="audio/wav")]) == 9
    # A tool result's images are nested parts of its functionResponse (generateContentResponseUtilities.ts
    # L157-160): name/4 + JSON.stringify({output})/4, i.e. 9/4 + len('{"output":"see image"}') 22/4 = 7.75,
    # plus 3,000 per image (L101-110).
    image = Attachment("image/png", "shot.png", 1_000)
    assert estimate_parts([Part("response", text="see image", name="read_file", attachments=(image, image))]) == 6_007
    # The nested parts are floored on their own: 0.25 + 13/4 + floor(2 × 9.75) = 22 (23 if floored once).
    audio = Attachment("audio/wav", "a.wav", 10)
    assert estimate_parts([Part("response", text="", name="x", attachments=(audio, audio))]) == 22


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
    assert [r.estimate_tokens for r in turns[:3]] == [0, 10_000, 31_999]
    threshold = [c for c in result.compactions if c.trigger == "threshold"]
    assert [c.step for c in threshold] == [3]
    # the check read 32,000; the request sent after the compression carries the new history's estimate, the
    # new chat's `lastPromptTokenCount` (§6, §10.1; worked out by hand in tests/test_estimates_after_compaction.py)
    assert threshold[0].estimate_tokens == 32_000
    assert turns[3].estimate_tokens == threshold[0].details["new_tokens"] < 32_000
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


def log_reads() -> Session:
    """Seven reads of a log file, six answered with an 80,000-character output (≈ 20,000 tokens each)."""
    s = Session()
    s.user("collect the logs")
    for n in range(7):
        s.assistant(f"read {n}", calls=[(f"r{n}", "read_file", {"path": f"log{n}.txt"})])
        if n < 6:
            s.result(f"r{n}", f"log {n}\n" + "z" * 80_000, name="read_file")
    return s


def test_masking_after_fifty_thousand_protected_tokens():
    # Six 80,000-char outputs (≈ 20,000 tokens each). Before step 5 the history holds r0..r3 (r4 is pending,
    # the newest content is the model call): r3, r2 protected (≈ 40,000), r1 closes the window and is
    # prunable, r0 too: ≈ 40,000 ≥ 30,000 (§8). Before step 6 only r2 would be prunable (< 30,000); before
    # the final request r3 and r2.
    result = replay(log_reads().transcript(), "gemini-cli", profile="1m", options={"token_limit": 1_048_576})
    masking = [c for c in result.compactions if c.trigger == "masking"]
    assert [(c.step, c.details["masked"]) for c in masking] == [(5, ["r1", "r0"]), (7, ["r3", "r2"])]
    final = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    assert final["r0"].startswith("<tool_output_masked>\n") and final["r0"].endswith("</tool_output_masked>")
    assert "Output too large. Full output available at: " in final["r0"]
    assert "[TRUNCATED]" in final["r0"]
    assert not final["r4"].startswith("<tool_output_masked>") and not final["r5"].startswith("<tool_output_masked>")
    assert strategy_pair_errors(result) == 0


def test_tool_result_images_are_kept_by_truncation():
    # §3 rewrites only `response` and spreads the rest of the functionResponse (chatCompressionService.ts
    # L202-208), so a truncated tool result keeps its nested image. With a 1,000-token budget the 60,000-char
    # result (15,000 estimated tokens) is truncated at min(4 × (64,000 − 32,000), 40,000) = 40,000 chars; the
    # background (120,000 chars) puts 70 % of the characters before "now look", where the kept tail starts.
    image = Attachment("image/png", "chart.png", 50_000)
    s = Session()
    s.user("start")
    s.assistant("ok", total=1_000)
    s.user("background " + "w " * 60_000)
    s.assistant("noted", total=1_000)
    s.user("now look at the chart")
    s.assistant("looking", calls=[("c1", "read_file", {"path": "chart.png"})], total=1_000)
    s._add(kind="tool_result", call_id="c1", tool_name="read_file", text="r " * 30_000, attachments=(image,))
    s.assistant("seen", total=32_000)
    s.user("next")
    s.assistant("fine", total=1_000)
    result = replay(s.transcript(), "gemini-cli", profile="1m", usage="recorded",
                    options={"token_limit": 64_000, "function_response_token_budget": 1_000})
    [compaction] = [c for c in result.compactions if c.trigger == "threshold"]
    [tool] = [m for m in compaction.after if m.role == "tool"]
    assert tool.tool_call_id == "c1" and tool.content.startswith("Output too large. Showing first 8,000 and last 32,000 characters.")
    assert tool.attachments == (image,)
    assert compaction.after[2].content == "now look at the chart"
    [final] = [m for m in result.final.messages if m.role == "tool"]
    assert final.attachments == (image,)


def test_tool_result_images_count_for_masking_and_stay_masked():
    # §8 measures a tool result as estimateTokenCountSync([part]), its nested image included (3,000), and the
    # masked part keeps it (toolOutputMaskingService.ts L121, L224-231). Before step 3 the history is
    # u, call r0, r0, call r1, r1, call r2 (the newest content is skipped): r1 = 9/4 + (13 + 104,000)/4 →
    # 26,005 tokens, protected; r0 = 2.25 + (13 + 112,000)/4 + 3,000 → 31,005 closes the window (57,010 >
    # 50,000) and alone is prunable: 31,005 ≥ 30,000. Without the image it would be 28,005 < 30,000: no mask.
    image = Attachment("image/png", "chart.png", 50_000)
    s = Session()
    s.user("collect")
    s.assistant("read 0", calls=[("r0", "read_file", {"path": "a"})])
    s._add(kind="tool_result", call_id="r0", tool_name="read_file", text="z" * 112_000, attachments=(image,))
    s.assistant("read 1", calls=[("r1", "read_file", {"path": "b"})])
    s.result("r1", "y" * 104_000, name="read_file")
    s.assistant("read 2", calls=[("r2", "read_file", {"path": "c"})])
    s.result("r2", "small", name="read_file")
    s.assistant("done")
    result = replay(s.transcript(), "gemini-cli", profile="1m", options={"token_limit": 1_048_576})
    masking = [c for c in result.compactions if c.trigger == "masking"]
    assert [(c.step, c.details["masked"]) for c in masking] == [(3, ["r0"])]
    final = {m.tool_call_id: m for m in result.final.messages if m.role == "tool"}
    assert final["r0"].content.startswith("<tool_output_masked>\n") and final["r0"].attachments == (image,)
    assert final["r1"].content == "y" * 104_000


def _shell_output(lines: int) -> str:
    """The shell tool's result as shell.ts L802-830 formats it."""
    body = "\n".join(f"test {i} passed" for i in range(lines))
    return f"Output: {body}\nError: (none)\nExit Code: 1\nProcess Group PGID: 4242"


def test_shell_preview_keeps_the_sections_after_the_output():
    # formatShellPreview (toolOutputMaskingService.ts L292-348): split at lines starting "Output: ", "Error: ",
    # "Exit Code: ", …; the text before the first section and the Output section get the 10 + 10 line preview,
    # the other sections stay whole.
    text = "Output too large. See the file.\n" + _shell_output(30)
    head = "\n".join(f"test {i} passed" for i in range(10))
    tail = "\n".join(f"test {i} passed" for i in range(20, 30))
    expected = ("Output too large. See the file.\n"
                f"Output: {head}\n\n... [10 lines omitted] ...\n\n{tail}\n"
                "Error: (none)\nExit Code: 1\nProcess Group PGID: 4242")
    assert shell_preview(text) == expected
    # Without two sections: the simple preview of the whole text (L306-309).
    plain = "\n".join(f"l{i}" for i in range(25))
    assert shell_preview(plain) == "\n".join(f"l{i}" for i in range(10)) + "\n\n... [5 lines omitted] ...\n\n" + "\n".join(f"l{i}" for i in range(15, 25))
    # JavaScript's multiline `^` also starts a line after a lone "\r".
    assert shell_preview("Output: a\rExit Code: 2") == "Output: a\nExit Code: 2"


def test_masked_shell_output_gets_the_sectioned_preview():
    # With 100-token protection and batch, each output (≈ 450 tokens) closes the window alone: r0 is masked
    # before step 2 (the newest content, the call of r1, skipped), r1 before step 3, r2 before the final request.
    s = Session()
    s.user("run the tests")
    for n in range(3):
        s.assistant(f"run {n}", calls=[(f"r{n}", "run_shell_command", {"command": "pytest"})])
        s.result(f"r{n}", _shell_output(120), name="run_shell_command")
    s.assistant("done")
    result = replay(s.transcript(), "gemini-cli", profile="1m",
                    options={"token_limit": 1_048_576, "mask_protection_tokens": 100, "mask_min_prunable_tokens": 100})
    masking = [c for c in result.compactions if c.trigger == "masking"]
    assert [(c.step, c.details["masked"]) for c in masking] == [(2, ["r0"]), (3, ["r1"]), (4, ["r2"])]
    head = "\n".join(f"test {i} passed" for i in range(10))
    tail = "\n".join(f"test {i} passed" for i in range(110, 120))
    preview = f"Output: {head}\n\n... [100 lines omitted] ...\n\n{tail}\nError: (none)\nExit Code: 1\nProcess Group PGID: 4242"
    final = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    assert final["r0"].startswith(f"<tool_output_masked>\n{preview}\n\nOutput too large. Full output available at: ")


def _gemini(token_limit: int = 64_000) -> GeminiCli:
    """The strategy alone, for its truncation and preview (no summariser is called)."""
    return GeminiCli(SimpleNamespace(profile=get_profile("1m"), session={}), GeminiCli.parse_options({"token_limit": token_limit}))


def test_truncation_counts_utf16_units_as_javascript_does():
    # formatTruncatedToolOutput (fileUtils.ts L709-716) compares and slices `contentStr.length` units: ten emoji are
    # 20 units, over a threshold of 15 though only 10 characters. Head floor(15 × 0.2) = 3 units: one emoji and
    # the first half of the next (U+FFFD here: a lone surrogate cannot be UTF-8); tail 12 units: the last six
    # emoji; 20 - 3 - 12 = 5 omitted.
    emoji = "😀" * 10
    assert format_truncated_output(emoji, "P", 15) == (
        "Output too large. Showing first 3 and last 12 characters. For full output see: P\n"
        "😀\ufffd\n\n... [5 characters omitted] ...\n\n" + "😀" * 6)
    assert format_truncated_output(emoji, "P", 20) is emoji
    # the tail may start inside a pair: 11 units of "a" + 5 emoji (21 units) at 10 keep 2 and 8 units
    assert format_truncated_output("a" * 11 + "😀" * 5, "P", 10).endswith("... [11 characters omitted] ...\n\n" + "😀" * 4)


def test_truncation_threshold_is_not_clamped():
    # getTruncateToolOutputThreshold (config.ts L3794-3801) = min(4 × (limit − last prompt), 40,000): negative once
    # the last prompt is over the window, and formatTruncatedToolOutput then cuts every text (length > maxChars)
    # with JavaScript's slice: at -10 head = floor(-2) = -2, tail = -8, so slice(0, -2) drops the last 2 units,
    # slice(8) drops the first 8, and 20 + 2 + 8 = 30 are "omitted".
    text = "abcdefghijklmnopqrst"
    assert format_truncated_output(text, "P", -10) == (
        "Output too large. Showing first -2 and last -8 characters. For full output see: P\n"
        "abcdefghijklmnopqr\n\n... [30 characters omitted] ...\n\nijklmnopqrst")
    # At 0 (and -1) there is no tail: slice(-0) is slice(0), the whole text.
    assert format_truncated_output(text, "P", 0) == (
        "Output too large. Showing first 0 and last 0 characters. For full output see: P\n"
        "\n\n... [20 characters omitted] ...\n\n" + text)
    assert format_truncated_output("", "P", 0) == ""
    assert format_truncated_output("", "P", -1) == (
        "Output too large. Showing first -1 and last 0 characters. For full output see: P\n\n\n... [1 characters omitted] ...\n\n")
    # §3 in the strategy: a 250,000-character output (62,500 tokens, over the 50,000 budget) after a request sent
    # with a prompt of 64,010 tokens on a 64,000 window (the UI's count, `ui_prompt_tokens`, which the threshold
    # reads): threshold 4 × (−10) = −40, head −8, tail −32: the "truncated" output keeps all but the last 8 and all
    # but the first 32 characters, and 250,040 are omitted.
    gemini = _gemini()
    gemini.history = [Content("user", [Part("response", text="x" * 250_000, name="read_file", call_id="c")])]
    gemini.ui_prompt_tokens = 64_010
    [part] = gemini.plan_truncation().contents()[0].parts
    path = "~/.gemini/tmp/project/tool-outputs/read_file_1.txt"
    assert part.text == (f"Output too large. Showing first -8 and last -32 characters. For full output see: {path}\n"
                         + "x" * 249_992 + "\n\n... [250,040 characters omitted] ...\n\n" + "x" * 249_968)


def test_masking_preview_counts_utf16_units():
    # A masked non-shell output's preview (toolOutputMaskingService.ts L205-212): JSON.stringify({output}, null, 2)
    # over 500 units keeps slice(0, 250) and slice(-250). 250 emoji: 15 + 500 + 3 = 518 units (268 characters).
    # The head is the 15-unit prefix and 117 emoji and a half; the tail a half, 123 emoji and the 3-unit suffix.
    gemini = _gemini()
    part = Part("response", text="😀" * 250, name="read_file", call_id="c")
    assert gemini._preview(part) == ('{\n  "output": "' + "😀" * 117 + "\ufffd" + "\n... [TRUNCATED] ...\n"
                                     + "\ufffd" + "😀" * 123 + '"\n}')
    # 240 emoji are 498 units: whole
    assert gemini._preview(Part("response", text="😀" * 240, name="read_file")) == '{\n  "output": "' + "😀" * 240 + '"\n}'


def test_user_images_are_sent():
    # A user message's images are inlineData parts of its content, sent with the text: the request's user message
    # carries them, so the provider counts each image (profile.image_tokens) and §10.2 estimates 3,000 for it.
    image = Attachment("image/png", "screen.png", 40_000)
    turns = []
    for attachments in ((image,), ()):
        s = Session()
        s._add(kind="user", text="what is wrong on this screen?", attachments=attachments)
        s.assistant("a typo")
        turns.append(replay(s.transcript(), "gemini-cli", profile="1m").requests[0])
    with_image, without = turns
    [user] = [m for m in with_image.messages if m.role == "user"]
    assert user.content == "what is wrong on this screen?" and user.attachments == (image,)
    assert with_image.true_tokens - without.true_tokens == get_profile("1m").image_tokens
    assert estimate_parts([Part("text", text="what is wrong on this screen?"), Part("data", mime="image/png")]) == 3_007


def test_tool_results_are_converted_as_convert_to_function_response_does():
    # convertToFunctionResponse (generateContentResponseUtilities.ts L48-188), for results of parts (those with
    # attachments): audio and video are stripped with a note before the text (L93-129; read_file's says the
    # content comes next), the rest stay nested, and without text the output counts them (L174-184).
    image, audio, video = Attachment("image/png", "a.png", 10), Attachment("audio/wav", "a.wav", 10), Attachment("video/mp4", "v.mp4", 10)
    s = Session()
    s.user("inspect the media")
    results = [("c1", "screenshot", "", (image, image)), ("c2", "bash", "done", (audio,)),
               ("c3", "read_file", "", (video, audio, video)), ("c4", "screenshot", "", (image, audio)),
               ("c5", "bash", "", ())]
    s.assistant("look", calls=[(call, tool, {}) for call, tool, _, _ in results])
    for call, tool, text, attachments in results:
        s._add(kind="tool_result", call_id=call, tool_name=tool, text=text, attachments=attachments)
    s.assistant("seen")
    result = replay(s.transcript(), "gemini-cli", profile="1m")
    tools = {m.tool_call_id: (m.content, m.attachments) for m in result.final.messages if m.role == "tool"}
    assert tools == {
        "c1": ("Binary content provided (2 item(s)).", (image, image)),
        "c2": ("[SYSTEM: Binary content (audio/wav) stripped from response due to protocol limitations.]\ndone", ()),
        "c3": ("Binary content (video/mp4, audio/wav) read successfully. Content will be injected for analysis in the next sequence.", ()),
        "c4": ("[SYSTEM: Binary content (audio/wav) stripped from response due to protocol limitations.]", (image,)),
        "c5": ("", ()),  # a string result stays as it is
    }


def _gemini_session(session: dict, token_limit: int = 64_000) -> GeminiCli:
    """The strategy alone with a recorded session (id and working directory); compactions are not recorded."""
    ctx = SimpleNamespace(profile=get_profile("1m"), session=session, record_compaction=lambda **kw: None)
    return GeminiCli(ctx, GeminiCli.parse_options({"token_limit": token_limit}))


def test_saved_output_paths_are_named_as_upstream_names_them():
    """The path a truncated or masked output names (google-gemini/gemini-cli@5411f113):

    - `saveTruncatedToolOutput` (packages/core/src/utils/fileUtils.ts L731-755)::

          const safeToolName = sanitizeFilenamePart(toolName).toLowerCase();
          const safeId = sanitizeFilenamePart(id.toString()).toLowerCase();
          const fileName = safeId.startsWith(safeToolName) ? `${safeId}.txt` : `${safeToolName}_${safeId}.txt`;
          let toolOutputDir = path.join(projectTempDir, TOOL_OUTPUTS_DIR);   // 'tool-outputs'
          if (sessionId) toolOutputDir = path.join(toolOutputDir, `session-${sanitizeFilenamePart(sessionId)}`);

      with `sanitizeFilenamePart = part.replace(/[^a-zA-Z0-9_-]/g, '_')` (L696-698, per UTF-16 unit);
    - §3 `truncateHistoryToBudget` (context/chatCompressionService.ts L189-194): `saveTruncatedToolOutput(contentStr,
      name ?? 'unknown_tool', config.getNextCompressionTruncationId(), config.storage.getProjectTempDir())`: no
      session folder; the id is `++this.compressionTruncationCounter` (config/config.ts L3812-3814), which nothing
      else advances;
    - §9 `ToolExecutor.truncateOutputIfNeeded` (scheduler/tool-executor.ts L222-228): `saveTruncatedToolOutput(content,
      toolName, callId, projectTempDir, this.context.promptId)`, the context being the config, whose `promptId` is
      the session id (config.ts L1740-1742);
    - `getProjectTempDir()` = `<homedir>/.gemini/tmp/<short id>` (config/storage.ts L54-60, L181-185), the short id
      `slugify(path.basename(projectRoot))` (config/projectRegistry.ts L304-320, L414-422).

    Session "5f3c-A.b", project "/home/dev/My Project!" (slug "my-project"), home unknown ("~"): two shell outputs
    over 40,000 characters go to the session folder by call id, with no number; the next §3 truncations, newest
    response first, are files 1 and 2 of the project's tool-outputs folder, and the next §3 call goes on at 3."""
    assert saved_output_name("run_shell_command", "run_shell_command-1760000000000-AbC") == "run_shell_command-1760000000000-abc.txt"
    assert saved_output_name("read_file", 12) == "read_file_12.txt"
    assert saved_output_name("réad😀", "c.1") == "r_ad___c_1.txt"  # é one unit, the emoji two
    assert saved_output_name("7", 71) == "71.txt" and saved_output_name("7", 17) == "7_17.txt"
    assert project_slug("/home/dev/My Project!/") == "my-project" and project_slug(None) == "project"

    gemini = _gemini_session({"id": "t", "session_id": "5f3c-A.b", "cwd": "/home/dev/My Project!"})
    folder = "~/.gemini/tmp/my-project/tool-outputs"
    for call_id in ("run_shell_command-1760000000000-AbC", "toolu_01.X"):
        gemini.on_input(Item(id=call_id, kind="tool_result", call_id=call_id, tool_name="run_shell_command", text="x" * 50_000))
    first, second = (part.text.split("\n", 1)[0] for part in gemini.pending[0].parts)
    assert first.endswith(f"For full output see: {folder}/session-5f3c-A_b/run_shell_command-1760000000000-abc.txt")
    assert second.endswith(f"For full output see: {folder}/session-5f3c-A_b/run_shell_command_toolu_01_x.txt")

    gemini.history = [Content("user", [Part("response", text="r" * 250_000, name="read_file", call_id="c1"),
                                       Part("response", text="g" * 250_000, name="grep", call_id="c2")])]
    read, grep = gemini.plan_truncation().contents()[0].parts
    assert grep.text.split("\n", 1)[0].endswith(f"For full output see: {folder}/grep_1.txt")
    assert read.text.split("\n", 1)[0].endswith(f"For full output see: {folder}/read_file_2.txt")
    read, grep = gemini.plan_truncation().contents()[0].parts
    assert (grep.text.split("\n", 1)[0][-10:], read.text.split("\n", 1)[0][-15:]) == ("grep_3.txt", "read_file_4.txt")


def test_masked_output_path_is_in_the_session_folder_and_advances_no_counter():
    """§8 `ToolOutputMaskingService.mask` (packages/core/src/context/toolOutputMaskingService.ts@5411f113 L163-188)::

          let toolOutputsDir = path.join(config.storage.getProjectTempDir(), TOOL_OUTPUTS_DIR);
          const sessionId = config.getSessionId();
          if (sessionId) toolOutputsDir = path.join(toolOutputsDir, `session-${sanitizeFilenamePart(sessionId)}`);
          const toolName = part.functionResponse.name || 'unknown_tool';
          const callId = part.functionResponse.id || Date.now().toString();
          const fileName = `${safeToolName}_${safeCallId}_${Math.random().toString(36).substring(7)}.txt`;

    (no `compressionTruncationCounter`). The random part is replayed as six base-36 digits. Before step 5 the history
    holds r0..r3 (80,000 characters each, ≈ 20,000 tokens): r3 and r2 are protected, r1 closes the window, r0 and r1
    are masked; a §3 truncation afterwards is still file 1."""
    s = Session()
    s.user("collect the logs")
    for n in range(5):
        s.assistant(f"read {n}", calls=[(f"r{n}", "read_file", {"path": f"log{n}.txt"})])
        s.result(f"r{n}", f"log {n}\n" + "z" * 80_000, name="read_file")
    s.assistant("done")
    transcript = Transcript(id="masking", items=tuple(s.items), source={"session_id": "5f3c-A.b", "cwd": "/home/dev/My Project!"})
    result = replay(transcript, "gemini-cli", profile="1m", options={"token_limit": 1_048_576})
    [masking] = [c for c in result.compactions if c.trigger == "masking"]
    assert masking.details["masked"] == ["r1", "r0"]
    folder = "~/.gemini/tmp/my-project/tool-outputs/session-5f3c-A_b"
    final = {m.tool_call_id: m.content for m in result.final.messages if m.role == "tool"}
    for call_id in ("r0", "r1"):
        assert re.search(f"\n\nOutput too large. Full output available at: {re.escape(folder)}/read_file_{call_id}_[0-9a-z]{{6}}\\.txt\n"
                         "</tool_output_masked>$", final[call_id]), final[call_id][-200:]
    # The strategy itself: masking, then a §3 truncation numbered 1.
    gemini = _gemini_session({"id": "masking", "session_id": "5f3c-A.b"})
    gemini.history = [Content("user", [Part("text", text="collect")])]
    for n in range(4):
        gemini.history += [Content("model", [Part("call", name="read_file", call_id=f"r{n}", args={})]),
                           Content("user", [Part("response", text="z" * 80_000, name="read_file", call_id=f"r{n}")])]
    gemini.history.append(Content("model", [Part("call", name="read_file", call_id="r4", args={})]))
    gemini._mask()
    assert gemini.history[2].parts[0].text.startswith("<tool_output_masked>")
    gemini.history = [Content("user", [Part("response", text="r" * 250_000, name="read_file", call_id="c1")])]
    [part] = gemini.plan_truncation().contents()[0].parts
    assert part.text.split("\n", 1)[0].endswith("For full output see: ~/.gemini/tmp/project/tool-outputs/read_file_1.txt")


def test_an_mcp_tools_one_text_part_result_is_truncated_when_it_runs_as_a_shells_is():
    """§9 (`tool-executor.ts@5411f113` L217-290): a shell's output and an MCP tool's result of exactly one text part
    are cut to min(40,000, 4 × remaining) characters, 20% head and 80% tail under the header; only the shell's was."""
    sent = {}
    for tool in ("run_shell_command", "mcp__github__get_file_contents", "read_file"):
        s = Session()
        s.user("look")
        s.assistant("", calls=[("c1", tool, {"q": "x"})])
        s.result("c1", "x" * 60_000, name=tool)
        s.assistant("done")
        result = replay(s.transcript(), "gemini-cli", profile="64k")
        (message,) = [m for m in result.requests[-1].messages if m.role == "tool"]
        sent[tool] = message.content
    assert sent["mcp__github__get_file_contents"].startswith("Output too large. Showing first 8,000 and last 32,000 characters.")
    for tool in ("mcp__github__get_file_contents", "run_shell_command"):  # 40,000 kept, the header naming the saved file
        assert 40_000 < len(sent[tool]) < 40_300 and sent[tool].endswith("x" * 32_000), tool
    assert sent["read_file"] == "x" * 60_000  # no other tool is truncated here

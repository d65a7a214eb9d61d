"""`gemini-cli`'s failed tool results settled against upstream `google-gemini/gemini-cli@5411f113` in the
faithfulness audit: a failed tool's function response is `{error: message}` (`ToolExecutor.createErrorResult`,
`packages/core/src/scheduler/tool-executor.ts` L148-166, L451-476), which the estimate, §3's truncation, §8's
masking preview and §9 each read as upstream does."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

from compaction_bench.profiles import get_profile
from compaction_bench.strategies.gemini_cli import (
    Content,
    GeminiCli,
    Part,
    compact_json_length,
    estimate_contents,
    estimate_parts,
    find_split_point,
    format_truncated_output,
    truncation_path,
)
from compaction_bench.transcript import Item

FOLDER = "~/.gemini/tmp/project/tool-outputs"


def _gemini() -> GeminiCli:
    """The strategy alone on a 64,000 window (§3's threshold min(4 × 64,000, 40,000) = 40,000); no summariser."""
    return GeminiCli(SimpleNamespace(profile=get_profile("1m"), session={}), GeminiCli.parse_options({"token_limit": 64_000}))


def _results(gemini: GeminiCli, *results: tuple[str, str, str, bool]) -> list[Part]:
    """Tool results (call id, tool, text, failed) observed into one user content, made the history."""
    for call_id, tool, text, failed in results:
        gemini.on_input(Item(id=call_id, kind="tool_result", call_id=call_id, tool_name=tool, text=text, is_error=failed))
    gemini.history, gemini.pending = gemini.pending, []
    return gemini.history[0].parts


def test_a_failed_result_is_an_error_response_with_its_estimate():
    # The response is `{error: message}`. §10.2: name/4 + JSON.stringify(response).length/4, floored:
    # "read_file" 9 + '{"error":"File not found: ab"}' 30 = 39 / 4 = 9.75 → 9 (as `{output: …}`, 40 / 4 = 10).
    [part] = _results(_gemini(), ("c1", "read_file", "File not found: ab", True))
    assert part.to_json() == {"functionResponse": {"name": "read_file", "response": {"error": "File not found: ab"}, "id": "c1"}}
    assert estimate_parts([part]) == 9
    # §9 truncates a success's output only (`createSuccessResult`, L371-376): a failed shell command's
    # 50,000-character message stays whole.
    [shell] = _results(_gemini(), ("c2", "run_shell_command", "e" * 50_000, True))
    assert shell.text == "e" * 50_000


def test_truncation_rewrites_an_older_error_response_as_output():
    # §3 (chatCompressionService.ts L155-224), newest first: c3 (180,000 chars, 45,000 tokens) fits the 50,000
    # budget; c2 would take it to 90,000, so it is cut (file 1) and the counter is past the budget; the error
    # response c1 is then cut too (file 2): its `contentStr` is `JSON.stringify(response, null, 2)` (no string
    # `output`), 34 characters, under the threshold, so the part becomes `{output: <that JSON>}` unchanged.
    gemini = _gemini()
    _results(gemini, ("c1", "read_file", "File not found: ab", True), ("c2", "read_file", "r" * 180_000, False),
             ("c3", "grep", "g" * 180_000, False))
    plan = gemini.plan_truncation()
    [content] = plan.contents()
    error, read, grep = content.parts
    assert error.to_json()["functionResponse"]["response"] == {"output": '{\n  "error": "File not found: ab"\n}'}
    assert read.text.split("\n", 1)[0].endswith(f"For full output see: {FOLDER}/read_file_1.txt")
    assert grep.text == "g" * 180_000
    _assert_measures_match(plan, content)
    # The error's cut took file number 2: the next plan numbers c2's file 3.
    assert gemini.plan_truncation().contents()[0].parts[1].text.split("\n", 1)[0].endswith("read_file_3.txt")


def test_truncation_cuts_a_long_error_response_from_its_json():
    # c2 (45,000 tokens) fits; the error message of 200,000 characters makes `contentStr`
    # '{\n  "error": "' + m × 200,000 + '"\n}' (200,017 characters, 50,004 tokens), over the budget: cut to its
    # first 8,000 and last 32,000 characters, 160,017 omitted, saved as file 1.
    gemini = _gemini()
    _results(gemini, ("c1", "read_file", "m" * 200_000, True), ("c2", "grep", "g" * 180_000, False))
    plan = gemini.plan_truncation()
    [content] = plan.contents()
    error = content.parts[0]
    assert error.to_json()["functionResponse"]["response"] == {"output": (
        f"Output too large. Showing first 8,000 and last 32,000 characters. For full output see: {FOLDER}/read_file_1.txt\n"
        + '{\n  "error": "' + "m" * 7_986 + "\n\n... [160,017 characters omitted] ...\n\n" + "m" * 31_997 + '"\n}')}
    _assert_measures_match(plan, content)


def _assert_measures_match(plan, content: Content) -> None:
    """The truncated content's measures, derived from the source's, equal those of the same parts built anew."""
    fresh = Content(content.role, [Part(p.kind, text=p.text, name=p.name, call_id=p.call_id) for p in content.parts])
    assert compact_json_length(content) == compact_json_length(fresh) == len(json.dumps(fresh.to_json(), separators=(",", ":")))
    assert plan.estimate() == estimate_contents([content]) == estimate_contents([fresh])


def test_masking_preview_of_an_error_response():
    # §8 (toolOutputMaskingService.ts L203-213): another tool's preview is `JSON.stringify(response, null, 2)`;
    # the shell preview (L292-309) reads `response.output || response.stdout || ''`: an error response has
    # neither, and '' splits into one piece, so `formatSimplePreview('')` returns '' before the root `error`
    # is looked at.
    gemini = _gemini()
    read, shell = _results(gemini, ("c1", "read_file", "File not found: ab", True), ("c2", "run_shell_command", "bad flag", True))
    assert gemini._preview(read) == '{\n  "error": "File not found: ab"\n}'
    assert gemini._preview(shell) == ""


def _straightforward_truncation(history: list[Content], threshold: int, directory: str, number: int) -> list[list[tuple[str, bool]]]:
    """`truncateHistoryToBudget` (chatCompressionService.ts L137-237) transcribed as it reads: newest part first,
    `contentStr` measured as a text part, past the 50,000 budget saved under the next number and formatted."""
    counter, out = 0, []
    for content in reversed(history):
        parts: list[tuple[str, bool]] = []
        for part in reversed(content.parts):
            if part.kind != "response":
                parts.insert(0, (part.text, False))
                continue
            source = part.source_text()
            tokens = estimate_parts([Part("text", text=source)])
            if counter + tokens > 50_000:
                number += 1
                message = format_truncated_output(source, truncation_path(directory, part.name, number), threshold)
                parts.insert(0, (message, False))
                counter += estimate_parts([Part("text", text=message)])
            else:
                parts.insert(0, (part.text, part.error_response))
                counter += tokens
        out.insert(0, parts)
    return out


def test_planned_truncation_equals_the_straightforward_one_with_error_responses():
    # The plan measures without building (`Part.cut_change`, `CutChanges`); on random histories of outputs and
    # error responses (ASCII, non-ASCII and escaped characters, a tool named by digits) it cuts the same parts
    # to the same texts, and its estimate, JSON lengths and split are those of the contents it builds.
    rng = random.Random(7)
    for _ in range(25):
        gemini = GeminiCli(SimpleNamespace(profile=get_profile("1m"), session={}),
                           GeminiCli.parse_options({"token_limit": rng.choice([30_000, 64_000, 200_000])}))
        gemini.ui_prompt_tokens = rng.choice([0, 10_000, 60_000])  # the count §3's threshold reads
        history = [Content("user", [Part("text", text="start")])]
        for step in range(rng.randint(3, 10)):
            ids = [f"c{step}_{k}" for k in range(rng.randint(1, 3))]
            history.append(Content("model", [Part("call", name="t", call_id=i, args={}) for i in ids]))
            history.append(Content("user", [Part("response", text=rng.choice("aé\"") * rng.choice([10, 500, 90_000, 180_000]),
                                                  name=rng.choice(["read_file", "7"]), call_id=i, error_response=rng.random() < 0.4)
                                             for i in ids]))
        gemini.history = history
        threshold = min(4 * (gemini.limit - gemini.ui_prompt_tokens), 40_000)
        expected = _straightforward_truncation(history, threshold, gemini.outputs_dir, gemini._truncation_ids)
        plan = gemini.plan_truncation()
        contents = plan.contents()
        assert [[(p.text, p.error_response) for p in c.parts] for c in contents] == expected
        fresh = [Content(c.role, [Part(p.kind, text=p.text, name=p.name, call_id=p.call_id, args=p.args,
                                       error_response=p.error_response) for p in c.parts]) for c in contents]
        assert plan.estimate() == estimate_contents(fresh)
        assert [compact_json_length(c) for c in contents] == [compact_json_length(c) for c in fresh]
        gemini._index()
        assert plan.split(0.7, gemini._clean, gemini._json) == find_split_point(fresh, 0.7)

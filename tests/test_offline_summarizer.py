"""The offline extractive summarizer: salience decides what fits, section titles only the layout,
the budget is the strategy's own summary limit, and an earlier summary of its own is read as the
previous summary however a strategy words the message around it."""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys

import pytest

import compaction_bench as bench
from compaction_bench.offline_models import TAG_BLOCK, _rule_category, _tag_blocks, extractive_summary, tag_blocks
from compaction_bench.registry import strategy_ids
from compaction_bench.request import Message
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.templates import default_prompt_dir
from compaction_bench.tokens import TokenCounter
from compaction_bench.wire import chat_messages

CONVERSATION = [
    {"role": "user", "content": "Fix the flaky upload test. You must never touch the vendored libs in third_party/."},
    {"role": "assistant", "content": "Reading tests/test_upload.py first."},
    {"role": "tool", "content": "def test_upload():\n    assert client.upload(b'x') == 200\nAssertionError: 503 != 200"},
    {"role": "assistant", "content": "I decided to retry on 503 because the server is rate limited."},
    {"role": "tool", "content": "just some ordinary output line\nanother unremarkable line of output"},
    {"role": "assistant", "content": "Updated src/upload/client.py with a retry; next I will run the suite."},
]
LAYOUT = "Summarize the conversation above with these sections:\n\n## {a}\n...\n\n## {b}\n...\n\n## {c}\n...\n"


def bullets(summary: str) -> set[str]:
    return {line[2:] for line in summary.splitlines() if line.startswith("- ") and line != "- (none)"}


def test_renamed_headings_select_the_same_lines():
    first = extractive_summary([*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)
    renamed = extractive_summary(
        [*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="What the user wants", b="Problems hit", c="Upcoming")}], 2000
    )
    assert bullets(first) == bullets(renamed) and bullets(first)
    assert "## What the user wants" in renamed and "## Goal" not in renamed  # the template decides the layout


def test_salient_lines_win_when_the_budget_is_tight():
    summary = extractive_summary([*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next")}], 60)
    kept = bullets(summary)
    assert any("must never touch the vendored libs" in line for line in kept)  # the user's constraint comes first
    assert not any("unremarkable" in line for line in kept)


def test_the_budget_follows_the_strategy_limit():
    long = [{"role": "tool", "content": "\n".join(f"error: step {n} failed in src/mod_{n}.py" for n in range(400))}]
    ask = {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next")}
    small, large = extractive_summary([*long, ask], 100), extractive_summary([*long, ask], 1000)
    assert len(small) <= 100 * 3 < len(large) <= 1000 * 3


def _rename(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = re.sub(rf"^(#+ ){re.escape(old)}$", rf"\g<1>{new}", text, flags=re.M)
    return text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "template", "names"),
    [
        ("codex-local", "codex_summary.j2", {
            "Progress and key decisions": "Progress and our decisions",
            "Context, constraints and user preferences": "Context, constraints and team preferences",
            "Remaining work and next steps": "Remaining jobs and next steps",
            "Critical data, examples and references": "Critical fact, examples and references",
        }),
        ("opencode-v1", "opencode_summary.j2", {
            "Objective": "Requested", "Important Details": "Essential Details", "Work State": "Work Stage", "Next Move": "Next Step",
            "Relevant Files": "Relevant Paths",
        }),
    ],
)
def test_renaming_a_templates_headings_changes_no_summary_of_a_whole_replay(tmp_path, strategy, template, names):
    """Headings in other words decide the layout and nothing else, over every compaction of a 200k-token replay.

    Each renamed title has the original's length, its o200k token count and its section rule (`_rule_category`: a
    previous summary's lines are scored by their section's rule, and a title no rule matches has none), so the budget and every
    token count are the same: the replay must then compact at the same requests and keep the same lines. (A title of
    another length frees or takes the characters of a line or two of the budget, and a session that compacts twenty
    times carries that difference on: the earlier form of this test, "within ten percent of the facts", held on one
    scenario and not on the others.)"""
    from compaction_bench.scenarios.synthetic import default_suite

    encode = TokenCounter("o200k_base").encoding.encode
    for old, new in names.items():
        assert len(old) == len(new) and len(encode(f"## {old}\n")) == len(encode(f"## {new}\n"))
        assert _rule_category(old) == _rule_category(new)
    scenario = next(s for s in default_suite() if s.name.startswith("synthetic-constraint-change"))
    original = (default_prompt_dir() / template).read_text(encoding="utf-8")
    renamed = _rename(original, names)
    assert renamed != original and all(f" {new}\n" in renamed for new in names.values())
    path = tmp_path / template
    path.write_text(renamed, encoding="utf-8")
    before = bench.replay(scenario.transcript, strategy, profile="32k")
    after = bench.replay(scenario.transcript, strategy, profile="32k", prompts={template: str(path)})
    assert len(before.compactions) >= 5, "the scenario must compact several times at 32k"
    assert [c.step for c in after.compactions] == [c.step for c in before.compactions]
    for old, new in zip(before.compactions, after.compactions, strict=True):
        assert old.summary and new.summary
        assert _rename(new.summary, {n: o for o, n in names.items()}) == old.summary
        assert any(f"## {title}" in new.summary for title in names.values())  # the renamed template laid it out


LATER = [
    {"role": "assistant", "content": "The retry works; tests/test_upload.py passes now."},
    {"role": "user", "content": "Good. Also log each retry in src/upload/client.py, but only at debug level."},
]


def _first_summary() -> str:
    return extractive_summary([*CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)


@pytest.mark.parametrize(
    "handed_back",
    [
        lambda summary: {"role": "user", "content": f"Another model worked on this before you; its notes follow.\n\n{summary}\n\nGo on from there."},
        # a Codex compaction item: an opaque item the wire gives the model as a user message holding the summary alone
        lambda summary: chat_messages([Message("compaction", summary)], provider="openai")[0],
    ],
    ids=["own-wording", "codex-compaction-item"],
)
def test_an_earlier_own_summary_is_the_previous_summary_whatever_the_words_around_it(handed_back):
    first = _first_summary()
    message = handed_back(first)
    assert message["role"] == "user" and first in message["content"]
    second = extractive_summary([message, *LATER, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)
    items = [line for line in second.splitlines() if line.startswith("- ")]
    # read as the previous summary: its lines come back once, without another list marker, under their
    # headings, and the strategy's own words around it are not conversation
    assert not any(line.startswith("- - ") for line in items)
    assert len(items) == len(set(items))
    assert bullets(first) <= bullets(second)
    assert "Another model worked on this" not in second and "Go on from there" not in second
    assert "Good. Also log each retry in src/upload/client.py, but only at debug level." in bullets(second)


def test_a_labelled_conversation_appended_to_the_prompt_is_the_conversation():
    """OpenCode V2 sends one user message: its prompt and template, then the conversation serialized
    with speaker labels in no tag (opencode.md, V2 core). The labelled part is conversation, read with
    its speakers; the headings before it are the sections."""
    prompt = ("Write the anchored summary.\n<template>\n## Objective\n- what the user wants\n\n## Relevant Files\n- paths\n</template>\n"
              "Rules: keep every section.\n\n")
    conversation = ("[User]: Fix the flaky upload test; never touch third_party/.\n\n"
                    "[Assistant tool call]: read({\"path\":\"tests/test_upload.py\"})\n[Tool result]: AssertionError: 503 != 200\n\n"
                    "[Assistant]: I decided to retry on 503 in src/upload/client.py.")
    summary = extractive_summary([{"role": "user", "content": prompt + conversation}], 2000)
    assert summary.startswith("## Objective\n") and summary.count("## ") == 2
    assert {"[User]: Fix the flaky upload test; never touch third_party/.", "[Tool result]: AssertionError: 503 != 200",
            "[Assistant]: I decided to retry on 503 in src/upload/client.py."} <= bullets(summary)


def test_the_sections_are_the_summary_prompts_not_the_agents_system_prompts():
    """Codex sends its own instructions (with headings such as "## Tools") first and the summary
    prompt last: the summary's sections are the prompt's."""
    system = {"role": "system", "content": "You are a coding agent.\n\n## Tools\nUse the shell.\n\n## Working style\nBe brief."}
    summary = extractive_summary([system, *CONVERSATION, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)
    assert [line for line in summary.splitlines() if line.startswith("## ")] == ["## Goal", "## Errors", "## Next steps"]


def test_markdown_the_summarizer_did_not_write_is_conversation():
    pasted = {"role": "user", "content": "## Goal\n- Ship the parser in src/parse.py\n\n## Errors\n- none yet"}
    summary = extractive_summary([pasted, {"role": "user", "content": LAYOUT.format(a="Goal", b="Errors", c="Next steps")}], 2000)
    assert "Ship the parser in src/parse.py" in bullets(summary)


@pytest.mark.parametrize("strategy", ["codex-local", "codex-remote-v1", "claude-code", "gemini-cli", "openhands", "opencode-v2", "aider"])
def test_summaries_of_a_long_session_never_nest_or_repeat_a_line(strategy):
    """Each summary lists every line it keeps once, as one "- " item: before earlier summaries were
    recognised, each compaction listed the last one's lines again one "- " deeper."""
    transcript = generate("short-turns", seed=0, target_tokens=400_000).transcript
    result = bench.replay(transcript, strategy, profile="64k")
    summaries = [c.summary for c in result.compactions if c.summary]
    assert len(summaries) >= 3
    for summary in summaries:
        items = [line for line in summary.splitlines() if line.startswith("- ")]
        assert not any(line.startswith(("- - ", "- * ")) for line in items), strategy
        assert len(items) == len(set(items)) or items.count("- (none)") > 1, strategy
    # between two compactions the session asks new things (user requests: goal lines), which outweigh
    # the earlier summary's least salient lines: an update is never the previous summary again
    for earlier, later in itertools.pairwise(summaries):
        assert set(later.splitlines()) - set(earlier.splitlines()), strategy


def test_aiders_serialized_conversation_is_read_as_the_conversation_with_its_speakers():
    """Aider sends its prompt as the system message and the conversation as one user message, each
    message under "# USER" or "# ASSISTANT" (aider.md §6): those are speakers, not sections, and an
    earlier summary among the user messages is the previous summary."""
    first = _first_summary()
    transcript = "".join(f"# {m['role'].upper()}\n{m['content']}\n" for m in [
        {"role": "user", "content": f"I spoke to you previously about a number of things.\n{first}"},
        {"role": "assistant", "content": "Ok."},
        *LATER,
    ])
    summary = extractive_summary([{"role": "system", "content": "Summarise this partial conversation, briefly."},
                                  {"role": "user", "content": transcript}], 2000)
    # no template sections: one "Summary" section, not "USER"/"ASSISTANT"
    assert summary.startswith("## Summary\n- ") and summary.count("## ") == 1
    # the user's new request is a goal line, the earlier summary's lines are carried without re-nesting
    assert "Good. Also log each retry in src/upload/client.py, but only at debug level." in bullets(summary)
    assert bullets(first) <= bullets(summary) and "I spoke to you previously about a number of things." not in summary


def test_a_cells_summaries_do_not_depend_on_what_the_process_ran_before(tmp_path):
    """The summarizer remembers its own summaries process-wide; a cell's summaries must be those of the
    same cell run alone in a fresh process (as `-j 2` runs it) after other cells filled that memory."""
    transcript = generate("short-turns", seed=2, target_tokens=150_000).transcript
    path = tmp_path / "session.jsonl"
    transcript.write(path)
    for other in ("claude-code", "codex-remote-v1", "pi"):
        bench.replay(transcript, other, profile="32k")
    here = [c.summary for c in bench.replay(transcript, "codex-local", profile="32k").compactions]
    child = (
        "import json, sys, compaction_bench as bench\n"
        "t = bench.load_transcript(sys.argv[1])\n"
        "print(json.dumps([c.summary for c in bench.replay(t, 'codex-local', profile='32k').compactions]))"
    )
    done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, check=True, timeout=300)
    alone = json.loads(done.stdout)
    assert len(here) >= 3 and here == alone


def test_tag_blocks_are_the_tag_block_pattern_s_matches():
    """`tag_blocks` pairs tags without `TAG_BLOCK`'s lazy scan; it must find exactly the pattern's matches:
    on hand-built edge cases (newlines inside the tags, empty and nested blocks, tags never closed, code
    generics) and on random texts built from tags, newlines and the characters around them."""
    def expected(text: str) -> list[tuple[str, str, str]]:
        return [(m.group("tag"), m.group(0), m.group("body")) for m in TAG_BLOCK.finditer(text)]

    cases = ["<a>x</a>", "<ab>\n</ab>", "<ab>\n\n</ab>", "<ab></ab>", "<ab>\nx\n</ab>", "<x1><x1>y</x1></x1>", "<ab>\n",
             "<tag>a</tag><tag>b</tag>", "<t-1>\n</t-1>z<t-1>q</t-1>", "Promise<void> <summary>\nkept\n</summary> Array<any>",
             "<previous-summary>\n## Goal\n- x\n</previous-summary>\n<template>\n## Goal\n</template>", "</ab><ab>", "<AB>x</ab>"]
    assert tag_blocks(cases[-4])[0] == ("summary", "<summary>\nkept\n</summary>", "kept")
    cases += ["<EVENT id=3>\nuser: fix it\n</EVENT>", "<PREVIOUS SUMMARY>\n## Goal\n- x\n</PREVIOUS SUMMARY>", "<ab c=\"1\" d='2'>x</ab>",
              "<ab cd>x</ab>", "<ab cd e=1>x</ab cd>", "<T extends Base>x</T>"]
    assert tag_blocks(cases[-6]) == [("EVENT", "<EVENT id=3>\nuser: fix it\n</EVENT>", "user: fix it")]
    assert tag_blocks(cases[-5])[0][0] == "PREVIOUS SUMMARY"
    pieces = ["<ab>", "</ab>", "<Ab>", "</Ab>", "<x-1>", "</x-1>", "<summary>", "</summary>", "\n", "\n\n", "x", " ", "<", ">",
              "/", "</", "<a", "b>", "<void>", "<ab id=1>", "<ab cd>", "</ab cd>", " id=", "=", '"']
    rng = random.Random(7)
    cases += ["".join(rng.choices(pieces, k=rng.randint(0, 30))) for _ in range(5000)]
    found = 0
    for text in cases:
        assert tag_blocks(text) == expected(text), text
        found += len(expected(text))
    assert found > 2000  # the random texts do hold blocks


def test_the_text_outside_the_blocks_is_the_text_with_each_block_taken_out_once():
    """A reading's `outside` is the text with each of its blocks removed where it stands (a layout tag's
    block unwrapped): on 3,000 blocks, some of them identical, the expected text is the pattern's
    substitution; a tag named in a sentence with the same words as a block stays as it is written."""
    blocks = "".join(f"line {k}\n<ab{k % 5}>\nbody {k % 3}\n</ab{k % 5}>\n" for k in range(3000))
    text = "Intro: nothing here is a block.\n" + blocks + "The end.\n"
    reading = _tag_blocks(text)
    assert reading.outside == TAG_BLOCK.sub("", text)
    assert reading.bodies == tuple(f"body {k % 3}" for k in range(3000))
    named = "<notes>x</notes> then write <notes>x</notes> in your answer\nafter\n"
    assert _tag_blocks(named).outside == "x then write <notes>x</notes> in your answer\nafter\n"  # the first is the layout's example


def test_an_event_showing_the_start_of_an_earlier_summary_is_that_summary_cut_short():
    """OpenHands lists an earlier summary among the events it asks to summarise as a display preview:
    the event's name, then "  user: " and the summary's first 497 characters followed by "..."
    (openhands.md §4.5). What the preview shows is the earlier summary to update: its heading is no
    line of the user's, its whole lines are kept as an earlier summary's, and the line the cut ends
    inside is not copied as if it were whole."""
    asks = [f"Please rename fetch_batch_{k} in src/ledger/batch_{k}.py and keep its callers working." for k in range(12)]
    conversation = [{"role": "user", "content": "\n".join(["Never edit files under vendor/.", *asks])},
                    {"role": "assistant", "content": "I decided to rename them one file at a time."}]
    first = extractive_summary([*conversation, {"role": "user", "content": "Summarise the conversation."}], 2000)
    assert len(first) > 600 and first.startswith("## ")
    preview = "CondensationSummaryEvent (environment)\n  user: " + first[:497] + "..."
    shown = first[:497]
    whole, cut = shown[: shown.rfind("\n")], shown[shown.rfind("\n") + 1 :].removeprefix("- ")
    assert cut and f"- {cut}\n" not in first[:497]  # the preview ends inside a line
    request = (
        "Summarise the events below.\n"
        f"<EVENT>\n{preview}\n</EVENT>\n"
        "<EVENT>\nMessageEvent (user)\n  user: Now also add a changelog entry for the renames in CHANGES.md.\n</EVENT>\n"
    )
    second = extractive_summary([{"role": "user", "content": request}], 2000)
    lines = bullets(second)
    assert not any(line.removeprefix("user: ").startswith("#") for line in lines), second
    assert bullets(whole) <= lines  # the whole lines shown, kept as the earlier summary's
    assert cut not in lines  # the cut line is not copied as a line
    assert any("CHANGES.md" in line for line in lines)


#: The lines of every strategy's prompt templates (no Jinja in them, long enough to be a sentence or a heading)
PROMPT_LINES = {
    line.strip()
    for path in default_prompt_dir().glob("*.j2")
    for line in path.read_text(encoding="utf-8").splitlines()
    if len(line.strip()) >= 12 and not {"{", "}"} & set(line)
}


@pytest.mark.parametrize("strategy", strategy_ids(builtin_only=True))
def test_no_summary_carries_a_line_of_a_summary_prompt(strategy):
    """A summary request's instructions are not conversation: no line of a strategy's own prompt (its
    section list, the example of the answer it shows, its rules) is ever one of the summary's lines. Claude
    Code's prompt names <analysis> and <summary> before showing an example of each, and Gemini CLI's
    system prompt names <state_snapshot> before showing its layout; both were read from the naming to the
    example's closing tag as the user's own lines."""
    transcript = generate("short-turns", seed=0, target_tokens=150_000).transcript
    summaries = [c.summary for c in bench.replay(transcript, strategy, profile="32k").compactions if c.summary]
    for summary in summaries:
        leaked = bullets(summary) & PROMPT_LINES  # (its "## " headings are the prompt's section titles, as they should be)
        assert not leaked, (strategy, sorted(leaked)[:3])


@pytest.mark.parametrize(
    ("strategy", "sections"),
    [
        ("claude-code", ["Primary Request and Intent", "Key Technical Concepts", "Files and Code Sections", "Errors and fixes",
                         "Problem Solving", "All user messages", "Pending Tasks", "Current Work", "Optional Next Step"]),
        ("gemini-cli", ["overall_goal", "active_constraints", "key_knowledge", "artifact_trail", "file_system_state",
                        "recent_actions", "task_state"]),
    ],
)
def test_the_sections_are_those_of_the_answers_example(strategy, sections):
    """The summary's sections are the ones the prompt's example of the answer shows: Claude Code's nine
    numbered sections (claude-code.md §3.2: "1. Primary Request and Intent:" ...), Gemini CLI's seven
    <state_snapshot> elements (gemini-cli.md §5.3), not the prompt's own headings ("GOAL")."""
    transcript = generate("short-turns", seed=0, target_tokens=150_000).transcript
    summaries = [c.summary for c in bench.replay(transcript, strategy, profile="32k").compactions if c.summary]
    assert summaries
    for summary in summaries:
        assert re.findall(r"^## (.+)$", summary, re.M) == sections


def test_the_sections_are_the_template_s_and_not_those_of_text_quoted_after_it():
    """OpenCode's prompt shows the answer's layout in a <template> block; V2 then appends the recent
    text, cut from its start (opencode.md §2.7), which can begin inside a quoted file: a heading there
    ("## Layout" of an AGENTS.md) is the file's, not a section the summary must have."""
    prompt = ("Write a fresh anchored summary of the conversation so far.\n\n"
              "Answer in Markdown laid out exactly as in the template below.\n"
              "<template>\n## Objective\n- what the user wants\n\n## Relevant Files\n- paths that matter\n</template>\n\n"
              "Rules: keep every section.\n\n"
              "iles under ledger/vendor/ are generated.\n## Layout\n- ledger/: the service\n\n"
              "[User]: Fix the rounding in ledger/money.py; never use float for amounts.\n\n"
              "[Assistant]: I decided to keep integer cents in ledger/money.py.\n")
    summary = extractive_summary([{"role": "user", "content": prompt}], 2000)
    assert re.findall(r"^## (.+)$", summary, re.M) == ["Objective", "Relevant Files"]
    assert "Fix the rounding in ledger/money.py; never use float for amounts." in summary


def test_a_tag_the_prompt_names_is_the_answers_layout_and_a_tag_it_does_not_holds_conversation():
    """Hand-built: a prompt that names <notes> in a sentence and then shows an example of it; the
    conversation comes in a <conversation> block the prompt opens at the end of a sentence (a block, not a
    naming: nothing follows it on its line) and never names, and the conversation mentions <notes> itself."""
    prompt = ("Read the conversation, then write your answer inside <notes> tags. Here it is: <conversation>\n"
              "[User]: Fix the flaky upload test; never touch third_party/. Put your plan in <notes> too.\n\n"
              "[Assistant]: I decided to retry on 503 in src/upload/client.py.\n</conversation>\n\n"
              "Example of the answer:\n<notes>\n1. Goal:\n   [what the user asked]\n2. Decisions:\n   [what was decided and why]\n</notes>\n")
    summary = extractive_summary([{"role": "user", "content": prompt}], 2000)
    assert re.findall(r"^## (.+)$", summary, re.M) == ["Goal", "Decisions"]
    assert "[User]: Fix the flaky upload test; never touch third_party/. Put your plan in <notes> too." in bullets(summary)
    assert not {"[what the user asked]", "[what was decided and why]", "1. Goal:"} & bullets(summary)


def test_a_tag_a_speaker_names_is_the_speakers_words_not_the_answers_layout():
    """In Aider's request the conversation is the user message itself (aider.md §6): code such as
    `Promise<notes> {` names a tag in a sentence, and a `<notes>` block with headings follows in the same
    message. Both are the speakers' words, so the block is not an example of the answer: the summary has
    Aider's one section (its prompt asks for none), not the block's headings."""
    transcript = ("# USER\nFix the flaky upload test in tests/test_upload.py; never touch third_party/.\n"
                  "# ASSISTANT\nThe hook is `async reset(): Promise<notes> { ... }`; I decided to keep it.\n"
                  "<notes>\n## Heading from the code\n- a note the assistant wrote\n</notes>\n")
    summary = extractive_summary([{"role": "system", "content": "Summarise this partial conversation, briefly."},
                                  {"role": "user", "content": transcript}], 2000)
    assert re.findall(r"^## (.+)$", summary, re.M) == ["Summary"]
    assert "Fix the flaky upload test in tests/test_upload.py; never touch third_party/." in bullets(summary)

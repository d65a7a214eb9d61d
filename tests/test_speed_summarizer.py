"""The offline summarizer's fast paths (issue 18) against the straightforward computations they replace.

- the case-insensitive salience patterns are matched case-sensitively on lowered ASCII text, and
  `PATH` only through the alternative a line can match: checked against the patterns themselves on
  every line of a real transcript and on random lines made of their words in random case;
- a serialized conversation is read by paragraph (each memoized): the lines (without their list
  markers), positions and categories are those of the whole text read line by line;
- `_select` sorts plain tuples and stops when no line can fit: the same choice as scoring every
  line and sorting them by (score, newer first), on a real conversation at many budgets;
- `text_tokens` (a summary's output tokens, summed over its lines) is the tokenizer's count of the whole text;
- an update (a previous summary) chooses among the earlier summary's lines and the conversation's as
  if all were scored and sorted together, and keeps the earlier lines under the headings they had,
  as a hand-worked example says.
"""

from __future__ import annotations

import itertools
import random
import re
import string

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.llm import text_tokens
from compaction_bench.offline_models import (
    CASELESS,
    CONSTRAINT,
    DECISION,
    ERROR,
    LOWERED,
    LOWERING_DIFFERS,
    NEXT,
    PATH,
    PROGRESS,
    RECENCY,
    SALIENCE,
    _conversation_parts,
    _earlier_lines,
    _has_path,
    _select,
    _speaker,
    extractive_summary,
)
from compaction_bench.tokens import get_encoding
from tests.conftest import CORPORA

ROLLOUT = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"
LABELS = {"user": "User", "assistant": "Assistant", "reasoning": "Assistant thinking", "tool_call": "Assistant tool calls", "tool_result": "Tool result"}


@pytest.fixture(scope="module")
def conversation() -> str:
    """A real session serialized as Pi and Claude Code serialize one for a summary ("[Role]: text", blank lines between)."""
    (transcript,) = load_transcripts(ROLLOUT)
    return "\n\n".join(f"[{LABELS[i.kind]}]: {i.text or i.arguments or ''}" for i in transcript.items if i.kind in LABELS)


def without_list_markers(line: str) -> str:
    """A stripped line less its leading list markers: each "-", "*" or "•" followed by white space."""
    while len(line) > 1 and line[0] in "-*•" and line[1].isspace():
        line = line[1:].lstrip()
    return line


def reference_lines(text: str, role: str) -> list[tuple[str, str]]:
    """(line, speaker) of every summarizable line, read line by line: stripped, without list markers,
    at least 4 characters, cut at 400."""
    lines = [line[:400] for line in (without_list_markers(raw.strip()) for raw in text.splitlines()) if len(line) >= 4]
    return [(line, _speaker(line) if role == "conversation" else role) for line in lines]


def reference_categories(text: str, role: str) -> tuple[str, ...]:
    """A line's salience categories, with the module's patterns searched as they are written (a line
    of an earlier summary, role "summary", has every category its words give but the speaker's "goal")."""
    summary = role == "summary"
    categories = []
    if role == "user":
        categories.append("goal")
    if (role == "user" or summary) and CONSTRAINT.search(text):
        categories.insert(0, "constraint")
    if ERROR.search(text) and (role in ("tool", "user", "assistant") or summary):
        categories.append("error")
    if DECISION.search(text) and (role == "assistant" or summary):
        categories.append("decision")
    if PATH.search(text):
        categories.append("artifact")
    if (role == "assistant" or summary) and NEXT.search(text):
        categories.append("next")
    if (role == "assistant" or summary) and PROGRESS.search(text):
        categories.append("progress")
    return tuple(categories)


def take_greedily(
    scored: list[tuple[float, int, str, tuple[str, ...]]], budget: int
) -> list[tuple[int, str, tuple[str, ...]]]:
    """The summarizer's choice written plainly: every (score, position, line, categories) sorted by
    (-score, -position), each line taken while it is unseen and fits `budget`, in position order."""
    chosen, used, seen = [], 0, set()
    for _, position, line, categories in sorted(scored, key=lambda entry: (-entry[0], -entry[1])):
        if line in seen or used + len(line) + 3 > budget:
            continue
        chosen.append((position, line, categories))
        seen.add(line)
        used += len(line) + 3
    return sorted(chosen)


def reference_select(lines: list[tuple[int, str, tuple[str, ...]]], budget: int) -> list[tuple[int, str, tuple[str, ...]]]:
    """Score every line (position, line, categories), sort them all by (-score, -position), take greedily what fits."""
    last = max((position for position, _, _ in lines), default=0) or 1
    scored = [
        (sum(SALIENCE[c] for c in dict.fromkeys(categories)) + RECENCY * position / last, position, line, categories)
        for position, line, categories in lines
        if categories
    ]
    return take_greedily(scored, budget)


def test_the_patterns_words_are_lower_case():
    assert LOWERED == tuple(re.compile(p.pattern) for p in (ERROR, CONSTRAINT, DECISION, PROGRESS, NEXT))
    assert all(p.pattern == p.pattern.lower() and p.flags & re.I for p in CASELESS)


def test_lowered_text_matches_as_the_caseless_patterns(conversation):
    """A line without `LOWERING_DIFFERS` lowered matches the lowered patterns exactly where it matches the
    caseless ones: on a real session's lines and on made ones, ASCII or not (accents, arrows, dashes, the
    Kelvin sign, and the three characters themselves, which take the caseless patterns)."""
    rng = random.Random(18)
    words = [w for p in CASELESS for w in re.findall(r"[a-z' ]{2,}", p.pattern)] + ["x", "/", ".py", "_", "-", "1", "\t", "é"]
    words += ["→", "—", "’", "ß", "\u212a", "\u0130nstead", "\u0131nstead", "\u017fhould not", "do\u00a0not", "٣"]
    made = ["".join(rng.choice([str.upper, str.lower, str.title])(rng.choice(words)) + rng.choice(["", " ", "_", "."]) for _ in range(6))
            for _ in range(6000)]
    lines = [line for line, _ in reference_lines(conversation, "conversation")] + made
    assert sum(line.isascii() for line in lines) > 1000 and sum(not line.isascii() for line in lines) > 1000
    assert sum(LOWERING_DIFFERS.search(line) is not None for line in lines) > 100
    for line in lines:
        for caseless, lowered in zip(CASELESS, LOWERED, strict=True):
            expected = caseless.search(line) is not None
            if LOWERING_DIFFERS.search(line) is None:
                assert (lowered.search(line.lower()) is not None) == expected, (caseless.pattern, line)
        assert _has_path(line) == (PATH.search(line) is not None), line


def test_lowering_is_ignoring_case_for_every_character_but_three():
    """Over every code point: lowering gives one character of the same word-ness (so no word boundary moves),
    and a character matches an ASCII letter case-insensitively exactly when it lowers to that letter; the
    exceptions are the three characters of `LOWERING_DIFFERS`, for which the caseless patterns are kept."""
    word, letter = re.compile(r"\w"), re.compile("[a-z]", re.I)
    exceptions = set()
    for code in itertools.chain(range(0xD800), range(0xE000, 0x110000)):
        c = chr(code)
        low = c.lower()
        if (
            len(low) != 1
            or (word.fullmatch(c) is None) != (word.fullmatch(low) is None)
            or (letter.fullmatch(c) is not None) != (low in string.ascii_lowercase)
            or (low in string.ascii_lowercase and re.fullmatch(low, c, re.I) is None)
        ):
            exceptions.add(c)
    assert exceptions == {"\u0130", "\u0131", "\u017f"}
    assert all(LOWERING_DIFFERS.fullmatch(c) for c in exceptions)


def test_a_conversation_read_by_paragraph_has_the_lines_of_the_whole_text(conversation):
    tricky = "a\r\n\nline one\n\n\n   \n\nx" + "y" * 500 + "\n\n\n\r\n[User]: must fix\x0bsplit by a vertical tab\n\n[Tool result]: error: in src/a.py"
    for text in (tricky, conversation):
        parts = _conversation_parts(text)
        merged, offset = [], 0
        for part in parts:
            merged += [(offset + n, line, categories) for n, line, _, categories in part.candidates]
            offset += part.size
        lines = reference_lines(text, "conversation")
        assert offset == len(lines) and len(parts) > 1
        assert merged == [(n, line, reference_categories(line, role)) for n, (line, role) in enumerate(lines) if reference_categories(line, role)]


def test_selection_is_the_greedy_choice_over_all_lines_sorted(conversation):
    windows = [conversation[:5_000], conversation[: len(conversation) // 2], conversation]
    for text in windows:
        lines = [(n, line, reference_categories(line, role)) for n, (line, role) in enumerate(reference_lines(text, "conversation"))]
        parts = _conversation_parts(text)
        for budget in (-5, 0, 6, 7, 50, 400, 2_000, 6_000, 60_000):
            assert _select(parts, budget) == reference_select(lines, budget), (len(text), budget)


def test_an_update_chooses_among_the_earlier_summarys_lines_and_the_conversations_as_one_sorted_list(conversation):
    """The lines of an earlier summary take positions -len to -1 before the conversation's (their
    recency over the larger of the last position and their number), score the salience of their
    section's category and their words' categories, and compete with the conversation's lines in one
    greedy choice."""
    text = conversation[: len(conversation) // 3]
    lines = [(n, line, reference_categories(line, role)) for n, (line, role) in enumerate(reference_lines(text, "conversation"))]
    parts = _conversation_parts(text)
    section_category = {"Goal": "goal", "Errors": "error", "Next steps": "next"}
    written = [("Goal", f"- {line}") for line, _ in reference_lines(text, "conversation")[5::40]]
    written += [("Errors", "* build failed: missing crate serde"), ("Next steps", "- - run the suite again"), ("Goal", "- abc")]
    previous = "\n\n".join(f"## {title}\n" + "\n".join(line for t, line in written if t == title) for title in section_category)
    earlier_lines = _earlier_lines(previous, tuple(section_category))
    expected_earlier = list(dict.fromkeys((title, without_list_markers(line)) for title, line in written if len(without_list_markers(line)) >= 4))
    assert [(line.title, line.text) for line in earlier_lines] == expected_earlier
    earlier = [
        (n - len(expected_earlier), line, tuple(dict.fromkeys((section_category[title], *reference_categories(line, "summary")))))
        for n, (title, line) in enumerate(expected_earlier)
    ]
    assert [line.categories for line in earlier_lines] == [categories for _, _, categories in earlier]
    for few_new in (False, True):
        # also with fewer new lines than earlier ones: the oldest earlier line still loses only `RECENCY`
        new_lines = [line for line in lines if line[0] < len(earlier) // 2] if few_new else lines
        new_parts = _conversation_parts("\n".join(line for _, line, _ in new_lines)) if few_new else parts
        last = max(position for position, _, _ in new_lines) or 1
        span = max(last, len(earlier))
        for budget in (0, 50, 400, 2_000, 6_000, 60_000):
            scored = [(sum(SALIENCE[c] for c in dict.fromkeys(categories)) + RECENCY * position / (last if position >= 0 else span),
                       position, line, categories)
                      for position, line, categories in [*earlier, *new_lines] if categories]
            chosen = _select(new_parts, budget, earlier_lines)
            assert chosen == take_greedily(scored, budget), (few_new, budget)
            if budget == 60_000:
                assert any(position < 0 for position, _, _ in chosen) and any(position >= 0 for position, _, _ in chosen)


def test_an_earlier_summarys_lines_are_weighed_by_their_words_and_section_and_a_bare_line_as_a_goal():
    """A summary does not say who spoke a line: its categories are its words' and its section title's
    (when a rule reads one there), and a line with neither is weighed as a goal. The text alone decides."""
    titles = ("Summary", "Errors", "Next steps")
    written = ("## Summary\n- Port the CLI to Rust; never drop the old flags.\n- Keep it small\n- see src/cli.rs\n\n"
               "## Errors\n- missing crate serde in Cargo.toml\n\n## Next steps\n- (none)")
    assert {line.text: line.categories for line in _earlier_lines(written, titles)} == {
        "Port the CLI to Rust; never drop the old flags.": reference_categories("Port the CLI to Rust; never drop the old flags.", "summary"),
        "Keep it small": ("goal",),
        "see src/cli.rs": ("artifact",),
        "missing crate serde in Cargo.toml": tuple(dict.fromkeys(("error", *reference_categories("missing crate serde in Cargo.toml", "summary")))),
    }
    assert reference_categories("Port the CLI to Rust; never drop the old flags.", "summary") == ("constraint",)


def test_previous_summary_lines_stay_under_their_headings():
    previous = "## Goal\n- Port the CLI to Rust\n\n## Errors\n* build failed: missing crate serde\n\n## Notes\n- keep the old flags"
    summary = extractive_summary(
        [
            {"role": "user", "content": f"<previous-summary>\n{previous}\n</previous-summary>\nUpdate it.\n\n## Goal\n\n## Errors\n\n## Next steps"},
        ],
        2000,
    )
    # "Notes" is not a heading of the template: its category ("goal", the default) puts its line under "Goal".
    assert summary == "## Goal\n- Port the CLI to Rust\n- keep the old flags\n\n## Errors\n- build failed: missing crate serde\n\n## Next steps\n- (none)"


def test_a_summary_counted_by_lines_has_the_tokenizers_count(conversation):
    encoding = get_encoding("o200k_base")
    template = "Summarize:\n\n## Goal\n\n## Errors and fixes\n\n## Files\n\n## Next steps"
    summaries = [extractive_summary([{"role": "user", "content": f"<conversation>\n{conversation[:end]}\n</conversation>\n{template}"}], 2000)
                 for end in (3_000, 30_000, len(conversation))]
    tricky = "## A\n- x\n/usr/bin\n  indented\n\n\nend\r\n- é ü 日本\n\t- tab\n- 'quoted'\n1234567\n- (none)\n"
    for text in [*summaries, tricky, "", "one line"]:
        assert text_tokens(text) == len(encoding.encode(text, disallowed_special=())), text[:80]

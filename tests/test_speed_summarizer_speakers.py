"""A serialized conversation's speakers found by their text, then kept where a line starts (issue 18).

`SPEAKER_HEADING` (Aider's "# USER") and `LABELLED_TURN` (Pi's and OpenCode V2's "[User]: ") begin with
"^", which has the engine try every position of a long summary prompt. `_line_starts` searches the same
patterns without it (`SPEAKER_HEADING_TEXT`, `LABELLED_TURN_TEXT`, found by their first characters) and
keeps the matches at the start of a line. Checked against the anchored patterns' own matches on real
prompts (a Codex session serialized both ways), on generated texts made of the speakers, near misses and
line breaks, and on hand-worked texts.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.offline_models import (
    LABELLED_TURN,
    LABELLED_TURN_TEXT,
    SPEAKER_HEADING,
    SPEAKER_HEADING_TEXT,
    _line_starts,
)
from tests.test_speed_summarizer import conversation

__all__ = ["conversation"]  # a real session serialized with speaker labels, a fixture of tests/test_speed_summarizer.py

PAIRS = ((SPEAKER_HEADING, SPEAKER_HEADING_TEXT), (LABELLED_TURN, LABELLED_TURN_TEXT))
PIECES = ("# USER", "# ASSISTANT", "## USER", "# USERS", "[User]: ", "[Tool result]: ", "[User]:", "[Assistant]: ",
          "\n", "\n\n", "\r", "\r\n", " ", "x", "#", "[", "é")


def spans(matches: object) -> list[tuple[int, int, tuple[str | None, ...]]]:
    return [(m.start(), m.end(), m.groups()) for m in matches]  # type: ignore[attr-defined]


def same_matches(text: str) -> None:
    for anchored, unanchored in PAIRS:
        assert spans(_line_starts(unanchored, text)) == spans(anchored.finditer(text)), (anchored.pattern, text)


def test_the_patterns_are_the_anchored_ones_without_their_caret():
    for anchored, unanchored in PAIRS:
        assert anchored.pattern == "^" + unanchored.pattern and anchored.flags == unanchored.flags


def test_hand_worked_texts():
    text = "# USER\nhi # USER\n# USER x\n\n# ASSISTANT\n[User]: no\n a [User]: x\n[Tool result]: y"
    assert [m.group(0) for m in _line_starts(SPEAKER_HEADING_TEXT, text)] == ["# USER", "# ASSISTANT"]
    assert [m.start() for m in _line_starts(SPEAKER_HEADING_TEXT, text)] == [0, 27]
    assert [m.start() for m in _line_starts(LABELLED_TURN_TEXT, text)] == [39, 63]
    assert next(_line_starts(LABELLED_TURN_TEXT, "x\r[User]: y"), None) is None  # only a newline starts a line for "^"


def test_real_prompts_have_the_anchored_patterns_matches(conversation):
    aider = re.sub(r"^\[(User|Assistant)[^\]]*\]: ", lambda m: f"# {m.group(1).upper()}\n", conversation, flags=re.M)
    for text in (conversation, aider, "Summarize this.\n\n" + conversation):
        assert len(spans(LABELLED_TURN.finditer(text))) + len(spans(SPEAKER_HEADING.finditer(text))) > 100
        same_matches(text)


@settings(max_examples=3000, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=14))
def test_made_texts_have_the_anchored_patterns_matches(pieces):
    same_matches("".join(pieces))

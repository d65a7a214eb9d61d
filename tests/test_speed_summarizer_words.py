"""A line's salience categories found in fewer scans (issue 18) against the patterns searched one by one.

- the four word-bounded patterns (CONSTRAINT, DECISION, PROGRESS, NEXT) are found in one zero-width scan
  of a lowered line (`BOUNDED_WORDS`), which reports the longest of their words at each word boundary, a
  word counting the categories of the shorter words bounded inside it (`WORD_CATEGORIES`);
  The scan's alternation is the words' trie (`longest_first`), which takes the longest word that fits
  as an alternation of the words sorted longest first does;
- a slashed path is a "/" between two of its characters (`PATH_SLASH`), found without `SLASHED_PATH`'s
  backtracking; a file name is looked for only where its end, a "." and an extension, is (`FILE_EXTENSION`).

Each is checked against the module's patterns searched as written (`reference_categories`), on every line
of a real session, on generated lines made of the patterns' words, their pieces and the characters around
them in any case, and on hand-worked lines.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction_bench.offline_models import (
    BOUNDED,
    CONSTRAINT,
    PATH,
    PATH_SLASH,
    SLASHED_PATH,
    WORD_CATEGORIES,
    _bounded_categories,
    _bounded_words,
    _categories,
    _has_path,
    longest_first,
)
from tests.test_speed_summarizer import conversation, reference_categories, reference_lines

__all__ = ["conversation"]  # the real session's lines, a fixture of tests/test_speed_summarizer.py

ROLES = ("user", "assistant", "tool", "summary", "system")
#: Pieces of lines: the patterns' words and their parts ("will" of "will use", "don" of "don't"), letters that
#: extend a word ("d", "s"), what separates words or not ("'", "_", "-", "é", digits), path characters, and the
#: three characters that lowering does not treat as matching ignores case ("İ", "ı", "ſ").
PIECES = sorted(
    {word for _, _, lowered in BOUNDED for word in _bounded_words(lowered)}
    | {"will", "use", "don", "t", "we", "ll", "so", "to", "do", "not", "still", "need", "error", "exit code 1", "src", "a.py"}
    | {" ", "  ", "'", "_", "-", ".", "/", "d", "s", "é", "3", "\u00a0", "İnstead", "ınstead", "ſhould not", "ſince", "x"}
)
LINES = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from((str.lower, str.upper, str.title))), max_size=10).map(
    lambda pieces: "".join(case(piece) for piece, case in pieces)
)


def scanned(line: str) -> frozenset[str]:
    """The word-bounded categories of a line as `_categories` finds them (lowered first where lowering is exact)."""
    lowered = line.isascii() or re.search("[\u0130\u0131\u017f]", line) is None
    return _bounded_categories(line.lower() if lowered else line, lowered)


def searched(line: str) -> frozenset[str]:
    """The word-bounded categories of a line: each caseless pattern searched as written."""
    return frozenset(category for category, caseless, _ in BOUNDED if caseless.search(line))


def test_the_words_are_the_patterns_alternatives_with_the_optional_letter_spelled_out():
    assert CONSTRAINT.pattern.count("required?") == 1
    words = _bounded_words(CONSTRAINT)
    assert "require" in words and "required" in words and "required?" not in words
    # every word is a literal text of lower case letters, spaces and apostrophes that its pattern matches whole
    for category, caseless, _ in BOUNDED:
        for word in _bounded_words(caseless):
            assert re.fullmatch("[a-z' ]+", word) and caseless.fullmatch(word), word
            assert category in WORD_CATEGORIES[word]


def test_a_word_counts_the_shorter_words_bounded_inside_it():
    # worked by hand: "will use" (a decision) starts with "will" (a next step) followed by a space; "required"
    # starts with "require", but not at a word boundary; "don't" starts with no word of its own
    assert WORD_CATEGORIES["will use"] == {"decision", "next"}
    assert WORD_CATEGORIES["will"] == {"next"}
    assert WORD_CATEGORIES["required"] == {"constraint"}
    assert WORD_CATEGORIES["don't"] == {"constraint"}
    assert all(len(categories) == 1 for word, categories in WORD_CATEGORIES.items() if word != "will use")


def test_hand_worked_lines():
    assert scanned("We will use uv instead") == {"decision", "next"}  # "will use" and "will" start at the same place
    assert scanned("I'll go to do not-yet-done work") == {"constraint", "next", "progress"}  # "to do" overlaps "do not"
    assert scanned("the planned rewrite is undone, abandoned") == frozenset()  # words inside longer words
    assert scanned("requirements are required_by_law") == frozenset()  # "_" joins words
    assert scanned("REQUIRE-ment") == {"constraint"}  # "-" does not
    assert scanned("İnstead, it's DONE") == {"decision", "progress"}  # read by the caseless patterns
    assert scanned("") == frozenset()


def test_every_line_of_a_real_session_has_the_categories_of_the_patterns(conversation):
    lines = [line for line, _ in reference_lines(conversation, "conversation")]
    assert len(lines) > 1500
    found = 0
    for line in lines:
        expected = searched(line)
        assert scanned(line) == expected, line
        found += bool(expected)
        assert (PATH_SLASH.search(line) is not None) == (SLASHED_PATH.search(line) is not None), line
        assert _has_path(line) == (PATH.search(line) is not None), line
        for role in ROLES:
            assert _categories.__wrapped__(line, role) == reference_categories(line, role), (line, role)
    assert 200 < found < len(lines) - 200  # both kinds of line are there


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=LINES)
def test_made_lines_have_the_categories_of_the_patterns(line):
    assert scanned(line) == searched(line)
    for role in ROLES:
        assert _categories.__wrapped__(line, role) == reference_categories(line, role)


@settings(max_examples=3000, deadline=None)
@given(line=st.text(alphabet="ab_-./ \u00e9\u00a03", max_size=16))
def test_a_slashed_path_is_a_slash_between_two_of_its_characters(line):
    assert (PATH_SLASH.search(line) is not None) == (SLASHED_PATH.search(line) is not None)
    assert _has_path(line) == (PATH.search(line) is not None)


def test_hand_worked_paths():
    assert all(PATH_SLASH.search(line) for line in ("src/a", "./x", "a/-", "é/3", "see a/b/c now"))
    assert not any(PATH_SLASH.search(line) for line in ("/", "a/", "/b", "a / b", "and /x", "\u00a0/\u00a0"))


#: Words over a small alphabet, so that many are prefixes of others, and texts of them with separators
SMALL_WORDS = st.lists(st.text(alphabet="ab '", min_size=1, max_size=5), min_size=1, max_size=12)


@settings(max_examples=2000, deadline=None)
@given(words=SMALL_WORDS, text=st.text(alphabet="ab '-_\u00e9", max_size=30))
def test_the_trie_alternation_takes_the_word_an_alternation_sorted_longest_first_takes(words, text):
    sorted_alternation = "|".join(map(re.escape, sorted(set(words), key=len, reverse=True)))
    for template in (r"\b(?=({}){})", r"({}){}"):  # at every word boundary, and where the words end at one
        expected = re.compile(template.format(sorted_alternation, r"\b")).findall(text)
        assert re.compile(template.format(longest_first(words), r"\b")).findall(text) == expected
    assert re.fullmatch(f"(?:{longest_first(words)})", words[-1])


def test_hand_worked_trie():
    # "ab" ends where "abc" and "abd" go on: both are tried before it; "b" is a branch of its own
    assert longest_first(["abc", "ab", "abd", "b"]) == "(?:ab(?:c|d)?|b)"
    assert re.findall(r"\b(?=(" + longest_first(["ab", "abc"]) + r")\b)", "abc ab abcd") == ["abc", "ab"]


FILE_PIECES = st.sampled_from(["a", "é", "_", "-", ".", " ", "/", "py", "c", "cpp", "json", "jsonl", "x.h", ".md", "3", "\u00a0"])


@settings(max_examples=3000, deadline=None)
@given(line=st.lists(FILE_PIECES, max_size=10).map("".join))
def test_a_file_name_is_found_where_its_extension_ends_a_word(line):
    assert _has_path(line) == (PATH.search(line) is not None)

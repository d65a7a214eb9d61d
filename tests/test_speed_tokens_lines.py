"""`LINE_CUT` positions are boundaries of tiktoken's own pre-tokenization, in both encodings.

`TokenCounter` counts a text from its lines (`line_pieces`) and `common_prefix` compares texts a line
at a time; both rest on the claim that a cut after a newline whose next character is neither
whitespace nor "/" is where one of tiktoken's pre-tokenization pieces ends and the next begins (BPE
never merges across pieces). Checked here against the independent answers: the pieces that each
encoding's own pattern (`Encoding._pat_str`, matched with the `regex` module as tiktoken matches it)
finds in the text, and the token ids tiktoken gives for the whole text, which must be the
concatenation of the ids of its lines, on random texts of the characters the patterns treat
specially and on the real transcripts' texts.
"""

from __future__ import annotations

import itertools

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.importing import load_transcripts
from compaction_bench.tokens import get_encoding, line_pieces
from tests.conftest import CORPORA

ENCODINGS = ("o200k_base", "cl100k_base")
#: what decides a piece around a newline: newlines and carriage returns, whitespace of every kind, "/",
#: letters of each case class and combining marks, numbers, punctuation, contractions, and symbols
AROUND_NEWLINES = ["\n", "\n\n", "\r", "\r\n", " ", "  ", "\t", "/", "a", "A", "ǅ", "\u0301", "É", "中", "'s", "'LL", "1", "1234",
                   ".", "{", "#", "-", "`", "😀", "\u00a0", "\u2028", "\x85", "\x0b", "\x1c", "\u3000", "<|endoftext|>"]
REAL = [
    "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl",
    "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl",
]


def cut_positions(text: str) -> set[int]:
    """Where `line_pieces` cuts `text` (each piece's start but the first)."""
    return set(itertools.accumulate(len(piece) for piece in line_pieces(text)[:-1]))


def pattern_boundaries(encoding: str, text: str) -> set[int]:
    """Where tiktoken's pattern for `encoding` starts a piece of `text` (every position it covers is in some piece)."""
    return {match.start() for match in regex.finditer(get_encoding(encoding)._pat_str, text)}


def ids_by_lines(encoding: str, text: str) -> list[int]:
    encode = get_encoding(encoding).encode_ordinary
    return [token for piece in line_pieces(text) for token in encode(piece)]


@pytest.mark.parametrize("encoding", ENCODINGS)
@settings(max_examples=2000, deadline=None)
@given(text=st.lists(st.sampled_from(AROUND_NEWLINES), max_size=40).map("".join))
def test_each_line_cut_is_where_the_encodings_own_pattern_starts_a_piece(encoding, text):
    assert cut_positions(text) <= pattern_boundaries(encoding, text)
    assert ids_by_lines(encoding, text) == get_encoding(encoding).encode(text, disallowed_special=())


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("path", REAL)
def test_the_ids_of_real_texts_are_the_ids_of_their_lines(encoding, path):
    texts = sorted({t for s in load_transcripts(CORPORA / path) for i in s.items for t in (i.text, i.arguments or "") if "\n" in t})
    assert len(texts) > 100
    joined = "\n".join(texts)  # texts wrapped one after another, as a summary request wraps them
    assert sum(len(line_pieces(t)) - 1 for t in texts) > 1000
    for text in [*texts, joined]:
        assert cut_positions(text) <= pattern_boundaries(encoding, text)
        assert ids_by_lines(encoding, text) == get_encoding(encoding).encode_ordinary(text)

"""The token counter memoizes each long line it encodes, and its counts stay tiktoken's.

`TokenCounter._count_by_lines` (compaction_bench.tokens) encodes a line of `LINES_FROM` characters or
more on its own, the first line of a text included, and memoizes it: on random texts made of short
and long lines (a long line first, last, alone, between runs of short ones, some counted before)
every count equals tiktoken's count of the whole text, and a long line is sent to the tokenizer once
however many new texts hold it.
"""

from __future__ import annotations

import random

import pytest

from compaction_bench.tokens import LINES_FROM, TokenCounter, get_encoding, line_pieces


class _Recording(TokenCounter):
    """A counter that records the texts it sends to the tokenizer."""

    def __init__(self, encoding: str) -> None:
        super().__init__(encoding)
        self.sent: list[str] = []

    def encode(self, text: str) -> list[int]:
        self.sent.append(text)
        return super().encode(text)


def _line(rng: random.Random, long: bool) -> str:
    words = ["alpha", "beta's", " gamma", "δ", "1234", "/path", "  indent", "```", "}", "- item", "😀", "\t", "x"]
    size = rng.randrange(LINES_FROM, LINES_FROM * 3) if long else rng.randrange(0, 60)
    text = ""
    while len(text) < size:
        text += rng.choice(words)
    return text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_texts_with_long_lines_have_the_tokenizers_count_and_each_long_line_is_encoded_once(encoding):
    rng = random.Random(3)
    encode = get_encoding(encoding).encode_ordinary
    counter = _Recording(encoding)
    long_lines = [f"[{n}] {_line(rng, True)}" for n in range(12)]
    for n in range(150):
        lines = [rng.choice(long_lines) if rng.random() < 0.15 else _line(rng, False) for _ in range(rng.randrange(1, 40))]
        if rng.random() < 0.3:
            lines.insert(0, rng.choice(long_lines))  # a long first line
        text = "\n".join(lines) + rng.choice(("", "\n"))
        pieces = line_pieces(text)
        for piece in rng.sample(pieces, k=min(len(pieces), rng.randrange(3))):
            counter.count(piece)  # lines counted before
        assert counter.count(text) == len(encode(text)), n
        assert counter.count(f"header {n}\n{text}") == len(encode(f"header {n}\n{text}")), n
    long_sent = [text for text in counter.sent if len(text) >= LINES_FROM]
    for line in long_lines:  # each long line's pieces (with or without its newline) were tokenized once at most
        for piece in (f"{line}\n", line):
            assert long_sent.count(piece) <= 1, piece[:40]
    assert any(piece in long_sent for line in long_lines for piece in (f"{line}\n", line))

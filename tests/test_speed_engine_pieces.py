"""The engine's faster structures of this pass give what the straightforward computation gives.

- `line_pieces` and `paragraph_pieces` (compaction_bench.tokens) find their cuts with a search led by a
  literal newline: they split exactly where `LINE_CUT.split` and `PARAGRAPH_CUT.split` do, on random
  texts of the characters that decide a cut and on the real transcripts' texts.
- `TokenCounter.count` memoizes a long text it counted by paragraphs: the text is split once however
  often it is counted, and its count stays tiktoken's. A long text that differs from one counted before
  only in its first line (Gemini CLI's header naming a truncated output's file by a new number at every
  request) is neither split again nor tokenized but for that line.
- `LogView` indexes a message by position as the tuple of its messages does (negative positions and
  out-of-range errors included), and `Cumulative.last` is its last total after any prefix and extension.
- `SimulatedProvider._bills_hidden` reads from the two messages whether either request bills hidden
  reasoning for them: the same answer as the difference of each request's billed and visible counts.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench import tokens
from compaction_bench.importing import load_transcripts
from compaction_bench.log_view import Cumulative, LogView
from compaction_bench.profiles import get_profile
from compaction_bench.provider import SimulatedProvider, _Entry
from compaction_bench.request import Message
from compaction_bench.tokens import (
    LINE_CUT,
    PARAGRAPH_CUT,
    HiddenTokens,
    TokenCounter,
    get_encoding,
    line_pieces,
    paragraph_pieces,
)
from tests.conftest import CORPORA

#: characters that decide a cut: newlines, whitespace of every kind (Unicode's too), "/", and others
DECIDING = ["\n", "\n\n", " ", "\t", "\r", "/", "a", "É", "1", ".", "\u00a0", "\u2028", "\x85", "\x0b", "\x1c", "\u3000", "<", "😀"]
REAL = [
    "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl",
    "codex-rollout-jsonl/Monotoba__OpenPrintKit/rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl",
]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(DECIDING), max_size=40).map("".join))
def test_pieces_cut_where_the_cut_patterns_split(text):
    assert line_pieces(text) == LINE_CUT.split(text)
    assert paragraph_pieces(text) == PARAGRAPH_CUT.split(text)


@pytest.mark.parametrize("path", REAL)
def test_pieces_of_real_texts_cut_where_the_cut_patterns_split(path):
    source = CORPORA / path
    texts = {t for s in load_transcripts(source) for i in s.items for t in (i.text, i.arguments or "") if "\n" in t}
    assert len(texts) > 100
    for text in texts:
        assert line_pieces(text) == LINE_CUT.split(text)
        assert paragraph_pieces(text) == PARAGRAPH_CUT.split(text)


def _paragraphs_text(seed: int) -> str:
    rng = random.Random(seed)
    words = ["alpha", " beta", "γ", "1234", "/x", "  indent", "}", "- item", "\n", "\n\n"]
    return "".join(rng.choice(words) for _ in range(6000))


def test_a_long_text_is_split_into_paragraphs_once_and_keeps_the_tokenizers_count(monkeypatch):
    text = _paragraphs_text(3)
    assert len(text) >= tokens.PARAGRAPHS_FROM and len(paragraph_pieces(text)) > 1
    splits: list[str] = []
    split = tokens.paragraph_pieces
    monkeypatch.setattr(tokens, "paragraph_pieces", lambda t: splits.append(t) or split(t))
    counter = TokenCounter("o200k_base")
    expected = len(get_encoding("o200k_base").encode(text, disallowed_special=()))
    assert [counter.count(text) for _ in range(3)] == [expected] * 3
    assert splits == [text]


def test_a_long_text_with_a_new_first_line_costs_the_tokenizer_that_line(monkeypatch):
    """Gemini CLI renames a truncated output's file at every request ("... For full output see:
    <folder>/shell_<n>.txt" over the same cut body): each text is new, only its first line differs. The body
    is split into paragraphs for the first text, and for the second, whose count remembers it; after that
    only the header is tokenized. A long text met once leaves no copy of its body in the memo."""
    body = "Traceback (most recent call last):\n" + _paragraphs_text(5)  # (its first character starts a line: a cut)
    counter = TokenCounter("o200k_base")
    encoded: list[str] = []
    encode = counter.encode
    monkeypatch.setattr(counter, "encode", lambda t: encoded.append(t) or encode(t))
    splits: list[str] = []
    split = tokens.paragraph_pieces
    monkeypatch.setattr(tokens, "paragraph_pieces", lambda t: splits.append(t) or split(t))
    tiktoken = get_encoding("o200k_base")
    for number in (7, 8, 9, 1234):
        header = f"Output too large. Showing first 8,000 and last 32,000 characters. For full output see: /tmp/out/shell_{number}.txt\n"
        text = header + body
        assert len(text) >= tokens.PARAGRAPHS_FROM and len(paragraph_pieces(text)) > 1
        encoded.clear()
        splits.clear()
        assert counter.count(text) == len(tiktoken.encode(text, disallowed_special=()))
        assert (body in counter._memo) == (number != 7)
        if number in (7, 8):
            assert splits == [text]
        else:
            assert encoded == [header] and not splits
    other = TokenCounter("o200k_base")
    for n in range(3):  # texts of different bodies behind the same header: none is remembered
        rest = "[User]: " + _paragraphs_text(10 + n)
        text = "<conversation>\n" + rest
        assert other.count(text) == len(tiktoken.encode(text, disallowed_special=()))
        assert rest not in other._memo


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 6))
def test_a_view_indexes_a_position_as_the_tuple_of_its_messages(log_size, length, tail_size):
    length = min(length, log_size)
    log = [Message("user", f"l{n}") for n in range(log_size)]
    tail = tuple(Message("assistant", f"t{n}") for n in range(tail_size))
    view, expected = LogView(log, length, tail), (*log[:length], *tail)
    for index in range(-len(expected) - 3, len(expected) + 3):
        if -len(expected) <= index < len(expected):
            assert view[index] is expected[index], index
        else:
            with pytest.raises(IndexError):
                view[index]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 700), st.integers(0, 600)), max_size=6))
def test_the_last_total_of_a_cumulative_is_its_last_element(steps):
    totals, plain = Cumulative(), []
    assert totals.last() == 0 and totals.last(-1) == -1
    for cut, added in steps:
        cut = min(cut, len(plain))
        totals, plain = totals.prefix(cut), plain[:cut]
        assert totals.last(-1) == (plain[-1] if plain else -1)
        new = list(range(len(plain) + 1, len(plain) + added + 1))
        totals.extend(new)
        plain += new
        assert totals.last(-1) == (plain[-1] if plain else -1)


def test_hidden_billing_read_from_the_messages_is_the_difference_of_billed_and_visible_counts():
    """Random requests of user messages, reasoning (some of it billed, some of it not), assistant
    messages, tool results and messages of a user message with reasoning, their last user message anywhere: for every position the two
    requests share, `_bills_hidden` says what their billed counts minus their visible counts say."""
    rng = random.Random(11)
    reasoning = {f"r{n}": rng.choice([0, 5, 300]) for n in range(30)}
    users = frozenset(f"u{n}" for n in range(30))
    provider = SimulatedProvider(get_profile("32k"), hidden=HiddenTokens(reasoning, users))
    pool = [Message("user", f"ask {n}", item_ids=(f"u{n}",)) for n in range(30)]
    pool += [Message("reasoning", f"think {n}", item_ids=(f"r{n}",)) for n in range(30)]
    pool += [Message("assistant", f"say {n}", item_ids=(f"a{n}", f"r{n}")) for n in range(30)]
    pool += [Message("tool", f"out {n}", tool_call_id=f"c{n}", item_ids=(f"t{n}",)) for n in range(30)]
    # a message built from a user message and reasoning both: it bills nothing as its request's last user message
    pool += [Message("user", f"ask and think {n}", item_ids=(f"u{n}", f"r{n}")) for n in range(30)]
    checked = 0
    for _ in range(400):
        shared = [rng.choice(pool) for _ in range(rng.randrange(0, 12))]
        kept_messages = tuple(shared + [rng.choice(pool) for _ in range(rng.randrange(0, 8))])
        messages = tuple(shared + [rng.choice(pool) for _ in range(rng.randrange(0, 8))])
        entries = []
        for request in (kept_messages, messages):
            last_user = provider._last_user(request, None, 0)
            visible, boundaries = provider._counts(request, None, 0, last_user)
            entries.append(_Entry(request, visible, boundaries, None, last_user, None))
        kept, current = entries

        def billed_hidden(entry: _Entry, n: int) -> int:
            before = entry.boundaries[n - 1] - entry.visible[n - 1] if n else 0
            return entry.boundaries[n] - entry.visible[n] - before

        for n in range(min(len(kept_messages), len(messages))):
            expected = bool(billed_hidden(kept, n) or billed_hidden(current, n))
            assert provider._bills_hidden(kept, n, messages, current.last_user) == expected, (kept_messages, messages, n)
            checked += expected
    assert checked > 100  # the billed case is met, not only the unbilled one

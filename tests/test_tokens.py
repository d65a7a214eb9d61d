"""Offline tokenizers (published token ids) and the upstream estimators."""

from __future__ import annotations

import pytest

from compaction_bench.tokens import (
    TokenCounter,
    codex_estimate,
    get_encoding,
    litellm_messages_tokens,
    opencode_estimate,
    pi_estimate,
    utf16_len,
)

TEST_STRING = "hello world, compaction!"


def test_published_token_ids_offline(no_network):
    # Ids published in docs/specs/environment.md §1, produced by tiktoken's own downloaded files.
    get_encoding.cache_clear()
    assert TokenCounter("o200k_base").encode(TEST_STRING) == [24912, 2375, 11, 1050, 1976, 0]
    assert TokenCounter("cl100k_base").encode(TEST_STRING) == [15339, 1917, 11, 1391, 1335, 0]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_special_token_text_is_encoded_as_ordinary_text(encoding):
    """The counter encodes with `encode_ordinary`: the ids of `encode(text, disallowed_special=())`, the call
    that reads special-token text as ordinary text (a transcript may quote `<|endoftext|>`), not the special ids."""
    counter = TokenCounter(encoding)
    special = counter.encoding.special_tokens_set
    texts = [f"before {token} after" for token in sorted(special)] + ["<|endoftext|><|endoftext|>", "a <|fim_prefix", TEST_STRING, "é😀\n\n  x", "a lone \ud83d surrogate"]
    for text in texts:
        ids = counter.encode(text)
        assert ids == counter.encoding.encode(text, disallowed_special=()), text
        assert not set(ids) & {counter.encoding.encode_single_token(token) for token in special}, text


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(Exception, match="unknown encoding 'r50k_base'"):
        get_encoding("r50k_base")


def test_codex_estimate_counts_utf8_bytes():
    assert codex_estimate("") == 0
    assert codex_estimate("abcd") == 1
    assert codex_estimate("abcde") == 2  # ceil(5/4)
    assert codex_estimate("é") == 1  # 2 bytes
    assert codex_estimate("😀😀😀") == 3  # 12 bytes


def test_utf16_estimators_use_code_units():
    # "😀" is one code point but two UTF-16 code units.
    assert utf16_len("😀") == 2
    assert utf16_len("a😀b") == 4
    assert pi_estimate("a😀b") == 1  # ceil(4/4)
    assert pi_estimate("a😀bc") == 2  # ceil(5/4)
    # OpenCode rounds half up: 6/4 = 1.5 -> 2, 5/4 = 1.25 -> 1, 2/4 = 0.5 -> 1.
    assert opencode_estimate("😀😀ab") == 2
    assert opencode_estimate("😀😀a") == 1
    assert opencode_estimate("ab") == 1
    assert opencode_estimate("a") == 0


def test_counter_memoizes_without_changing_counts():
    counter = TokenCounter("o200k_base")
    first = counter.count(TEST_STRING)
    assert first == 6
    assert counter.count(TEST_STRING) == first
    assert counter.count("") == 0


def test_hidden_reasoning_is_billed_only_in_the_current_turn():
    """Recorded reasoning counts are split over the response's reasoning items; an item without one
    is estimated from its encrypted length (codex.md §6); reasoning before the request's last real
    user message is not billed (codex.md §1.3)."""
    from compaction_bench.request import Message
    from compaction_bench.tokens import HiddenTokens, encrypted_reasoning_estimate
    from compaction_bench.transcript import Item, Transcript, Usage

    items = (
        Item("u1", "user", "first", turn=0),
        Item("r1", "reasoning", "", response=0, turn=0, meta={"encrypted_len": 4000}),
        Item("r2", "reasoning", "", response=0, turn=0, meta={"encrypted_len": 4000}),
        Item("a1", "assistant", "ok", response=0, turn=0, usage=Usage(input=10, output=400, reasoning=301)),
        Item("u2", "user", "second", turn=1),
        Item("r3", "reasoning", "", response=1, turn=1, meta={"encrypted_len": 4000}),
        Item("a2", "assistant", "done", response=1, turn=1, usage=Usage(input=20, output=5)),
        Item("u3", "user", "third", turn=2),
        Item("t4", "reasoning", "visible thinking, counted as its text", response=2, turn=2),
        Item("a3", "assistant", "ok", response=2, turn=2, usage=Usage(input=30, output=50, reasoning=40)),
    )
    hidden = HiddenTokens.of(Transcript("t", items))
    assert hidden.reasoning == {"r1": 151, "r2": 150, "r3": encrypted_reasoning_estimate(4000)}  # t4 is not hidden
    assert encrypted_reasoning_estimate(4000) == (4000 * 3 // 4 - 650 + 3) // 4 == 588
    assert (hidden.recorded, hidden.estimated) == (2, 1)
    messages = [Message("user", "first", item_ids=("u1",)), Message("reasoning", "", item_ids=("r1",)),
                Message("reasoning", "", item_ids=("r2",)), Message("assistant", "ok", item_ids=("a1",))]
    assert hidden.per_message(messages) == [0, 151, 150, 0]
    later = [*messages, Message("user", "second", item_ids=("u2",)), Message("reasoning", "", item_ids=("r3",))]
    assert hidden.per_message(later) == [0, 0, 0, 0, 0, 588]


def test_true_counts_match_recorded_input_on_real_codex_rollouts(capsys):
    """issue 11, token truth: replay `none` with recorded usage on the five Codex rollouts and compare
    the true count (plus the session's unrecorded system prompt and tools, estimated from its first
    request, which is therefore left out) with the provider's recorded input of every request."""
    import statistics

    from compaction_bench.importing import load_transcript
    from compaction_bench.replay import replay
    from compaction_bench.tokens import unrecorded_tokens
    from tests.conftest import corpus_files

    files = corpus_files("codex-rollout-jsonl")
    assert len(files) == 5
    errors: list[float] = []
    lines = []
    for path in files:
        result = replay(load_transcript(path), "none", profile="1m", usage="recorded")
        rows = [r for r in result.turn_requests if r.usage is not None and r.usage.input > 0 and not r.overflow]
        base = unrecorded_tokens(rows[0].usage.input, rows[0].true_tokens)
        own = [abs(r.true_tokens + base - r.usage.input) / r.usage.input for r in rows[1:]]
        errors += own
        lines.append(f"{path.name[:44]}: {len(own)} requests, unrecorded {base:,} tokens, median {statistics.median(own):.2%}")
    errors.sort()
    median, p90 = statistics.median(errors), errors[int(0.9 * (len(errors) - 1))]
    with capsys.disabled():
        print("\n" + "\n".join(lines) + f"\nall {len(errors)} requests: median |error| {median:.2%}, p90 {p90:.2%}")
    assert median <= 0.03


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_a_long_text_counted_by_paragraphs_has_the_tokenizers_count(encoding):
    """`PARAGRAPH_CUT`, `LINE_CUT` and `chunk_pieces` claim their cut points are pre-tokenization boundaries of both
    encodings, so the sum of the parts' counts is the whole text's. Checked against tiktoken on random text
    built from the characters the patterns treat specially, on the real corpora's texts joined as a summary
    request joins them, and on their JSON-escaped forms (one long line each) behind a prefix, as a
    serialized tool call holds the call's arguments after they were counted alone."""
    import json
    import random
    import re

    from compaction_bench.tokens import LINE_CUT, PARAGRAPH_CUT, PARAGRAPHS_FROM, chunk_pieces
    from tests.conftest import CORPORA

    encode = get_encoding(encoding).encode
    alphabet = ["\n", "\n\n", "\n\n\n", " ", "  ", "\t", "\r", "\r\n", "/", "'", "'s", "'LL", "a", "Ab", "É", "é", "1", "1234", ".",
                "!", "(", "{", "-", "#", "`", "😀", "中文", "\u00a0", "\u2028", "\x85", "\x0b", "<|endoftext|>", "\\n", '"',
                ",", ";", ":", ")", "]", "_", "x, y", "a) b", "1. ", '": ']
    rng = random.Random(0)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40)))
        inside_each_separator = re.split(r"(?<=,)(?= )", text)  # every cut `chunk_pieces` may make
        for parts in (PARAGRAPH_CUT.split(text), LINE_CUT.split(text), inside_each_separator):
            assert "".join(parts) == text
            assert sum(len(encode(p, disallowed_special=())) for p in parts) == len(encode(text, disallowed_special=())), (text, parts)
    files = [p for p in sorted(CORPORA.glob("*/*/*")) if p.is_file()][:30]
    texts = [p.read_text(encoding="utf-8", errors="replace")[:30_000].strip() for p in files]
    counter = TokenCounter(encoding)
    for n in range(60):
        text = "\n\n".join(rng.sample(texts, 4))
        assert len(text) >= PARAGRAPHS_FROM and len(PARAGRAPH_CUT.split(text)) > 1
        assert counter.count(text) == len(encode(text, disallowed_special=())), n
    chunked = 0
    for n, text in enumerate(texts):
        line = json.dumps({"text": text[:6_000]})  # one line: its newlines escaped
        chunked += len(chunk_pieces(line)) > 1
        for whole in (line, f"[Assistant tool call]: shell({line[1:-1]})", f"{n}: {line}"):
            assert counter.count(whole) == len(encode(whole, disallowed_special=())), (n, whole[:80])
    assert chunked >= len(texts) // 2  # most such lines are counted by chunks


def test_the_common_token_prefix_of_two_texts_is_found_from_the_paragraph_where_they_differ():
    """`TokenCounter.common_prefix` against encoding both texts whole and comparing the ids, for edits
    anywhere in real transcript texts and in their JSON-escaped forms (a character, a paragraph appended,
    removed or replaced, a truncation) and around blank lines, "/" and the chunk cuts of long lines."""
    import json
    import random

    from tests.conftest import CORPORA

    counter = TokenCounter("o200k_base")

    def whole(a: str, b: str) -> int:
        left, right = counter.encode(a), counter.encode(b)
        return next((n for n, (x, y) in enumerate(zip(left, right, strict=False)) if x != y), min(len(left), len(right)))

    rng = random.Random(4)
    files = [p for p in sorted(CORPORA.glob("*/*/*")) if p.is_file()][:12]
    texts = [p.read_text(encoding="utf-8", errors="replace")[:20_000] for p in files]
    texts += ["intro\n\nfirst paragraph\n\n/path\n\n  indented\n\nlast", "a\n\n\n\nb\n\nc", "x" * 50]
    texts += [json.dumps(text[:8_000]) for text in texts[:6]]  # long lines, compared by their chunks (`chunk_pieces`)
    edits = ["", "\n\n", "\n\nnew paragraph", " ", "/", "Z", "\n\n/x", "\n\n\n", "é😀", ", ", "a) ", " b"]
    for text in texts:
        for _ in range(25):
            at = rng.randrange(len(text) + 1)
            cut = rng.choice([0, 0, 1, 5, 200])
            other = text[:at] + rng.choice(edits) + text[at + cut :]
            if rng.random() < 0.2:
                other = other[: rng.randrange(len(other) + 1)]
            assert counter.common_prefix(text, other) == whole(text, other), (at, cut)
            assert counter.common_prefix(other, text) == whole(other, text), (at, cut)
    assert counter.common_prefix("same\n\ntext", "same\n\ntext") == counter.count("same\n\ntext")
    # a line whose ids begin the other's: the following lines decide, on either side
    for a, b in [("one\nhello", "one\nhello world\nmore"), ("p\nab", "p\nab\ncd\nef"), ("x\nfoo\nbar\nbaz", "x\nfoo\nbar\nbazz\n"),
                 ("q\n" + "word " * 300, "q\n" + "word " * 300 + "\nnext\nline"), ("r\nab\n", "r\nab\n\n\nc")]:
        assert counter.common_prefix(a, b) == whole(a, b), (a, b)
        assert counter.common_prefix(b, a) == whole(b, a), (a, b)


def test_a_long_line_is_cut_into_chunks_inside_separators_at_least_the_minimum_apart():
    """`chunk_pieces` against its definition, cut by cut: each chunk but the last ends with the comma of a
    ", " whose comma is the first at `CHUNK_MIN` characters or more after the chunk's start. And a line
    that holds another behind a prefix shares that line's chunks from the first cut both make."""
    import json
    import random

    from compaction_bench.tokens import CHUNK_MIN, chunk_pieces
    from tests.conftest import CORPORA

    def reference(line: str) -> list[str]:
        cuts, start = [], 0
        for n in range(len(line) - 1):
            if line[n : n + 2] == ", " and n >= start + CHUNK_MIN:
                cuts.append(n + 1)
                start = n + 1
        return [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]

    rng = random.Random(3)
    for _ in range(2_000):
        line = "".join(rng.choice(["a", ", ", ",", " ", "x" * 40, ", , "]) for _ in range(rng.randrange(0, 80)))
        assert chunk_pieces(line) == reference(line), line
    text = json.dumps(next(p for p in sorted(CORPORA.glob("codex-rollout-jsonl/*/*")) if p.is_file()).read_text()[:20_000])
    inner = chunk_pieces(text)
    assert len(inner) > 20
    outer = chunk_pieces("[Assistant tool call]: shell(" + text + ")")
    assert len(set(inner) & set(outer)) >= len(inner) - 3  # all but the chunks around the prefix and the end


def test_a_new_text_counted_from_the_lines_counted_before_has_the_tokenizers_count():
    """`TokenCounter.count` reads a new text's known lines from the memo and encodes the runs between
    them; `line_pieces` (and `_first_cut`, its first cut) must cut exactly where `LINE_CUT` does, and
    `paragraph_pieces` where `PARAGRAPH_CUT` does. Checked against tiktoken on random texts whose lines
    are partly counted before (as a summary's lines are before it is wrapped), and on the same texts
    after other first lines (a text counted before is the rest of the new one)."""
    import random

    from compaction_bench.tokens import LINE_CUT, LINES_FROM, PARAGRAPH_CUT, _first_cut, line_pieces, paragraph_pieces

    alphabet = ["\n", "\n\n", " ", "\t", "\r", "/", "a", "É", "1", ".", "\u00a0", "\u2028", "\x85", "\x0b", "\x1c", "\u3000", "x\n/", "'s"]
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        pieces = LINE_CUT.split(text)
        assert line_pieces(text) == pieces, repr(text)
        assert _first_cut(text) == (len(pieces[0]) if len(pieces) > 1 else 0), repr(text)
        assert paragraph_pieces(text) == PARAGRAPH_CUT.split(text), repr(text)
    encode = get_encoding("o200k_base").encode
    words = ["alpha", "beta's", " gamma", "δ", "1234", "/path", "  indent", "```", "}", "- item", "😀"]
    for n in range(300):
        lines = ["".join(rng.choice(words) for _ in range(rng.randrange(0, 12))) for _ in range(rng.randrange(40, 200))]
        text = "\n".join(lines)
        counter = TokenCounter("o200k_base")
        for line in rng.sample(line_pieces(text), k=rng.randrange(len(line_pieces(text)) + 1)):
            counter.count(line)
        assert len(text) < LINES_FROM or counter.count(text) == len(encode(text, disallowed_special=())), n
        for header in (f"Saved to /tmp/out_{n}.txt\n", "<conversation>\n", "x"):  # the same rest after another first line
            other = header + text
            assert counter.count(other) == len(encode(other, disallowed_special=())), (n, header)


@pytest.mark.parametrize(("model", "encoding"), [("gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base")])
def test_message_list_count_is_litellms_token_counter(model, encoding):
    """`litellm_messages_tokens` against `litellm.token_counter(model, messages)` itself (Aider counts a list
    of messages with it, docs/specs/aider.md §4): per-message and reply-primer tokens, a `name`, and texts
    longer than litellm's 1,024-character encoding slices, where slicing changes the count."""
    import random

    import litellm

    rng = random.Random(7)
    mixed = "".join(rng.choice("ab  \n\t—“é日本😀x1,.{}<|endoftext|>") for _ in range(5_000))
    runs = "a" * 3_000 + " " * 2_000 + "b"
    summary = "I spoke to you previously about a number of things.\n" + "\n\n".join(
        f"You fixed `parse_config()` in src/config.py — the “strict” mode failed on line {i}." for i in range(40))
    cases = [
        [],
        [{"role": "user", "content": summary}],
        [{"role": "system", "content": "be brief"}, {"role": "assistant", "content": mixed}, {"role": "user", "content": "hi", "name": "bob"}],
        [{"role": "user", "content": runs}],
    ]
    counter = TokenCounter(encoding)
    # the slices matter: these texts' whole counts differ from the sums of their slices' counts
    assert counter.count(mixed) != sum(counter.count(mixed[i : i + 1_024]) for i in range(0, 5_000, 1_024))
    assert counter.count(runs) != sum(counter.count(runs[i : i + 1_024]) for i in range(0, 5_001, 1_024))
    for messages in cases:
        assert litellm_messages_tokens(counter, messages) == litellm.token_counter(model=model, messages=messages), messages

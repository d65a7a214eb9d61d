"""Offline tokenizers (published token ids) and the upstream estimators."""

from __future__ import annotations

import pytest

from compaction_bench.tokens import TokenCounter, codex_estimate, get_encoding, opencode_estimate, pi_estimate, utf16_len

TEST_STRING = "hello world, compaction!"


def test_published_token_ids_offline(no_network):
    # Ids published in docs/specs/environment.md §1, produced by tiktoken's own downloaded files.
    get_encoding.cache_clear()
    assert TokenCounter("o200k_base").encode(TEST_STRING) == [24912, 2375, 11, 1050, 1976, 0]
    assert TokenCounter("cl100k_base").encode(TEST_STRING) == [15339, 1917, 11, 1391, 1335, 0]


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

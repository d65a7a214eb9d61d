"""Graders: presence after normalization, the deterministic match rules, and judged probes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_bench.llm import LLMResult
from compaction_bench.metrics.grading import (
    Anchor,
    _token_pattern,
    anchor,
    context_messages,
    context_text,
    find_token,
    grade_reply,
    judge_reply,
    normalize,
    normalize_joined,
    presence,
    set_f1,
)
from compaction_bench.probes import Probe, ProbeError
from compaction_bench.request import Message, ToolCall


def probe(answer, match="contains", **kw) -> Probe:
    return Probe(id="p", kind=kw.pop("kind", "recall"), question="q?", answer=answer, match=match, source="x", **kw)


def test_presence_normalizes_case_whitespace_and_quotes():
    context = "Traceback ...\nmodulenotfounderror:   No module named \u2018yaml\u2019\n"
    assert presence(probe("ModuleNotFoundError: No module named 'yaml'"), context).present
    assert not presence(probe("No module named 'toml'"), context).present


def test_presence_of_a_set_needs_every_member_and_reports_the_share():
    found = presence(probe(["src/a.py", "src/b.py", "src/c.py"], "set", kind="artifact"), "edited src/a.py and src/c.py")
    assert not found.present
    assert found.share == pytest.approx(2 / 3)


def test_presence_needs_the_evidence_too():
    p = probe("1", "number", meta={"evidence": ["pytest -x tests/unit"]})
    source = anchor(p, "$ pytest -x tests/unit\nexit code 1")
    assert source == Anchor(sentence="exit code 1")
    assert presence(p, "exit code 1", evidence=source).present is False  # the command is gone
    assert presence(p, "$ pytest -x tests/unit\nexit code 1", evidence=source).present is True


def test_a_short_answer_is_never_a_bare_substring():
    # The user stated the limit; after it is dropped, line numbers still contain "100".
    p = probe("100", "number")
    source = anchor(p, "Please keep the retry limit at 100. Thanks!")
    assert source.sentence == "please keep the retry limit at 100."
    listing = "\n".join(f"{n}: line {n}" for n in range(95, 105)) + "\n1000 requests, 100 ms"
    assert "100" in listing and presence(probe("100", "number"), listing).present is False  # no evidence: never present
    assert presence(p, listing, evidence=source).present is False
    kept = listing + "\nUser: please keep the retry limit at 100. Thanks!"
    assert presence(p, kept, evidence=source).present is True


def test_two_is_not_inside_three_point_twelve():
    p = probe("2", "number")
    source = anchor(p, "Run it on Python 3.12 and retry 2 times.")
    assert presence(p, "We use Python 3.12 now.", evidence=source).present is False
    assert presence(p, "Run it on Python 3.12 and retry 2 times.", evidence=source).present is True
    # Even inside its evidence, only the whole token counts.
    assert presence(probe("2", "number", evidence=r"python \d+\.\d+"), "we run python 3.12").present is False
    assert presence(probe("3.12", "number", evidence=r"python \d+\.\d+"), "we run python 3.12").present is True


def test_a_numeric_fact_of_one_project_is_absent_from_another():
    # A recall probe mined from project A: `make test` exited 2. Project B's session mentions exit code 2
    # elsewhere (a different command) and the number 2 all over.
    p = probe("2", "number", meta={"evidence": ["make test"]})
    source = anchor(p, "$ make test\nmake: *** [test] Error 2\nexit code 2")
    other_project = "$ cargo build --release\nexit code 2\nerror[E0308]: mismatched types (2 errors)\nmake test targets: 2"
    assert presence(p, other_project, evidence=source).present is False
    assert source.sentence == "make: *** [test] error 2"
    assert presence(p, "$ make test\nmake: *** [test] Error 2\nexit code 2", evidence=source).present is True


def test_long_answers_still_match_as_substrings_and_evidence_regexes_must_compile():
    assert presence(probe("feature/retry-backoff"), "branch Feature/Retry-Backoff is ready").present
    with pytest.raises(ProbeError, match="evidence"):
        probe("1", "number", evidence="(unclosed")


def test_presence_sees_tool_call_arguments():
    messages = [Message("assistant", tool_calls=(ToolCall("c1", "edit", '{"path": "ledger/fees.py"}'),))]
    assert presence(probe("ledger/fees.py"), context_text(messages)).present


def test_set_f1_is_two_thirds_for_two_of_three_right_and_one_wrong():
    # precision 2/3 (a.py, b.py right, d.py wrong), recall 2/3 (c.py missed): F1 = 2/3.
    assert set_f1(["a.py", "b.py", "c.py"], "a.py, b.py, d.py") == pytest.approx(2 / 3)
    grade = grade_reply(probe(["a.py", "b.py", "c.py"], "set", kind="artifact"), "a.py, b.py, d.py")
    assert grade.score == pytest.approx(2 / 3) and grade.correct is True
    strict = grade_reply(probe(["a.py", "b.py", "c.py"], "set", kind="artifact", meta={"min_f1": 1.0}), "a.py, b.py, d.py")
    assert strict.correct is False


def test_set_items_in_a_sentence():
    # items: "I modified `a.py`" (contains a.py) and "b.py" -> precision 1, recall 2/3 -> F1 0.8
    assert set_f1(["a.py", "b.py", "c.py"], "I modified `a.py` and b.py") == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("answer", "match", "reply", "correct"),
    [
        ("feature/retry", "exact", "  `feature/retry`. ", True),
        ("feature/retry", "exact", "the branch is feature/retry", False),
        ("feature/retry", "contains", "The branch is Feature/Retry.", True),
        (r"full[ -]jitter", "regex", "Exponential backoff with full-jitter", True),
        (r"full[ -]jitter", "regex", "a fixed delay", False),
        ("1024", "number", "It was 1,024 tokens.", True),
        ("1024", "number", "It was 1,023 tokens.", False),
    ],
)
def test_deterministic_matches(answer, match, reply, correct):
    assert grade_reply(probe(answer, match), reply).correct is correct


def test_accepted_alternatives_count():
    p = probe("staging port 8443", "contains", accept=("port 8443",))
    assert grade_reply(p, "It listens on port 8443").correct


class ScriptedJudge:
    """A judge whose verdicts are scripted per rubric (strict first, then lenient)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.prompts: list[str] = []

    def complete(self, messages, **kwargs) -> LLMResult:
        self.prompts.append(messages[-1]["content"])
        return LLMResult(text=self.texts.pop(0), model="scripted")


def test_judge_probes_are_unscored_without_a_judge():
    grade = judge_reply(probe("we chose keyset pagination because OFFSET is slow", "judge", kind="decision"), "keyset", None)
    assert grade.correct is None and grade.judge_strict is None and grade.judge_lenient is None


def test_judge_reports_strict_and_lenient_and_strict_decides():
    judge = ScriptedJudge("VERDICT: INCORRECT\nmissing the reason", "verdict: correct")
    p = probe("we chose keyset pagination because OFFSET is slow", "judge", kind="decision")
    grade = judge_reply(p, "keyset pagination", judge)
    assert (grade.correct, grade.judge_strict, grade.judge_lenient) == (False, False, True)
    assert "keyset pagination" in judge.prompts[0] and "OFFSET is slow" in judge.prompts[0]
    assert judge.prompts[0] != judge.prompts[1]


def test_an_unreadable_verdict_leaves_the_probe_unscored():
    grade = judge_reply(probe("x", "judge", kind="decision"), "y", ScriptedJudge("I think so", "VERDICT: CORRECT"))
    assert grade.correct is None and grade.judge_lenient is True


def test_context_messages_are_chat_dicts():
    messages = [
        Message("system", "rules"),
        Message("assistant", "looking", tool_calls=(ToolCall("c1", "read", "{}"),)),
        Message("tool", "file body", tool_call_id="c1"),
        Message("reasoning", "hmm"),
        Message("compaction", "summary so far"),
    ]
    dicts = context_messages(messages)
    assert [d["role"] for d in dicts] == ["system", "assistant", "tool", "assistant", "user"]
    assert dicts[1]["tool_calls"][0]["function"] == {"name": "read", "arguments": "{}"}
    assert dicts[2]["tool_call_id"] == "c1"


@pytest.mark.parametrize(
    "parts",
    [
        ["Alpha  Beta", "  gamma\t", "DELTA"],
        ["e\u0301", "\u0301x", "caf\u00e9"],  # a combining accent at a join composes with nothing across it
        ["   ", "x", "\n\n", "\u00a0y\u00a0", ""],  # whitespace-only and empty parts leave no trace
        ["\u201cquoted\u201d", "\ufb01ne \u2460", "STRASSE Stra\u00dfe"],  # quotes, compatibility forms, case folding
    ],
)
def test_normalizing_parts_equals_normalizing_their_joined_text(parts):
    assert normalize_joined(parts) == normalize("\n".join(parts))


@pytest.mark.parametrize("context", ["rows: 13445", "3440 rows", "1.344.2", "code 3445"])
def test_a_short_answer_whose_evidence_is_itself_is_a_whole_token_of_the_whole_text(context):
    # The miner makes a short answer its own evidence: the passage is then the answer alone, and the
    # token boundary must be judged on the text around it, not inside the cut-out passage.
    p = probe("344", "number", evidence="344")
    assert presence(p, context).present is False
    assert presence(p, f"{context}\nresult: 344 rows").present is True
    assert presence(p, "344").present is True  # at both edges of the text


def test_evidence_that_matches_inside_a_longer_number_does_not_carry_the_answer():
    p = probe("1", "number", evidence=r"exit code: 1")
    assert presence(p, "pytest -q\nexit code: 12").present is False
    assert presence(p, "pytest -q\nexit code: 1.5").present is False
    assert presence(p, "pytest -q\nexit code: 1").present is True
    # A whole-token "1" outside the evidence (a line number next to it) does not count either.
    assert presence(p, "line 1: ok\nexit code: 12").present is False


def test_a_sentence_anchor_counts_a_token_inside_it_and_none_next_to_it():
    p = probe("344")
    source = anchor(p, "The parser read 344 rows.")
    assert source == Anchor(sentence="the parser read 344 rows.")
    assert presence(p, "the parser read 344 rows. line 344", evidence=source).present is True
    assert presence(p, "line 344: the parser read 3440 rows.", evidence=Anchor(sentence="the parser read 3440 rows.")).present is False


@pytest.mark.parametrize("answer, inside", [("view", "please review it"), ("view", "viewport"), ("typeerror", "MyTypeError raised"), ("config.py", "old_config.py")])
def test_a_one_token_answer_of_any_length_is_never_a_bare_substring(answer, inside):
    assert presence(probe(answer), inside).present is False
    assert presence(probe(answer), f"{inside}; then {answer}.").present is True
    assert grade_reply(probe(answer), inside).correct is False
    assert grade_reply(probe(answer), f"It is {answer}.").correct is True


def test_a_phrase_is_still_a_substring():
    p = probe("reproduce the bug first")
    assert presence(p, "I will reproduce the bug first.").present
    assert grade_reply(p, "I will reproduce the bug first, then fix it").correct is True


def test_contains_grades_a_short_answer_as_a_whole_token_of_the_reply():
    p = probe("344")
    assert grade_reply(p, "rows: 13445").correct is False
    assert grade_reply(p, "version 1.344.2").correct is False
    assert grade_reply(p, "It read 344 rows.").correct is True


def test_set_members_are_whole_tokens_of_the_reply():
    members = ["8080", "9090"]
    assert set_f1(members, "pid 18080 and 19090") == 0.0
    assert grade_reply(probe(members, "set"), "pid 18080 and 19090").correct is False
    assert set_f1(members, "ports 8080 and 9090") == 1.0


def test_a_token_ending_in_a_separator_has_no_boundary_to_keep_there():
    # The folder is whole at the head of a path under it; a word edge still needs its boundary.
    assert presence(probe("ledger/vendor/"), "edited ledger/vendor/x.py").present is True
    assert presence(probe("ledger/vendor/"), "edited oldledger/vendor/x.py").present is False
    assert grade_reply(probe("ledger/vendor/"), "Never under ledger/vendor/.").correct is True


WORDS = st.sampled_from(["344", "13445", "3.44", "1.344.2", "-1", "2-1", "view", "review", "_view", "view_", "x.py",
                         "ledger/vendor/", "ledger/vendor/x.py", ".", "a", "é", " ", "\n", "344.", ".344", "344a"])


@settings(max_examples=400, deadline=None)
@given(
    answer=st.sampled_from(["344", "view", "-1", "x.py", "ledger/vendor/", "1.344", ".", "a"]),
    words=st.lists(WORDS, max_size=30),
    pos=st.integers(0, 80),
    span=st.one_of(st.none(), st.integers(0, 80)),
)
def test_find_token_finds_what_the_whole_token_pattern_searches(answer, words, pos, span):
    """`find_token` is `re.search` with the whole-token pattern, found by `str.find`: the same first
    match for every text, start and end (the pattern's look-arounds read beyond both)."""
    text = normalize("".join(words))
    token = _token_pattern(answer)
    endpos = None if span is None else pos + span
    expected = token.search(text, pos) if endpos is None else token.search(text, pos, endpos)
    found = find_token(answer, token, text, pos, endpos)
    assert (found and found.span()) == (expected and expected.span())


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab é€\n", max_size=60), st.sampled_from(["a+", "b\\s*a", "^a", "é+", "a$"]))
def test_evidence_spans_are_character_offsets_in_ascii_and_other_texts(text, pattern):
    # An ASCII text is searched as bytes (RE2's byte offsets are its character offsets there); either way the
    # spans are Python's own `re` spans of the same pattern (case-insensitive, multi-line), in characters.
    expected = [m.span() for m in re.finditer(f"(?mi){pattern}", text)]
    assert Anchor(pattern=pattern).spans(text) == expected
    ascii_only = text.encode("ascii", "ignore").decode()
    assert Anchor(pattern=pattern).spans(ascii_only) == [m.span() for m in re.finditer(f"(?mi){pattern}", ascii_only)]

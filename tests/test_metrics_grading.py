"""Graders: presence after normalization, the deterministic match rules, and judged probes."""

from __future__ import annotations

import pytest

from compaction_bench.metrics.grading import context_messages, context_text, grade_reply, judge_reply, presence, set_f1
from compaction_bench.probes import Probe
from compaction_bench.request import Message, ToolCall
from compaction_bench.strategy import LLMResult


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
    assert presence(p, "exit code 1").present is False
    assert presence(p, "$ pytest -x tests/unit\nexit code 1").present is True


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

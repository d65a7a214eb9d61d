"""A measured judge: hand-labelled (question, answer, reply, label) rows and Cohen's κ of each grader.

`tests/data/judge_labels.jsonl` holds 104 rows written by hand from facts of three real
transcripts of the shared corpora (a Codex rollout and a Pi session): for each of 26 facts, a
reply that states it verbatim and one that paraphrases it (both `correct`), one with a wrong
detail and one that says it is unavailable or states something else (both `incorrect`). Each
row's `evidence` occurs verbatim in its transcript (checked below), so every label can be verified.

The strict and lenient judge prompts (metrics/prompts) are sent through the project's model
client to the local OpenAI-compatible server. No real judge model can be reached offline, so the
server's judge is a stand-in that follows each rubric by a fixed rule (strict: the whole reference
occurs in the answer; lenient: at least 60% of the reference's words do) and its replies are logged;
the test checks the pipeline end to end (prompts rendered, verdicts parsed, κ computed from them)
and prints κ. With a real model, `judge_agreement(rows, LLMClient(MODEL))` gives that model's κ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import load_transcript
from compaction_bench.llm import CallSettings, LLMClient
from compaction_bench.metrics.grading import grade_reply, judge_reply, normalize
from compaction_bench.probes import Probe
from tests.conftest import CORPORA
from tests.model_servers import Call

LABELS = Path(__file__).parent / "data" / "judge_labels.jsonl"
WORD = re.compile(r"[a-z0-9_.:/-]{2,}")


def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's κ of two binary raters: (observed − chance agreement) / (1 − chance agreement)."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return 1.0 if chance == 1 else (observed - chance) / (1 - chance)


def probe_of(row: dict[str, Any]) -> Probe:
    return Probe(id=row["id"], kind="recall", question=row["question"], answer=row["answer"], match="judge", source_text=row["evidence"])


def judge_agreement(data: Sequence[dict[str, Any]], judge: LLMClient) -> dict[str, float]:
    """κ of the strict and the lenient rubric against the labels (an unreadable verdict counts as incorrect)."""
    labels = [r["label"] == "correct" for r in data]
    grades = [judge_reply(probe_of(r), r["reply"], judge) for r in data]
    return {
        "strict": cohen_kappa(labels, [g.judge_strict is True for g in grades]),
        "lenient": cohen_kappa(labels, [g.judge_lenient is True for g in grades]),
    }


def _section(prompt: str, start: str, end: str) -> str:
    return prompt.split(start, 1)[1].split(end, 1)[0].strip()


def rubric_judge(call: Call) -> str:
    """The stand-in judge at the local server: applies the rubric the prompt names by a fixed rule."""
    prompt = call.last_user
    references = [line[2:] for line in _section(prompt, "\nReference answer", "\nAnswer to grade:").splitlines() if line.startswith("- ")]
    reply = normalize(_section(prompt, "Answer to grade:", "\nGrading rules:"))
    if "Be strict." in prompt:
        ok = any(normalize(ref) in reply for ref in references)
    else:
        ok = any(
            (words := set(WORD.findall(normalize(ref)))) and sum(w in reply for w in words) / len(words) >= 0.6 for ref in references
        )
    return f"VERDICT: {'CORRECT' if ok else 'INCORRECT'}\nBy the rule of the rubric."


def test_cohen_kappa_on_a_worked_example():
    # 50 items: both yes 20, both no 15, rater A yes / B no 5, A no / B yes 10.
    a = [True] * 20 + [False] * 15 + [True] * 5 + [False] * 10
    b = [True] * 20 + [False] * 15 + [False] * 5 + [True] * 10
    # observed 0.7; chance 0.5·0.6 + 0.5·0.4 = 0.5; κ = 0.4
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_the_labelled_rows_come_from_real_transcripts():
    data = rows()
    assert len(data) >= 100 and len({r["id"] for r in data}) == len(data)
    assert {r["label"] for r in data} == {"correct", "incorrect"}
    texts: dict[str, str] = {}
    for r in data:
        if r["source"] not in texts:
            t = load_transcript(CORPORA / r["source"])
            texts[r["source"]] = "\n".join([i.text or "" for i in t.items] + [i.arguments or "" for i in t.items])
        assert r["evidence"] in texts[r["source"]], r["id"]
        # a reply labelled correct carries the fact; the wrong-detail replies never contain the reference
        if r["kind"] == "wrong":
            assert normalize(r["answer"]) not in normalize(r["reply"]), r["id"]


def test_judge_prompts_kappa_through_the_local_server(openai_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    openai_server.reply = rubric_judge
    data = rows()
    judge = LLMClient("openai/judge-stand-in", CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False))
    kappas = judge_agreement(data, judge)
    assert openai_server.calls == 2 * len(data) and openai_server.rejected == []
    # κ recomputed from the server's own log of prompts and verdicts: the pipeline lost or flipped nothing.
    logged = {"strict": [], "lenient": []}
    for payload in openai_server.log:
        prompt = payload["messages"][-1]["content"]
        verdict = rubric_judge(Call("openai", "m", "", (("user", prompt),), None, payload)).startswith("VERDICT: CORRECT")
        logged["strict" if "Be strict." in prompt else "lenient"].append(verdict)
    labels = [r["label"] == "correct" for r in data]
    assert kappas == {k: pytest.approx(cohen_kappa(labels, v)) for k, v in logged.items()}
    offline = cohen_kappa(labels, [bool(grade_reply(replace(probe_of(r), match="contains"),
                                                    r["reply"]).correct) for r in data])
    with capsys.disabled():
        print(f"\njudge κ on {len(data)} labelled rows: strict prompt {kappas['strict']:.3f}, lenient prompt {kappas['lenient']:.3f} "
              f"(rule-following stand-in at the local server); offline `contains` grading {offline:.3f}")

"""The third audit of fact retention: what presence reads in a context, and what the answerer's ceiling is keyed by.
The right answers are hand-built transcripts and real corpus sessions read with a rule stated apart from the code."""

from __future__ import annotations

import json

import pytest

import compaction_bench as bench
from compaction_bench.metrics import grading, retention
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.offline_models import reader_answer
from compaction_bench.probes import Probe
from compaction_bench.request import Message
from compaction_bench.scenarios.mining import mine_probes
from compaction_bench.transcript import Item, Transcript
from tests.conftest import CORPORA

CODEX_FILE = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"
DJANGO_FILE = CORPORA / "mini-swe-agent-traj/SWE-agent__mini-swe-agent/deepseek_chat_test_1-100__django__django-13265.traj.json"


def test_a_codex_tool_output_is_read_through_its_json_envelope():
    """Codex sends a tool output inside a JSON envelope, its line breaks and quotes escaped; the model reads them as
    such, and a fact kept word for word in it is kept."""
    wire = Message("tool", '{"output":"Ran 3 tests\\nFAILED: \\"test_port\\" caf\\u00e9","metadata":{"exit_code":1}}', tool_call_id="c1")
    assert grading.readable(wire) == '{"output":"Ran 3 tests\nFAILED: "test_port" café","metadata":{"exit_code":1}}'
    plain = Message("tool", 'print("a\\nb")', tool_call_id="c2")  # a literal backslash in code outside an envelope stays
    assert grading.readable(plain) == plain.content


def test_a_codex_strategy_that_keeps_everything_keeps_every_fact():
    """At the 1m window codex-local compacts nothing and sends every output whole, in its envelope, so it holds
    every fact `none` holds: its retention was 0.833 where `none` read 1.000 (the audit), ranked last for escaping."""
    (transcript,) = bench.load_transcripts(CODEX_FILE)
    probes = mine_probes(transcript)
    retention_of = {}
    for strategy in ("none", "codex-local"):
        result = bench.replay(transcript, strategy, profile="1m")
        assert not result.compactions
        rows = [r for r in measure_cell(result, probes, answerer=None).probes if r["point_kind"] != "compaction"]
        retention_of[strategy] = sum(r["present"] for r in rows) / len(rows)
    assert retention_of == {"none": 1.0, "codex-local": 1.0}


def _thinking_session() -> Transcript:
    """The only statement of a decision is the first turn's thinking; two more user turns follow."""
    items = [
        Item("s0", "system", "You are a coding agent."),
        Item("u1", "user", "Please set up the database layer for the app.", turn=0),
        Item("r1", "reasoning", "The container lacks the postgres driver, so I will use the sqlite backend for the prototype database.",
             turn=0, response=0),
        Item("a1", "assistant", "I have set up the database layer.", turn=0, response=0),
        Item("u2", "user", "Great. Now add a README.", turn=1),
        Item("a2", "assistant", "README added.", turn=1, response=1),
        Item("u3", "user", "Thanks, that is all.", turn=2),
        Item("a3", "assistant", "You're welcome.", turn=2, response=2),
    ]
    return Transcript("thinking-decision", tuple(items))


PROBE = Probe("d1", "decision", "Which database backend did the assistant choose?", "use the sqlite backend for the prototype database", source="r1")


@pytest.mark.parametrize(("profile", "kept"), [("claude-sonnet", False), ("claude-opus", True)])
def test_thinking_the_model_dropped_is_not_a_fact_it_kept(profile, kept):
    """Sonnet 4.5 drops the first turn's thinking once the next user message comes: the provider already bills it
    nothing, and presence read it as kept all the same. Opus 4.5 keeps it."""
    result = bench.replay(_thinking_session(), "none", profile=profile)
    rows = [r for r in measure_cell(result, [PROBE], answerer=None).probes if r["point_kind"] != "compaction"]
    later = [r for r in rows if r["step"] >= 1]
    assert later and all(r["present"] is kept for r in later)


def test_opencode_v2s_verbatim_recent_messages_are_kept_not_summary():
    """OpenCode V2's checkpoint message carries the summary and then the recent messages verbatim
    (`<recent-context>`): a fact only in those is kept, not the summary's. Every row the replay calls `summary`
    must have its answer in a summary text (the audit: 37 of 122 had it in no summary)."""
    (transcript,) = bench.load_transcripts(DJANGO_FILE)
    probes = mine_probes(transcript)
    result = bench.replay(transcript, "opencode-v2", profile="64k")
    summaries = [c.summary for c in result.compactions if c.summary]
    assert summaries
    by_id = {p.id: p for p in probes}
    rows = measure_cell(result, probes, answerer=None).probes
    credited = [r for r in rows if r["found"] == "summary" or r["in_summary"]]
    assert credited
    for row in credited:
        probe = by_id[row["probe_id"]]
        evidence = grading.anchor(probe, retention.source_text(transcript, retention.source_position(transcript, probe)))
        assert any(grading.presence(probe, s, None, evidence).present for s in summaries), row["probe_id"]


def test_a_sentence_answer_is_found_without_its_closing_punctuation():
    """A constraint mined with its full stop is stated by a bullet or a quote that ends otherwise."""
    normalized = grading.normalize("- Do NOT commit your changes")
    assert grading.occurs("Do NOT commit your changes.", normalized)
    probe = Probe("c1", "constraint", "What must not be done?", "Do NOT commit your changes.", source_text="Do NOT commit your changes.")
    for reply in ("Do NOT commit your changes", 'The user said: "Do NOT commit your changes".', "- **Do NOT commit your changes**"):
        assert grading.grade_reply(probe, reply).correct, reply
    assert not grading.occurs("port is 5432.", grading.normalize("the port is 54321"))  # still a whole phrase


def test_the_ceiling_is_keyed_by_the_transcripts_content_not_its_id():
    """Two sessions of one task share an id and a length; the ceiling of one was served to the other."""
    first = Transcript("task-1", (Item("u1", "user", "Use port 5432.", turn=0), Item("a1", "assistant", "OK.", turn=0, response=0)))
    second = Transcript("task-1", (Item("u1", "user", "Use port 5432.", turn=0), Item("a1", "assistant", "No: 6543.", turn=0, response=0)))
    assert retention.transcript_digest(first) != retention.transcript_digest(second)
    assert retention.transcript_digest(first) == retention.transcript_digest(Transcript("other", first.items))


def test_the_offline_reader_reads_a_codex_envelope_as_a_model_does():
    """The offline reader quotes the context line most like the question. An output in a Codex JSON envelope is one
    escaped line on the wire; a model reads its lines, and so does the reader: it quotes the same line from the
    envelope as from the plain output, quotes unescaped (before, the whole envelope was one line and `"test_port"`
    read `\\"test_port\\"`, so a codex strategy answered less than `none` on the same kept outputs)."""
    lines = ["Ran 41 tests in 3.2s", 'FAILED: "test_port" expected 8080, got 8081', "OK: test_host, test_scheme", "exit status 1"]
    plain = "\n".join(lines)
    envelope = json.dumps({"output": plain, "metadata": {"exit_code": 1}}, separators=(",", ":"))
    question = {"role": "user", "content": "Which test failed on the port, and what port did it get?"}

    def answer(output: str) -> str:
        call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command":["pytest"]}'}}
        context = [{"role": "user", "content": "Run the tests."}, {"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "c1", "content": output}]
        return reader_answer([*context, question])

    assert answer(plain).startswith('FAILED: "test_port" expected 8080, got 8081')
    assert answer(envelope) == answer(plain)


def test_the_ceiling_is_keyed_by_the_answerer_s_endpoint_not_only_its_model(monkeypatch, tmp_path):
    """Two runs in one process (a notebook's) ask the same probes with answerers of one model name on two endpoints:
    one that never knows, one that answers. The second run's ceiling is its own answerer's (before: the first's, 0)."""
    from compaction_bench.llm import CallSettings, LLMClient
    from tests.model_servers import ModelServer

    monkeypatch.setenv("OPENAI_API_KEY", "local-key")
    items = (Item("u0", "user", "The deploy key is ZEBRA-42. Keep it safe.", turn=0),
             Item("a0", "assistant", "Noted.", response=0, turn=0))
    transcript = Transcript("ceiling-endpoints", items)
    probe = Probe("key", "recall", "What is the deploy key?", "ZEBRA-42", source="u0")
    result = bench.replay(transcript, "none", profile="1m")
    ceilings = []
    for reply in (lambda call: "I do not know.", lambda call: "The deploy key is ZEBRA-42."):
        server = ModelServer("openai", reply=reply)
        try:
            answerer = LLMClient("openai/gpt-4o-mini", CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path / str(server.port))))
            rows = measure_cell(result, [probe], answerer=answerer).probes
        finally:
            server.close()
        ceilings.append({row["ceiling_correct"] for row in rows})
    assert ceilings == [{False}, {True}]

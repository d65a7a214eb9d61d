"""Paired checkpoints: where probes are asked, what an overflowed context counts as, kept vs
summary, and the same paired rows for every strategy of a run."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest

import compaction_bench as bench
from compaction_bench.llm import LLMClient, LLMResult
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.metrics.retention import Checkpoint, checkpoints
from compaction_bench.probes import Probe
from compaction_bench.profiles import get_profile
from compaction_bench.provider import MessageCounter
from compaction_bench.reports.leaderboard import CANNOT_SERVE, leaderboard
from compaction_bench.request import Message, Request, message_from_item
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.tokens import HiddenTokens
from compaction_bench.transcript import Item, Transcript
from tests.test_metrics_measure import LATE, TOKEN, SummarizeAtSecondTurn, session


def turns_of(sizes: list[int]) -> Transcript:
    """A session whose user turn t has sizes[t] model responses (tool calls, then a closing message)."""
    items = [Item("sys", "system", "You are a coding agent.")]
    response = 0
    for turn, size in enumerate(sizes):
        items.append(Item(f"u{turn}", "user", f"request {turn}", turn=turn))
        for _ in range(size - 1):
            items += [
                Item(f"c{response}", "tool_call", call_id=f"k{response}", tool_name="read", arguments="{}", response=response, turn=turn),
                Item(f"r{response}", "tool_result", f"output {response}", call_id=f"k{response}", turn=turn),
            ]
            response += 1
        items.append(Item(f"a{response}", "assistant", f"done {turn}", response=response, turn=turn))
        response += 1
    return Transcript("turns", tuple(items))


def test_checkpoints_are_the_first_response_of_every_user_turn_and_the_end():
    transcript = turns_of([6, 2, 1])  # steps 0-5, 6-7, 8
    found = checkpoints(transcript, every_steps=None)
    assert [(c.kind, c.step) for c in found] == [("checkpoint", 0), ("checkpoint", 6), ("checkpoint", 8), ("final", 9)]
    # The context at step 6 saw everything before its first output item, the user message u1 included.
    assert found[1].position == transcript.position("u1") + 1
    assert found[-1] == Checkpoint("final", 9, len(transcript.items))


def test_long_turns_get_a_checkpoint_every_n_steps_and_the_count_can_be_capped():
    transcript = turns_of([6, 2, 1])
    assert [c.step for c in checkpoints(transcript, every_steps=2)] == [0, 2, 4, 6, 8, 9]
    assert [c.step for c in checkpoints(transcript, every_steps=2, max_checkpoints=3)] == [0, 4, 8, 9]


def test_an_overflowed_checkpoint_is_absent_and_unanswered():
    transcript = session()  # ~7.5k tokens of tool output; `none` never compacts
    small = replace(get_profile("gpt-5"), context_window=4_000)
    result = bench.replay(transcript, "none", profile=small)
    rows = [r for r in measure_cell(result, [TOKEN], answerer=LLMClient("offline/reader")).probes if r["point_kind"] != "compaction"]
    by_step = {r["step"]: r for r in rows}
    assert by_step[0]["status"] == "seen" and by_step[0]["present"] and by_step[0]["correct"]
    overflowed = [r for r in rows if r["status"] == "not_seen"]
    assert overflowed and all(result.requests[r["request"]].overflow for r in overflowed)
    assert all(r["present"] is False and r["correct"] is False and r["found"] == "absent" for r in overflowed)
    assert overflowed[-1]["point_kind"] == "final"  # the final context does not fit either
    assert all(r["ceiling_correct"] is True for r in rows)  # the uncompacted transcript answers it: the ceiling


def test_without_a_judge_an_overflowed_judge_probe_is_unscored_like_every_other_row_of_it():
    # A `judge` probe cannot be graded without --judge: counting it wrong only where the context
    # overflowed would mark down the strategies that overflow on rows the others leave out.
    transcript = session()
    small = replace(get_profile("gpt-5"), context_window=4_000)
    result = bench.replay(transcript, "none", profile=small)
    judged = replace(TOKEN, id="token-judged", match="judge")
    rows = [r for r in measure_cell(result, [judged], answerer=LLMClient("offline/reader")).probes if r["point_kind"] != "compaction"]
    assert any(r["status"] == "not_seen" for r in rows) and any(r["status"] == "seen" for r in rows)
    assert all(r["correct"] is None for r in rows)


def test_a_fact_only_the_summary_carries_is_found_in_the_summary():
    result = bench.replay(session(), SummarizeAtSecondTurn, profile="gpt-5")
    rows = measure_cell(result, [TOKEN], answerer=None).probes
    start = next(r for r in rows if r["point_kind"] == "checkpoint" and r["step"] == 4)  # the first response of turn 1
    assert start["source_summarized"] and start["in_summary"] and start["found"] == "summary" and start["present"]
    first = next(r for r in rows if r["point_kind"] == "checkpoint" and r["step"] == 0)
    assert first["found"] == "kept" and not first["source_summarized"]


@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    from compaction_bench.runner import Case, run
    from compaction_bench.scenarios.synthetic import default_suite

    scenario = next(s for s in default_suite() if s.name.startswith("synthetic-parallel"))
    root = run(
        cases=[Case(scenario.name, scenario.transcript, tuple(scenario.probes))], strategies=["none", "truncate", "codex-local"],
        profiles=["32k"], out=tmp_path_factory.mktemp("runs"), run_id="overflow", jobs=1, answerer="", report=False, progress=False,
    )
    return pd.read_parquet(root / "summary.parquet"), pd.read_parquet(root / "probes.parquet"), pd.read_parquet(root / "requests.parquet")


@pytest.mark.slow
def test_none_overflowing_32k_counts_its_overflowed_checkpoints_as_absent_and_is_marked(overflow_run):
    summary, probes, requests = overflow_run
    none = summary.set_index("strategy").loc["none"]
    assert none["cannot_serve"] and none["failed_requests"] > 0
    rows = probes[(probes["strategy"] == "none") & probes["point_kind"].isin(["checkpoint", "final"])]
    unseen = rows[rows["status"] == "not_seen"]
    assert len(unseen) and not unseen["present"].any()
    # `none` keeps every item, so what it misses is exactly what it could not send.
    assert rows.loc[rows["status"] == "seen", "present"].all()
    per_probe = rows.groupby("probe_id")["present"].mean()
    assert none["retention"] == pytest.approx(per_probe.mean()) and none["retention"] < 1.0
    header, table = leaderboard(summary, probes)
    window = header.index("window")
    marks = {row[0]: row[window] for row in table}
    assert marks["none"].startswith(CANNOT_SERVE) and marks["truncate"] == "ok"
    retention = [float(row[header.index("retention [95% CI]")].split()[0]) for row in table]
    assert retention == sorted(retention, reverse=True)  # ordered by headline retention


@pytest.mark.slow
def test_every_strategy_has_the_same_paired_rows(overflow_run):
    summary, probes, _ = overflow_run
    headline = probes[probes["point_kind"].isin(["checkpoint", "final"])]
    keys = {s: set(map(tuple, g[["probe_id", "point_kind", "step"]].to_numpy().tolist())) for s, g in headline.groupby("strategy")}
    assert keys["none"] == keys["truncate"] == keys["codex-local"]
    assert summary["paired_pairs"].nunique() == 1 and summary["paired_pairs"].iloc[0] == len(keys["none"])


READER_CONTEXT = [
    {"role": "user", "content": "Set up the project.\nThe database port is 5433 on staging."},
    {"role": "assistant", "content": "Noted.\n\nI will use port 5433."},
    {"role": "tool", "content": "ok"},
    {"role": "user", "content": "Set up the project.\nThe database port is 5433 on staging."},  # the same text again
]


def test_the_reader_quotes_the_best_line_and_the_last_one_on_a_tie():
    from compaction_bench.offline_models import ReaderContext, reader_answer

    question = {"role": "user", "content": "What is the database port on staging?"}
    # Lines: 0 "Set up the project." 1 "The database port is 5433 on staging." 2 "Noted." 3 "I will use port 5433."
    # 4 "ok", 5 and 6 the same as 0 and 1. Lines 1 and 6 hold database, port and staging: a tie the later
    # line wins; it is short, but no line follows it.
    assert reader_answer([*READER_CONTEXT, question]) == "The database port is 5433 on staging."
    context = ReaderContext(READER_CONTEXT)
    assert (context.total, context.line(4), context.line(5)) == (7, "ok", "Set up the project.")
    # "project" ties lines 0 and 5; line 5 is short, so the line after it comes along.
    assert context.answer("Anything about the project setup?") == "Set up the project.\nThe database port is 5433 on staging."
    assert context.answer("zebra") == "I don't know."
    assert context.answer("?") == "The database port is 5433 on staging."  # no informative word: the last line
    assert ReaderContext([]).answer("port") == "I don't know."


#: Lines whose words' weights tie two lines exactly: alpha and delta are on 1 line each, bravo and echo on 2,
#: charlie and foxtrot on 3, of 8 lines; "alpha bravo charlie" and "delta echo foxtrot" each hold one word of each.
TIED_LINES = ["bravo zulu", "echo zulu", "charlie yankee", "charlie xray", "foxtrot yankee", "foxtrot xray",
              "alpha bravo charlie", "delta echo foxtrot"]
ANSWER_TIED = """
import json, sys
from compaction_bench.offline_models import ReaderContext
print(json.dumps(ReaderContext([{"role": "user", "content": sys.argv[1]}]).answer("alpha bravo charlie delta echo foxtrot?")))
"""


def test_the_readers_answer_does_not_change_with_the_processs_string_hashes():
    """Regression: the scores were float sums over the question's words, a set whose order changes with
    PYTHONHASHSEED; two lines whose sums are equal in exact arithmetic differed by a last bit in some orders,
    and a run's answers changed from one run to the next (two runs over all the corpora, `none` and `truncate` at
    64k, differed in 3 of their 32,392 answers)."""
    weights = [math.log(1 + 8 / holders) for holders in (1, 2, 3)]
    assert len({(a + b) + c for a, b, c in itertools.permutations(weights)}) > 1  # in floats, the order matters here
    answers = {
        seed: json.loads(subprocess.run([sys.executable, "-c", ANSWER_TIED, "\n".join(TIED_LINES)], capture_output=True, text=True,
                                        check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout)
        for seed in range(8)
    }
    assert set(answers.values()) == {"delta echo foxtrot"}, answers  # the tie goes to the later line in every process


def test_prepared_contexts_answer_as_the_whole_payload_does():
    """Asking with a context converted once gives the reply and input tokens of sending it whole."""
    from compaction_bench.llm import PreparedContext
    from compaction_bench.request import Message, ToolCall

    messages = [
        Message("user", "Deploy the service; the API key lives in vault path secret/deploy."),
        Message("assistant", "", tool_calls=(ToolCall("c1", "bash", '{"cmd": "make deploy"}'),)),
        Message("tool", "deployed revision r-4411 to eu-west", tool_call_id="c1"),
        Message("reasoning", "The deploy worked."),
    ]
    client = LLMClient("offline/reader")
    question = {"role": "user", "content": "Which revision was deployed?"}
    prepared = PreparedContext(messages)
    once = client.complete([question], purpose="answer", context=prepared)
    whole = client.complete([*prepared.payload, question], purpose="answer")
    # Only the tool output holds "revision" and "deployed"; it is short, so the next line comes along.
    assert once.text == whole.text == "deployed revision r-4411 to eu-west\nThe deploy worked."
    assert once.input_tokens == whole.input_tokens


class FixedSummary(SummarizeAtSecondTurn):
    """Replaces everything before the second user message with a summary whose text is known."""

    name = "test-fixed-summary"
    TEXT = "Summary of the earlier work: the deploy token is ZX-4471."

    def on_user_turn(self, item: Item) -> None:
        if item.turn == 1:
            before = self.history.render()
            summarized = [i.id for i in self.history.items if i.kind != "system"]
            self.history.items = [i for i in self.history.items if i.kind == "system"]
            self.summary = Message("user", self.TEXT)
            self.history.append(item)
            self.ctx.record_compaction(trigger="manual", before=before, after=self.messages(), summary=self.TEXT, summarized_ids=summarized)
            return
        NoCompaction.on_user_turn(self, item)


class Replies:
    """An answerer that always gives the same reply."""

    model = "test/fixed-reply"
    limits = None  # no window of its own

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def complete(self, messages, **kw) -> LLMResult:
        return LLMResult(self.reply, self.model, purpose="answer")


def final_row(result, probe, answerer=None):
    rows = measure_cell(result, [probe], answerer=answerer).probes
    return next(r for r in rows if r["point_kind"] == "final")


def test_a_set_assembled_from_summary_and_kept_messages_is_not_credited_to_the_summary():
    result = bench.replay(session(), FixedSummary, profile="gpt-5")
    final = result.requests[final_row(result, TOKEN)["request"]]
    assert FixedSummary.TEXT in [m.content for m in final.messages] and "u0" not in final.item_ids()
    # ZX-4471 is only in the summary, LATE-FACT-77 only in a kept tool output: the summary alone does not
    # carry the set, so it is not `summary` (retention = kept + summary still adds up: it is `kept`).
    both = Probe("both", "recall", "Which token and fact?", ["ZX-4471", "LATE-FACT-77"], match="set", source="u0")
    row = final_row(result, both)
    assert row["present"] and not row["in_summary"] and row["found"] == "kept"
    # The summary alone carrying the answer is still `summary`; the kept messages alone, `kept`.
    assert final_row(result, TOKEN)["found"] == "summary"
    assert final_row(result, replace(LATE, source="out9"))["found"] == "kept"


def test_a_number_or_a_set_is_never_correct_when_its_answer_is_gone():
    transcript = session()  # `none` keeps everything; no 42, 8080 or 9090 anywhere in it
    result = bench.replay(transcript, "none", profile="gpt-5")
    latency = Probe("latency", "recall", "What was the latency?", "42 ms", match="number", source="u0")
    row = final_row(result, latency, Replies("see line 42"))
    assert row["present"] is False and row["answer"] == "see line 42" and row["correct"] is False
    ports = Probe("ports", "recall", "Which ports?", ["8080", "9090"], match="set", source="u0")
    row = final_row(result, ports, Replies("8080 and 9090"))  # the grader alone would pass it
    assert row["present"] is False and row["correct"] is False
    # Where the answer is in the context, the same reply counts.
    row = final_row(result, replace(TOKEN, match="contains"), Replies("it is ZX-4471"))
    assert row["present"] and row["correct"] is True


def test_the_age_of_a_fact_counts_the_tokens_after_its_source_not_its_own():
    transcript = session()
    result = bench.replay(transcript, "none", profile="gpt-5")
    late = replace(LATE, source="out9")  # a long tool output; only the closing "All modules read." follows it
    row = final_row(result, late)
    counter = MessageCounter(result.profile, hidden=HiddenTokens.of(transcript))
    closing = counter.message_tokens(message_from_item(transcript.items[-1]))
    assert transcript.items[-1].id == "done" and 0 < closing < 30
    assert counter.message_tokens(message_from_item(transcript.items[-2])) > 1_000  # its own size is not its age
    assert row["fact_age_tokens"] == closing


class ReservesOutput(NoCompaction):
    """Sends everything and reserves 2,000 output tokens on every request."""

    name = "test-reserves-output"

    def request(self) -> Request:
        return Request(self.messages(), max_output_tokens=2_000)


def test_the_final_context_overflows_by_the_profiles_own_rule_reserved_output_included():
    transcript = session()
    wide = bench.replay(transcript, ReservesOutput, profile="gpt-5")
    tokens = wide.final.true_tokens
    # Input + reserved output beyond the limit, the input alone within the window: the provider refuses it.
    tight = replace(get_profile("gpt-5"), overflow="input+output", context_window=tokens + 1_000, context_limit=tokens + 1_000)
    assert tight.overflows(tokens, 2_000) and tokens <= tight.context_window
    result = bench.replay(transcript, ReservesOutput, profile=tight)
    assert result.final.true_tokens == tokens and result.final.overflow is True
    rows = measure_cell(result, [TOKEN], answerer=None).probes
    assert next(r for r in rows if r["point_kind"] == "final")["status"] == "not_seen"
    # Input-only overflow (OpenAI-style input limit) ignores the reservation, as the provider does.
    loose = replace(tight, overflow="input")
    assert bench.replay(transcript, ReservesOutput, profile=loose).final.overflow is False


def test_a_context_beyond_the_answerer_s_own_window_is_unscored_without_a_call(no_network):
    # The session's model takes every request; the answerer named (gpt-4, 8,192 tokens) could not:
    # its questions reach no model (no_network) and the points are unscored, never wrong.
    items = (
        Item("u0", "user", "Remember: the deploy token is ZX-4471.\n" + "context line\n" * 5_000, turn=0),
        Item("a0", "assistant", "Noted.", response=0, turn=0),
        Item("u1", "user", "Go on.", turn=1),
        Item("a1", "assistant", "Done.", response=1, turn=1),
    )
    result = bench.replay(Transcript("long", items), "none", profile="gpt-5")
    probe = replace(TOKEN, source="u0")
    rows = measure_cell(result, [probe], answerer=LLMClient("openai/gpt-4")).probes
    assert rows and all(r["present"] and r["correct"] is None and r["ceiling_correct"] is None for r in rows)
    assert all("beyond openai/gpt-4's window" in r["answer_error"] for r in rows)


def test_the_ids_summarized_before_a_request_are_those_of_every_earlier_compaction_it_does_not_hold():
    """`_Contexts.summarized_before` (one map of each id's first compaction, made once) against its definition,
    the union of the summarized ids of every compaction whose next request is this one or an earlier one less
    the request's own items, for every request and every item id of a real Pi session replayed at `32k` by
    `pi` (dozens of compactions), by `codex-local` (which summarizes some ids again: the first compaction
    that did decides) and by `none` (no compaction)."""
    from compaction_bench.importing import load_transcripts
    from compaction_bench.metrics.retention import _Contexts
    from tests.conftest import CORPORA

    transcript = load_transcripts(CORPORA / "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl")[0]
    ids = [item.id for item in transcript.items]
    for strategy in ("pi", "codex-local", "none"):
        result = bench.replay(transcript, strategy, profile="32k")
        assert bool(result.compactions) == (strategy != "none")
        contexts = _Contexts(result)
        for request in result.requests[:: max(1, len(result.requests) // 150)]:
            earlier = [c for c in result.compactions if c.next_request is not None and c.next_request <= request.index]
            expected = {i for c in earlier for i in c.summarized_ids} - set(request.item_ids())
            assert contexts.summarized_before(request, ids) == expected & set(ids), request.index
            assert contexts.summarized_before(request, ids[:50]) == expected & set(ids[:50]), request.index

"""Per-cell tables: probes at points, a fact kept only by a summary, token accuracy, cost, silent loss."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import compaction_bench as bench
from compaction_bench.llm import CallSettings, LLMClient, LLMResult
from compaction_bench.metrics.accuracy import estimate_error, premature
from compaction_bench.metrics.cost import request_cost
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.probes import Probe
from compaction_bench.profiles import Prices, get_profile
from compaction_bench.provider import SimulatedProvider
from compaction_bench.records import from_rows, to_rows
from compaction_bench.replay import CompactionRecord, RequestRecord
from compaction_bench.request import Message, Request, message_from_item
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.tokens import shared_counter
from compaction_bench.transcript import Item, Transcript

FILLER = "lorem ipsum dolor sit amet " * 300  # about 1,500 tokens


def session(request: str = "Remember: the deploy token must be ZX-4471.\nPlease read the modules.") -> Transcript:
    items = [
        Item("sys", "system", "You are a coding agent."),
        Item("u0", "user", request, turn=0),
    ]
    for k in range(4):
        items += [
            Item(f"call{k}", "tool_call", call_id=f"c{k}", tool_name="read", arguments=f'{{"path": "m{k}.py"}}', response=k, turn=0),
            Item(f"out{k}", "tool_result", f"module {k}\n{FILLER}", call_id=f"c{k}", turn=0),
        ]
    items.append(Item("u1", "user", "Now continue with the late module.", turn=1))
    items += [
        Item("call9", "tool_call", call_id="c9", tool_name="read", arguments='{"path": "late.py"}', response=4, turn=1),
        Item("out9", "tool_result", "late module: LATE-FACT-77\n" + FILLER, call_id="c9", turn=1),
        Item("done", "assistant", "All modules read.", response=5, turn=1),
    ]
    return Transcript("hand", tuple(items))


class SummarizeAtSecondTurn(NoCompaction):
    """Replaces everything before the second user message with a summary (a user message without item ids)."""

    name = "test-summarize"

    def on_user_turn(self, item: Item) -> None:
        if item.turn == 1:
            before = self.history.render()
            summarized = [i.id for i in self.history.items if i.kind != "system"]
            prompt = Message("user", "Summarize the conversation.\n\n## Constraints\n\n## Next steps")
            result = self.ctx.summarize(Request((*before, prompt), kind="summary", max_output_tokens=400))
            self.history.items = [i for i in self.history.items if i.kind == "system"]
            self.summary = Message("user", result.text)
            self.history.append(item)
            self.ctx.record_compaction(
                trigger="manual", before=before, after=self.messages(), summary=result.text, summarized_ids=summarized
            )
            return
        super().on_user_turn(item)

    def messages(self) -> list[Message]:
        rendered = self.history.render()
        summary = getattr(self, "summary", None)
        return rendered[:1] + [summary] + rendered[1:] if summary else rendered


TOKEN = Probe("token", "constraint", "What is the deploy token?", "ZX-4471", source="u0")
LATE = Probe("late", "recall", "What fact did the late module hold?", "LATE-FACT-77", source_text="LATE-FACT-77")


@pytest.fixture(scope="module")
def summarized():
    result = bench.replay(session(), SummarizeAtSecondTurn, profile="gpt-5")
    return result, measure_cell(result, [TOKEN, LATE], answerer=LLMClient("offline/reader"))


def test_a_probe_answered_only_by_the_summary(summarized):
    result, cell = summarized
    (compaction,) = result.compactions
    point = next(r for r in cell.probes if r["probe_id"] == "token" and r["point_kind"] == "compaction")
    context = result.requests[point["request"]]
    assert "u0" not in context.item_ids()  # the fact's own message is gone
    assert point["present"] and point["found"] == "summary"
    assert point["correct"] is True and "ZX-4471" in point["answer"]


def test_probes_are_asked_only_at_points_after_their_source(summarized):
    result, cell = summarized
    asked = {(r["probe_id"], r["point_kind"]) for r in cell.probes if r["point_kind"] != "checkpoint"}
    # LATE-FACT-77 appears after the compaction point (in turn 1's tool output), so only the end asks it.
    assert asked == {("token", "compaction"), ("token", "final"), ("late", "final")}
    final = next(r for r in cell.probes if r["probe_id"] == "late")
    assert final["step"] == len(result.transcript.steps()) and final["present"] and final["correct"]


def test_fact_age_is_the_tokens_after_the_source(summarized):
    result, cell = summarized
    provider = SimulatedProvider(result.profile)
    items = result.transcript.items
    start = [i.id for i in items].index("out9")
    # the tokens of the items after the source item (its own tokens are not time the fact has waited)
    expected = sum(provider.message_tokens(message_from_item(i)) for i in items[start + 1 :])
    late = next(r for r in cell.probes if r["probe_id"] == "late")
    assert late["fact_age_tokens"] == expected


def test_summary_request_and_its_call_are_counted(summarized):
    result, cell = summarized
    (row,) = cell.compactions
    (summary_request,) = [r for r in cell.requests if r["kind"] == "summary"]
    (call,) = result.compactions[0].llm_calls
    assert row["llm_calls"] == 1 and row["llm_output_tokens"] == call.output_tokens > 0
    assert summary_request["output_tokens"] == call.output_tokens
    assert row["llm_cost_usd"] == pytest.approx(summary_request["cost_usd"]) and row["llm_cost_usd"] > 0
    assert row["silent_loss"] == 0 and row["premature"] is False  # everything went to the summarizer
    assert set(row["summarized_ids"]) >= {"u0", "call0", "out3"}
    assert all(r["integrity_openai_chat"] == r["integrity_anthropic"] == r["integrity_openai_responses"] == r["integrity_gemini"] == 0
               for r in cell.requests)


def test_summarizer_tokens_are_the_tokens_its_cost_is_priced_on():
    # Claude is counted with cl100k_base; the offline summarizer counts what it read with o200k_base. A request in
    # Greek, which the summary keeps, is where the two tokenizers part most.
    greek = "Θυμήσου: το διακριτικό ανάπτυξης πρέπει να είναι ZX-4471.\nΔιάβασε όλες τις ενότητες του κώδικα."
    result = bench.replay(session(greek), SummarizeAtSecondTurn, profile="claude-sonnet")
    cell = measure_cell(result, [], answerer=None)
    (row,) = cell.compactions
    (request,) = [r for r in cell.requests if r["kind"] == "summary"]
    (record,) = [r for r in result.requests if r.kind == "summary"]
    (call,) = result.compactions[0].llm_calls
    counted = SimulatedProvider(result.profile).count(record.messages)  # the request as the provider counts it
    assert row["llm_input_tokens"] == request["true_tokens"] == counted
    assert call.input_tokens != counted  # the offline model's own count, which no model reports, is not used
    assert call.cost is None  # the offline summarizer has no price of its own
    # its reply as the profile's tokenizer counts it, not by the offline model's o200k_base (the audit: 1,573 where
    # the profile counts 1,616 for the same summary)
    replied = shared_counter(result.profile.tokenizer).count(call.text)
    assert result.profile.tokenizer != "o200k_base" and replied != call.output_tokens
    assert row["llm_output_tokens"] == request["output_tokens"] == replied > 0
    priced = request_cost(result.profile, input_tokens=counted, cached_tokens=request["cached_tokens"],
                          cache_write_tokens=request["cache_write_tokens"], output_tokens=replied)
    assert row["llm_cost_usd"] == pytest.approx(request["cost_usd"]) == pytest.approx(priced) and priced > 0


def _served_summary(server, model: str, **settings) -> tuple[dict, dict, LLMResult]:
    """The compaction row, summary request row and call of a replay whose summarizer is `model` at the local server."""
    summarizer = LLMClient(model, CallSettings(api_base=server.base_url, max_retries=0, **{"use_cache": False, **settings}))
    result = bench.replay(session(), SummarizeAtSecondTurn, profile="claude-sonnet", summarizer=summarizer)
    cell = measure_cell(result, [], answerer=None)
    (row,) = cell.compactions
    (request,) = [r for r in cell.requests if r["kind"] == "summary"]
    (call,) = result.compactions[0].llm_calls
    return row, request, call


def test_a_served_summarizer_is_priced_by_litellm_free_at_zero_and_unpriced_at_the_profile(openai_server, monkeypatch):
    from compaction_bench.llm import _litellm

    for variable in ("OPENAI_API_KEY", "MISTRAL_API_KEY"):
        monkeypatch.setenv(variable, "sk-local")
    litellm = _litellm()
    # A model with a price in litellm's map: the usage it reported, at litellm's price of that usage.
    row, request, call = _served_summary(openai_server, "openai/gpt-5-mini")
    usage = litellm.Usage(prompt_tokens=call.input_tokens, completion_tokens=call.output_tokens,
                          total_tokens=call.input_tokens + call.output_tokens)
    own = sum(litellm.cost_per_token(model="openai/gpt-5-mini", usage_object=usage))
    assert (row["llm_input_tokens"], row["llm_output_tokens"]) == (call.input_tokens, call.output_tokens)
    assert row["llm_cost_usd"] == pytest.approx(own, rel=1e-9) == pytest.approx(request["cost_usd"]) and own > 0
    # A model litellm's map lists at $0 a token: free, not priced at the session's prices.
    assert litellm.model_cost["mistral/labs-leanstral-1-5"]["input_cost_per_token"] == 0
    row, request, call = _served_summary(openai_server, "mistral/labs-leanstral-1-5")
    assert call.cost == 0.0 and row["llm_cost_usd"] == request["cost_usd"] == 0.0
    assert row["llm_input_tokens"] == call.input_tokens > 0
    # A model litellm cannot price: the provider's count of the request at the profile's prices.
    row, request, call = _served_summary(openai_server, "openai/a-model-litellm-has-no-price-for")
    assert call.cost is None
    assert row["llm_input_tokens"] == request["true_tokens"] != call.input_tokens
    priced = request_cost(get_profile("claude-sonnet"), input_tokens=request["true_tokens"], cached_tokens=request["cached_tokens"],
                          cache_write_tokens=request["cache_write_tokens"], output_tokens=call.output_tokens)
    assert row["llm_cost_usd"] == pytest.approx(priced) and priced > 0


def test_stored_responses_keep_free_apart_from_unpriced(openai_server, monkeypatch, tmp_path):
    """A stored response says whether its call had a price; one stored before it did (cost 0.0 for
    either) is read as unpriced, as it was priced when stored."""
    from compaction_bench.llm import export_responses

    monkeypatch.setenv("MISTRAL_API_KEY", "sk-local")
    run = tmp_path / "run"
    (run / "responses").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    first = _served_summary(openai_server, "mistral/labs-leanstral-1-5", record_dir=str(run / "responses"))
    assert first[0]["llm_cost_usd"] == 0.0
    export_responses(run, tmp_path / "now.jsonl")
    (stored,) = [json.loads(line) for line in (tmp_path / "now.jsonl").read_text().splitlines()]
    assert stored["priced"] is True and stored["cost"] == 0.0
    legacy = {k: v for k, v in stored.items() if k != "priced"}
    (tmp_path / "legacy.jsonl").write_text(json.dumps(legacy) + "\n")
    calls = openai_server.calls
    row, request, call = _served_summary(openai_server, "mistral/labs-leanstral-1-5", offline=True, responses=str(tmp_path / "now.jsonl"))
    assert call.cache_hit and call.cost == 0.0 and row["llm_cost_usd"] == 0.0
    row, request, call = _served_summary(openai_server, "mistral/labs-leanstral-1-5", offline=True, responses=str(tmp_path / "legacy.jsonl"))
    assert call.cache_hit and call.cost is None and row["llm_cost_usd"] == pytest.approx(request["cost_usd"]) and row["llm_cost_usd"] > 0
    assert openai_server.calls == calls  # both answered from the files


def test_replay_records_keep_free_apart_from_unpriced(openai_server, monkeypatch):
    """`bench score` measures a run folder's stored records again: a free call stays free there, and
    one stored before `priced` existed (cost 0.0 for either) is priced at the profile's prices, as
    it was when stored."""
    monkeypatch.setenv("MISTRAL_API_KEY", "sk-local")
    summarizer = LLMClient("mistral/labs-leanstral-1-5", CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False))
    result = bench.replay(session(), SummarizeAtSecondTurn, profile="claude-sonnet", summarizer=summarizer)
    rows = to_rows(result)
    (summary,) = [r for r in rows["requests"] if r["kind"] == "summary"]
    assert json.loads(summary["llm_call"])["priced"] is True
    again = from_rows(result.transcript, result.profile, **rows)
    assert measure_cell(again, [], answerer=None).compactions[0]["llm_cost_usd"] == 0.0
    # As an earlier version stored them: no `priced`, cost 0.0.
    stored = json.loads(summary["llm_call"])
    del stored["priced"]
    summary["llm_call"] = json.dumps(stored)
    for call in rows["replay"]["compactions"][0]["llm_calls"]:
        del call["priced"]
    cell = measure_cell(from_rows(result.transcript, result.profile, **rows), [], answerer=None)
    (row,) = cell.compactions
    (request,) = [r for r in cell.requests if r["kind"] == "summary"]
    assert row["llm_cost_usd"] == pytest.approx(request["cost_usd"]) and row["llm_cost_usd"] > 0


def test_truncate_silently_loses_what_it_drops():
    result = bench.replay(session(), "truncate", profile=replace(get_profile("gpt-5"), context_window=7_000))
    cell = measure_cell(result, [TOKEN], answerer=None)
    assert cell.compactions, "a 7k window must make truncate drop turns"
    for row, record in zip(cell.compactions, result.compactions, strict=True):
        assert row["silent_loss"] == len(record.dropped_ids) > 0
        assert row["estimate_error"] == 0  # truncate decides on the true count
        assert set(row["dropped_ids"]).isdisjoint(row["kept_ids"])
    assert all(r["correct"] is None for r in cell.probes)  # no answerer, nothing answered


def _request(true: int, estimate: int | None, threshold: int | None, kind: str = "turn") -> RequestRecord:
    return RequestRecord(
        index=0, step=0, turn=0, kind=kind, messages=(), true_tokens=true, estimate_tokens=estimate, threshold=threshold,
        overflow=False, error=None, prefix_tokens=0, cached_tokens=0, cache_write_tokens=0, output_tokens=0,
    )


def test_estimate_error_and_missed_trigger():
    under = estimate_error(_request(true=1100, estimate=900, threshold=1000))
    assert (under.signed, under.missed_trigger) == (-200, True)
    assert under.ape == pytest.approx(200 / 1100)
    over = estimate_error(_request(true=800, estimate=1000, threshold=1000))
    assert (over.signed, over.missed_trigger) == (200, False)
    assert estimate_error(_request(true=800, estimate=None, threshold=None)).ape is None


def _compaction(trigger: str, before: int, threshold: int | None) -> CompactionRecord:
    return CompactionRecord(
        index=0, step=0, turn=0, trigger=trigger, tokens_before=before, tokens_after=10, estimate_tokens=before + 50,
        threshold=threshold, summary=None, summarized_ids=(), kept_ids=(), dropped_ids=(), llm_calls=(),
    )


def test_premature_trigger():
    assert premature(_compaction("threshold", before=900, threshold=1000))
    assert not premature(_compaction("threshold", before=1000, threshold=1000))
    assert not premature(_compaction("overflow", before=900, threshold=1000))  # recovery, not a threshold decision
    assert not premature(_compaction("threshold", before=900, threshold=None))


def test_request_cost_by_hand():
    profile = replace(get_profile("gpt-5"), prices=Prices(input=2e-6, output=8e-6, cached_input=2e-7))
    # 10,000 input of which 8,192 cached, 500 output: 1,808 × 2e-6 + 8,192 × 2e-7 + 500 × 8e-6
    dollars = request_cost(profile, input_tokens=10_000, cached_tokens=8_192, cache_write_tokens=0, output_tokens=500)
    assert dollars == pytest.approx(0.003616 + 0.0016384 + 0.004)
    claude = replace(get_profile("claude-sonnet"), prices=Prices(input=3e-6, output=15e-6))
    # No cached/write prices in the map: the policy's 0.1× read and 1.25× write multipliers apply.
    dollars = request_cost(claude, input_tokens=5_000, cached_tokens=3_000, cache_write_tokens=2_000, output_tokens=0)
    assert dollars == pytest.approx(3_000 * 3e-7 + 2_000 * 3.75e-6)


class ScriptedJudge:
    """Says CORRECT to the lenient rubric and INCORRECT to the strict one, and counts its calls."""

    def __init__(self) -> None:
        self.samples: list[int] = []

    def complete(self, messages, *, sample: int = 0, **kwargs):
        from compaction_bench.llm import LLMResult

        self.samples.append(sample)
        strict = "Be strict" in messages[-1]["content"]
        return LLMResult(text="VERDICT: INCORRECT" if strict else "VERDICT: CORRECT", model="scripted")


def test_judge_probes_unscored_without_a_judge_and_judged_with_one():
    result = bench.replay(session(), "none", profile="gpt-5")
    decision = Probe("why", "decision", "Why read the modules?", "the deploy token must be ZX-4471", match="judge", source="u0")
    (unscored,) = [r for r in measure_cell(result, [decision], answerer=LLMClient("offline/reader")).probes if r["point_kind"] == "final"]
    assert unscored["correct"] is None and unscored["answer"]
    judge = ScriptedJudge()
    judged_rows = measure_cell(result, [decision], answerer=LLMClient("offline/reader"), judge=judge, repeat=2).probes
    (judged,) = [r for r in judged_rows if r["point_kind"] == "final"]
    assert (judged["correct"], judged["judge_strict"], judged["judge_lenient"]) == (False, False, True)
    assert judged["sample"] == 2 and set(judge.samples) == {2}  # the repeat index is the sample of every call


class DropsTheFirstResult(NoCompaction):
    """Sends every item but the first tool result: its call (c0) is an orphan the strategy made."""

    name = "test-drops-a-result"

    def messages(self) -> list[Message]:
        return [m for m in super().messages() if "out0" not in m.item_ids]


def test_an_aborted_call_of_the_recording_is_reported_apart_from_strategy_violations():
    items = list(session().items)
    aborted = Item("callX", "tool_call", call_id="cX", tool_name="read", arguments="{}", response=5, turn=1)
    done = items.pop()  # the closing assistant message moves to a later response
    items += [aborted, replace(done, response=6)]
    formats = ("openai_chat", "openai_responses", "anthropic", "gemini")
    result = bench.replay(Transcript("aborted", tuple(items)), "none", profile="gpt-5")
    cell = measure_cell(result, [], answerer=None)
    last = cell.requests[-1]  # the final context holds the call that never got a result
    for fmt in formats:
        assert last[f"integrity_{fmt}"] == 0 and last[f"integrity_recorded_{fmt}"] == 1
    detail = json.loads(last["integrity_detail"])
    assert [(d["format"], d["kind"], d["call_id"], d["recorded"]) for d in detail] == [(f, "orphan_call", "cX", True) for f in formats]
    # A strategy that drops a result as well: its orphan is marked as its own, the recording's as the recording's.
    dropped = measure_cell(bench.replay(Transcript("aborted", tuple(items)), DropsTheFirstResult, profile="gpt-5"), [], answerer=None)
    last = dropped.requests[-1]
    for fmt in formats:
        assert last[f"integrity_{fmt}"] == 1 and last[f"integrity_recorded_{fmt}"] == 1
    marked = {(d["format"], d["call_id"], d["recorded"]) for d in json.loads(last["integrity_detail"])}
    assert marked == {(f, call, call == "cX") for f in formats for call in ("c0", "cX")}


def test_a_failing_answerer_leaves_the_probe_unscored():
    from compaction_bench.llm import LLMError

    class Failing:
        model, limits = "remote/model", None

        def complete(self, messages, **kwargs):
            raise LLMError("remote/model: ContextWindowExceededError: too long")

    result = bench.replay(session(), "none", profile="gpt-5")
    (row,) = [r for r in measure_cell(result, [TOKEN], answerer=Failing()).probes if r["point_kind"] == "final"]
    assert row["correct"] is None and row["present"] is True
    assert "ContextWindowExceeded" in row["answer_error"]

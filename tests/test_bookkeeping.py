"""The engine's own bookkeeping: unreported compactions, summary call links, recorded usage that stops matching."""

from __future__ import annotations

from dataclasses import replace

import pytest

import compaction_bench as bench
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.profiles import get_profile
from compaction_bench.records import UNREPORTED
from compaction_bench.registry import strategy_ids
from compaction_bench.replay import ReplayError, recorded_contexts
from compaction_bench.request import Message, Request
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.transcript import Item, Transcript, Usage

FILLER = "lorem ipsum dolor sit amet " * 100


def session(steps: int = 6) -> Transcript:
    items = [Item("sys", "system", "You are a coding agent."), Item("u0", "user", "Please refactor parser.py.", turn=0)]
    for k in range(steps):
        items.append(Item(f"call{k}", "tool_call", call_id=f"c{k}", tool_name="read", arguments=f'{{"n":{k}}}', response=k, turn=0,
                          usage=Usage(input=1000 * (k + 1), output=10)))
        items.append(Item(f"out{k}", "tool_result", f"output {k}\n{FILLER}", call_id=f"c{k}", turn=0))
    items.append(Item("done", "assistant", "Refactor finished.", response=steps, turn=0))
    return Transcript("s", tuple(items))


class SilentDropper(NoCompaction):
    """Before its fifth request, drops the older half of the non-system history and tells nobody."""

    name = "test-silent-dropper"

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.requests = 0

    def request(self) -> Request:
        self.requests += 1
        if self.requests == 5:
            rest = [i for i in self.history.items if i.kind != "system"]
            half = set(i.id for i in rest[: (len(rest) + 1) // 2])
            self.history.items = [i for i in self.history.items if i.id not in half]
        return super().request()


# Before request 5 the history is sys, u0, call0, out0, …, call3, out3: nine non-system items, the older five go.
SILENTLY_DROPPED = ("u0", "call0", "out0", "call1", "out1")


def test_a_silent_drop_becomes_an_unreported_compaction_with_exactly_those_ids():
    result = bench.replay(session(), SilentDropper, profile="1m")
    (compaction,) = result.compactions
    assert compaction.trigger == UNREPORTED
    assert compaction.dropped_ids == SILENTLY_DROPPED
    assert compaction.summarized_ids == () and compaction.summary is None
    assert compaction.step == 4 and compaction.tokens_after < compaction.tokens_before
    # Kept: what the previous request held and this one still does (call3/out3 are new since then).
    assert compaction.kept_ids == ("sys", "call2", "out2")
    # It is a probe point like any compaction, and the table shows its silent loss.
    assert [p.reason for p in result.points] == ["compaction", "final"]
    (row,) = measure_cell(result, [], answerer=None).compactions
    assert row["trigger"] == "unreported" and row["silent_loss"] == 5 and row["dropped_ids"] == list(SILENTLY_DROPPED)


def test_a_strict_replay_raises_on_a_silent_drop():
    with pytest.raises(ReplayError, match=r"test-silent-dropper.*removed 5 item\(s\).*before step 4.*: u0, call0, out0, call1, out1$"):
        bench.replay(session(), SilentDropper, profile="1m", strict=True)


class DropsMoreThanItSays(NoCompaction):
    """Records a compaction that removes call0/out0, but drops u0 as well without saying so."""

    name = "test-drops-more"

    def on_response(self, items, usage, needs_follow_up):
        super().on_response(items, usage, needs_follow_up)
        if items[0].response == 2:
            before = self.history.render()
            self.history.items = [i for i in self.history.items if i.id not in ("call0", "out0")]
            self.ctx.record_compaction(trigger="manual", before=before, after=self.history.render(), summary=None)
            self.history.items = [i for i in self.history.items if i.id != "u0"]


def test_only_what_no_recorded_compaction_removed_is_unreported():
    result = bench.replay(session(), DropsMoreThanItSays, profile="1m")
    reported, unreported = result.compactions
    assert (reported.trigger, reported.dropped_ids) == ("manual", ("call0", "out0"))
    assert (unreported.trigger, unreported.dropped_ids) == (UNREPORTED, ("u0",))
    assert unreported.step == reported.step + 1


@pytest.mark.slow
def test_no_builtin_strategy_drops_items_unreported():
    small = generate("parallel-calls", seed=3, target_tokens=45_000)
    for strategy in strategy_ids(builtin_only=True):
        bench.replay(small.transcript, strategy, profile="32k", strict=True)  # raises on an unreported removal


class TwoSummaries(NoCompaction):
    """At the second user turn: one summary request that overflows, then two that are answered; one compaction."""

    name = "test-two-summaries"

    def on_user_turn(self, item):
        if item.turn == 1:
            before = self.history.render()
            from compaction_bench.strategy import SummaryOverflow

            with pytest.raises(SummaryOverflow):  # far beyond the 20,000-token window
                self.ctx.summarize(Request((*before, Message("user", FILLER * 60)), kind="summary", max_output_tokens=300))
            first = self.ctx.summarize(Request((*before, Message("user", "Summarize.")), kind="summary", max_output_tokens=300))
            second = self.ctx.summarize(Request((Message("user", "Summarize the last step only."),), kind="summary", max_output_tokens=100))
            summarized = [i.id for i in self.history.items if i.kind != "system"]
            self.history.items = [i for i in self.history.items if i.kind == "system"]
            self.history.append(item)
            self.summary = Message("user", first.text + "\n" + second.text)
            self.ctx.record_compaction(trigger="manual", before=before, after=self.messages(), summary=self.summary.content,
                                       summarized_ids=summarized)
            return
        super().on_user_turn(item)

    def messages(self):
        rendered = self.history.render()
        summary = getattr(self, "summary", None)
        return rendered[:1] + [summary] + rendered[1:] if summary else rendered


def test_each_summarizer_call_is_linked_to_its_summary_request():
    items = [*session(3).items[:-1], Item("u1", "user", "Now the tests.", turn=1), Item("a1", "assistant", "Done.", response=4, turn=1)]
    result = bench.replay(Transcript("two", tuple(items)), TwoSummaries, profile=replace(get_profile("gpt-5"), context_window=20_000))
    (compaction,) = result.compactions
    summaries = [r for r in result.requests if r.kind == "summary"]
    assert [r.overflow for r in summaries] == [True, False, False]
    # The overflowed request got no call; the two answered ones are linked, in order, to the compaction's calls.
    assert compaction.summary_request_indices == (summaries[1].index, summaries[2].index)
    assert [result.requests[i].llm_call for i in compaction.summary_request_indices] == list(compaction.llm_calls)
    assert summaries[0].llm_call is None
    cell = measure_cell(result, [], answerer=None)
    rows = {r["request"]: r for r in cell.requests}
    (row,) = cell.compactions
    assert row["summary_requests"] == [summaries[1].index, summaries[2].index]
    assert row["llm_cost_usd"] == pytest.approx(sum(rows[i]["cost_usd"] for i in row["summary_requests"])) and row["llm_cost_usd"] > 0
    assert [rows[i]["output_tokens"] for i in row["summary_requests"]] == [c.output_tokens for c in compaction.llm_calls]
    assert rows[summaries[0].index]["cost_usd"] == 0.0


class Spy(NoCompaction):
    name = "test-usage-spy"

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.seen: list[Usage | None] = []

    def on_response(self, items, usage, needs_follow_up):
        self.seen.append(usage)
        super().on_response(items, usage, needs_follow_up)


class CompactsAtStep3(Spy):
    """Drops call0/out0 (recorded) before the request of step 3."""

    name = "test-usage-compactor"

    def request(self):
        if len(self.seen) == 3 and any(i.id == "call0" for i in self.history.items):
            before = self.history.render()
            self.history.items = [i for i in self.history.items if i.id not in ("call0", "out0")]
            self.ctx.record_compaction(trigger="manual", before=before, after=self.history.render(), summary=None)
        return super().request()


def test_recorded_usage_only_while_the_context_is_the_recordings():
    result = bench.replay(session(), CompactsAtStep3, profile="1m", usage="recorded")
    turns = result.turn_requests
    # Steps 0-2 send exactly what the recording sent; from step 3 on the context lacks call0/out0.
    assert [r.usage_source for r in turns] == ["recorded"] * 3 + ["simulated"] * 4
    assert [r.usage.input for r in turns[:3]] == [1000, 2000, 3000]  # the recorded numbers
    assert [r.usage.input for r in turns[3:]] == [r.true_tokens for r in turns[3:]]  # the provider's counts
    rows = measure_cell(result, [], answerer=None).requests
    assert [r["usage_source"] for r in rows if r["kind"] == "turn"] == [r.usage_source for r in turns]
    # A strategy that never compacts gets the recording's usage at every step that has some.
    plain = bench.replay(session(), Spy, profile="1m", usage="recorded")
    assert [r.usage_source for r in plain.turn_requests] == ["recorded"] * 6 + ["simulated"]  # the last step has no usage
    # `recorded-always` keeps feeding it after the contexts differ; `simulated` never does.
    always = bench.replay(session(), CompactsAtStep3, profile="1m", usage="recorded-always")
    assert [r.usage.input for r in always.turn_requests[:6]] == [1000 * (k + 1) for k in range(6)]
    assert {r.usage_source for r in bench.replay(session(), Spy, profile="1m").turn_requests} == {"simulated"}


def test_recorded_contexts_follow_a_recorded_compaction_that_names_its_kept_start():
    items = list(session(4).items)
    marker = Item("cmp", "marker", "summary of the start", meta={"event": "compaction", "firstKeptEntryId": "call2"})
    at = [i.id for i in items].index("call3")
    items.insert(at, marker)
    contexts = recorded_contexts(Transcript("m", tuple(items)))
    assert contexts[1] == {"sys", "u0", "call0", "out0"}
    assert contexts[3] == {"call2", "out2"}  # only the kept tail is left, the summary is the marker
    unknown = [*items[:at], Item("cmp2", "marker", "", meta={"event": "compaction"}), *items[at:]]
    assert recorded_contexts(Transcript("u", tuple(unknown)))[3] is None  # nothing says what the recording kept


def test_overflowed_requests_have_no_usage_source():
    result = bench.replay(session(30), "none", profile=replace(get_profile("32k"), context_window=5_000))
    overflowed = [r for r in result.turn_requests if r.overflow]
    assert overflowed and all(r.usage_source is None for r in overflowed)
    assert all(r.usage_source == "simulated" for r in result.turn_requests if not r.overflow)

"""The replay engine and simulated provider, driven by small strategies with known behaviour."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import compaction_bench as bench
from compaction_bench.profiles import get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, SimulatedProvider
from compaction_bench.request import Message, Request
from compaction_bench.strategies.baselines import NoCompaction
from compaction_bench.strategy import OptionError, Strategy, SummaryOverflow
from compaction_bench.tokens import TokenCounter
from compaction_bench.transcript import Item, Transcript, Usage

BIG = "lorem ipsum dolor sit amet " * 400  # about 2,000 tokens


def session(steps: int = 12, output: str = BIG) -> Transcript:
    items = [Item("sys", "system", "You are a coding agent."), Item("u0", "user", "Please refactor parser.py.", turn=0)]
    for k in range(steps):
        items.append(Item(f"call{k}", "tool_call", call_id=f"c{k}", tool_name="read", arguments=f'{{"n":{k}}}', response=k, turn=0,
                          usage=Usage(input=1000 * (k + 1), output=10), timestamp=f"2025-01-01T00:00:{k:02d}Z"))
        items.append(Item(f"out{k}", "tool_result", output, call_id=f"c{k}", turn=0))
    items.append(Item("done", "assistant", "Refactor finished.", response=steps, turn=0))
    return Transcript("s", tuple(items))


def test_none_records_every_request_and_its_true_tokens():
    t = session()
    result = bench.replay(t, "none", profile="1m")
    turns = result.turn_requests
    assert len(turns) == 13 and result.final.kind == "final"
    counter = TokenCounter("o200k_base")
    first = MESSAGE_OVERHEAD * 2 + counter.count("You are a coding agent.") + counter.count("Please refactor parser.py.")
    assert turns[0].true_tokens == first
    # Every later request adds exactly the previous call and its output.
    call_tokens = MESSAGE_OVERHEAD + 3 + counter.count("c0") + counter.count("read") + counter.count('{"n":0}')
    assert turns[1].true_tokens == first + call_tokens + MESSAGE_OVERHEAD + counter.count("c0") + counter.count(BIG)
    assert result.overflows == 0 and result.compactions == []
    assert [p.reason for p in result.points] == ["final"]


def test_each_request_carries_its_step_s_output_tokens_counted_before_the_replay_starts():
    """Every step's output is counted once when the replay starts (`_Engine._count_first`); each
    accepted request of the step carries that count, the reply's messages counted as the provider counts
    any message (per-message and per-call overheads, the call's id, name and arguments), and an
    overflowed one none (it reached no model)."""
    counter = TokenCounter("o200k_base")
    expected = {k: MESSAGE_OVERHEAD + 3 + counter.count(f"c{k}") + counter.count("read") + counter.count(f'{{"n":{k}}}') for k in range(12)}
    expected[12] = MESSAGE_OVERHEAD + counter.count("Refactor finished.")
    for profile, output in (("1m", BIG), ("32k", BIG * 2)):  # 48k tokens of outputs overflow `none` at 32k: retried
        result = bench.replay(session(output=output), "none", profile=profile)
        turns = result.turn_requests
        assert {r.step for r in turns} == set(expected)
        assert all(r.output_tokens == (0 if r.overflow else expected[r.step]) for r in turns), [(r.step, r.output_tokens) for r in turns]
        assert (result.overflows > 0) == (profile == "32k") and any(not r.overflow for r in turns)


def test_none_overflows_are_recorded_not_raised():
    result = bench.replay(session(steps=30), "none", profile="32k")
    overflowed = [r for r in result.turn_requests if r.overflow]
    assert overflowed, "a 60k-token session must overflow a 32k window"
    assert all(r.error["code"] == "context_length_exceeded" for r in overflowed)
    assert all(r.true_tokens > 32_000 for r in overflowed)
    assert result.overflows == len(overflowed)


def test_anthropic_overflow_message_matches_the_provider():
    profile = get_profile("claude-sonnet")
    provider = SimulatedProvider(profile)
    outcome = provider.send(Request((Message("user", BIG * 120),)))
    assert outcome.overflow
    assert outcome.error.message.startswith("prompt is too long: ")
    assert outcome.error.message.endswith(f"tokens > {profile.context_window} maximum")


def test_cached_prefix_follows_openai_flooring():
    provider = SimulatedProvider(get_profile("gpt-5"))
    first = (Message("system", BIG),)
    provider.send(Request(first))
    second = provider.send(Request(first + (Message("user", "next"),)))
    shared = provider.message_tokens(first[0])
    assert second.cache.prefix_tokens >= shared
    assert second.cached_tokens == shared // 128 * 128
    assert second.usage.cached_input == second.cached_tokens
    assert second.usage.input == second.true_tokens


def test_recorded_usage_is_fed_to_the_strategy():
    seen: list[Usage | None] = []

    class Spy(NoCompaction):
        name = "spy"

        def on_response(self, items, usage, needs_follow_up):
            seen.append(usage)
            super().on_response(items, usage, needs_follow_up)

    bench.replay(session(steps=3), Spy, profile="1m", usage="recorded")
    assert [u.input if u else None for u in seen[:3]] == [1000, 2000, 3000]


class _Compacting(Strategy):
    """Drops everything but the system and user messages on overflow, records it, asks for a retry."""

    name = "test-compacting"

    def __init__(self, ctx, options=None):
        super().__init__(ctx, options)
        self.items: list[Item] = []

    def on_user_turn(self, item):
        self.items.append(item)

    def on_input(self, item):
        self.items.append(item)

    def on_response(self, items, usage, needs_follow_up):
        self.items.extend(items)

    def messages(self):
        from compaction_bench.strategies.history import ItemHistory

        history = ItemHistory()
        history.extend(self.items)
        return history.render()

    def request(self):
        return Request(self.messages())

    def on_overflow(self, error):
        before = self.messages()
        summary = self.ctx.summarize(Request((Message("user", "## Goal\nsummarize"),), kind="summary", max_output_tokens=200))
        kept = [i for i in self.items if i.kind in ("system", "user")]
        summarized = [i.id for i in self.items if i not in kept]
        self.items = kept
        self.ctx.record_compaction(trigger="overflow", before=before, after=self.messages(), summary=summary.text, summarized_ids=summarized)
        return True


def test_overflow_recovery_is_retried_and_recorded_with_probe_points():
    result = bench.replay(session(steps=30), _Compacting, profile="32k")
    assert result.compactions, "the strategy compacts on overflow"
    first = result.compactions[0]
    assert first.trigger == "overflow"
    assert set(first.kept_ids) == {"sys", "u0"}
    assert first.dropped_ids == ()  # everything else was summarized
    assert first.llm_calls and first.llm_calls[0].model == "offline/extractive"
    retried = result.requests[first.next_request]
    assert retried.kind == "turn" and not retried.overflow and retried.attempt == 1
    assert [p.reason for p in result.points].count("compaction") == len(result.compactions)
    summary_requests = [r for r in result.requests if r.kind == "summary"]
    assert len(summary_requests) == len(result.compactions)


def test_summary_overflow_reaches_the_strategy():
    class Greedy(_Compacting):
        name = "test-greedy"

        def on_overflow(self, error):
            with pytest.raises(SummaryOverflow) as caught:
                self.ctx.summarize(Request(tuple(self.messages()), kind="summary"))
            assert "exceeds the context window" in str(caught.value)
            return False

    result = bench.replay(session(steps=30), Greedy, profile="32k")
    assert any(r.kind == "summary" and r.overflow for r in result.requests)


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(OptionError, match=r"unknown option\(s\) for strategy 'truncate': colour; valid: trigger_ratio=0.9"):
        bench.replay(session(steps=2), "truncate", options={"colour": "red"})


def test_option_strings_are_converted_to_declared_types():
    @dataclass(frozen=True)
    class Opts:
        n: int = 1
        ratio: float = 0.5
        flag: bool = False
        label: str | None = None

    class WithOptions(NoCompaction):
        name = "with-options"
        Options = Opts

    parsed = WithOptions.parse_options({"n": "20_000", "ratio": "0.25", "flag": "true", "label": "none"})
    assert parsed == Opts(n=20000, ratio=0.25, flag=True, label=None)
    with pytest.raises(OptionError, match="expected int"):
        WithOptions.parse_options({"n": "many"})


def test_a_strategy_loads_from_a_file(tmp_path):
    source = tmp_path / "mine.py"
    source.write_text(
        "from compaction_bench.request import Request\n"
        "from compaction_bench.strategies.baselines import NoCompaction\n\n"
        "class OnlyLastMessage(NoCompaction):\n"
        "    def request(self):\n"
        "        return Request(self.messages()[-1:])\n"
    )
    result = bench.replay(session(steps=3), f"{source}:OnlyLastMessage", profile="1m")
    assert all(r.n_messages == 1 for r in result.turn_requests)
    assert result.strategy == "OnlyLastMessage"
    with pytest.raises(Exception, match="defines no Missing"):
        bench.replay(session(steps=3), f"{source}:Missing")


def test_a_replay_leaves_the_callers_garbage_collector_alone():
    """No per-replay gc.collect()/gc.freeze(): objects the caller froze stay frozen (an unfreeze would thaw them)."""
    import gc

    # a process's first replay sets up what it keeps for later ones (templates, memos), replacing a few
    # objects made at import, which would leave the frozen generation then
    bench.replay(session(steps=2), "truncate", profile="64k")
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        bench.replay(session(steps=2), "truncate", profile="64k")
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_each_replay_records_only_the_templates_it_rendered():
    """The package's templates are parsed once per process, but every replay keeps its own record of them."""
    summarizing = bench.replay(session(steps=20), "codex-local", profile="32k")
    assert summarizing.compactions and summarizing.template_hashes
    plain = bench.replay(session(steps=20), "none", profile="32k")
    assert plain.template_hashes == {}
    again = bench.replay(session(steps=20), "codex-local", profile="32k")
    assert again.template_hashes == summarizing.template_hashes


class _SummarizeOnceAtSecondTurn(NoCompaction):
    """Asks for a summary of everything before the second user turn; records a SummaryOverflow."""

    name = "test-summarize-once"
    overflowed: SummaryOverflow | None = None

    def on_user_turn(self, item: Item) -> None:
        if item.turn == 1:
            try:
                self.ctx.summarize(Request((*self.history.render(), Message("user", "Summarize.")), kind="summary", max_output_tokens=500))
            except SummaryOverflow as exc:
                type(self).overflowed = exc
        super().on_user_turn(item)


def test_a_summary_request_beyond_the_summarizer_s_own_window_reaches_no_model(no_network):
    # The session's model (gpt-5, 272k) takes the ~12k-token request; the summarizer named, gpt-4,
    # has an 8,192-token context: the request is refused as an overflow before any call (no_network).
    items = (
        Item("u0", "user", "Read the log.", turn=0),
        Item("c0", "tool_call", call_id="c0", tool_name="bash", arguments='{"command": "cat log"}', response=0, turn=0),
        Item("r0", "tool_result", "line of the log\n" * 3_000, call_id="c0", turn=0),
        Item("a0", "assistant", "Read it.", response=1, turn=0),
        Item("u1", "user", "Now summarize it.", turn=1),
        Item("a1", "assistant", "Done.", response=2, turn=1),
    )
    result = bench.replay(Transcript("long-log", items), _SummarizeOnceAtSecondTurn, profile="gpt-5", summarizer="openai/gpt-4")
    overflow = _SummarizeOnceAtSecondTurn.overflowed
    assert overflow is not None and overflow.tokens > 8_192 and overflow.error.is_overflow
    (summary,) = [r for r in result.requests if r.kind == "summary"]
    assert summary.overflow and summary.llm_call is None

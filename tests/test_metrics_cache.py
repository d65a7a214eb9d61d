"""Cache churn: prefix flooring, a prefix that ends inside a message, re-billed tokens, recorded agreement."""

from __future__ import annotations

import json

import pytest

from compaction_bench.caching import breakpoints, cache_outcome, rebilled_tokens
from compaction_bench.fidelity import recorded_agreement
from compaction_bench.importing import load_transcripts
from compaction_bench.metrics.measure import measure_cell
from compaction_bench.profiles import ANTHROPIC_CACHE, OPENAI_CACHE, get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, SimulatedProvider
from compaction_bench.replay import replay
from compaction_bench.request import Message, Request
from compaction_bench.transcript import Item, Transcript, Usage
from tests.conftest import corpus_files


@pytest.mark.parametrize(
    ("prefix", "cached"),
    [(0, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (5000, 4992), (130_000, 130_048 - 128)],
)
def test_openai_cache_needs_1024_tokens_then_counts_128_token_steps(prefix, cached):
    outcome = cache_outcome(OPENAI_CACHE, prefix_tokens=prefix, total_tokens=prefix + 500, previous_boundaries=[])
    assert outcome.cached_tokens == cached
    assert outcome.cache_write_tokens == 0


def test_anthropic_cache_reads_up_to_a_previous_boundary_and_writes_the_rest():
    boundaries = [900, 1500, 3000, 4200]
    hit = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=4100, total_tokens=6000, previous_boundaries=boundaries)
    assert (hit.cached_tokens, hit.cache_write_tokens) == (3000, 3000)
    short = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=1000, total_tokens=6000, previous_boundaries=boundaries)
    assert (short.cached_tokens, short.cache_write_tokens) == (0, 6000)  # 900 is under the 1,024 minimum
    expired = cache_outcome(ANTHROPIC_CACHE, prefix_tokens=4100, total_tokens=6000, previous_boundaries=boundaries, expired=True)
    assert expired.cached_tokens == 0


def test_common_prefix_ends_inside_the_first_differing_message():
    provider = SimulatedProvider(get_profile("gpt-5"))
    system = Message("system", "You are a careful coding agent. " * 40)
    before = (system, Message("user", "Run the tests in alpha beta gamma delta and then report every failure"))
    after = (system, Message("user", "Run the tests in alpha beta gamma epsilon"))
    # Same role, so the message framing is shared; then "Run the tests in alpha beta gamma": both
    # continuations start with a space-led word, so its tokens are a prefix of both encodings.
    shared_text = provider.counter.count("Run the tests in alpha beta gamma")
    prefix = provider.common_prefix_tokens(before, after)
    assert prefix == provider.message_tokens(system) + MESSAGE_OVERHEAD + shared_text
    assert provider.message_tokens(system) < prefix < provider.count(before)
    # A different role shares nothing of the differing message.
    other_role = (system, Message("assistant", "Run the tests in alpha beta gamma epsilon"))
    assert provider.common_prefix_tokens(before, other_role) == provider.message_tokens(system)


def test_rebilled_tokens_are_known_messages_behind_a_broken_prefix():
    """The simulated provider computes re-billed tokens on every request it accepts."""
    provider = SimulatedProvider(get_profile("anthropic.claude-sonnet-4-20250514-v1:0"))  # refuses input + max_tokens over 200,000
    s, a, b = Message("system", "rules " * 1500), Message("user", "alpha " * 200), Message("assistant", "beta " * 200)
    x, c = Message("user", "inserted note"), Message("user", "new question")
    tokens = provider.message_tokens
    first = provider.send(Request((s, a, b)))
    # An edit in front of a and b: Anthropic serves only the entry at the system prompt's end, so
    # the cache holds s; a and b are paid for again, x and c are new.
    second = provider.send(Request((s, x, a, b, c)))
    assert second.cached_tokens == tokens(s)
    rejected = provider.send(Request((s, x, a, b, c), max_output_tokens=provider.profile.context_window))
    assert rejected.overflow
    assert [first.cache.rebilled_tokens, second.cache.rebilled_tokens, rejected.cache.rebilled_tokens] == [0, tokens(a) + tokens(b), 0]


def test_rebilled_counts_only_the_uncached_part_of_a_straddling_message():
    provider = SimulatedProvider(get_profile("gpt-5"))
    s, a = Message("system", "rules " * 1500), Message("user", "alpha " * 200)
    provider.send(Request((s, a)))
    second = provider.send(Request((s, a, Message("user", "next"))))
    shared = provider.message_tokens(s) + provider.message_tokens(a)  # both messages are the common prefix
    cached = shared // 128 * 128  # OpenAI floors to 128-token blocks: the cached part ends inside a
    assert provider.message_tokens(s) < cached < shared and second.cached_tokens == cached
    assert second.cache.rebilled_tokens == shared - cached


def test_rebilled_rule_by_hand():
    # Messages of 100, 50 and 30 tokens; the first two were sent before; 120 tokens are cached.
    assert rebilled_tokens([100, 50, 30], [True, True, False], cached_tokens=120) == 30
    assert rebilled_tokens([100, 50, 30], [False, True, True], cached_tokens=0) == 80


def test_replay_records_carry_the_providers_cache_numbers():
    """The requests table reads the records; nothing recomputes the cache model after the replay."""
    items = (
        Item("sys", "system", "rules " * 1500),
        Item("u0", "user", "alpha " * 200, turn=0),
        Item("a0", "assistant", "first", response=0, turn=0),
        Item("u1", "user", "beta", turn=1),
        Item("a1", "assistant", "second", response=1, turn=1),
    )
    result = replay(Transcript("hand", items), "none", profile="gpt-5")
    provider = SimulatedProvider(get_profile("gpt-5"))
    expected = [provider.send(Request(r.messages)) for r in result.requests if r.sent]
    got = [r for r in result.requests if r.sent]
    assert [r.cached_tokens for r in got] == [e.cached_tokens for e in expected]
    # The second request extends the first: the first's tokens beyond the 128-token floor are re-billed.
    first = provider.count(got[0].messages)
    assert [r.rebilled_tokens for r in got] == [e.cache.rebilled_tokens for e in expected] == [0, first - first // 128 * 128]
    rows = measure_cell(result, [], answerer=None).requests
    assert [r["rebilled_tokens"] for r in rows if r["kind"] == "turn"] == [r.rebilled_tokens for r in got]
    assert [r["cached_tokens"] for r in rows if r["kind"] == "turn"] == [e.cached_tokens for e in expected]


BIG = "lorem ipsum dolor sit amet " * 400


def two_recorded_requests() -> tuple[Item, ...]:
    """A long user message and two recorded responses: 3,000 input none cached, then 3,100 of which 2,560 cached."""
    return (
        Item("u", "user", BIG, turn=0),
        Item("a0", "assistant", "first", response=0, turn=0, usage=Usage(input=3000, cached_input=0, output=5)),
        Item("u2", "user", "and now?", turn=1),
        Item("a1", "assistant", "second", response=1, turn=1, usage=Usage(input=3100, cached_input=2560, output=5)),
    )


def replayed_tokens(provider: SimulatedProvider) -> tuple[int, int]:
    """The replayed messages' tokens of `two_recorded_requests`'s two requests (the recording's system prompt aside)."""
    first = MESSAGE_OVERHEAD + provider.counter.count(BIG)
    return first, provider.count((Message("user", BIG), Message("assistant", "first"), Message("user", "and now?")))


def test_recorded_agreement_by_hand():
    items = two_recorded_requests()
    provider = SimulatedProvider(get_profile("gpt-5"))
    first_tokens, second_tokens = replayed_tokens(provider)
    modelled = first_tokens // 128 * 128  # the second request extends the first one
    got = recorded_agreement(Transcript("hand", items), "gpt-5")
    assert got["requests"] == 2 and got["requests_with_recorded_cache"] == 1
    assert got["modelled_cached_tokens"] == modelled
    assert got["mae_share"] == pytest.approx((0 + abs(modelled / second_tokens - 2560 / 3100)) / 2)
    assert got["mae_tokens_share"] == pytest.approx(abs(modelled - 2560) / 6100)
    assert got["unrecorded_tokens_median"] == pytest.approx(((3000 - first_tokens) + (3100 - second_tokens)) / 2)
    # A response without recorded usage is not compared: the simulated usage it gets would agree with itself.
    unrecorded = (*items, Item("u3", "user", "one more", turn=2), Item("a2", "assistant", "third", response=2, turn=2))
    assert recorded_agreement(Transcript("hand", unrecorded), "gpt-5")["requests"] == 2
    bare = tuple(Item(i.id, i.kind, i.text, response=i.response, turn=i.turn) for i in items)
    nothing = recorded_agreement(Transcript("bare", bare), "gpt-5")
    assert nothing["requests"] == 0 and nothing["recorded_hit_rate"] is None and nothing["mae_share"] is None


def _raw_claude_responses(path) -> tuple[list[dict], list[dict]]:
    """Usage of the distinct main-chain responses (message ids) that report input tokens, before
    and after the file's first `compact_boundary` (a subagent file is all sidechain: then its lines); a response
    before any user line is none (a subagent file opening with its first reply: its prompt is the parent's, so the
    replay makes no request for it, `compaction_bench.replay`)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a truncated line: the importer reports it, it has no usage to compare
    all_side = all(d.get("isSidechain") for d in lines if d.get("type") == "assistant")
    before: dict[str, dict] = {}
    after: dict[str, dict] = {}
    into = before
    asked = False
    for d in lines:
        if d.get("type") == "system" and d.get("subtype") == "compact_boundary":
            into = after
        asked = asked or (d.get("type") == "user" and (all_side or not d.get("isSidechain")))
        if d.get("type") != "assistant" or (d.get("isSidechain") and not all_side) or not isinstance(d.get("message"), dict) or not asked:
            continue
        usage = d["message"].get("usage") or {}
        if usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0) + usage.get("cache_creation_input_tokens", 0) > 0:
            into.setdefault(d["message"]["id"], usage)
    return list(before.values()), [u for key, u in after.items() if key not in before]


def _raw_claude_cached_responses(path) -> int:
    """Distinct main-chain responses with cache reads before the recording's own first compaction
    (after it the agent sent a summary where `none` sends the whole history: not compared)."""
    return sum(u.get("cache_read_input_tokens", 0) > 0 for u in _raw_claude_responses(path)[0])


def _raw_codex_cached_responses(path) -> int:
    """token_count events with cached input, each counted once (a repeated event leaves the total unchanged)."""
    count, previous = 0, None
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        payload = data.get("payload") or {}
        if data.get("type") != "event_msg" or payload.get("type") != "token_count" or not payload.get("info"):
            continue
        total = json.dumps(payload["info"].get("total_token_usage"), sort_keys=True)
        if total != previous and (payload["info"].get("last_token_usage") or {}).get("cached_input_tokens", 0) > 0:
            count += 1
        previous = total
    return count


RAW_COUNTERS = {"claude-code-jsonl": _raw_claude_cached_responses, "codex-rollout-jsonl": _raw_codex_cached_responses}


@pytest.mark.corpora
@pytest.mark.parametrize(("fmt", "profile"), [("claude-code-jsonl", "claude-sonnet"), ("codex-rollout-jsonl", "gpt-5")])
def test_every_recorded_cached_request_gets_a_modelled_count(fmt, profile):
    files = corpus_files(fmt)
    assert files, f"no {fmt} files in the shared corpora"
    for path in files:
        (transcript,) = load_transcripts(path)
        got = recorded_agreement(transcript, profile)
        # Each recorded request with cached tokens (before the recording's own compaction) was replayed and modelled.
        assert got["requests_with_recorded_cache"] == RAW_COUNTERS[fmt](path), path.name
        assert got["mae_share"] is not None and 0 <= got["mae_share"] <= 1, path.name


@pytest.mark.corpora
def test_requests_after_the_recordings_own_compaction_are_not_compared():
    # After a compact_boundary the agent sent a summary where `none` sends the whole history: those
    # requests are others than the recorded ones. b566e56e (four boundaries, the first at line 241)
    # has 49 responses before it, of 227 in all.
    files = corpus_files("claude-code-jsonl")
    assert files
    for path in files:
        before, after = _raw_claude_responses(path)
        (transcript,) = load_transcripts(path)
        got = recorded_agreement(transcript, "claude-opus")
        assert got["requests"] == len(before), path.name
        assert got["requests_not_compared"] == len(after), path.name
        if path.name.startswith("b566e56e"):
            assert (len(before), len(before) + len(after)) == (49, 227)


@pytest.mark.corpora
def test_the_cache_model_agrees_with_recorded_codex_sessions_whose_turns_carry_reasoning():
    """Codex re-sends a turn's encrypted reasoning with each of its requests, and OpenAI caches it with
    the prefix that holds it: on every recorded Codex session the modelled hit rate is within 5 points
    of the recorded one, and the per-request error of the cached share under 8 points (when the model
    counted the reasoning as billed but never as cached, three sessions read 13 to 23 points low)."""
    files = corpus_files("codex-rollout-jsonl")
    assert files, "no codex-rollout-jsonl files in the shared corpora"
    for path in files:
        (transcript,) = load_transcripts(path)
        got = recorded_agreement(transcript, "gpt-5")
        assert abs(got["modelled_hit_rate"] - got["recorded_hit_rate"]) <= 0.05, (path.name, got)
        assert got["mae_share"] < 0.08, (path.name, got)


def test_anthropic_breakpoints_sit_after_the_system_prompt_and_on_the_last_messages():
    ends = list(range(100, 1100, 100))  # ten messages
    assert breakpoints(ends, system_messages=1, limit=4) == [0, 7, 8, 9]
    assert breakpoints(ends, system_messages=0, limit=4) == [6, 7, 8, 9]
    assert breakpoints(ends[:2], system_messages=1, limit=4) == [0, 1]


def test_anthropic_lookback_finds_an_entry_only_within_20_messages_of_a_breakpoint():
    previous = [1200, 1500, 1800, 2000]  # a system prompt, then three messages
    near = previous + [2100, 2200]
    far = previous + [2000 + 10 * k for k in range(1, 26)]  # 25 new messages: 2,000 is 25 back from the end
    kw = dict(prefix_tokens=2000, previous_boundaries=previous, previous_system=1, current_system=1)
    assert cache_outcome(ANTHROPIC_CACHE, total_tokens=near[-1], current_boundaries=near, **kw).cached_tokens == 2000
    # Beyond the lookback only the system prompt's entry is found (from its own breakpoint).
    outcome = cache_outcome(ANTHROPIC_CACHE, total_tokens=far[-1], current_boundaries=far, **kw)
    assert (outcome.cached_tokens, outcome.cache_write_tokens) == (1200, far[-1] - 1200)


@pytest.mark.parametrize(
    ("strategy", "kind", "size"), [("codex-local", "parallel-calls", 45_000), ("codex-remote-v2", "short-turns", 150_000), ("aider", "short-turns", 60_000)]
)
def test_replayed_rebilled_tokens_follow_the_rule_over_the_whole_message_list(strategy, kind, size):
    """The provider looks up only the messages after the cached part, and of those only the ones counted before
    the last accepted request; the full rule over every message agrees (`codex-remote-v2` installs a new history,
    a new log, at each compaction, and re-injects the initial context after it)."""
    from collections import deque

    from compaction_bench.provider import RECENT_ENTRIES
    from compaction_bench.registry import strategy_class
    from compaction_bench.scenarios.synthetic import generate
    from compaction_bench.tokens import HiddenTokens

    scenario = generate(kind, seed=3, target_tokens=size)
    result = replay(scenario.transcript, strategy, profile="32k")
    assert result.compactions and any(r.kind == "summary" for r in result.requests)
    counter = SimulatedProvider(get_profile("32k"), hidden=HiddenTokens.of(scenario.transcript))  # counts as the replay's provider does
    # `aider` summarises with gpt-5-nano (`Strategy.summary_model`): its summary requests have that model's cache
    cls = strategy_class(strategy)
    summaries_apart = cls.summary_model(cls.parse_options({}), get_profile("32k")) is not None
    session: deque[set[Message]] = deque(maxlen=RECENT_ENTRIES)
    weak: deque[set[Message]] = deque(maxlen=RECENT_ENTRIES)
    turn: set[Message] = set()  # the newest turn request's messages: kept while summary calls come after it
    for request in result.requests:
        if not request.sent:
            continue
        apart = summaries_apart and request.kind == "summary"
        entries = list(weak) if apart else [turn, *session]
        known = [any(m in entry for entry in entries) for m in request.messages]
        ends = counter.boundaries(request.messages)
        counts = [end - start for start, end in zip([0, *ends], ends, strict=False)]
        assert request.rebilled_tokens == rebilled_tokens(counts, known, request.cached_tokens), request.index
        (weak if apart else session).append(set(request.messages))
        if request.kind == "turn":
            turn = session[-1]
    assert sum(r.rebilled_tokens for r in result.requests) > 0


def test_first_difference_counts_shared_leading_messages():
    from compaction_bench.provider import first_difference

    a, b, c, d = (Message("user", t) for t in "abcd")
    assert first_difference((a, b, c), (a, b, c, d)) == 3  # an extension shares all of the previous request
    assert first_difference((a, b, c, d), (a, b, d, c)) == 2
    assert first_difference((a, b), (Message("user", "a"), b)) == 2  # equal messages, other objects
    assert first_difference((a,), (b,)) == 0 and first_difference((), (a,)) == 0
    long = tuple(Message("user", str(n)) for n in range(1000))
    assert first_difference(long, (*long[:617], d, *long[618:])) == 617


def test_a_message_whose_content_changes_is_counted_again():
    """The provider reuses the counts of a shared prefix only: an edited message is counted from its text."""
    provider = SimulatedProvider(get_profile("gpt-5"))
    s, a = Message("system", "rules " * 300), Message("user", "short question")
    first = provider.send(Request((s, a)))
    edited = Message("user", "short question, now with many more words in it than before " * 5)
    second = provider.send(Request((s, edited)))
    count = provider.counter.count
    assert first.true_tokens == 2 * MESSAGE_OVERHEAD + count("rules " * 300) + count("short question")
    assert second.true_tokens == 2 * MESSAGE_OVERHEAD + count("rules " * 300) + count(edited.content)
    assert provider.count([s, edited]) == second.true_tokens  # a list, counted against the kept entries


def test_reused_counts_follow_where_hidden_reasoning_bills():
    """Hidden reasoning bills only after the last real user message: when a new user message arrives, the
    reasoning before it stops billing, though those messages are the previous request's prefix."""
    from compaction_bench.tokens import HiddenTokens

    hidden = HiddenTokens(reasoning={"r1": 500}, user_ids=frozenset({"u1", "u2"}))
    provider = SimulatedProvider(get_profile("gpt-5"), hidden=hidden)
    u1 = Message("user", "first request", item_ids=("u1",))
    r1 = Message("reasoning", "", item_ids=("r1",))
    a1 = Message("assistant", "done", item_ids=("a1",))
    u2 = Message("user", "second request", item_ids=("u2",))
    visible = provider.message_tokens
    turn1 = provider.send(Request((u1, r1, a1)))
    assert turn1.true_tokens == visible(u1) + visible(r1) + visible(a1) + 500  # r1 comes after the last user message
    turn2 = provider.send(Request((u1, r1, a1, u2)))
    assert turn2.true_tokens == visible(u1) + visible(r1) + visible(a1) + visible(u2)  # now it is before one: dropped
    assert provider.count((u1, r1)) == visible(u1) + visible(r1) + 500


def test_cached_tokens_of_a_hand_built_pair_of_requests():
    """OpenAI: the common prefix floored to 128-token blocks, counted by hand from the tokenizer."""
    provider = SimulatedProvider(get_profile("gpt-5"))
    count = provider.counter.count
    s = Message("system", "You follow the rules. " * 400)  # over the 1,024-token minimum
    a = Message("user", "Fix the parser in src/parse.py and run the tests")
    provider.send(Request((s, a)))
    b = Message("user", "Fix the parser in src/parse.py and then stop")
    second = provider.send(Request((s, b)))
    shared_words = count("Fix the parser in src/parse.py and")
    prefix = MESSAGE_OVERHEAD + count(s.content) + MESSAGE_OVERHEAD + shared_words
    assert second.cache.prefix_tokens == prefix > 1024
    assert second.cached_tokens == prefix // 128 * 128

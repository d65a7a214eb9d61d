"""The engine's shortcuts give what the straightforward computation gives.

- `SharedPrefixes` (compaction_bench.log_view) remembers how many leading messages two growing logs
  share: its answers equal a comparison of the two contexts from their first message.
- The simulated provider reuses counts of earlier contexts (counting bases, the same object counted
  twice), skips the tokens inside a differing message when they cannot make an older cache entry win,
  and memoizes them per pair of messages: every count equals the sum of the messages' counts plus
  their billed hidden reasoning, every cached prefix is the longest common token prefix with one
  of the two previous accepted requests (the newest on a tie), tokenized from scratch here, and the
  re-billed tokens are those of every message after the cached part that one of them holds (an equal
  message of another object as well, wherever it stands in the entry's log).
- The engine gives an emulated server's instructions to the summarizer as one message object per text.
- `Message.__init__` is written out (it stores each field through its slot): it takes the declared
  fields, in order, with their defaults, and the instances stay frozen.
- `merge_assistant` folds each run of assistant messages once, as the pairwise fold it replaced did
  (which copied a run's calls once per call: a step of 4,000 parallel calls re-rendered at each of
  Codex's compaction retries took 90 s of a 4,000-call replay, 16 s now).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from compaction_bench.caching import cache_outcome, leading_system, rebilled_tokens
from compaction_bench.llm import DEFAULT_SUMMARIZER, LLMClient
from compaction_bench.log_view import LogView, SharedPrefixes
from compaction_bench.profiles import get_profile
from compaction_bench.provider import MESSAGE_OVERHEAD, RECENT_ENTRIES, MessageCounter, SimulatedProvider
from compaction_bench.registry import strategy_class
from compaction_bench.replay import _Engine, _prompt_set
from compaction_bench.request import Message, Request, ToolCall, merge_assistant
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.tokens import HiddenTokens
from tests.test_log_view import plain_first_difference


def test_shared_prefixes_of_growing_logs_are_those_a_full_comparison_finds():
    rng = random.Random(7)
    pool = [Message("user", f"m{n}") for n in range(5)]
    canon = [Message("assistant", f"c{n}") for n in range(310)]  # what most logs hold at each position
    logs: list[list[Message]] = [list(canon[:k]) for k in (0, 5, 20, 20, 40)]
    logs += [[*canon[:7], pool[0]], [Message("assistant", "c0"), *canon[1:12]]]  # a fork, and an equal message of another object
    prefixes = SharedPrefixes()
    for step in range(3000):
        grown = rng.choice(logs)
        if len(grown) < 300:  # the owner appends: mostly what the others hold there, sometimes not
            grown.append(canon[len(grown)] if rng.random() < 0.9 else rng.choice(pool))
        if step % 500 == 0:
            logs.append(list(canon[: rng.randrange(30)]))  # a log started anew
        views = []
        for log in (rng.choice(logs), rng.choice(logs)):
            length = rng.randint(max(0, len(log) - 6), len(log))
            tail = tuple(canon[length + n] if rng.random() < 0.7 else rng.choice(pool) for n in range(rng.randrange(4)))
            views.append(LogView(log, length, tail))
        a, b = views
        assert prefixes.first_difference(a, b) == plain_first_difference(tuple(a), tuple(b)), (a, b)
        assert prefixes.first_difference(b, tuple(a)) == plain_first_difference(tuple(b), tuple(a))
    assert len(logs) > 10  # more pairs than SharedPrefixes keeps: its memory started anew on the way


def _common_tokens(counter: MessageCounter, previous, current, hidden: HiddenTokens | None = None) -> int:
    """The longest common prefix of two requests' billed tokens, from their whole encodings (the definition):
    the equal leading messages with the hidden reasoning each bills, up to the first that one request bills
    reasoning for and the other does not; then the tokens inside the first differing message, when neither
    bills reasoning for it (where reasoning sits inside a message is not modelled)."""
    shared = plain_first_difference(previous, current)
    before = hidden.per_message(previous) if hidden is not None else [0] * len(previous)
    now = hidden.per_message(current) if hidden is not None else [0] * len(current)
    tokens = 0
    for n in range(shared):
        if before[n] != now[n]:
            return tokens
        tokens += counter.message_tokens(previous[n]) + before[n]
    inside_billed = shared < len(previous) and shared < len(current) and (before[shared] or now[shared])
    if shared < len(previous) and shared < len(current) and previous[shared].role == current[shared].role and not inside_billed:
        a, b = (m.content + "".join(f"\n{c.name} {c.arguments}" for c in m.tool_calls) for m in (previous[shared], current[shared]))
        left, right = counter.counter.encode(a), counter.counter.encode(b)
        same = plain_first_difference(left, right)
        tokens += min(MESSAGE_OVERHEAD + same, counter.message_tokens(previous[shared]) - 1, counter.message_tokens(current[shared]) - 1)
    return tokens


@pytest.mark.parametrize("profile", ["32k", "claude-sonnet"])
def test_provider_counts_and_cache_prefixes_equal_the_straightforward_ones(profile):
    """A session sent as two contexts, as `anthropic-clear-tool-uses` sends it: its whole history and a
    copy with old tool results cleared, each a view of its own growing log, counted, re-counted and
    sent in turns, with reasoning billed after the last user message (and cached with the prefix that
    holds it)."""
    rng = random.Random(13)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    reasoning: dict[str, int] = {}
    users: set[str] = set()
    full: list[Message] = [Message("system", "You are a careful coding agent. " * 30, item_ids=("s",))]
    cleared: list[Message] = list(full)
    for n in range(120):
        kind = rng.choice(["user", "call", "call", "reasoning"]) if n else "user"
        item = f"i{n}"
        if kind == "user":
            users.add(item)
            message = Message("user", " ".join(rng.choices(words, k=rng.randrange(3, 30))), item_ids=(item,))
            full.append(message)
            cleared.append(message)
        elif kind == "reasoning":
            reasoning[item] = rng.randrange(20, 400)
            full.append(Message("reasoning", "", item_ids=(item,)))
            cleared.append(full[-1])
        else:
            call = Message("assistant", tool_calls=(ToolCall(f"c{n}", "read", f'{{"path": "{rng.choice(words)}.py"}}'),), item_ids=(item,))
            text = "\n".join(" ".join(rng.choices(words, k=8)) for _ in range(rng.randrange(1, 40)))
            result = Message("tool", text, tool_call_id=f"c{n}", item_ids=(f"r{n}",), name="read")
            full += [call, result]
            cleared += [call, Message("tool", "[Old tool result content cleared]", tool_call_id=f"c{n}", item_ids=(f"r{n}",), name="read")]
    hidden = HiddenTokens(reasoning, frozenset(users))
    provider = SimulatedProvider(get_profile(profile), hidden=hidden)
    reference = MessageCounter(get_profile(profile), hidden=hidden)
    full_log: list[Message] = []
    cleared_log: list[Message] = []
    sent: list[tuple[Message, ...]] = []
    for end in range(1, len(full), 3):
        full_log.extend(full[len(full_log) : end])
        cleared_log.extend(cleared[len(cleared_log) : end])
        whole = LogView(full_log, end)
        keep = rng.randrange(0, end)  # results before `keep` cleared, the rest as sent
        edited = LogView(cleared_log, keep, tuple(full[keep:end]))
        for context in (whole, edited, tuple(edited), list(whole)):
            assert provider.count(context) == reference.count(tuple(context))
        request = rng.choice([whole, edited, edited, LogView(cleared_log, max(0, keep - 2), tuple(full[max(0, keep - 2) : end]))])
        outcome = provider.send(Request(request))
        messages = tuple(request)
        assert outcome.true_tokens == reference.count(messages) == provider.count(request)
        prefixes = [(_common_tokens(reference, previous, messages, hidden), n) for n, previous in enumerate(sent[-RECENT_ENTRIES:])]
        prefix, newest = max(prefixes, default=(0, -1))
        previous = sent[-RECENT_ENTRIES:][newest] if prefixes else ()
        expected = cache_outcome(
            get_profile(profile).cache, prefix_tokens=prefix, total_tokens=outcome.true_tokens,
            previous_boundaries=reference.boundaries(previous), previous_system=leading_system(m.role for m in previous),
            current_boundaries=reference.boundaries(messages), current_system=leading_system(m.role for m in messages),
        )
        assert (outcome.cache.prefix_tokens, outcome.cache.cached_tokens, outcome.cache.cache_write_tokens) == (
            expected.prefix_tokens, expected.cached_tokens, expected.cache_write_tokens
        ), end
        if not outcome.overflow:  # re-billed: every message after the cached part looked up in every recent request
            ends = reference.boundaries(messages)
            known = [any(m in previous for previous in sent[-RECENT_ENTRIES:]) for m in messages]
            counts = [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]
            assert outcome.cache.rebilled_tokens == rebilled_tokens(counts, known, outcome.cache.cached_tokens), end
            sent.append(messages)
    assert reasoning and any(provider.count(LogView(full_log, n)) > sum(map(reference.message_tokens, full_log[:n])) for n in range(len(full_log)))


def test_re_billed_messages_are_found_by_equality_in_a_new_log_near_its_end_far_from_it_or_never_sent():
    """After a compaction a request is a view of a new log. Of its messages after the cached part, those equal
    to one a recent request sent re-bill: a copy of the previous request's last message (near the end of that
    request), a copy of one sent far from its end (past what is compared before the log is indexed), and one
    first counted before the last request but sent only now is looked up too; a message first counted now
    re-bills nothing."""
    profile = get_profile("32k")
    provider = SimulatedProvider(profile)
    reference = MessageCounter(profile)
    far = Message("user", "the constraint stated long ago " * 8)
    log = [Message("system", "rules " * 40), far, *[Message("user", f"note {n} " * 12) for n in range(150)]]
    counted_early = Message("user", "counted early, sent late " * 6)
    provider.count([*log[:1], counted_early])  # counted before the request below, never sent
    provider.send(Request(LogView(log, len(log))))
    again = Message(log[-1].role, log[-1].content)  # equal to the last message sent, another object
    far_again = Message(far.role, far.content)
    new = Message("user", "never said before " * 6)
    history = [Message("user", "summary of the work so far " * 10), again, far_again, counted_early, new]
    outcome = provider.send(Request(LogView(history, len(history))))
    assert not outcome.overflow and outcome.cache.cached_tokens == 0  # nothing shared from the start
    counts = [reference.message_tokens(m) for m in history]
    assert outcome.cache.rebilled_tokens == counts[1] + counts[2] == rebilled_tokens(counts, [False, True, True, False, False], 0)


def test_hidden_total_is_the_sum_of_the_per_message_billing():
    users = frozenset({"u1", "u2"})
    hidden = HiddenTokens({"r1": 100, "r2": 7, "r3": 50}, users)
    messages = [Message("user", "a", item_ids=("u1",)), Message("reasoning", item_ids=("r1",)), Message("user", "b", item_ids=("u2",)),
                Message("reasoning", item_ids=("r2",)), Message("assistant", "c", item_ids=("r3", "x"))]
    assert hidden.per_message(messages) == [0, 0, 0, 7, 50]  # r1 is before the last user message: not billed
    for n in range(len(messages) + 1):
        assert hidden.total(messages[:n]) == sum(hidden.per_message(messages[:n]))
    assert hidden.total(messages[:2]) == 100
    for start in range(len(messages) + 1):  # a run of messages from `start` on bills what the whole request bills there
        assert hidden.billed(messages[start:], start, 2) == hidden.per_message(messages)[start:]


def test_an_older_cache_entry_that_shares_more_inside_the_differing_message_is_the_one_read():
    """The newer entry shares the system prompt and a few tokens of the next message; the older one
    shares that message's long text: the skipped tokenization must not skip the older entry."""
    provider = SimulatedProvider(get_profile("32k"))
    system = Message("system", "You are a careful coding agent. " * 60)
    text = "\n".join(f"line {n}: the quick brown fox jumps over the lazy dog" for n in range(200))
    older = (system, Message("tool", text, tool_call_id="c1"))
    newer = (system, Message("tool", "line 0: nothing here", tool_call_id="c1"))
    current = (system, Message("tool", text + "\nline 200: one more", tool_call_id="c1"))
    for request in (older, newer):
        provider.send(Request(request))
    outcome = provider.send(Request(current))
    expected = _common_tokens(MessageCounter(get_profile("32k")), older, current)
    assert expected > _common_tokens(MessageCounter(get_profile("32k")), newer, current) + 1000
    assert outcome.cache.prefix_tokens == expected


def test_a_message_holds_the_fields_it_was_built_with_as_the_dataclass_declares_them():
    """`Message.__init__` is written out: its parameters are the declared fields, in order, with their defaults."""
    values = {"role": "tool", "content": "out", "tool_calls": (ToolCall("c", "read"),), "tool_call_id": "c", "item_ids": ("i",),
              "attachments": (), "name": "read", "is_error": True}
    declared = [f for f in dataclasses.fields(Message) if f.init]
    assert [f.name for f in declared] == list(values)
    for message in (Message(**values), Message(*values.values())):
        assert {name: getattr(message, name) for name in values} == values
        assert message == dataclasses.replace(Message("user"), **values) and hash(message) == hash(dataclasses.replace(message))
    assert {f.name: getattr(Message("user"), f.name) for f in declared} == {"role": "user", **{f.name: f.default for f in declared[1:]}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        Message("user").content = "x"
    with pytest.raises(ValueError, match="unknown message role"):
        Message("narrator")


def test_an_emulated_servers_instructions_reach_the_summarizer_as_one_message_per_text():
    """A remote compaction's instructions go to the summarizer as a user message after the request: one
    object per text, so that the offline models read it once (they know runs of messages by identity)."""
    transcript = generate("short-turns", seed=0, target_tokens=5_000).transcript
    cls = strategy_class("codex-remote-v2")
    engine = _Engine(transcript, cls, get_profile("64k"), LLMClient(DEFAULT_SUMMARIZER), cls.parse_options(None), "simulated", _prompt_set(None))
    first, again, other = (engine._instructions_message(text) for text in ("Compact this.", "Compact this.", "Compact that."))
    assert (first.role, first.content, other.content) == ("user", "Compact this.", "Compact that.")
    assert again is first and other is not first



def pairwise_fold(messages: list[Message]) -> list[Message]:
    """`merge_assistant` as it was written: each tool-call message folded into the message before it, one at a time."""
    out: list[Message] = []
    for message in messages:
        if out and message.role == "assistant" and out[-1].role == "assistant" and message.tool_calls:
            prev = out[-1]
            out[-1] = dataclasses.replace(
                prev,
                content="\n".join(t for t in (prev.content, message.content) if t),
                tool_calls=prev.tool_calls + message.tool_calls,
                item_ids=prev.item_ids + message.item_ids,
            )
        else:
            out.append(message)
    return out


def test_merge_assistant_folds_every_run_as_the_pairwise_fold_did():
    rng = random.Random(7)
    kinds = ["user", "tool", "text", "call", "text+call", "empty", "reasoning"]
    for trial in range(2_000):
        messages = []
        for n in range(rng.randrange(0, 14)):
            kind, ids = rng.choice(kinds), (f"i{trial}-{n}",)
            call = (ToolCall(f"c{n}", "read", "{}"),)
            messages.append({
                "user": Message("user", f"ask {n}", item_ids=ids),
                "tool": Message("tool", f"out {n}", tool_call_id=f"c{n}", item_ids=ids),
                "text": Message("assistant", f"say {n}", item_ids=ids),
                "call": Message("assistant", tool_calls=call, item_ids=ids),
                "text+call": Message("assistant", f"and {n}", tool_calls=call, item_ids=ids),
                "empty": Message("assistant", "", item_ids=ids),
                "reasoning": Message("reasoning", f"think {n}", item_ids=ids),
            }[kind])
        assert merge_assistant(list(messages)) == pairwise_fold(list(messages)), messages

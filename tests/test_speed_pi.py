"""Pi's incremental structures (issue 18) against the straightforward computations they replace.

- `WireFold`, `WireFold2025` and `ContextEstimator` keep state between calls on a list that grows
  at its end (the estimator also each message's estimate, for lists rebuilt by a compaction); here
  they are checked on hand-built lists with answers worked out from the spec, on random rebuilds, and
  at every request of real replays (many compactions, overflows and retries at 32k) against the
  transform or estimate computed from scratch on the same list;
- `SessionTree.latest_compaction` against a scan of a path built by a parent walk;
- `find_cut_point`, which looks for the valid cut point it needs, against the upstream order that
  lists all valid cut points first;
- `PathIndex` (sums and lists along the path) against the loops over the path it replaces;
- the agent messages after a removal against the context built from the path;
- the requests, views of one log between compactions (the same view while nothing changed),
  against the system messages and the transform of the agent messages when each was taken;
- `retimed` against `dataclasses.replace`.

`build_session_context` and `estimate_context_tokens` below are the spec's definitions written as
plain loops over a path or a list (§1.4, §2.4): the references the incremental structures are
compared with.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

import compaction_bench as bench
from compaction_bench.profiles import get_profile
from compaction_bench.request import Message, Request, ToolCall
from compaction_bench.scenarios.synthetic import generate
from compaction_bench.strategies.pi import Pi, Pi202512, Pi202603, PiStrategy
from compaction_bench.strategies.pi_compaction import (
    ConversationSerializer,
    CutPoint,
    find_cut_point,
    is_valid_cut_point,
    serialize_conversation,
)
from compaction_bench.strategies.pi_session_tree import (
    NO_RESULT_TEXT,
    ContextEstimate,
    ContextEstimator,
    Entry,
    PathIndex,
    PiMessage,
    SessionTree,
    WireFold,
    WireFold2025,
    entry_message,
    estimate_tokens,
    is_turn_start,
    latest_compaction_index,
    retimed,
    to_wire,
    to_wire_2025,
)
from compaction_bench.transcript import Attachment, Usage
from tests.conftest import CORPORA
from tests.pi_builders import Entries

PI_SESSION = CORPORA / "pi-session-jsonl/badlogic__pi-mono/large-session.jsonl"


def build_session_context(path: Sequence[Entry], *, nested_compactions: bool) -> list[PiMessage]:
    """`buildSessionContext` (§1.4) as a loop over the path: without a compaction, the message of
    every entry; else the latest compaction's summary, the messages of the entries from its
    `firstKeptEntryId` up to it (older compactions among them only with `nested_compactions`,
    LATER §10) and those of every entry after it."""
    k = latest_compaction_index(path)
    if k < 0:
        return [m for m in (entry_message(e) for e in path if e.type != "compaction") if m is not None]
    compaction = path[k]
    start = next((i for i in range(k) if path[i].id == compaction.first_kept_id), k)
    middle = [e for e in path[start:k] if nested_compactions or e.type != "compaction"]
    rest = [m for m in (entry_message(e) for e in [*middle, *path[k + 1 :]]) if m is not None]
    return [compaction.summary_message, *rest]


def estimate_context_tokens(messages: Sequence[PiMessage], *, image_chars: int, user_images: bool) -> ContextEstimate:
    """`estimateContextTokens` (§2.4) as a loop: the last usable usage's tokens plus chars/4 of
    every message after it (of every message without one)."""
    index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].usable_usage), None)
    usage = None if index is None else messages[index].usage
    tokens = 0 if usage is None else usage.total
    after = messages[0 if index is None else index + 1 :]
    return ContextEstimate(tokens + sum(estimate_tokens(m, image_chars=image_chars, user_images=user_images) for m in after), index)


def _user(text: str) -> PiMessage:
    return PiMessage(role="user", texts=(text,), item_ids=(text,))


def _assistant(text: str, *calls: str, total: int | None = None, stop: str = "stop") -> PiMessage:
    usage = Usage(input=total, total=total) if total is not None else None
    tool_calls = tuple(ToolCall(c, "read", "{}") for c in calls)
    return PiMessage(role="assistant", texts=(text,), tool_calls=tool_calls, stop_reason=stop, usage=usage, item_ids=(text,))


def _result(call: str) -> PiMessage:
    return PiMessage(role="toolResult", texts=("out " + call,), tool_call_id=call, tool_name="read", item_ids=("r" + call,))


def _shape(messages: list[Message]) -> list[tuple]:
    return [(m.role, m.content, m.tool_call_id, tuple(c.id for c in m.tool_calls)) for m in messages]


# ------------------------------------------------------------------ hand-built
def test_wire_fold_patches_a_call_left_open_once_the_next_user_message_arrives():
    fold = WireFold()
    u1, a1 = _user("u1"), _assistant("a1", "c1")
    messages = [u1, a1]
    # The call is still open at the end of the list: nothing is patched yet.
    assert _shape(fold(messages)) == [("user", "u1", None, ()), ("assistant", "a1", None, ("c1",))]
    messages.append(_user("u2"))
    # §1.4 step 6: the open call gets "No result provided" before the next user message.
    assert _shape(fold(messages)) == [
        ("user", "u1", None, ()),
        ("assistant", "a1", None, ("c1",)),
        ("tool", NO_RESULT_TEXT, "c1", ()),
        ("user", "u2", None, ()),
    ]
    # A rebuilt list (a compaction replaced the head) is folded from its start.
    rebuilt = [_user("summary"), messages[-1]]
    assert _shape(fold(rebuilt)) == [("user", "summary", None, ()), ("user", "u2", None, ())]
    # An errored assistant is dropped, and its open calls are not patched.
    rebuilt += [_assistant("boom", "c9", stop="error"), _user("u3")]
    assert _shape(fold(rebuilt)) == [("user", "summary", None, ()), ("user", "u2", None, ()), ("user", "u3", None, ())]


def test_wire_fold_copies_runs_of_the_previous_list_exactly_on_random_rebuilds():
    """After a compaction the list is rebuilt from runs of the previous one (LATER also puts the
    old summary back in the middle); the fold copies those runs' output. On random lists that
    grow, get rebuilt from random runs and new summaries, with open and answered calls, errored
    and aborted assistants and bash executions left out of the context, every output must be
    the fold from scratch (`to_wire`)."""
    rng = random.Random(29)
    fold = WireFold()
    messages: list[PiMessage] = []
    calls: list[str] = []
    for n in range(1500):
        pick = rng.random()
        if pick < 0.06 and messages:  # a rebuild: a new head, then random runs of the old list
            rebuilt = [_user(f"summary{n}")]
            for _ in range(rng.randint(1, 3)):
                lo = rng.randint(0, len(messages) - 1)
                rebuilt += messages[lo : rng.randint(lo + 1, len(messages))]
            messages = rebuilt
        elif pick < 0.3:
            calls = [f"c{n}.{k}" for k in range(rng.randint(0, 3))]
            stop = rng.choice(["toolUse", "toolUse", "stop", "error", "aborted"])
            messages.append(_assistant(f"a{n}", *calls, stop=stop))
        elif pick < 0.6 and calls:
            messages.append(_result(calls.pop(rng.randrange(len(calls)))))
        elif pick < 0.7:
            messages.append(PiMessage(role="bashExecution", command="ls", output="x", exclude=rng.random() < 0.5, item_ids=(f"b{n}",)))
        else:
            messages.append(_user(f"u{n}"))
        assert fold(list(messages)) == to_wire(messages)


def test_wire_fold_2025_drops_unanswered_calls_except_in_the_last_message():
    fold = WireFold2025()
    messages = [_user("u1"), _assistant("a1", "c1", "c2"), _result("c1")]
    # a1 is not the last message: c2 has no result before the end of the list, so it is dropped.
    assert _shape(fold(messages)) == [("user", "u1", None, ()), ("assistant", "a1", None, ("c1",)), ("tool", "out c1", "c1", ())]
    messages.append(_result("c2"))  # the result arrives: both calls stay
    assert _shape(fold(messages))[1] == ("assistant", "a1", None, ("c1", "c2"))
    messages.append(_assistant("a2", "c3"))
    # The last message keeps its calls (an ongoing turn).
    assert _shape(fold(messages))[-1] == ("assistant", "a2", None, ("c3",))
    messages.append(_assistant("a3"))  # a2's call is now unanswered before the next assistant
    assert _shape(fold(messages))[-2:] == [("assistant", "a2", None, ()), ("assistant", "a3", None, ())]


def test_context_estimator_adds_chars_over_four_after_the_last_usable_usage():
    estimate = ContextEstimator(image_chars=4800, user_images=False)
    messages = [_user("x" * 40), _assistant("y" * 8, total=1000), _user("z" * 21)]
    # 1000 from the assistant's usage + ceil(21 / 4) for the user message after it
    assert estimate(messages).tokens == 1006
    messages.append(_assistant("w" * 4, stop="error", total=5000))  # an error's usage is not usable
    assert estimate(messages).tokens == 1006 + 1
    assert estimate(messages[2:]).tokens == 6 + 1  # no usage at all: every message's chars / 4


def test_context_estimator_rebuilt_lists_equal_the_spec_loop():
    """Lists rebuilt as a compaction rebuilds them (a summary, a kept run of the previous list, new
    messages; an errored assistant removed) read the messages' estimates kept by identity: each
    answer equals the spec's loop over the same list."""
    rng = random.Random(5)
    estimate = ContextEstimator(image_chars=4800, user_images=True)
    pool = [
        _user("u" * rng.randint(0, 90)) if n % 3 == 0
        else _assistant("a" * rng.randint(0, 90), total=rng.choice([None, 500 + n]), stop=rng.choice(["stop", "error", "aborted"]))
        if n % 3 == 1 else _result(f"c{n}")
        for n in range(60)
    ]
    messages: list[PiMessage] = []
    for _ in range(300):
        move = rng.random()
        if move < 0.5:
            messages = messages + rng.sample(pool, rng.randint(1, 3))
        elif move < 0.8 and messages:
            start = rng.randint(0, len(messages))
            messages = [PiMessage(role="compactionSummary", summary="s" * rng.randint(1, 50)), *messages[start:]]
        elif messages:
            del messages[rng.randrange(len(messages))]
        assert estimate(messages) == estimate_context_tokens(messages, image_chars=4800, user_images=True)


def test_retimed_equals_dataclasses_replace():
    call = ToolCall("c1", "read", '{"path": "a.py"}')
    image = Attachment(mime="image/png", name="p.png", size=10)
    messages = [
        PiMessage(role="assistant", texts=("x\U0001f600",), thinking=("t",), tool_calls=(call,), usage=Usage(input=3, total=3), timestamp=5.0),
        PiMessage(role="user", texts=("u",), images=(image,), item_ids=("i",), timestamp=1.0),
        PiMessage(role="bashExecution", command="ls", output="a\nb", exclude=True),
    ]
    for message in messages:
        for computed in (False, True):
            if computed:  # what the message computed is copied; it does not read the timestamp
                assert message.estimate_chars >= 0 and message.file_tool_paths is not None
            copy = retimed(message, 42.0)
            assert copy == replace(message, timestamp=42.0) and copy is not message and message.timestamp != 42.0
            assert (copy.estimate_chars, copy.file_tool_paths) == (replace(message).estimate_chars, replace(message).file_tool_paths)


# ------------------------------------------------------------------ real replays
class _Checked(PiStrategy):
    """Every request also computes the wire and the estimate from scratch and compares."""

    checked = 0

    def _check_request(self, messages: list[PiMessage], wire: list[Message]) -> None:
        if isinstance(self, Pi202512):
            fresh = to_wire_2025(messages)
        else:
            fresh = to_wire(messages)
        assert wire == self.system + fresh
        o = self.options
        assert self._estimate() == estimate_context_tokens(messages, image_chars=o.image_chars, user_images=self.rules.user_images).tokens
        _Checked.checked += 1

    def request(self) -> Request:
        request = super().request()
        self._check_request(self.run_messages(), list(request.messages))
        return request


class CheckedPi(_Checked, Pi):
    pass


class CheckedPi202603(_Checked, Pi202603):
    pass


class CheckedPi202512(_Checked, Pi202512):
    pass


@pytest.mark.parametrize("strategy", [CheckedPi, CheckedPi202603, CheckedPi202512])
def test_incremental_wire_and_estimate_equal_the_fresh_ones_at_every_request(strategy):
    if not PI_SESSION.exists():
        pytest.skip("shared corpora not available")
    _Checked.checked = 0
    result = bench.replay(bench.load_transcript(PI_SESSION), strategy, profile="32k")
    assert result.compactions and _Checked.checked == len([r for r in result.requests if r.kind != "summary"])


def test_incremental_wire_equals_the_fresh_one_on_a_synthetic_session():
    transcript = generate("short-turns", seed=3, target_tokens=150_000).transcript
    _Checked.checked = 0
    result = bench.replay(transcript, CheckedPi, profile="32k")
    assert result.compactions and _Checked.checked > 100


# ------------------------------------------------------------------ tree and cut points
def _naive_path(tree: SessionTree) -> list[Entry]:
    out, current = [], tree.leaf
    while current is not None:
        out.append(tree.entries[current])
        current = tree.entries[current].parent
    return out[::-1]


def test_latest_compaction_equals_a_scan_of_the_walked_path_under_random_branching():
    rng = random.Random(11)
    tree = SessionTree()
    ids: list[str] = []
    for n in range(2000):
        if ids and rng.random() < 0.1:
            tree.branch(rng.choice(ids))
        if ids and rng.random() < 0.05:
            tree.path(rng.choice(ids))  # a path to another leaf moves the cached path away and back
        kind = "compaction" if rng.random() < 0.08 else "message"
        tree.append(Entry(f"e{n}", tree.leaf, kind, float(n)))
        ids.append(f"e{n}")
        path = _naive_path(tree)
        k = latest_compaction_index(path)
        assert tree.latest_compaction() is (path[k] if k >= 0 else None)
        assert tree.active_path() == path


def _listing_cut_point(path, start, end, keep, *, image_chars, user_images) -> CutPoint:
    """`findCutPoint` in upstream's order: all valid cut points first, then the walk."""
    cuts = [i for i in range(start, end) if is_valid_cut_point(path[i])]
    if not cuts:
        return CutPoint(start, -1, False)
    cut, accumulated = cuts[0], 0
    for i in range(end - 1, start - 1, -1):
        entry = path[i]
        if entry.type != "message" or entry.message is None:
            continue
        accumulated += estimate_tokens(entry.message, image_chars=image_chars, user_images=user_images)
        if accumulated >= keep:
            cut = next((c for c in cuts if c >= i), cut)
            break
    while cut > start and path[cut - 1].type not in ("message", "compaction"):
        cut -= 1
    if path[cut].type == "message" and path[cut].role == "user":
        return CutPoint(cut, -1, False)
    turn_start = next((i for i in range(cut, start - 1, -1) if is_turn_start(path[i])), -1)
    return CutPoint(cut, turn_start, turn_start != -1)


def test_find_cut_point_equals_the_listing_order_on_random_paths():
    rng = random.Random(5)
    for _ in range(300):
        e = Entries()
        for n in range(rng.randint(1, 25)):
            pick = rng.random()
            if pick < 0.25:
                e.user(rng.randint(0, 60))
            elif pick < 0.5:
                e.assistant(rng.randint(0, 60), [(f"c{n}", "read", {"path": "p"})] if rng.random() < 0.5 else [])
            elif pick < 0.85:
                e.result(f"c{n}", rng.randint(0, 200))
            else:
                e.setting()
        start = rng.randint(0, len(e.path) - 1)
        keep = rng.randint(0, 80)
        args = (e.path, start, len(e.path), keep)
        assert find_cut_point(*args, index=PathIndex(image_chars=4800, user_images=False)) == _listing_cut_point(*args, image_chars=4800, user_images=False)


def _random_entry(rng: random.Random, n: int, path: list[Entry]) -> Entry:
    """A random entry of any kind that carries (or not) a message, as a child of the path's end."""
    parent = path[-1].id if path else None
    pick = rng.random()
    chars = "x" * rng.randint(0, 90)
    if pick < 0.2:
        images = (Attachment("image/png"),) * rng.randint(0, 2)
        return Entry(f"e{n}", parent, "message", float(n), message=PiMessage(role="user", texts=(chars,), images=images))
    if pick < 0.45:
        stop = rng.choice(["stop", "toolUse", "error", "aborted"])
        usage = Usage(input=rng.randint(0, 5000), output=rng.randint(0, 100)) if rng.random() < 0.7 else None
        calls = tuple(ToolCall(f"c{n}.{k}", rng.choice(["read", "write", "bash"]), f'{{"path":"f{rng.randint(0, 9)}"}}') for k in range(rng.randint(0, 2)))
        message = PiMessage(role="assistant", texts=(chars,), tool_calls=calls, stop_reason=stop, usage=usage)
        return Entry(f"e{n}", parent, "message", float(n), message=message)
    if pick < 0.65:
        images = (Attachment("image/png"),) * rng.randint(0, 1)
        return Entry(f"e{n}", parent, "message", float(n), message=PiMessage(role="toolResult", texts=(chars,), images=images))
    if pick < 0.72:
        return Entry(f"e{n}", parent, "custom_message", float(n), message=PiMessage(role="custom", texts=(chars,)))
    if pick < 0.8:
        return Entry(f"e{n}", parent, "branch_summary", float(n), summary=chars)
    if pick < 0.88 and path:
        return Entry(f"e{n}", parent, "compaction", float(n), summary=chars, first_kept_id=rng.choice(path).id)
    return Entry(f"e{n}", parent, "model_change", float(n))


def test_path_index_equals_the_loops_on_random_paths_under_branching():
    """`PathIndex` against the loops it replaces: the kept tail, the cut walk's stopping entry,
    the messages a range summarizes with their file-tool paths, the session context, the latest
    compaction, a turn's start, an entry's position, and `estimate_context_tokens` of a range of the path and of the
    LATER session context,
    on random paths (images, errored and aborted assistants, usages, compactions) while the leaf
    moves around the tree (the sums must follow a path that changes below its last common entry)."""
    rng = random.Random(17)
    for user_images in (False, True):
        tree = SessionTree()
        sums = PathIndex(image_chars=4800, user_images=user_images)
        ids: list[str] = []

        def estimate(message: PiMessage) -> int:
            return estimate_tokens(message, image_chars=4800, user_images=user_images)  # noqa: B023 - the loop's own value

        for n in range(700):
            if ids and rng.random() < 0.08:
                tree.branch(rng.choice(ids))
            tree.append(_random_entry(rng, n, tree.path()))
            ids.append(f"e{n}")
            path = _naive_path(tree)
            sums.update(path)
            start = rng.randint(0, len(path) - 1)
            in_messages = [e for e in path[start:] if e.type == "message" and e.message is not None]
            assert sums.tail(start) == sum(estimate(e.message) for e in in_messages if e.message is not None)
            keep = rng.randint(0, 400)
            accumulated, reached = 0, None
            for i in range(len(path) - 1, start - 1, -1):
                message = path[i].message
                if path[i].type == "message" and message is not None:
                    accumulated += estimate(message)
                    if accumulated >= keep:
                        reached = i
                        break
            assert sums.walk_back(start, len(path), keep) == reached
            range_messages = [m for m in (entry_message(e) for e in path[start:]) if m is not None]
            expected = estimate_context_tokens(range_messages, image_chars=4800, user_images=user_images).tokens
            assert sums.range_estimate(start) == expected
            summarized = [(m, e.id) for e in path[start:] if e.type != "compaction" and (m := entry_message(e)) is not None]
            assert sums.summarized(start, len(path)) == ([m for m, _ in summarized], [i for _, i in summarized])
            calls = [p for m, _ in summarized if m.role == "assistant" for p in m.file_tool_paths]
            assert sums.file_tool_paths(start, len(path)) == calls
            k = latest_compaction_index(path)
            assert sums.latest_compaction() == k
            for nested in (False, True):
                assert sums.session_context(nested_compactions=nested) == build_session_context(path, nested_compactions=nested)
            at = rng.randint(start, len(path) - 1)
            assert sums.turn_start(at, start) == next((i for i in range(at, start - 1, -1) if is_turn_start(path[i])), -1)
            wanted = rng.choice(ids)
            assert sums.position(wanted, at) == next((i for i in range(at) if path[i].id == wanted), None)
            if k >= 0:
                kept = next((i for i in range(k - 1, -1, -1) if path[i].id == path[k].first_kept_id), k)
                context = build_session_context(path, nested_compactions=True)
                expected = estimate_context_tokens(context, image_chars=4800, user_images=user_images).tokens
                assert sums.compacted_estimate(k, kept) == expected


def test_serializer_equals_serialize_conversation_on_lists_that_grow_shrink_and_alternate():
    """`ConversationSerializer` keeps the texts of recent lists and extends them; every text
    must be `serialize_conversation` of the same list, also when messages serialize to nothing
    (an empty tool result), when a list is shorter than the one kept for its first message, and
    when several lists alternate (history and turn prefix) or more heads than it keeps come by."""
    rng = random.Random(23)
    pool = []
    for n in range(60):
        pick = rng.random()
        if pick < 0.3:
            pool.append(_user(f"u{n}"))
        elif pick < 0.6:
            pool.append(_assistant(f"a{n}", f"c{n}"))
        elif pick < 0.8:
            pool.append(_result(f"c{n}"))
        else:
            pool.append(PiMessage(role="toolResult", texts=("",), tool_call_id=f"c{n}"))  # no part at all
    serializer = ConversationSerializer(2000)
    for _ in range(400):
        lo = rng.choice([0, 5, 17, 30, rng.randint(0, 59)])
        hi = rng.randint(lo, 60)
        messages = pool[lo:hi]
        assert serializer(messages) == serialize_conversation(messages, 2000)


def test_agent_messages_after_a_removal_equal_the_context_built_from_the_path():
    """A removal (a retried error) drops the message from the kept context without a rebuild; the
    result is the session context built from a parent walk, minus the removed message."""
    strategy = Pi(_Context(), None)
    for entry_id in ("u1", "a1", "u2"):
        message = _user(entry_id) if entry_id.startswith("u") else _assistant(entry_id, stop="error")
        strategy.tree.append(Entry(entry_id, strategy.tree.leaf, "message", 0.0, message=message))
        assert strategy.agent_messages()[-1] is message
    errored = strategy.tree.entries["a1"].message
    assert errored is not None
    strategy._remove(errored)
    expected = [m for m in build_session_context(_naive_path(strategy.tree), nested_compactions=True) if m is not errored]
    assert len(expected) == 2 and strategy.agent_messages() == expected


@pytest.mark.parametrize("strategy_class", [Pi, Pi202512])
def test_requests_are_views_of_one_log_until_a_compaction_or_a_new_system_message(strategy_class):
    """`wire()` is a view of a log of the system messages and the fold's output. Each request must
    hold exactly the system messages and the transform of the agent messages at that time, keep
    holding them when the log grows, and share the log only while nothing but appends happened."""
    strategy = strategy_class(_Context(), None)
    transform = to_wire_2025 if strategy_class is Pi202512 else to_wire
    taken: list[tuple[object, list[Message]]] = []

    def take():
        view = strategy.wire()
        expected = [*strategy.system, *transform(strategy.agent_messages())]
        assert list(view) == expected
        taken.append((view, expected))
        return view

    def append(entry_id: str, message: PiMessage) -> None:
        strategy.tree.append(Entry(entry_id, strategy.tree.leaf, "message", 0.0, message=message))

    append("u1", _user("u1"))
    first = take()
    assert take() is first  # nothing changed: the same request object
    append("a1", _assistant("a1", "c1"))
    append("r1", _result("c1"))
    assert take().log is first.log  # appends only: the same log
    strategy.system.append(Message(role="system", content="S", item_ids=("s",)))
    with_system = take()
    assert with_system.log is not first.log and with_system[0].content == "S"
    append("u2", _user("u2"))
    assert take().log is with_system.log
    strategy.tree.append(Entry("c", strategy.tree.leaf, "compaction", 0.0, summary="SUM", first_kept_id="u2"))
    assert take().log is not with_system.log  # the fold started a new output
    append("a2", _assistant("a2"))
    take()
    for view, expected in taken:  # no later request changed what an earlier one holds
        assert list(view) == expected


class _Context:
    """What building a Pi strategy reads of its context."""

    profile = get_profile("64k")

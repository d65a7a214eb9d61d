"""The incremental structures of the Codex and OpenCode strategies against the straightforward computation.

`PromptView` and `ActiveTerms` (Codex) and `CompactionInput` (OpenCode V1) keep, across requests, what
the strategies used to compute from the whole history on every request. Each test grows a history step
by step (late tool outputs, orphans, replaced lists, touched records, new projections) and compares the
structure, after every step, with the computation from scratch: `for_prompt` + `render`, the spec's
backward scans of §1.3, and §2.2's filtering with a fresh rendering and estimator.
"""

from __future__ import annotations

import random

from compaction_bench.request import Message
from compaction_bench.strategies.codex_components import (
    ActiveTerms,
    CodexItem,
    ItemConverter,
    PromptView,
    TokenAccount,
    for_prompt,
    render,
)
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.strategies.opencode_components import (
    CompactionInput,
    CompactionPart,
    Estimator,
    Record,
    Renderer,
    SessionStore,
    View,
)
from compaction_bench.transcript import Item

# --------------------------------------------------------------------------- Codex


def _codex_item(rng: random.Random, n: int) -> CodexItem:
    call_id = f"c{rng.randrange(6)}"
    kind = rng.choice(["user", "assistant", "call", "custom", "output", "custom_output", "reasoning", "agent"])
    ids = (f"i{n}",)
    if kind == "user":
        return CodexItem(type="message", role="user", text=f"question {n}", contextual=rng.random() < 0.2, item_ids=ids)
    if kind == "assistant":
        return CodexItem(type="message", role="assistant", text=f"answer {n}", item_ids=ids)
    if kind in ("call", "custom"):
        return CodexItem(type="function_call" if kind == "call" else "custom_tool_call", name="shell",
                         arguments=f'{{"n":{n}}}', call_id=call_id, item_ids=ids)
    if kind in ("output", "custom_output"):
        kind_name = "function_call_output" if kind == "output" else "custom_tool_call_output"
        return CodexItem(type=kind_name, call_id=call_id, text=f"output {n} " * rng.randrange(1, 5), item_ids=ids)
    if kind == "reasoning":
        return CodexItem(type="reasoning", text=f"thinking {n}", encrypted_len=rng.choice([0, 1200, 4000]), item_ids=ids)
    return CodexItem(type="agent_message", text=f"agent {n}", item_ids=ids)


def _active_by_scan(account: TokenAccount, items: list[CodexItem]) -> int:
    """§1.3 `get_total_token_usage` as the spec states it: the estimates after the last model-generated
    item (none: 0), plus, unless reasoning is included, the encrypted reasoning before the last
    user-turn boundary (none: 0)."""
    last_model = next((n for n in range(len(items) - 1, -1, -1) if items[n].is_model_generated), None)
    tail = 0 if last_model is None else sum(i.estimate for i in items[last_model + 1 :])
    boundary = next((n for n in range(len(items) - 1, -1, -1) if items[n].is_user_turn_boundary), 0)
    reasoning = sum(i.estimate for i in items[:boundary] if i.type == "reasoning" and i.encrypted_len)
    return account.last_total + tail + (0 if account.reasoning_included else reasoning)


def test_prompt_view_and_active_terms_follow_a_growing_history():
    make = ItemConverter().make
    for seed in range(40):
        rng = random.Random(seed)
        view, terms = PromptView(make, FoldMemo()), ActiveTerms()
        account = TokenAccount(last_total=1000, reasoning_included=seed % 2 == 0)
        history: list[CodexItem] = []
        base = "base instructions"
        for n in range(60):
            history.extend(_codex_item(rng, 10 * n + k) for k in range(rng.randrange(1, 4)))
            if rng.random() < 0.05:
                history = history[rng.randrange(len(history)) :]  # a compaction installs a new list
            if rng.random() < 0.03:
                base = f"{base}\n\nmore"
            expected = for_prompt(history, make)
            assert [(i.type, i.call_id, i.text, i.item_ids) for i in view.update(history, base)] == [
                (i.type, i.call_id, i.text, i.item_ids) for i in expected
            ]
            assert list(view.messages(history, base)) == render(expected, base, FoldMemo())
            assert view.items_estimate == sum(i.estimate for i in expected)
            assert view.history_estimate == sum(i.estimate for i in history)
            assert account.active(history, terms) == _active_by_scan(account, history)


def test_prompt_view_restores_a_late_output_and_a_late_call():
    make = ItemConverter().make
    view = PromptView(make, FoldMemo())
    user = CodexItem(type="message", role="user", text="go", item_ids=("u",))
    call = CodexItem(type="function_call", name="shell", arguments="{}", call_id="k", item_ids=("c",))
    history = [user, call]
    messages = view.messages(history, "")
    # the call has no output yet: an "aborted" output follows it
    assert [(m.role, m.content) for m in messages] == [("user", "go"), ("assistant", ""), ("tool", "aborted")]
    history.append(CodexItem(type="function_call_output", call_id="k", text="done", item_ids=("o",)))
    assert [(m.role, m.content) for m in view.messages(history, "")] == [("user", "go"), ("assistant", ""), ("tool", "done")]
    # an output whose call comes later is dropped until the call arrives
    history.append(CodexItem(type="function_call_output", call_id="z", text="early", item_ids=("oz",)))
    assert [m.content for m in view.messages(history, "")][-1] == "done"
    history.append(CodexItem(type="function_call", name="shell", arguments="{}", call_id="z", item_ids=("cz",)))
    assert [(m.role, m.content) for m in view.messages(history, "")][3:] == [("tool", "early"), ("assistant", "")]


# --------------------------------------------------------------------------- OpenCode V1


def _user(store: SessionStore, text: str) -> Record:
    return store.new("user", items=[Item(f"u{len(store.records)}", "user", text)])


def _step(store: SessionStore, n: int, result: bool = True) -> Record:
    call = Item(f"c{n}", "tool_call", call_id=f"k{n}", tool_name="bash", arguments=f'{{"cmd":"ls {n}"}}', response=n)
    record = store.add_response([Item(f"a{n}", "assistant", f"step {n}", response=n), call], None)
    if result:
        store.observe_input(Item(f"r{n}", "tool_result", "x" * (50 * n + 3000 * (n % 3 == 0)), call_id=f"k{n}"))
    return record


def _compaction(store: SessionStore, completed: bool) -> None:
    parent = store.new("compaction", compaction=CompactionPart(auto=True, overflow=False))
    store.new("summary", parent=parent.id, text=f" summary of {parent.id} ", failed=not completed)
    if completed:
        store.new("continue", text="Continue")


def _by_filtering(records: list[Record], end: int) -> tuple[list[Record], str | None]:
    """§2.2 from scratch: the records before `end` without completed summaries and the compaction
    requests they answer; the newest completed summary before `end`, stripped."""
    before = records[:end]
    completed = {r.parent for r in before if r.completed_summary}
    summaries = [r for r in before if r.completed_summary]
    history = [r for r in before if not r.completed_summary and not (r.kind == "compaction" and r.id in completed)]
    return history, summaries[-1].text.strip() if summaries else None


def _check(view: View, compaction_input: CompactionInput) -> None:
    renderer = Renderer(2000)
    compaction_input.update()
    for end in range(len(view.records) + 1):
        history, previous, prefix = compaction_input.cut(end)
        expected, expected_previous = _by_filtering(view.records, end)
        assert history == expected and previous == expected_previous
        # a cut between a compaction request and its summary keeps the request: not a prefix
        assert prefix == (history == compaction_input.records[: len(history)])
        if not prefix:
            continue
        slices = Estimator().slices([renderer.record(r) for r in history])
        for k in range(len(history) + 1):
            assert compaction_input.messages_before(k) == renderer.render(history[:k], for_summary=True)
            assert compaction_input.estimate(k, len(history)) == slices(k, len(history))
        assert [n for n, r in enumerate(history) if r.starts_turn] == compaction_input.turn_starts[
            : sum(1 for r in history if r.starts_turn)
        ]


def test_compaction_input_follows_the_projection():
    store = SessionStore()
    view = View(store, Renderer(2000), Estimator())
    compaction_input = CompactionInput(view)
    _user(store, "first")
    _step(store, 1)
    _step(store, 2, result=False)  # interrupted until its result arrives below
    _compaction(store, completed=False)
    _user(store, "second")
    view.update()
    _check(view, compaction_input)
    # the interrupted call's result arrives: that record is rendered again; more records are appended
    store.observe_input(Item("r2", "tool_result", "late result", call_id="k2"))
    _step(store, 3)
    _compaction(store, completed=True)  # a completed summary: the input starts anew
    _user(store, "third")
    _step(store, 4)
    view.update()
    _check(view, compaction_input)
    # prune clears an output far back: re-rendered from there
    store.records[1].pruned.add("k1")
    store.touch(store.records[1])
    view.update()
    _check(view, compaction_input)
    # a new projection (a new generation of the view), then growth again
    view.reset(store.records[3:])
    _check(view, compaction_input)
    _compaction(store, completed=False)
    _step(store, 5)
    view.update()
    _check(view, compaction_input)


def test_compaction_input_keeps_a_request_whose_summary_is_cut_off():
    store = SessionStore()
    view = View(store, Renderer(2000), Estimator())
    compaction_input = CompactionInput(view)
    _user(store, "first")
    _step(store, 1)
    _compaction(store, completed=True)
    view.reset(store.records)
    compaction_input.update()
    request = store.records[2]
    # before the summary (position 3) the compaction request is not answered yet: it is compacted like any record
    history, previous, prefix = compaction_input.cut(3)
    assert [r.id for r in history] == [0, 1, request.id] and previous is None and not prefix
    history, previous, prefix = compaction_input.cut(5)
    assert [r.kind for r in history] == ["user", "step", "continue"] and previous == "summary of 2" and prefix
    assert compaction_input.messages_before(1) == [Message("user", "first", item_ids=("u0",))]

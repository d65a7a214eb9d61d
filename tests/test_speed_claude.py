"""The incremental bookkeeping of `claude-code`, `claude-code-2.1`, `anthropic-clear-tool-uses` and
`aider` against the straightforward computation (issue 18): every replay must equal, request by
request and compaction by compaction, one that recomputes from the whole history on every request.

The references below are the rules as the spec states them, read from the whole history each time
(`tool_pairs` over every item, the chars/4 sum over the whole tail, the split over every message);
`anthropic-clear-tool-uses` has that path itself (it takes it whenever tool inputs are to be
cleared, which `clear_tool_inputs_for` naming no tool's name forces without changing any decision).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from compaction_bench.importing import load_transcripts
from compaction_bench.log_view import LogView
from compaction_bench.replay import ReplayResult, replay
from compaction_bench.request import Message, Request
from compaction_bench.strategies.aider import OK, Aider, AiderSummaryFailed, ChatMessage
from compaction_bench.strategies.anthropic_context import ServerCompact
from compaction_bench.strategies.claude_code import (
    CLEARED_RESULT,
    FILE_CALL,
    FILE_REFERENCE,
    TODO_NUDGE,
    TODO_REMINDER,
    ClaudeCode,
    ClaudeCode21,
    _reminder,
    number_lines,
)
from compaction_bench.strategies.components import chars_div4
from compaction_bench.transcript import Item
from tests.conftest import CORPORA
from tests.pi_builders import Session, small_profile

OPUS = {"model": "claude-opus-4-5-20251101", "max_output_tokens_env": 64_000}
CLAUDE_FILE = "claude-code-jsonl/Smartagent-so__Personal_AI_Infrastructure/b566e56e-94a7-425e-a662-d701321e27ce.jsonl"
PI_FILE = "pi-session-jsonl/badlogic__pi-mono/before-compaction.jsonl"


def tool_pairs(items: Sequence[Item]) -> list[tuple[Item, Item | None]]:
    """Each tool call in order, with the first result of its id (None while none came): §5 caches a result's
    size per `tool_use_id`, so a reused id is read as its first result, as `ClaudeCode._sync` reads it."""
    results: dict[str, Item] = {}
    for item in items:
        if item.kind == "tool_result" and item.call_id and item.call_id not in results:
            results[item.call_id] = item
    return [(i, results.get(i.call_id or "")) for i in items if i.kind == "tool_call"]


class ReferenceClaudeCode(ClaudeCode):
    """§5 microcompact from `tool_pairs` of the whole history, the cleared placeholders on every result of a cleared id, the context
    rendered anew as a list on every request, the summary prompts rendered and the §4.1 summary message
    and §4.2 attachments built anew for every compaction."""

    name = "claude-code-reference"

    def messages(self) -> list[Message]:
        items = self.history.items
        calls = {i.call_id for i in items if i.kind == "tool_call"}
        replacements = {r.id: CLEARED_RESULT for r in items if r.kind == "tool_result" and r.call_id in self.cleared and r.call_id in calls}
        body = self.history.render(None, replacements)
        return [*self.history.render(self.system), *self.prefix, *body]

    def summary_request(self, messages: Sequence[Message], instructions: str | None) -> Request:
        system = self.ctx.render_prompt("claude_code_system.j2")
        prompt = self.ctx.render_prompt("claude_code_summary.j2", instructions=instructions, text_only=self.later)
        return Request([Message("system", system), *messages, Message("user", prompt)], kind="summary", max_output_tokens=self._summary_max_output())

    def _summary_message(self, text: str, *, auto: bool) -> Message:
        return Message("user", self.wrap_summary(text, auto=auto))

    def _attachments(self) -> tuple[list[Message], list[str]]:
        o = self.options
        files = sorted((f for f in self.files.values() if self._restorable(f.path)), key=lambda f: (-f.modified, -f.order))
        out: list[Message] = []
        kept: dict[str, Any] = {}
        total = 0
        for f in files[: o.restore_max_files]:
            fits = f.content is not None and self._fits(f.content)
            payload = {"type": "file", "filename": f.path, "content": f.content} if fits else {"type": "compact_file_reference", "filename": f.path}
            size = chars_div4(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
            if total + size > o.restore_total_tokens:
                continue
            total += size
            if fits:
                out.append(Message("user", _reminder(FILE_CALL + json.dumps({"file_path": f.path}, ensure_ascii=False, separators=(",", ":")))))
                out.append(Message("user", _reminder(self._file_result(f.content or ""))))
                kept[f.path] = f
            else:
                out.append(Message("user", _reminder(FILE_REFERENCE.format(path=f.path))))
        self.files.clear()  # the read cache holds only the kept files
        self.files.update(kept)
        if self.todos:
            out.append(Message("user", _reminder(f"{TODO_REMINDER}\n\n{json.dumps(self.todos, ensure_ascii=False, separators=(',', ':'))}. {TODO_NUDGE}")))
        return out, [f.path for f in kept.values()]

    def _microcompact(self) -> None:
        o = self.options
        if o.disable_microcompact or self.later:
            return
        pairs = [(c, r) for c, r in tool_pairs(self.history.items) if c.tool_name in self.eligible and c.call_id not in self.cleared]
        sizes = [self._result_tokens(r) if r is not None else 0 for _, r in pairs]
        total = sum(sizes)
        protected = len(pairs) - o.microcompact_keep_recent
        marked, cleared = [], 0
        for n, ((call, _), size) in enumerate(zip(pairs, sizes, strict=True)):
            if n >= protected:
                break
            if total - cleared > o.microcompact_keep_tokens:
                marked.append(call.call_id or "")
                cleared += size
        warning_line = (self.threshold if o.auto_compact else self.effective) - o.warning_buffer
        if not marked or self.count() < warning_line or cleared < o.microcompact_min_saving:
            return
        before = self.messages()
        self.cleared.update(marked)
        self._prune_read_cache(set(marked))
        self.ctx.record_compaction(
            trigger="microcompact", before=before, after=self.messages(), summary=None,
            estimate_tokens=self.count(), threshold=warning_line, details={"cleared_calls": marked, "cleared_tokens": cleared},
        )


class ReferenceClaudeCode21(ClaudeCode21):
    """§8.2 the count: the usage plus chars/4 of every item after the newest response, summed each time."""

    name = "claude-code-2.1-reference"

    def count(self) -> int:
        start = self.last_response_at if self.last_response_at is not None else 0
        extra = sum(self._estimate(i) for i in self.history.items[start:])
        if self.last_response_at is None:
            extra += sum(chars_div4(m.content) for m in self.prefix)
        return self.last_usage + extra


class ReferenceAider(Aider):
    """§3 `too_big` on the whole of `done` at every edited turn, §5 the split with every message's count read first
    (the sizes of the whole list, as upstream), and wire messages built anew on every request."""

    name = "aider-reference"

    def _done_total(self) -> int:
        return sum(self.token_count(m) for m in self.done)

    def summarize_start(self) -> None:
        if not self._done_total() > self.max_tokens:
            return
        self.summarize_end()
        self.snapshot = list(self.done)
        try:
            self.summarized = self.summarize(self.snapshot)
        except AiderSummaryFailed:
            self.summarized = []

    def summarize(self, messages: Sequence[ChatMessage], *, over_limit: bool = False) -> list[ChatMessage]:
        out = self.summarize_real(list(messages), 0)
        if out and out[-1].role != "assistant":
            out.append(ChatMessage("assistant", OK))
        return out

    def request(self) -> Request:
        self.summarize_end()
        total = self._done_total()
        meta = {"done_over_limit": True} if total > self.max_tokens else {"done_tokens": total}
        return Request(self.messages(), meta={**meta, "history_limit": self.max_tokens})

    def summarize_real(self, messages: list[ChatMessage], depth: int, *, over_limit: bool = False) -> list[ChatMessage]:
        o = self.options
        sized = [(self.token_count(m), m) for m in messages]
        total = sum(t for t, _ in sized)
        if total <= self.max_tokens and depth == 0:
            return messages
        if len(messages) <= o.min_split or depth > o.max_depth:
            return self.summarize_all(messages)
        half = self.max_tokens // 2
        tail_tokens, split = 0, len(messages)
        for i in range(len(messages) - 1, -1, -1):
            if tail_tokens + sized[i][0] < half:
                tail_tokens += sized[i][0]
                split = i
            else:
                break
        while messages[split - 1].role != "assistant" and split > 1:
            split -= 1
        if split <= o.min_split:
            return self.summarize_all(messages)
        tail = messages[split:]
        keep, running = [], 0
        for tokens, message in sized[:split]:
            running += tokens
            if running > self.head_limit:
                break
            keep.append(message)
        summary = self.summarize_all(keep)
        if self.token_count(summary[0]) + sum(t for t, _ in sized[split:]) < self.max_tokens:
            return summary + tail
        return self.summarize_real(summary + tail, depth + 1)

    def messages(self) -> list[Message]:
        return [*self.system, *(Message(m.role, m.content, item_ids=m.item_ids) for m in [*self.done, *self.cur])]


def _trace(result: ReplayResult) -> tuple[list[Any], list[Any]]:
    requests = [(r.kind, r.true_tokens, r.estimate_tokens, r.threshold, r.overflow, r.meta, tuple(r.messages)) for r in result.requests]
    compactions = [(c.step, c.trigger, c.summary, c.details, c.summarized_ids, tuple(c.before), tuple(c.after)) for c in result.compactions]
    return requests, compactions


def _assert_same(a: ReplayResult, b: ReplayResult) -> None:
    (requests_a, compactions_a), (requests_b, compactions_b) = _trace(a), _trace(b)
    assert len(requests_a) == len(requests_b) and len(compactions_a) == len(compactions_b)
    for n, (x, y) in enumerate(zip(requests_a, requests_b, strict=True)):
        assert x == y, f"request {n} differs"
    for n, (x, y) in enumerate(zip(compactions_a, compactions_b, strict=True)):
        assert x == y, f"compaction {n} differs"


def _tangled_session(repeat_id: bool = True, in_order: bool = False) -> Session:
    """Reads (eligible), an unlisted tool (not eligible), a result after a user message and large results,
    so that microcompact fires more than once; unless `in_order`, results answered out of order and one
    four steps late; with `repeat_id`, a call id used twice."""
    s = Session()
    s.user("read the modules and fix the parser")
    body = ("lorem ipsum dolor " * 2_300)[:40_000]  # ≈ 10,000 estimated tokens
    for n in range(6):
        calls: list[tuple[str, str, dict[str, Any]]] = [(f"a{n}", "Read", {"file_path": f"/repo/a{n}.py"}), (f"b{n}", "Probe", {"target": n})]
        slow = n == 1 and not in_order
        s.assistant(f"reading pair {n}", calls=calls + ([("slow", "Grep", {"pattern": "parse"})] if slow else []), total=104_000 + n)
        results = [(f"a{n}", f"{n} {body}", "Read"), (f"b{n}", f"probe {n} " * 50, "Probe")]
        for call_id, text, name in results if in_order else results[::-1]:
            s.result(call_id, text, name=name)
        if n == 5 and not in_order:
            s.result("slow", f"grep hits {body}", name="Grep")
    if repeat_id:
        s.assistant("again", calls=[("a1", "Read", {"file_path": "/repo/a1.py"})], total=105_000)
        s.result("a1", "second read of a1", name="Read")
    s.assistant("late", calls=[("late", "Bash", {"command": "make"})], total=105_500)
    s.user("and the result of make?")
    s.result("late", f"make output {body}", name="Bash")
    for n in range(6, 10):
        s.assistant(f"reading {n}", calls=[(f"a{n}", "Read", {"file_path": f"/repo/a{n}.py"})], total=106_000 + n)
        s.result(f"a{n}", f"{n} {body}", name="Read")
    s.assistant("writing", calls=[("w", "Write", {"file_path": "/repo/a0.py", "content": "fixed"})], total=107_000)
    s.result("w", "ok", name="Write")
    s.assistant("done", total=107_500)
    return s


@pytest.mark.parametrize("model", [OPUS["model"], "claude-3-5-haiku"])  # above and below the warning line
def test_claude_code_microcompact_equals_the_whole_history_reading(model):
    t = _tangled_session().transcript()
    options = OPUS | {"model": model}
    fast = replay(t, ClaudeCode, profile="claude-opus", usage="recorded", options=options)
    if model == OPUS["model"]:
        assert sum(1 for c in fast.compactions if c.trigger == "microcompact") >= 2
    _assert_same(fast, replay(t, ReferenceClaudeCode, profile="claude-opus", usage="recorded", options=options))


def test_claude_code_on_the_recorded_session():
    t = load_transcripts(CORPORA / CLAUDE_FILE)[0]
    for profile in ("32k", "64k"):
        fast = replay(t, ClaudeCode, profile=profile)
        assert any(c.trigger == "microcompact" for c in fast.compactions)
        assert isinstance(fast.requests[-1].messages, LogView)
        _assert_same(fast, replay(t, ReferenceClaudeCode, profile=profile))


def test_claude_code_restores_files_and_todos_as_built_anew():
    # At 32k the threshold W - R - 13,000 is below zero: every request compacts, and the files and todo
    # list one compaction restores are restored by the next (a rewritten file and new todos replace them).
    s = Session()
    s.user("tidy the package")
    small = "def parse(text):\n    return text.split()\n"
    s.assistant("reading", calls=[("r1", "Read", {"file_path": "/repo/a.py"}), ("r2", "Read", {"file_path": "/repo/b.py"})], total=900)
    s.result("r1", number_lines(small), name="Read")  # as 2.0.57's Read tool numbers a file's lines
    s.result("r2", number_lines(" ".join(str(k) for k in range(2_500))), name="Read")  # 6,500 tokens, over 5,000: a reference
    s.assistant("planning", calls=[("t1", "TodoWrite", {"todos": [{"content": "tidy a.py", "status": "pending"}]})], total=950)
    s.result("t1", "ok", name="TodoWrite")
    for n in range(3):
        s.assistant(f"step {n}", calls=[(f"g{n}", "Grep", {"pattern": f"p{n}"})], total=1_000 + n)
        s.result(f"g{n}", f"hits {n}", name="Grep")
    s.assistant("rewriting", calls=[("w1", "Write", {"file_path": "/repo/a.py", "content": small + "# tidy\n"})], total=1_100)
    s.result("w1", "ok", name="Write")
    s.assistant("re-planning", calls=[("t2", "TodoWrite", {"todos": [{"content": "tidy a.py", "status": "done"}]})], total=1_150)
    s.result("t2", "ok", name="TodoWrite")
    s.assistant("done", total=1_200)
    t = s.transcript()
    fast = replay(t, ClaudeCode, profile="32k", usage="recorded")
    restored = [c.details["restored_files"] for c in fast.compactions]
    assert sum(1 for r in restored if "/repo/a.py" in r) >= 4 and len(fast.compactions) >= 6
    assert sum(1 for c in fast.compactions if c.details["todos"]) >= 3
    _assert_same(fast, replay(t, ReferenceClaudeCode, profile="32k", usage="recorded"))


def test_claude_code_sends_an_unchanged_context_as_the_same_object():
    # At 32k the threshold is below zero: every request follows a compaction, whose `after` is the context the
    # request sends (one object). A session that only polls gets the same summary back each time, and its
    # message is the last one again. Every request and compaction equals the lists and messages built anew.
    s = Session()
    s.user("keep polling the build until it is green")
    for n in range(12):
        s.assistant("polling", calls=[(f"p{n}", "Probe", {"target": "build"})], total=1_000 + n)
        s.result(f"p{n}", "still running", name="Probe")
    s.assistant("green", total=1_100)
    t = s.transcript()
    fast = replay(t, ClaudeCode, profile="32k")
    auto = [c for c in fast.compactions if c.trigger == "auto" and c.next_request is not None]
    assert len(auto) >= 10
    assert all(c.after is fast.requests[c.next_request].messages for c in auto)
    heads = [c.after[0] for c in auto]  # no system item: the summary message comes first
    again = [n for n in range(1, len(auto)) if auto[n].summary == auto[n - 1].summary]
    assert len(again) >= 10 and all(heads[n] is heads[n - 1] for n in again)
    _assert_same(fast, replay(t, ReferenceClaudeCode, profile="32k"))


@pytest.mark.parametrize("late_system", [False, True])
def test_claude_code_log_equals_the_lists(late_system):
    # A system item that arrives mid-session goes in front of the history: the log starts anew.
    s = _tangled_session(repeat_id=False, in_order=True)
    if late_system:
        s.items.insert(12, Item(id="sys1", kind="system", text="The repository moved to /srv/repo."))
    t = s.transcript()
    fast = replay(t, ClaudeCode, profile="claude-opus", usage="recorded", options=OPUS)
    assert sum(1 for c in fast.compactions if c.trigger == "microcompact") >= 2
    _assert_same(fast, replay(t, ReferenceClaudeCode, profile="claude-opus", usage="recorded", options=OPUS))


@pytest.mark.parametrize("profile", ["32k", "64k"])
def test_claude_code_21_count_equals_the_whole_tail_sum(profile):
    for t in (_tangled_session().transcript(), load_transcripts(CORPORA / PI_FILE)[0]):
        _assert_same(replay(t, ClaudeCode21, profile=profile), replay(t, ReferenceClaudeCode21, profile=profile))


@pytest.mark.parametrize("options", [{"trigger_value": 30_000}, {"trigger_value": 30_000, "keep_tool_uses": 1, "exclude_tools": "Probe"},
                                     {"trigger_type": "tool_uses", "trigger_value": 4, "clear_at_least": 5_000}])
@pytest.mark.parametrize(("repeat_id", "in_order"), [(False, True), (False, False), (True, True)])
def test_clear_tool_uses_incremental_edit_equals_the_whole_history_edit(options, repeat_id, in_order):
    # in order without a repeated id the edit is incremental throughout; else from the first such item on
    # the strategy recomputes it from the whole history
    t = _tangled_session(repeat_id, in_order).transcript()
    fast = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options=options)
    assert len(fast.compactions) >= 3
    plain = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options=options | {"clear_tool_inputs_for": "NoSuchTool"})
    _assert_same(fast, plain)


def test_clear_tool_uses_on_a_recorded_session():
    t = load_transcripts(CORPORA / PI_FILE)[0]
    fast = replay(t, "anthropic-clear-tool-uses", profile="32k")
    assert len(fast.compactions) > 100
    _assert_same(fast, replay(t, "anthropic-clear-tool-uses", profile="32k", options={"clear_tool_inputs_for": "NoSuchTool"}))


def _aider_session(turns: int) -> Session:
    s = Session()
    for n in range(turns):
        s.user(f"change {n}: " + " ".join(f"w{n}x{k}" for k in range(60 + 7 * (n % 5))))
        s.assistant(f"edit {n} " + " ".join(f"r{n}y{k}" for k in range(80)))
        if n % 3 != 2:  # every third turn edits nothing: `cur` stays
            s.items.append(Item(id=f"out{n}", kind="marker", text=f"Applied edit to f{n}.py\nCommit abc{n:04d} feat: change {n}",
                                meta={"event": "aider-output"}))
    return s


@pytest.mark.parametrize("applied", [False, True])
def test_aider_split_and_rendering_equal_the_whole_list_reading(applied):
    t = _aider_session(40).transcript()
    for profile in (small_profile(8_000), small_profile(3_000)):  # the head cut at the summariser's window, or not
        fast = replay(t, Aider, profile=profile, options={"applied": applied})
        assert sum(1 for r in fast.requests if r.kind == "summary") >= 5
        _assert_same(fast, replay(t, ReferenceAider, profile=profile, options={"applied": applied}))


class ReferenceServerCompact(ServerCompact):
    """The client history as lists: the system messages, then the whole history rendered anew."""

    name = "anthropic-compact-reference"

    def messages(self) -> list[Message]:
        block = [self.block] if self.block is not None else []
        body = self.history.render() if self.start == 0 else self.history.render(self.history.items[self.start:])
        return [*self.history.render(self.system), *block, *body]


def test_server_compact_view_equals_the_lists():
    # A system item that arrives mid-session goes in front of the history: the view's log starts anew.
    s = _tangled_session(repeat_id=False, in_order=True)
    s.items.insert(0, Item(id="sys0", kind="system", text="You are a coding agent."))
    s.items.insert(12, Item(id="sys1", kind="system", text="The repository moved to /srv/repo."))
    t = s.transcript()
    for options in ({"trigger": 50_000}, {"trigger": 50_000, "pause_after_compaction": True}):
        fast = replay(t, ServerCompact, profile="claude-opus", options=options)
        assert len(fast.compactions) >= 1
        _assert_same(fast, replay(t, ReferenceServerCompact, profile="claude-opus", options=options))
    fast = replay(t, "anthropic-clear-tool-uses", profile="claude-opus", options={"trigger_value": 30_000})
    assert len(fast.compactions) >= 3
    _assert_same(fast, replay(t, "anthropic-clear-tool-uses", profile="claude-opus",
                              options={"trigger_value": 30_000, "clear_tool_inputs_for": "NoSuchTool"}))


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0), ("a", 0), ("ab", 1), ("abcd", 1), ("abcdef", 2),  # Math.round: halves up
    ("ééééé", 1), ("\U0001F600" * 3, 2),  # 5 and 6 UTF-16 units (Python's len: 5 and 3)
    ("\ud800ab", 1),  # a lone surrogate is one unit in JavaScript
])
def test_chars_div4_is_javascripts_round_of_utf16_units_over_4(text, expected):
    assert chars_div4(text) == expected

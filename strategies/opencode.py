"""OpenCode's two compaction paths as strategies (docs/specs/opencode.md, upstream commit SNAP).

`opencode-v1` (`packages/opencode/src/session/*`, the TUI/CLI path):

- §1 trigger: the usable window (§1.1); the count (§1.2) of the newest finished non-summary
  assistant's usage compared with ``>=``, after every step (§1.3.1) and at loop start (§1.3.2);
  a provider overflow error (§1.4 patterns, HTTP 413, `context_length_exceeded`) compacts with
  ``overflow=true`` (§1.3.3); ``auto=False`` switches all three off (§1.5);
- §2 what is summarized: prior completed compactions removed, at most `tail_turns` turns kept
  verbatim within the token budget, the earliest fitting suffix of the first turn that does not
  fit, no tail at index 0; summary input with media as text, tool outputs truncated, pruned
  outputs as the placeholder; the anchored prompt and its update mode (§2.7); a summary request
  that overflows stops the compaction (§2.8);
- §3 records (compaction request, summary, tail pointer, "Continue…" follow-up) and the
  projection of `filterCompacted` (summary first, then the old tail, then newer messages;
  "newest" decided by id);
- §4 overflow replay: the last real user message is left out of the summary and posted again
  with media as text;
- §5 prune (opt-in, ``prune=True``): older tool outputs beyond the newest 40,000 estimated tokens
  cleared when the candidates exceed 20,000.

`opencode-v2` (`packages/core/src/session/*`, §6): the history since the latest checkpoint is
serialized as text, the newest 8,000 tokens of it are kept as text (the boundary entry cut at
``remaining * 4`` characters), the rest summarized with at most 4,096 output tokens; the
compaction is refused when the prompt does not fit; it triggers before every call on the
request's own estimate (system, messages and the built-in tools' definitions, a documented size:
`OpenCodeV2Options`), and once more (with one retry) on a provider overflow. The checkpoint is
one user message with the summary and the recent text.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.strategies.opencode_components import (
    CONTINUE_TEXT,
    CompactionInput,
    CompactionPart,
    Entries,
    Estimator,
    Record,
    Renderer,
    SessionStore,
    View,
    is_context_overflow,
    max_output_tokens,
    media_as_text,
    model_limits,
    preserve_budget,
    select_from_turns,
    split_recent,
    turn_spans,
    usable_window,
    usage_count,
)
from compaction_bench.strategy import TOKEN_COUNT, Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.tokens import opencode_estimate, opencode_estimate_units
from compaction_bench.transcript import Item, Usage

#: §3.1: prepended to the follow-up when the compaction answered a provider overflow (our words).
OVERFLOW_NOTE = (
    "The previous request was larger than the provider accepts, most likely because of large media "
    "attachments; those attachments have been taken out of the conversation."
)

#: The range of a models.dev limit option: a token count, where 0 is models.dev's "unknown" (§1.1, §6.6).
MODEL_LIMIT = Range(0, what="a model limit in tokens")


class _OpenCode(Strategy):
    """What both paths share: the session store, its rendering, the estimator and the model limits
    (V2 reads no `limit.input`: its options have no `input_limit`)."""

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        self.store = SessionStore()
        self.renderer = Renderer(self.options.tool_output_max_chars)
        self.estimator = Estimator()
        self.view = View(self.store, self.renderer, self.estimator)
        o = self.options
        self.limits = model_limits(ctx.profile, o.context_limit, o.output_limit, getattr(o, "input_limit", None))
        self._system: list[Message] = []
        self._prompts: dict[tuple[Any, ...], str] = {}

    def _prompt(self, template: str, **variables: Any) -> str:
        """`ctx.render_prompt`, each template with each set of variables rendered once (rendering is
        deterministic and the template's hash is recorded by the first call): a compaction that is
        tried again and again (§2.8) sends the same text object, not a new one to count again."""
        key = (template, *((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(variables.items())))
        text = self._prompts.get(key)
        if text is None:
            text = self._prompts[key] = self.ctx.render_prompt(template, **variables)
        return text

    def _system_messages(self) -> list[Message]:
        """The system prompt's messages (items are only ever appended to it)."""
        if len(self._system) != len(self.store.system):
            self._system = self.renderer.system(self.store)
        return self._system

    def on_user_turn(self, item: Item) -> None:
        self.store.observe_input(item)

    def on_input(self, item: Item) -> None:
        self.store.observe_input(item)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.store.add_response(items, usage)

    def _meta(self) -> dict[str, Any]:
        return {"unpaired_results": list(self.store.unpaired_results)} if self.store.unpaired_results else {}


# ===================================================================== V1
@dataclass(frozen=True)
class OpenCodeV1Options:
    """Upstream defaults (§1.1, §1.5, §2.1, §5). Model limits default to the profile's."""

    #: `compaction.auto`: False turns off the usable-window triggers, and a provider overflow becomes a hard error
    #: instead of a compaction (§1.3, §1.5).
    auto: bool = True
    #: `compaction.prune`: clear old tool outputs at the end of each prompt loop; opt-in upstream (§1.5, §5).
    prune: bool = False
    #: `tail_turns`: at most this many newest turns are kept verbatim after a summary; 0 = no tail, all is summarized
    #: (§2.5).
    tail_turns: int = field(default=2, metadata={"range": Range(0, what="a number of turns")})
    #: `preserve_recent_tokens`: token budget of the verbatim tail; None = the usable window × `preserve_recent_ratio`,
    #: bounded by the min/max options below (§2.1).
    preserve_recent_tokens: int | None = None
    #: `compaction.reserved`: tokens kept below `limit.input` (usable = input - this) when the model has an input
    #: limit; None = min(`compaction_buffer`, max output) (§1.1).
    reserved: int | None = field(default=None, metadata={"range": TOKEN_COUNT})
    #: `OUTPUT_TOKEN_MAX`: max output = min(output limit, this), or this when the limit is 0; it is subtracted from
    #: the window and is the summary's maxOutputTokens (§1.1, §2.6).
    output_token_max: int = 32_000
    #: `COMPACTION_BUFFER`: the default reserve below `limit.input`, capped at the max output; unused without an
    #: input limit (§1.1).
    compaction_buffer: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: `MIN_PRESERVE_RECENT_TOKENS`: lower bound of the default tail budget (§2.1).
    min_preserve_recent_tokens: int = 2_000
    #: `MAX_PRESERVE_RECENT_TOKENS`: upper bound of the default tail budget (§2.1).
    max_preserve_recent_tokens: int = 8_000
    #: Share of the usable window (floored) that is the default tail budget, before the min/max bounds (§2.1).
    preserve_recent_ratio: float = 0.25
    #: `TOOL_OUTPUT_MAX_CHARS`: tool outputs in the summary input are cut to this many characters, with a note of
    #: how many were omitted (§2.6).
    tool_output_max_chars: int = 2_000
    #: `PRUNE_PROTECT`: of the tool outputs older than the newest two user turns, the newest this many estimated tokens
    #: are never pruned (§5).
    prune_protect: int = field(default=40_000, metadata={"range": TOKEN_COUNT})
    #: `PRUNE_MINIMUM`: prune only when the candidates add up to more than this many estimated tokens (§5).
    prune_minimum: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: comma-separated tool names prune never clears
    prune_protected_tools: str = "skill"
    #: models.dev `limit.context`, in tokens; None = the profile's whole context (GPT-5: 400,000) or its window;
    #: 0 as models.dev's 0 turns the overflow check off (§1.1)
    context_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})
    #: models.dev `limit.output`, in tokens, capped by `output_token_max`; None = the profile's max output capped at
    #: half the window; 0 = none, so `output_token_max` (§1.1).
    output_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})
    #: models.dev `limit.input`, in tokens: when set, usable = input - reserve instead of context - max output;
    #: None = the profile's input limit, if it has one; 0 = none (§1.1).
    input_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})


def filter_compacted(records: Sequence[Record]) -> list[Record]:
    """§3.3 `filterCompacted`: newest first up to the newest completed compaction (or its tail
    start), then reordered to [compaction request, summary, old tail, newer messages]."""
    result: list[Record] = []
    completed: set[int] = set()
    retain: int | None = None
    for record in reversed(records):
        result.append(record)
        if retain is not None:
            if record.id == retain:
                break
            continue
        if record.role == "user" and record.id in completed:
            part = record.compaction
            if part is None:
                continue
            if part.tail_start_id is None:
                break
            retain = part.tail_start_id
            if record.id == retain:
                break
            continue
        if record.completed_summary and record.parent is not None:
            completed.add(record.parent)
    result.reverse()
    c = max(
        (n for n, r in enumerate(result) if r.compaction is not None and r.compaction.tail_start_id is not None),
        default=-1,
    )
    if c < 0:
        return result
    parent_id = result[c].id
    s = next((n for n in range(c + 1, len(result)) if result[n].kind == "summary" and result[n].parent == parent_id), -1)
    compaction = result[c].compaction
    tail_id = compaction.tail_start_id if compaction is not None else None
    t = next((n for n, r in enumerate(result) if r.id == tail_id), -1)
    if 0 <= t < c and s > c:
        return result[c : s + 1] + result[t:c] + result[s + 1 :]
    return result


class OpenCodeV1(_OpenCode):
    name = "opencode-v1"
    description = "OpenCode V1: usable-window trigger, ≤2-turn verbatim tail within a token budget, anchored summary, overflow replay; prune as option"
    spec = "docs/specs/opencode.md §1-§5"
    Options = OpenCodeV1Options
    sends_inputs_verbatim = True

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.max_output = max_output_tokens(self.limits, o.output_token_max)
        self.usable = usable_window(self.limits, o.output_token_max, o.reserved, o.compaction_buffer)
        self._pending: str | None = None
        self.input = CompactionInput(self.view)

    # ------------------------------------------------------------ trigger (§1)
    def _last_finished(self) -> Record | None:
        """The newest finished assistant by id (§1.3.2, §3.4)."""
        return next(
            (r for r in reversed(self.store.records) if r.kind == "summary" or (r.kind == "step" and r.usage is not None)),
            None,
        )

    def _count(self) -> int | None:
        last = self._last_finished()
        if last is None or last.kind == "summary" or last.usage is None:
            return None
        return usage_count(last.usage)

    def _overflowing(self, count: int | None) -> bool:
        """§1.2 `isOverflow`."""
        return self.options.auto and self.limits.context > 0 and count is not None and count >= self.usable

    def _threshold(self) -> int | None:
        """The smallest count at which it compacts (`Request.threshold`): `isOverflow` is `count >= usable`
        (§1.2, `overflow.ts` L22-34), not strict, so the usable window itself. None when no count ever
        triggers a compaction (`auto` off or no context limit, §1.2, §1.5)."""
        return self.usable if self.options.auto and self.limits.context > 0 else None

    def on_user_turn(self, item: Item) -> None:
        if self._pending:
            self._compact(self._pending, overflow=False)
        super().on_user_turn(item)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        super().on_response(items, usage, needs_follow_up)
        if usage is not None and self._overflowing(usage_count(usage)):
            self._pending = "step"
        if not needs_follow_up:
            # The prompt loop ends: a pending compaction runs inside it, prune after it (§1.3, §5).
            if self._pending:
                self._compact(self._pending, overflow=False)
            if self.options.prune:
                self._prune()

    def request(self) -> Request:
        if self._pending is None and self._overflowing(self._count()):
            self._pending = "loop-start"
        if self._pending:
            self._compact(self._pending, overflow=False)
        return Request(
            self._messages(),
            estimate_tokens=self._count(),
            threshold=self._threshold(),
            max_output_tokens=self.max_output,
            meta=self._meta(),
        )

    def on_overflow(self, error: ProviderError) -> bool:
        if not (self.options.auto and is_context_overflow(error)):
            return False
        self._pending = None
        return self._compact("overflow", overflow=True)

    # ------------------------------------------------------------ projection (§3)
    def _sequence(self) -> list[Record]:
        """`filter_compacted` of the store, kept in the view: records created since the last call
        are appended (the walk reaches them first and goes on as before) unless one of them is a
        completed summary, which moves the start: then the whole projection is taken again."""
        if any(r.completed_summary for r in self.view.created()):
            self.view.reset(filter_compacted(self.store.records))
        else:
            self.view.update()
        return self.view.records

    def _messages(self) -> list[Message]:
        self._sequence()
        return self._system_messages() + self.view.messages

    # ------------------------------------------------------------ compaction (§2, §3, §4)
    def _compact(self, trigger: str, *, overflow: bool) -> bool:
        self._pending = None
        o = self.options
        before = self._messages()
        count = self._count()
        parent = self.store.new("compaction", compaction=CompactionPart(auto=True, overflow=overflow))
        messages = self._sequence()
        self.input.update()
        end = len(messages) - 1 if messages and messages[-1] is parent else len(messages)
        replay: Record | None = None
        if overflow:
            # §4: the newest real user message before the request is replayed, not summarized.
            for i in range(len(messages) - 2, -1, -1):
                if messages[i].starts_turn:
                    if any(messages[n].starts_turn for n in range(i)):
                        replay, end = messages[i], i
                    break
        # the records before `end` but completed summaries and the compaction requests they answer
        history, previous, prefix = self.input.cut(end)

        budget = preserve_budget(
            self.usable, o.preserve_recent_tokens, o.min_preserve_recent_tokens, o.max_preserve_recent_tokens,
            o.preserve_recent_ratio,
        )
        size = len(history)
        # select looks only at the newest `tail_turns` turns: their spans, and slice estimates from the first of them
        estimate: Callable[[int, int], int]
        if prefix:  # the records are `input.records[:size]`: its turn starts and running sums serve
            starts = self.input.turn_starts
            before_end = bisect.bisect_left(starts, size)
            recent = starts[max(0, before_end - o.tail_turns) : before_end] if o.tail_turns > 0 else []
            estimate = self.input.estimate
        else:
            turn_starts = [n for n, r in enumerate(history) if r.starts_turn]
            recent = turn_starts[-o.tail_turns :] if o.tail_turns > 0 else []
            first = recent[0] if recent else size
            estimate = self.estimator.slices([self.renderer.record(r) for r in history[first:]], first)
        choice = select_from_turns(turn_spans(recent, size), estimate, o.tail_turns, budget)
        head = history if choice.start is None else history[: choice.start]
        head_messages = self.input.messages_before(len(head)) if prefix else self.renderer.render(head, for_summary=True)

        prompt = self._prompt("opencode_summary.j2", previous_summary=previous, context=[])
        system = self._prompt("opencode_compaction_system.j2")
        summary_request = Request(
            [Message("system", system), *head_messages, Message("user", prompt)],
            kind="summary",
            max_output_tokens=self.max_output,
        )
        try:
            result = self.ctx.summarize(summary_request)
        except SummaryOverflow:
            # §2.8: the summary assistant ends in ContextOverflowError; no retry.
            self.store.new("summary", parent=parent.id, failed=True)
            return False
        self.store.new("summary", parent=parent.id, text=result.text)
        tail_record = history[choice.start] if choice.start is not None else None
        if tail_record is not None and parent.compaction is not None:
            parent.compaction.tail_start_id = tail_record.id
        if replay is not None:
            text = "\n".join(media_as_text(i) for i in replay.items) if replay.kind == "user" else replay.text
            self.store.new("replay", items=list(replay.items), text=text)
        else:
            self.store.new("continue", text=f"{OVERFLOW_NOTE}\n\n{CONTINUE_TEXT}" if overflow else CONTINUE_TEXT)
        self.ctx.record_compaction(
            trigger=trigger,
            before=before,
            after=self._messages(),
            summary=result.text,
            summarized_ids=[i for r in head for i in r.item_ids()],
            estimate_tokens=count,
            threshold=self._threshold(),
            details={
                "overflow": overflow,
                "replay": replay is not None,
                "update": previous is not None,
                "tail": choice.reason,
                "tail_whole_turns": choice.whole_turns,
                "tail_split_turn": choice.split,
                "tail_start_item": next(iter(tail_record.item_ids()), None) if tail_record else None,
                "tail_budget": budget,
            },
        )
        return True

    # ------------------------------------------------------------ prune (§5)
    def _prune(self) -> None:
        o = self.options
        protected = {t.strip() for t in o.prune_protected_tools.split(",") if t.strip()}
        total = pruned = turns = 0
        candidates: list[tuple[Record, str]] = []
        done = False
        for record in reversed(self.store.records):
            if record.is_user_message:
                turns += 1
            if turns < 2:
                continue
            if record.kind == "summary":
                break
            for call in reversed(record.calls()):
                result = record.results.get(call.call_id or "")
                if result is None or result.is_error or call.tool_name in protected:
                    continue
                if call.call_id in record.pruned:
                    done = True
                    break
                estimate = opencode_estimate(result.text)
                total += estimate
                if total > o.prune_protect:
                    pruned += estimate
                    candidates.append((record, call.call_id or ""))
            if done:
                break
        if pruned <= o.prune_minimum:
            return
        before = self._messages()
        for record, call_id in candidates:
            record.pruned.add(call_id)
            self.store.touch(record)
        self.ctx.record_compaction(
            trigger="prune",
            before=before,
            after=self._messages(),
            summary=None,
            details={"pruned_outputs": len(candidates), "pruned_tokens": pruned, "tool_output_tokens": total},
        )


# ===================================================================== V2
@dataclass(frozen=True)
class OpenCodeV2Options:
    """Upstream defaults (§6.1). Model limits default to the profile's.

    `tools_json_chars` is the length of the tool definitions the trigger estimate includes (§6.6).
    OpenCode's own storage (export, SQLite, legacy files) does not record them and no importer
    reads them, so the default is a documented size: ``JSON.stringify`` of the eight built-in tools
    OpenCode sends a GPT model by default (bash, read, glob, grep, task, webfetch, todowrite and
    apply_patch, which replaces edit/write for `gpt-` models in `packages/opencode/src/tool/registry.ts`
    @010bc19e), each as ``{name, description, inputSchema}``: the descriptions verbatim from
    `packages/opencode/src/tool/*.txt` (bash@0a4e5dff with 2,000 lines / 51,200 bytes filled in,
    read@150e763a, glob@48f95361, grep@14c12f9c, task@02fd6be6, webfetch@12eda598,
    todowrite@262b2831, apply_patch@679d8d32; 27,218 characters) and the parameters as JSON Schema
    draft-07 objects, the shape of upstream's recorded requests (bash, glob, webfetch and apply_patch
    checked against stored sources; read, grep, task and todowrite not: a few hundred characters
    at most). 32,375 UTF-16 units: 8,094 estimated tokens. Left out: `question` and `skill` (client- and configuration-dependent), MCP and plugin
    tools, and the agent list appended to `task`'s description. The spec's commit (5f7091ab) could
    not be read; these are the nearest stored versions, so the size is approximate.
    """

    #: `compaction.auto`: False turns off the pre-call trigger; a provider overflow still compacts once (§6.6, §6.7).
    auto: bool = True
    #: `compaction.buffer`: compact before a call when the request's estimate exceeds context - max(output limit,
    #: this) (§6.1, §6.6).
    buffer: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: `keep.tokens`: the newest serialized history kept as `recent` text, in round(chars / 4) tokens; the entry that
    #: crosses it is split by characters; 0 keeps none (§6.1, §6.4).
    keep_tokens: int = 8_000
    #: `TOOL_OUTPUT_MAX_CHARS`: tool results in the serialized history are cut to this many characters, plus
    #: "\n[truncated]" (§6.3).
    tool_output_max_chars: int = 2_000
    #: `SUMMARY_OUTPUT_TOKENS`: summary maxTokens = min(output limit or this, this), which the fit check also keeps
    #: free of the context (§6.5 steps 6-7).
    summary_output_tokens: int = 4_096
    #: §6.6: UTF-16 length of ``JSON.stringify(request.tools)`` in the trigger estimate (2: no tools, ``[]``)
    tools_json_chars: int = 32_375
    #: models.dev limits; None: the profile's window and its max output (capped at half the window); a context
    #: of 0 turns the trigger off (§6.6), an output of 0 counts as none
    context_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})
    #: models.dev `limit.output`, in tokens: in the trigger's max(output, buffer) and the summary's output cap; None =
    #: the profile's max output capped at half the window; 0 = none (§6.5, §6.6).
    output_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})


@dataclass(frozen=True)
class Checkpoint:
    """§6.8: the stored compaction row and the user message it projects to."""

    summary: str
    recent: str
    recent_ids: tuple[str, ...]
    message: Message


class OpenCodeV2(_OpenCode):
    name = "opencode-v2"
    description = "OpenCode V2 core: serialized history, 8k recent text split inside a message, summary ≤4096, checkpoint as one user message"
    spec = "docs/specs/opencode.md §6"
    Options = OpenCodeV2Options

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        #: §6.6's limit, compared strictly (`estimate > threshold` compacts); the reported threshold is one more
        self.threshold = self.limits.context - max(self.limits.output, self.options.buffer)
        # The replay sends no tool definitions (for any strategy), so what this strategy reports
        # for the token-accuracy metrics is net of them: the tools' own estimate comes off both the
        # estimate and the threshold. The trigger compares the same difference, so no decision changes.
        # (`[]`, no tools, takes nothing off.)
        self.tools_tokens = opencode_estimate_units(max(0, self.options.tools_json_chars - 2))
        self.checkpoint: Checkpoint | None = None
        self._since = 0
        self._recovered = False
        self._refused: str | None = None
        self.entries = Entries(self.options.tool_output_max_chars)

    def _messages(self) -> list[Message]:
        """The checkpoint, then the records since it (the view holds ``records[_since:]``)."""
        self.view.update()
        head = [self.checkpoint.message] if self.checkpoint else []
        return self._system_messages() + head + self.view.messages

    def _estimate(self) -> int:
        """§6.6: the estimate of the request `_messages` just built (system, messages, tools)."""
        units, count = self.view.units, len(self.view.messages)
        if self.checkpoint:
            units, count = units + self.estimator.units(self.checkpoint.message), count + 1
        system = [m.content for m in self._system_messages()]
        return self.estimator.request(system, units, count, self.options.tools_json_chars)

    def request(self) -> Request:
        messages = self._messages()
        estimate = self._estimate()
        # §6.6: `compactIfNeeded` before every provider call, again after each compaction until
        # the request fits or compaction is refused (each pass consumes the entries it summarized).
        while self.options.auto and self.limits.context > 0 and estimate > self.threshold and self._compact("threshold", estimate):
            messages = self._messages()
            estimate = self._estimate()
        meta = self._meta()
        if self._refused:
            meta["compaction_refused"] = self._refused
            self._refused = None
        return Request(messages, estimate_tokens=estimate - self.tools_tokens, threshold=self._reported_threshold(), meta=meta)

    def _reported_threshold(self) -> int | None:
        """The smallest estimate that compacts (`Request.threshold`), net of the tools' estimate:
        `compactIfNeeded` goes on only when the estimate is not `<= context - max(output, buffer)` (§6.6), a
        strict `>`, so one more than `self.threshold`. Taking the tools' constant estimate off both sides keeps
        the comparison exact against the true count of the messages sent (which carry no tools). None when
        no estimate ever triggers a compaction (`auto` off or no context limit, §6.6: only a provider overflow
        compacts then, §6.7)."""
        return self.threshold + 1 - self.tools_tokens if self.options.auto and self.limits.context > 0 else None

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        super().on_response(items, usage, needs_follow_up)
        self._recovered = False

    def on_overflow(self, error: ProviderError) -> bool:
        """§6.7: one compaction (regardless of `auto`) and one retry; a second overflow is fatal."""
        if self._recovered or not is_context_overflow(error):
            return False
        self._recovered = True
        return self._compact("overflow", None)

    def _refuse(self, reason: str) -> bool:
        self._refused = reason
        return False

    def _compact(self, trigger: str, estimate: int | None) -> bool:
        """§6.5 `compactAfterOverflow`."""
        o = self.options
        context = self.limits.context
        if context <= 0:
            return self._refuse("no context limit")
        entries = self.entries.of(self.store.records[self._since :])
        if not entries:
            return self._refuse("nothing to compact")
        split = split_recent([text for _, text in entries], o.keep_tokens)
        prev = self.checkpoint
        if not split.head and prev is None:
            return self._refuse("nothing to compact")
        prompt = self.ctx.render_prompt(
            "opencode_summary.j2",
            previous_summary=prev.summary if prev else None,
            context=[x for x in (prev.recent if prev else "", split.head) if x],
        )
        summary_output = min(self.limits.output or o.summary_output_tokens, o.summary_output_tokens)
        prompt_tokens = opencode_estimate(prompt)
        if prompt_tokens > context - summary_output:
            return self._refuse(f"summary prompt of {prompt_tokens} estimated tokens exceeds {context - summary_output}")
        # the fit check refuses at `estimate > context - summaryOutput` (strict, §6.5 step 7): the smallest
        # count at which this request would not be sent is one more (`Request.threshold`)
        request = Request(
            [Message("user", prompt)],
            estimate_tokens=prompt_tokens,
            threshold=context - summary_output + 1,
            kind="summary",
            max_output_tokens=summary_output,
        )
        try:
            result = self.ctx.summarize(request)
        except SummaryOverflow:
            return self._refuse("summary request overflowed")
        if not result.text.strip():
            return self._refuse("blank summary")
        before = self._messages()
        head_records = [r for r, _ in entries[: split.split]]
        recent_records = [r for r, _ in entries[split.split :]]
        cut_ids = entries[split.cut][0].item_ids() if split.cut is not None else []
        recent_ids = tuple(dict.fromkeys([*cut_ids, *(i for r in recent_records for i in r.item_ids())]))
        text = self.ctx.render_prompt("opencode_checkpoint.j2", summary=result.text, recent=split.recent)
        self.checkpoint = Checkpoint(result.text, split.recent, recent_ids, Message("user", text, item_ids=recent_ids))
        self._since = len(self.store.records)
        self.view.reset([])
        summarized = [*(prev.recent_ids if prev else ()), *(i for r in head_records for i in r.item_ids())]
        self.ctx.record_compaction(
            trigger=trigger,
            before=before,
            after=self._messages(),
            summary=result.text,
            summarized_ids=summarized,
            estimate_tokens=None if estimate is None else estimate - self.tools_tokens,
            threshold=self._reported_threshold(),
            details={
                "tools_estimate_tokens": self.tools_tokens,
                "cut_inside_message": split.cut is not None,
                "cut_item_ids": cut_ids,
                "cut_at_chars": split.cut_chars,
                "keep_tokens": o.keep_tokens,
                "prompt_tokens": prompt_tokens,
                "update": prev is not None,
            },
        )
        return True

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
  with media as text, its synthetic parts (the `context` records after it) with it;
- §5 prune (opt-in, ``prune=True``): older tool outputs beyond the newest 40,000 estimated tokens
  cleared when the candidates exceed 20,000.

`opencode-v2` follows upstream's newest V2 core, `anomalyco/opencode:packages/core/src/session/compaction.ts`
@031a4a9c with `runner/llm.ts`@008d5715 (which calls it) and `runner/to-llm-message.ts`. It supersedes the
spec's §6 (SNAP, 5f7091ab): the spec's §9 records this version as "V2-LATE" of unverified provenance, and
upstream has since confirmed it (PR #40906, merged 2026-08-06, raised the retained context from 8,000 to
15,000 tokens; opencode.ai/docs/compaction describes the 15k retained tail and the summary request that
reuses the normal request's prompt cache). The project's rule: where spec and upstream differ, upstream wins.

- trigger (`required`, L555-570): before every call, unless `auto` is off, the model has no context limit
  or the history ends in a just completed checkpoint; it compacts when `estimateTokens` (L140-185: the
  newest measured response's usage, input + cache + output + reasoning, plus ``round(len / 4)`` of every part
  after it, its own tool results included, images 1,500 and PDFs 2,000 tokens; before any response the
  parts, the system prompt and the tools) ``>= min(limit.input - buffer, context - max(min(limit.output,
  32,000), buffer))``; the tools are none by default, as the replay sends no strategy tool definitions
  (`OpenCodeV2Options.tools_json_chars` replays upstream's);
- tail (`findTailStart`, L281-312): whole serialized records from the newest within `keep.tokens`
  (15,000), the newest always, then back to a user message; when that is the first, the latest user
  message; else everything since a checkpoint with a recent tail, or nothing. No cut inside a message;
- summary request (`execute`, L366-553): the normal system prompt and the history before the tail as
  the normal request sends it (checkpoint first), then the prompt (`buildPrompt`, L314-335: a new summary,
  or an update of the checkpoint above; Objective / Requirements / Decisions / Work State / Next Move /
  Relevant Files / Additional Context); no output limit of its own; one reminder when the reply has no
  template heading; an overflow, a `length` or content-filter finish, or no heading fails it, and a failed
  compaction fails the step (runner/llm.ts@008d5715 L213): the request is not sent;
- a provider overflow compacts once per step and the step is tried again, only with `auto` on
  (runner/llm.ts@008d5715 L256-258, L278-281);
- the checkpoint (to-llm-message.ts `toLLMMessage`): one user message with the summary and the retained
  tail as text; the model's history starts at it (history.ts@008d5715).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.provider import AGENT_REFUSAL, ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.strategies.opencode_components import (
    CONTINUE_TEXT,
    CompactionInput,
    CompactionPart,
    Entries,
    Estimator,
    PartsView,
    PartTokens,
    Record,
    Renderer,
    SessionStore,
    View,
    find_tail_start,
    is_context_overflow,
    max_output_tokens,
    media_as_text,
    model_limits,
    part_tokens,
    preserve_budget,
    prompt_ceiling,
    select_from_turns,
    turn_spans,
    usable_window,
    usage_count,
    usage_tokens,
)
from compaction_bench.strategy import TOKEN_COUNT, Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.templates import TemplateError
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


def user_message_records(records: Sequence[Record], start: int) -> list[Record]:
    """The records of the user message at `start` (§4, §2.3): its record and the `context` records that follow it up
    to the next other record, the synthetic text parts of that message upstream (an ``@file``'s read line and
    contents), which the store keeps as records of their own."""
    end = start + 1
    while end < len(records) and records[end].kind == "context":
        end += 1
    return list(records[start:end])


def replay_text(records: Sequence[Record]) -> str:
    """§4: the text of a replayed user message, which copies every part of it but compaction parts: the user and
    context records' items with media as ``[Attached mime: name]`` text; a message OpenCode wrote itself ("Continue…",
    an earlier replay) by its text."""
    texts = [r.text if r.kind in ("continue", "replay") else "\n".join(media_as_text(i) for i in r.items) for r in records]
    return "\n".join(texts)


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
        replay: list[Record] = []
        if overflow:
            # §4: the newest real user message before the request is replayed, not summarized.
            for i in range(len(messages) - 2, -1, -1):
                if messages[i].starts_turn:
                    if any(messages[n].starts_turn for n in range(i)):
                        replay, end = user_message_records(messages, i), i
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
        if replay:
            self.store.new("replay", items=[i for r in replay for i in r.items], text=replay_text(replay))
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
                "replay": bool(replay),
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
#: Sent once after the summary request, with what it sent, when the reply has none of the template's headings
#: (compaction.ts@031a4a9c L428-439; the rejected reply is not part of it). Our words.
SUMMARY_REMINDER = Message(
    "user",
    "Your reply did not follow the summary template. Without calling any tools, answer with the summary itself as "
    "text, under the template's section headings written exactly as the template gives them.",
)

#: Finish reasons that fail a summary reply (L465-472), in litellm's words: cut off at the output limit, or
#: withheld by the provider's content filter.
FAILED_FINISHES = {
    "length": "the summary reached the output token limit",
    "content_filter": "the provider blocked the summary",
}


@dataclass(frozen=True)
class OpenCodeV2Options:
    """Upstream's defaults at `compaction.ts@031a4a9c` (L36-41, `state` L348). Model limits default to the profile's.

    `tools_json_chars` is the size of tool definitions the trigger counts; by default there are none (2, the
    empty array ``[]``). The bench's convention: a profile's window is the window of the messages the replay
    sends, for every strategy, and the replay sends no strategy tool definitions, so no trigger counts them
    (every agent's own usage counts its tools: Codex's, Claude Code's, Pi's, OpenCode V1's `tokens.total`;
    none of those strategies adds them either). Set it to replay upstream's tool overhead: upstream's trigger
    counts the tools inside the anchor's provider usage and, before any response, as ``Token.estimate(name +
    description + JSON.stringify(inputSchema))`` per tool (L177-183); their estimate, ``round((tools_json_chars
    - 2) / 4)``, is then added to the trigger's count either way, and the requests report their estimate and
    threshold net of it (the replay's usage holds no tools). OpenCode's storage (export, SQLite, legacy files)
    does not record the definitions, so the value to pass is a documented size: 32,375, the UTF-16 length of
    ``JSON.stringify`` of the eight built-in tools OpenCode sends a GPT model by default (bash, read, glob,
    grep, task, webfetch, todowrite and apply_patch, which replaces edit/write for `gpt-` models in
    `packages/opencode/src/tool/registry.ts` @010bc19e), each as ``{name, description, inputSchema}``: the
    descriptions verbatim from `packages/opencode/src/tool/*.txt` (bash@0a4e5dff with 2,000 lines / 51,200
    bytes filled in, read@150e763a, glob@48f95361, grep@14c12f9c, task@02fd6be6, webfetch@12eda598,
    todowrite@262b2831, apply_patch@679d8d32; 27,218 characters) and the parameters as JSON Schema draft-07
    objects, 8,093 estimated tokens. Upstream's per-tool sum leaves out the JSON framing and escapes (some
    hundreds of characters); `question`, `skill`, MCP and plugin tools and the agent list appended to `task`'s
    description are left out too, so the size is approximate. With ``--usage recorded`` the recorded usage
    already holds the recorded agent's tools: keep the default there.
    """

    #: `auto`: False turns off the trigger before each call and the compaction that answers a provider overflow
    #: (`required` L557; runner/llm.ts@008d5715 L256 `recoverOverflow && compaction.enabled()`).
    auto: bool = True
    #: `buffer`: the trigger's ceiling is min(input limit - this, context - max(output, this)) (L564-568).
    buffer: int = field(default=20_000, metadata={"range": TOKEN_COUNT})
    #: `keep.tokens` (`DEFAULT_KEEP_TOKENS`, L37): whole serialized records from the newest within this many
    #: round(chars / 4) tokens are kept as recent text, from a user message on (the newest always; L281-312).
    keep_tokens: int = 15_000
    #: `OUTPUT_TOKEN_MAX` (L38): the output limit in the ceiling is min(output limit, this) (L564).
    output_token_max: int = 32_000
    #: `TOOL_OUTPUT_MAX_CHARS` (L39): tool results in the recent text keep this many characters (a surrogate pair
    #: counting as one), then a line saying they were truncated (L208-220).
    tool_output_max_chars: int = 2_000
    #: `IMAGE_TOKEN_ESTIMATE` (L40): an image part after the anchor counts this many tokens (L187-190).
    image_token_estimate: int = 1_500
    #: `PDF_TOKEN_ESTIMATE` (L41): a PDF part after the anchor counts this many tokens (L187-190).
    pdf_token_estimate: int = 2_000
    #: UTF-16 length of the tool definitions the trigger counts; 2 (``[]``): none, the bench's convention; 32,375:
    #: OpenCode's eight default tools (see the class docstring)
    tools_json_chars: int = 2
    #: models.dev `limit.context`, in tokens; None = the profile's whole context (GPT-5: 400,000) or its window;
    #: 0 turns the trigger off (L563)
    context_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})
    #: models.dev `limit.output`, in tokens, capped by `output_token_max` in the ceiling; None = the profile's max
    #: output capped at half the window (L564)
    output_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})
    #: models.dev `limit.input`, in tokens: the ceiling is at most input - `buffer`; None = the profile's input
    #: limit, if it has one; 0 = none (L565-566)
    input_limit: int | None = field(default=None, metadata={"range": MODEL_LIMIT})


@dataclass(frozen=True)
class Checkpoint:
    """The completed compaction row (`Compaction.Ended`, L544-551) and the one user message it projects to
    (`toLLMMessage`, runner/to-llm-message.ts: `<conversation-checkpoint>` with `<summary>` and
    `<recent-context>`; the retained tail is text there, not messages: the runner's history starts at the
    latest completed compaction, history.ts@008d5715 `messageEntries`)."""

    summary: str
    recent: str
    recent_ids: tuple[str, ...]
    message: Message
    #: `Token.estimate` of the message's text (L194), its part of the estimate before any response
    tokens: int


@dataclass(frozen=True)
class SummaryOutcome:
    """What `execute`'s summary requests came to (L428-543): the accepted text, or why it failed."""

    text: str | None
    failure: str | None = None
    #: whether the reminder was sent
    reminded: bool = False


def summary_headings(prompt: str) -> frozenset[str]:
    """`SUMMARY_HEADINGS` (L82): the prompt's lines that start with "##" (its template's headings)."""
    return frozenset(line for line in prompt.split("\n") if line.startswith("##"))


def has_summary_section(text: str, headings: frozenset[str]) -> bool:
    """`hasSummarySection` (L337-338): a line of the reply, trimmed, is one of the headings."""
    return any(line.strip() in headings for line in text.split("\n"))


class OpenCodeV2(_OpenCode):
    name = "opencode-v2"
    description = (
        "OpenCode V2 core (031a4a9c): last response's usage + local estimate >= min(input - buffer, context - "
        "max(output, buffer)); 15k of whole records from a user message kept as text; the summary asked on the "
        "normal system prompt and history with a template check and one reminder; checkpoint as one user message"
    )
    spec = "docs/specs/opencode.md §9 (upstream compaction.ts@031a4a9c, superseding §6)"
    Options = OpenCodeV2Options

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        #: the records since the checkpoint, their messages and their parts' running sums (also the base's `view`)
        self.since = PartsView(self.store, self.renderer, self.estimator, self._part_tokens)
        self.view = self.since
        self.ceiling = prompt_ceiling(self.limits, o.buffer, o.output_token_max)
        self.tools_tokens = opencode_estimate_units(max(0, o.tools_json_chars - 2))
        self.checkpoint: Checkpoint | None = None
        self.entries = Entries(o.tool_output_max_chars)
        #: the newest response since the checkpoint with a measured prompt (`estimateTokens`' anchor, L141-147)
        self._anchor: Record | None = None
        self._recovered = False
        self._failure = ""
        self._system_tokens = (0, 0)
        self._prompt_messages: dict[str, Message] = {}

    def _part_tokens(self, record: Record) -> PartTokens:
        return part_tokens(record, self.options.image_token_estimate, self.options.pdf_token_estimate)

    # ------------------------------------------------------------ the request
    def _messages(self) -> list[Message]:
        """The system prompt, the checkpoint, then the records since it (the view holds them)."""
        self.since.update()
        head = [self.checkpoint.message] if self.checkpoint else []
        return self._system_messages() + head + self.since.messages

    def _estimate(self) -> int:
        """`estimateTokens` (L140-185) of the request `_messages` just built, with the tools' estimate: the anchor's
        usage and the parts after it but its own message (its tool results count, L149, L159); without an anchor the
        parts of every message since the checkpoint (the checkpoint's text included), the system prompt and the
        tools (L170-184)."""
        anchor = self._anchor
        if anchor is not None and anchor.usage is not None:
            added = self.since.parts_from(self.since.position(anchor.id)) - self.since.parts(anchor).own
            return usage_tokens(anchor.usage) + added + self.tools_tokens
        checkpoint = self.checkpoint.tokens if self.checkpoint else 0
        return checkpoint + self.since.parts_from(0) + self._system_estimate() + self.tools_tokens

    def _system_estimate(self) -> int:
        """The system parts' `Token.estimate`s (L179), memoized while the system prompt stays as it is."""
        count, tokens = self._system_tokens
        if count != len(self.store.system):
            tokens = sum(opencode_estimate(m.content) for m in self._system_messages())
            self._system_tokens = (len(self.store.system), tokens)
        return tokens

    def _armed(self) -> bool:
        """Whether `required` looks at the estimate (L555-563): `auto` on, a context limit, and the history not
        ending in the checkpoint ("run the completed checkpoint before considering another")."""
        ends_in_checkpoint = self.checkpoint is not None and not self.since.records
        return self.options.auto and self.limits.context > 0 and not ends_in_checkpoint

    def _reported(self, armed: bool) -> int | None:
        """The threshold a request reports (`Request.threshold`): `required` compacts at ``estimate >=
        promptCeiling`` (L569), so the ceiling itself, net of the tools' estimate as the estimate is; None when
        no estimate would compact this request (not `_armed`)."""
        return self.ceiling - self.tools_tokens if armed else None

    def request(self) -> Request:
        """runner/llm.ts@008d5715 `runStep` (L211-215): before each call, `required` (L569); a compaction that
        completes rebuilds the request, which is sent unchecked (it ends in the checkpoint); one that fails
        fails the step (`StepFailedError`): the request is not sent."""
        messages = self._messages()
        estimate = self._estimate()
        armed = self._armed()
        meta = self._meta()
        if armed and estimate >= self.ceiling:
            if self._compact("threshold", estimate):
                messages, estimate, armed = self._messages(), self._estimate(), False
            else:
                meta["compaction_failed"] = self._failure
                self.ctx.refuse_request(f"OpenCode V2 compaction failed ({self._failure}); the step stops with that error")
        return Request(messages, estimate_tokens=estimate - self.tools_tokens, threshold=self._reported(armed), meta=meta)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        record = self.store.add_response(items, usage)
        if usage is not None and usage.input > 0:  # a prompt the provider measured (L141-147)
            self._anchor = record
        self._recovered = False

    def on_overflow(self, error: ProviderError) -> bool:
        """An overflow before any output (runner/step.ts@0784e0f5 `attempt`) compacts once per step when
        `auto` is on (runner/llm.ts@008d5715 L256-258 `recoverOverflow && compaction.enabled()`, `enabled` is
        `auto`, L603), and the step is tried again; another overflow in it is an error (L278-281). A request
        the strategy refused (a failed compaction) is no overflow."""
        if error.provider == AGENT_REFUSAL or not self.options.auto or self._recovered or not is_context_overflow(error):
            return False
        self._recovered = True
        return self._compact("overflow", None)

    # ------------------------------------------------------------ compaction
    def _fail(self, reason: str) -> bool:
        self._failure = reason
        return False

    def _compact(self, trigger: str, estimate: int | None) -> bool:
        """`execute` (L366-553): the retained tail from `findTailStart`, the summary asked on the base transcript
        of everything before it, the checkpoint recorded with the tail's text."""
        previous = self.checkpoint
        before = self._messages()
        records = self.since.records
        entries = self.entries.of(records)
        tail = find_tail_start(
            [(position, record.kind == "user", text) for position, record, text in entries],
            len(records), self.options.keep_tokens, previous is not None and bool(previous.recent),
        )
        if tail is None:
            return self._fail("nothing to compact yet")
        head = [*self._system_messages(), *([previous.message] if previous else []), *self.since.messages_before(tail.start)]
        outcome = self._summarize(head, update=previous is not None)
        if outcome.text is None:
            return self._fail(outcome.failure or "no summary")
        recent = "\n\n".join(text for position, _, text in entries if position >= tail.start)
        recent_ids = tuple(dict.fromkeys(i for r in records[tail.start :] for i in r.item_ids()))
        text = self.ctx.render_prompt("opencode_checkpoint.j2", summary=outcome.text, recent=recent)
        message = Message("user", text, item_ids=recent_ids)
        self.checkpoint = Checkpoint(outcome.text, recent, recent_ids, message, opencode_estimate(text))
        summarized = [*(previous.recent_ids if previous else ()), *(i for r in records[: tail.start] for i in r.item_ids())]
        self.since.reset([])
        self._anchor = None
        self.ctx.record_compaction(
            trigger=trigger,
            before=before,
            after=self._messages(),
            summary=outcome.text,
            summarized_ids=summarized,
            estimate_tokens=None if estimate is None else estimate - self.tools_tokens,
            threshold=None if estimate is None else self._reported(True),
            details={
                "tools_estimate_tokens": self.tools_tokens,
                "tail": tail.reason,
                "tail_start_item": next(iter(records[tail.start].item_ids()), None) if tail.start < len(records) else None,
                "recent_tokens": opencode_estimate(recent),
                "keep_tokens": self.options.keep_tokens,
                "update": previous is not None,
                "reminder": outcome.reminded,
            },
        )
        return True

    def _summarize(self, head: list[Message], *, update: bool) -> SummaryOutcome:
        """The summary request (L397-427): the head as the normal request sends it (system prompt, checkpoint,
        messages), then the prompt as a user message; no output limit of its own (the provider's default).
        Asked again once with `SUMMARY_REMINDER` after a reply without a template heading (L428-439, L526);
        an overflow, a reply cut off at its output limit or filtered, or no heading after the reminder, fails
        the compaction (L447-472, L492, L530-542)."""
        prompt = self._prompt("opencode_v2_summary.j2", update=update)
        headings = summary_headings(prompt)
        if not headings:
            raise TemplateError(
                "prompt template 'opencode_v2_summary.j2' has no line starting with '##': opencode-v2 accepts a summary "
                "only when a line of it is one of its template's headings (compaction.ts@031a4a9c L82, L337-338)"
            )
        first = [*head, self._prompt_message(prompt)]
        result = None
        for reminded, messages in ((False, first), (True, [*first, SUMMARY_REMINDER])):
            try:
                result = self.ctx.summarize(Request(messages, kind="summary"))
            except SummaryOverflow:
                return SummaryOutcome(None, "the summary request overflowed", reminded)
            failed = FAILED_FINISHES.get(result.finish_reason or "")
            if failed is not None:
                return SummaryOutcome(None, failed, reminded)
            if has_summary_section(result.text, headings):
                return SummaryOutcome(result.text, None, reminded)
        empty = result is None or not result.text.strip()
        return SummaryOutcome(None, "the summary was empty" if empty else "the summary did not follow the template", True)

    def _prompt_message(self, prompt: str) -> Message:
        """The prompt's user message, one object per text (a compaction asked again sends the same one)."""
        message = self._prompt_messages.get(prompt)
        if message is None:
            message = self._prompt_messages[prompt] = Message("user", prompt)
        return message

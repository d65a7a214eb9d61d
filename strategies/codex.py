"""Codex CLI context compaction: `codex-local`, `codex-remote-v1`, `codex-remote-v2`, `codex-token-budget`.

Rules from docs/specs/codex.md; the shared pieces (estimator, limits, accountant, normalization,
truncation, windows, retention) are in `compaction_bench.strategies.codex_components`.

- Trigger points (§1.2-§1.4), common to all four: the pre-turn check before the new user message
  is recorded (model-switch checks first: comp_hash change, downshift to a smaller window, both
  compacting with the previous model's limits); the mid-turn check after a sampling step that
  needs a follow-up, run once the step's tool outputs are in history (Codex executes the tools
  inside the sampling pass, so the check sees them), i.e. at the next `request()` or user turn;
  ``ContextWindowExceeded`` on a normal request marks usage full with ``fill_to_context_window``
  (the zero quirk) and ends the turn without retry.
- After every compaction (§1.5): the window advances, the history is replaced and the usage is
  rebased to the local estimate of the new history.
- `codex-local` (§2): summary request = normalized history + the compaction prompt as a user
  message; on overflow the oldest item (with its call/output partner) is dropped and the request
  retried; new history = real user messages newest-first within 20,000 tokens (the crossing one
  middle-truncated) then the summary as a user message behind the summary prefix.
- `codex-remote-v1` (§3) and `codex-remote-v2` (§4): the trailing tool-output pre-trim; the server
  is emulated: the configured summarizer writes the content of an opaque compaction item (role
  ``compaction``, counted with §4's encrypted-size rule); retained messages follow §4.3's 64k rule
  (for v1 the spec says the server applies the same reference rule), the compaction item last.
- `codex-token-budget` (§5): a new window holding only the initial context and the
  ``<context_window>`` section; reminders once per window below a threshold (option).
- Contextual messages (`WORLD_STATE_MARKERS` in the components): before the first user message the developer
  bundle and the world-state user fragments are the initial context; after it the world-state fragments are the
  next turn's context updates and a client's `<external_…>` additional context that turn's input, both recorded
  after its pre-turn compaction, and every other contextual message (a `/shell` turn's output, `<turn_aborted>`,
  another format's synthetic message) is a history item from where it happened, in the compaction input like the
  rest of the history and never re-injected.
- Initial context re-injection (§2.2 step 5): mid-turn before the last real user message (or, as
  upstream's `compact.rs` L559-614 has it beyond the spec, the last agent message that is no
  `FINAL_ANSWER` completion, when that comes later); after a pre-turn compaction the next turn
  re-injects it after the summary, before the new user message.
- Token budget after a pre-turn rollover (§5.1; `session/mod.rs` L3705-3735, L3754-3808): the new
  window is built from the incoming turn's context and is that turn's baseline, so the turn records
  no context diffs of its own (a model-switch rollover, built with the previous model, still records
  the `<model_switch>` message).

Model windows for a switch: the marker's ``context_window`` when the transcript gives one, else
the `model_context_window` option, else the profile window.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from compaction_bench.log_view import LogView
from compaction_bench.provider import ProviderError
from compaction_bench.request import Message, Request
from compaction_bench.strategies.codex_components import (
    ActiveTerms,
    CodexItem,
    ContextLimits,
    ContextWindows,
    ItemConverter,
    ModelState,
    PromptView,
    RetainedRun,
    TokenAccount,
    TokenStatus,
    TruncationPolicy,
    approx_tokens,
    comp_hash_for,
    downshift_at,
    encrypted_length,
    for_prompt,
    initial_context_index,
    insert_initial_context,
    is_context_update,
    is_initial_context,
    is_model_switch,
    is_turn_input,
    item_ids_of,
    model_switch_reason,
    pretrim_tool_outputs,
    remote_candidates,
    remove_first_item,
    render,
    select_user_messages,
    update_context,
    with_window_section,
)
from compaction_bench.strategies.history import FoldMemo
from compaction_bench.strategy import CONTEXT_WINDOW, OptionError, Range, Strategy, SummaryOverflow
from compaction_bench.transcript import Item, Usage

SPEC = "docs/specs/codex.md"


@dataclass(frozen=True)
class CodexOptions:
    """Options shared by the four Codex strategies (upstream defaults)."""

    #: `model_context_window` config override; None = the marker's window or the profile window.
    model_context_window: int | None = field(default=None, metadata={"range": CONTEXT_WINDOW})
    #: Usable window as a percent of the context window (`window * pct // 100`, 95% = 258,400 of 272k): the full-limit
    #: check, the remote pre-trim target and the overflow fill all use it (§1.1).
    effective_context_window_percent: int = 95
    #: The 90% clamp of the auto-compact limit (`context_window * 9 / 10`).
    auto_compact_percent: int = 90
    #: Config `model_auto_compact_token_limit`, in tokens: the auto-compact limit is min(this, the 90% clamp), or this
    #: unclamped in `body_after_prefix` scope; None = the clamp alone (§1.1).
    model_auto_compact_token_limit: int | None = None
    #: `total` or `body_after_prefix` (§1.1).
    auto_compact_token_limit_scope: Literal["total", "body_after_prefix"] = "total"
    #: True when the server sends `X-Reasoning-Included: true` (§1.3).
    reasoning_included: bool = False
    #: Tool-output truncation policy (§9): `tokens` (all bundled models but gpt-5.2) or `bytes`.
    truncation_mode: Literal["tokens", "bytes"] = "tokens"
    #: Config `tool_output_token_limit`: N tokens, or 4N bytes in bytes mode (§9, `model_info.rs` L38-50);
    #: None = the model's own policy, a limit of 10,000 in its mode's unit.
    tool_output_token_limit: int | None = None
    #: The history-insertion budget is the policy's limit × this, rounded up (§9).
    history_truncation_multiplier: float = field(default=1.2, metadata={"range": Range(0, low_open=True, what="a multiplier")})
    #: Bytes counted for an inline image (§6).
    image_bytes_estimate: int = field(default=7_373, metadata={"range": Range(0, what="a number of bytes")})
    #: Bytes of encryption envelope subtracted from encrypted reasoning/compaction items (§6).
    encrypted_overhead_bytes: int = field(default=650, metadata={"range": Range(0, what="a number of bytes")})
    #: Seed of the thread id used for window ids.
    thread_id: str = "thread"


@dataclass(frozen=True)
class LocalOptions(CodexOptions):
    #: Budget, in ceil(UTF-8 bytes / 4) tokens, for the real user messages kept newest first after a summary; the one
    #: that crosses it is middle-truncated; 0 keeps none (§2.2 step 3, `COMPACT_USER_MESSAGE_MAX_TOKENS`).
    compact_user_message_max_tokens: int = 20_000
    #: Compaction prompt appended as the last user message of the summary request (§2.1).
    summary_template: str = field(default="codex_summary.j2", metadata={"template": True})
    #: `SUMMARY_PREFIX` put before the summary text (with a newline); user messages starting with it are earlier
    #: summaries and are not kept (§2.2 steps 1-2).
    summary_prefix_template: str = field(default="codex_summary_prefix.j2", metadata={"template": True})


@dataclass(frozen=True)
class RemoteOptions(CodexOptions):
    #: Budget, in ceil(UTF-8 bytes / 4) tokens of text, for retained messages, newest first; the crossing message is
    #: truncated to the remainder; 0 retains none (§4.3 step 3, `RETAINED_MESSAGE_TOKEN_BUDGET`).
    retained_message_token_budget: int = 64_000
    #: Agent messages whose estimate exceeds this many tokens are not retained (§4.3 step 1,
    #: `MAX_RETAINED_AGENT_MESSAGE_TOKENS`).
    max_retained_agent_message_tokens: int = 10_000
    #: Body that replaces each trailing tool output the pre-trim rewrites while the estimate exceeds the usable window
    #: (§3.1).
    trimmed_output_text: str = "Output exceeded the available model context and was truncated"
    #: The emulated server's summary instructions (the real ones are not visible).
    summary_template: str = field(default="codex_summary.j2", metadata={"template": True})


@dataclass(frozen=True)
class TokenBudgetOptions(CodexOptions):
    #: The `Agent name:` line of the `<context_window>` section: the root agent's path (`AgentPath::root()`).
    agent_name: str = "/root"
    #: No upstream default (config or model defaults); None = no reminders.
    reminder_threshold_tokens: int | None = None
    #: Developer reminder sent once per window when remaining tokens ≤ `reminder_threshold_tokens`; it gets
    #: `n_remaining` (§5.3).
    reminder_template: str = field(default="codex_token_budget_reminder.j2", metadata={"template": True})
    #: Developer message sent once per window when no tokens remain; None (or "") = none, and no fallback buffer
    #: (§5.3, §1.1).
    auto_compact_fallback_prompt: str | None = None
    #: Tokens added to the auto-compact limit while a fallback prompt is set, so the prompt is sent before the
    #: rollover; must then be > 0 (§1.1, §5.3).
    auto_compact_fallback_buffer_tokens: int = 0
    #: Text an MCP `notes.thread_hint` would return (external in Codex).
    thread_hint: str | None = None
    #: Text of a `<context_window_guidance>` developer message after the `<context_window>` section; None = none
    #: (§5.1).
    guidance_message: str | None = None

    def __post_init__(self) -> None:
        """Codex's config check (§5.3 "Validation", `config/mod.rs@3aae5d8` L1152-1244): a fallback prompt
        needs a positive buffer; with none the window would reset at the check that should send the prompt."""
        if self.auto_compact_fallback_prompt and self.auto_compact_fallback_buffer_tokens <= 0:
            raise OptionError("option codex-token-budget.auto_compact_fallback_prompt: needs a positive "
                              "auto_compact_fallback_buffer_tokens (Codex's config refuses the prompt without one)")


@dataclass
class Built:
    """The result of a compaction path: the new history and what went into it."""

    history: list[CodexItem]
    summary: str | None
    summarized_ids: list[str]
    details: dict[str, Any]


class CodexCompactionFailed(Exception):
    """A compaction path that could not produce a new history (the turn ends with an error)."""


class _Codex(Strategy):
    """The Codex session: history, accountant, windows and the trigger points of §1.4."""

    spec = SPEC
    Options = CodexOptions
    #: Whether the initial context is re-injected after a compaction (mid-turn before the last real
    #: user message, pre-turn at the next turn); False when the new history already is that context.
    reinject_initial_context = True

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        o = self.options
        self.converter = ItemConverter(
            TruncationPolicy.of(o.truncation_mode, o.tool_output_token_limit),
            o.history_truncation_multiplier,
            o.encrypted_overhead_bytes,
            o.image_bytes_estimate,
        )
        self.history: list[CodexItem] = []
        self.base = ""
        self.folds = FoldMemo()
        #: `for_prompt(history)` and its rendering, and the accountant's history terms, followed as
        #: the history grows (`history` is only appended to between replacements)
        self.prompt = PromptView(self.converter.make, self.folds)
        self.terms = ActiveTerms()
        #: The current initial context: the session's first one with later context updates applied.
        self.initial_context: list[CodexItem] = []
        #: Contextual messages recorded since the first user turn and not yet in the history: at the next user
        #: turn its context updates and additional context, and the history items recorded before it
        #: (`take_pending_context`); if a request comes first, mid-turn input.
        self.pending_context: list[CodexItem] = []
        self.account = TokenAccount(reasoning_included=o.reasoning_included)
        self.windows = ContextWindows(seed=o.thread_id)
        self.model = ModelState(None, None, self.limits_for(None))
        self.pending_model: ModelState | None = None
        self.seen_user = False
        self.inject_next_turn = False
        self.step_pending = False
        self.follow_up = False
        self.turn_failed = False
        self.new_context_requested = False
        #: The context updates of the turn whose pre-turn checks are running (empty otherwise).
        self.incoming: list[CodexItem] = []
        #: The phase of the last compaction the current turn's pre-turn checks ran (None: none ran).
        self.rolled_over: str | None = None
        #: Compactions that failed since the last successful one (reported in its details).
        self.failures: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ limits
    def limits_for(self, window: int | None) -> ContextLimits:
        o = self.options
        return ContextLimits(
            window=window or o.model_context_window or self.ctx.profile.context_window,
            effective_percent=o.effective_context_window_percent,
            auto_compact_percent=o.auto_compact_percent,
            configured_limit=o.model_auto_compact_token_limit,
            scope=o.auto_compact_token_limit_scope,
            fallback_buffer=self.fallback_buffer(),
        )

    def fallback_buffer(self) -> int:
        return 0

    @property
    def limits(self) -> ContextLimits:
        return self.model.limits

    def status(self, limits: ContextLimits | None = None) -> TokenStatus:
        return self.account.status(self.history, limits or self.limits, self.terms)

    # ------------------------------------------------------------------ protocol
    def on_input(self, item: Item) -> None:
        if item.kind == "system" and item.meta.get("role") != "developer":
            if item.meta.get("role") == "system":
                return  # system-role history messages are never stored (`is_api_message`, §9)
            self.base = f"{self.base}\n\n{item.text}" if self.base else item.text
            return
        entry = self.converter.convert(item)
        if not self.seen_user:
            if is_initial_context(entry):
                self.initial_context.append(entry)
        elif entry.contextual and entry.type == "message":
            self.pending_context.append(entry)
            return
        self.history.append(entry)

    def take_pending_context(self) -> tuple[list[CodexItem], list[CodexItem]]:
        """At a user turn: the pending contextual messages that are history items (a `/shell` turn's output, a
        `<turn_aborted>` marker, any other format's synthetic message...) join the history where they happened,
        before the pre-turn check, which counts them and whose compaction takes them (`record_conversation_items`
        when they happen, `compact.rs@3aae5d8` L247-251 `clone_history`; see `WORLD_STATE_MARKERS`). Returned are
        the turn's context updates and its additional context (`is_turn_input`), which the turn records after that
        check, in that order, before its user message (`session/turn.rs@3aae5d8` L169-245)."""
        updates: list[CodexItem] = []
        turn_input: list[CodexItem] = []
        for entry in self.pending_context:
            if is_turn_input(entry):
                turn_input.append(entry)
            elif is_context_update(entry, self.initial_context):
                updates.append(entry)
            else:
                self.history.append(entry)
        self.pending_context = []
        return updates, turn_input

    def on_marker(self, item: Item) -> None:
        if item.meta.get("event") != "model_switch" or not item.meta.get("model"):
            return
        slug = str(item.meta["model"])
        comp_hash = item.meta.get("comp_hash") or comp_hash_for(slug)
        window = item.meta.get("context_window")
        state = ModelState(slug, comp_hash, self.limits_for(int(window) if window else None))
        if self.model.slug is None:
            self.model = state
        else:
            self.pending_model = state

    def on_user_turn(self, item: Item) -> None:
        """A new turn (§1.4 item 1). A step still waiting for its follow-up was interrupted: its
        turn ended without the mid-turn check, so the pre-turn check decides (no injection). The
        contextual messages recorded since are history (`take_pending_context`) but for the turn's
        context updates (environment diff, `<model_switch>`) and additional context, which are recorded
        after the pre-turn compaction, never in its request; after a compaction the full *current*
        initial context is injected instead of the diff, the model-switch message first, then the
        additional context."""
        self.after_step(interrupted=True)
        self.turn_failed = False
        updates, turn_input = self.take_pending_context()
        self.initial_context = update_context(self.initial_context, updates)
        self.incoming, self.rolled_over = updates, None
        turn_ok = self.pre_turn()
        self.incoming = []
        if not turn_ok:
            self.failures.append({"phase": "pre-turn", "item": item.id, "note": "user message not recorded"})
            return
        if not self.seen_user:
            self.before_first_turn()
        if self.inject_next_turn:
            self.history.extend([u for u in updates if is_model_switch(u)])
            self.history.extend(self.initial_context_to_inject())
            self.inject_next_turn = False
        else:
            self.history.extend(self.context_updates(updates))
        self.history.extend(turn_input)
        self.history.append(self.converter.convert(item))
        self.seen_user = True

    def context_updates(self, updates: list[CodexItem]) -> list[CodexItem]:
        """What the turn's context-update step records (`record_context_updates_and_set_reference_context_item`,
        `session/mod.rs` L3754-3808) when no initial context is re-injected: the diffs as they came."""
        return updates

    def initial_context_to_inject(self) -> list[CodexItem]:
        """The initial context a compaction re-injects (the current one)."""
        return self.initial_context

    def before_first_turn(self) -> None:
        """Hook for mode-specific context added before the session's first user message."""

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        self.history.extend(self.converter.convert(i) for i in items)
        if usage is not None:
            self.account.observe(usage)
        self.step_pending = True
        self.follow_up = needs_follow_up and not self.turn_failed

    def on_overflow(self, error: ProviderError) -> bool:
        """ContextWindowExceeded on a normal request: usage marked full, turn ends, no retry (§1.3)."""
        if error.is_overflow:
            self.account.fill_to_context_window(self.limits.usable)
            self.turn_failed = True
        return False

    def request(self) -> Request:
        self.after_step()
        self.history.extend(self.pending_context)
        self.pending_context = []
        return Request(
            self.prompt.messages(self.history, self.base),
            estimate_tokens=self.account.active(self.history, self.terms),
            threshold=self.limits.compact_at,  # `>=` in total scope; None in body_after_prefix (ContextLimits)
            meta={"window_id": self.windows.request_id},
        )

    # ------------------------------------------------------------------ trigger points
    def after_step(self, *, interrupted: bool = False) -> None:
        """The mid-turn check of the last sampling step (§1.4 item 2), once its outputs are recorded.
        `interrupted`: the turn ended before the follow-up, so no mid-turn check runs. A failed
        mid-turn compaction ends the turn (`run_auto_compact` returns the error): no further
        attempt before the next turn."""
        if not self.step_pending:
            return
        self.step_pending = False
        status = self.status()
        if self.follow_up and not interrupted and (self.new_context_requested or status.limit_reached):
            reason = "NewContextRequested" if self.new_context_requested else "ContextLimit"
            if not self.compact("mid-turn", reason, status, self.limits, threshold=self.limits.compact_at):
                self.turn_failed = True
        else:
            self.after_sampling(status)

    def after_sampling(self, status: TokenStatus) -> None:
        """Hook for what runs after a sampling step without rollover (token-budget reminders)."""

    def pre_turn(self) -> bool:
        """Model-switch checks, then the token check (§1.4 items 1 and 3). False on failure."""
        if self.pending_model is not None:
            new, self.pending_model = self.pending_model, None
            status = self.status()
            reason = model_switch_reason(self.model, new, status.active)
            ok = True
            if reason:
                # a downshift is decided on the new model's limits (strict auto-limit test, `downshift_at`); a
                # comp_hash change on no count at all, so it reports no threshold
                threshold = downshift_at(new.limits) if reason == "ModelDownshift" else None
                ok = self.compact("model-switch", reason, status, self.limits, model=self.model.slug, threshold=threshold)
            self.model = new
            if not ok:
                return False
        status = self.status()
        if status.limit_reached:
            return self.compact("pre-turn", "ContextLimit", status, self.limits, threshold=self.limits.compact_at)
        return True

    # ------------------------------------------------------------------ compaction
    def compact(
        self, phase: str, reason: str, status: TokenStatus, limits: ContextLimits, model: str | None = None, *, threshold: int | None
    ) -> bool:
        """Run the strategy's path and install its history (§1.5). False when it failed. `threshold` is what
        the record reports: the smallest active count at which the rule that decided fires (`Request.threshold`)."""
        before = self.prompt.messages(self.history, self.base)
        saved_windows = copy.copy(self.windows)
        self.windows.advance()
        try:
            built = self.build(phase, limits)
        except CodexCompactionFailed as exc:
            self.windows = saved_windows
            self.failures.append({"phase": phase, "reason": reason, "error": str(exc)})
            return False
        history = built.history
        if self.reinject_initial_context and phase == "mid-turn":
            history = insert_initial_context(history, self.initial_context_to_inject())
        else:
            self.inject_next_turn = self.reinject_initial_context
        self.history = history
        self.rolled_over = phase
        self.installed(built, history)
        # the prompt view follows the new history from here (the next request adds only what comes after)
        after: Sequence[Message] = self.prompt.messages(history, self.base)
        estimate = approx_tokens(self.base) + self.prompt.history_estimate  # `estimate_history(history, base)`
        self.account.rebase(estimate)
        self.new_context_requested = False
        self.on_new_window()
        if not self.prompt.normalized_as_is:
            after = render(history, self.base, self.folds)
        self.ctx.record_compaction(
            trigger=phase,
            before=before,
            after=after,
            summary=built.summary,
            summarized_ids=built.summarized_ids,
            estimate_tokens=status.active,
            threshold=threshold,
            details={
                "reason": reason,
                "phase": phase,
                "injection": "FreshInitialContext" if not self.reinject_initial_context
                else "BeforeLastUserMessage" if phase == "mid-turn" else "DoNotInject",
                "model": model or self.model.slug,
                "window_number": self.windows.number,
                "window_id": self.windows.current_id,
                "previous_window_id": self.windows.previous_id,
                "usable_window": limits.usable,
                "auto_compact_limit": limits.auto_limit,
                "estimate_after": estimate,
                "failed_attempts": self.failures,
                **built.details,
            },
        )
        self.failures = []
        return True

    def installed(self, built: Built, history: list[CodexItem]) -> None:
        """Hook: `history` (`built.history`, with the initial context when re-injected) has just replaced
        the session's history."""

    def on_new_window(self) -> None:
        """Hook: per-window flags are cleared when a window advances (§1.5)."""

    def build(self, phase: str, limits: ContextLimits) -> Built:
        raise NotImplementedError

    def summary_request(self, items: Sequence[CodexItem], template: str, *, whole: bool = False) -> Request:
        """History + the compaction prompt as a user message, no tools (§2.1). `whole`: `items` are the
        prompt view's (`for_prompt` of the whole history), whose rendering it holds. No estimate: the local
        path decides nothing on the request's size, it sends it and drops the oldest item on an overflow."""
        prompt = Message(role="user", content=self.ctx.render_prompt(template))
        if whole:
            view = self.prompt.messages(self.history, self.base)  # `render(items, base, folds)`
            messages: Sequence[Message] = LogView(view.log, view.length, (*view.tail, prompt))
        else:
            messages = [*render(items, self.base, self.folds), prompt]
        return Request(messages, kind="summary")


class CodexLocal(_Codex):
    """Local inline summarization (§2)."""

    name = "codex-local"
    description = "Codex inline summary: real user messages within 20k approx tokens + summary as a user message"
    spec = f"{SPEC} §1, §2, §6, §9"
    Options = LocalOptions

    def build(self, phase: str, limits: ContextLimits) -> Built:
        o = self.options
        items = list(self.prompt.update(self.history, self.base))
        dropped: list[str] = []
        while True:
            try:
                result = self.ctx.summarize(self.summary_request(items, o.summary_template, whole=not dropped))
                break
            except SummaryOverflow as exc:
                if not items:
                    self.account.fill_to_context_window(limits.usable)
                    raise CodexCompactionFailed(f"summary request does not fit: {exc}") from None
                dropped.extend(i for removed in remove_first_item(items) for i in removed.item_ids)
                items = for_prompt(items, self.converter.make)
        # `drain_to_completed` (`compact.rs` L692-752) feeds the summary response's usage to
        # `update_token_usage_info` like any response: it adds to the cumulative total that
        # `fill_to_context_window` reads (§1.3); the rebase (§1.5) replaces the rest.
        if result.usage_known:  # `record_token_usage_info` skips a response without usage (`if let Some(token_usage)`)
            self.account.observe(Usage(input=result.input_tokens, output=result.output_tokens))
        prefix = self.ctx.render_prompt(o.summary_prefix_template)
        # An empty summary leaves the prefix and its newline; the text is kept as returned.
        summary_text = f"{prefix}\n{result.text}"
        users = [i for i in self.history if i.is_real_user and not i.text.startswith(prefix + "\n")]
        kept = select_user_messages(users, o.compact_user_message_max_tokens)
        original = {u.item_ids: u.text for u in users}
        summary = self.converter.make(type="message", role="user", text=summary_text, summary=True)
        return Built(
            history=[*kept, summary],
            summary=summary_text,
            summarized_ids=item_ids_of(items),
            details={
                "dropped_for_overflow": dropped,
                "kept_user_ids": item_ids_of(kept),
                "truncated_user_ids": [i for k in kept if k.text != original[k.item_ids] for i in k.item_ids],
            },
        )


class _Remote(_Codex):
    """The remote paths (§3, §4): pre-trim, emulated server, retained messages + compaction item.

    §4.3's retention is carried from one compaction to the next (`RetainedRun`): when the history is
    the one the previous compaction installed, only appended to since, the candidates are that
    run plus those among the appended items, the summarized ids those of the installed history plus
    the appended items', and the new history's messages, estimate and ids are read from the run;
    otherwise everything starts again from the whole history."""

    Options = RemoteOptions
    endpoint = ""

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.run = RetainedRun()
        #: the history of the last compaction built and the ids of its retained messages, until it is installed
        self._built: tuple[list[CodexItem], list[str]] | None = None

    def build(self, phase: str, limits: ContextLimits) -> Built:
        o = self.options
        items = self.prompt.update(self.history, self.base)
        estimate = approx_tokens(self.base) + self.prompt.items_estimate  # `estimate_history(items, base)`
        if estimate > limits.usable and items and items[-1].is_tool_output:
            items = list(items)  # the pre-trim rewrites trailing outputs: not in the prompt view's own list
        trimmed, estimate = pretrim_tool_outputs(items, estimate, limits.usable, o.trimmed_output_text)
        if not items:  # §3.2: empty input → empty result, no request sent
            return Built(history=[], summary=None, summarized_ids=[], details={"endpoint": self.endpoint, "empty_input": True})
        # §3.2 / §4.1: the request is the history itself (v2 adds only the trigger item); the
        # emulated server's instructions reach the summarizer, not the counted request.
        # the items are the prompt view's (but the trimmed outputs at the end), and so are their messages
        messages = self.prompt.messages_trimmed(self.history, self.base, items)
        request = Request(messages, estimate_tokens=estimate, kind="summary")
        try:
            result = self.ctx.summarize(request, instructions=self.ctx.render_prompt(o.summary_template))
        except SummaryOverflow as exc:
            raise CodexCompactionFailed(f"Error running remote compact task: {exc}") from None
        run = self.run
        if run.follows(self.history):
            # `items` begin with the installed history (`for_prompt` and the pre-trim leave items that
            # are no call or output as they are), whose candidates are the retained run
            new = items[run.length :]
            summarized_ids = run.history_ids + item_ids_of(new)
            run.extend(remote_candidates(new, o.max_retained_agent_message_tokens))
        else:
            summarized_ids = item_ids_of(items)
            run.restart(remote_candidates(items, o.max_retained_agent_message_tokens))
        run.forget()  # until the new history is installed
        history = run.retain(o.retained_message_token_budget)
        compaction = self.converter.make(
            type="compaction", text=result.text, encrypted_len=encrypted_length(result.text, o.encrypted_overhead_bytes)
        )
        history.append(compaction)  # the retained messages, then the compaction item
        self._built = history, run.retained_ids
        return Built(
            history=history,
            summary=result.text,
            summarized_ids=summarized_ids,
            details={
                "endpoint": self.endpoint,
                "pretrimmed_output_ids": trimmed,
                "compaction_estimate": compaction.estimate,
            },
        )

    def installed(self, built: Built, history: list[CodexItem]) -> None:
        """The run, its compaction item and the initial context re-injected among them (mid-turn) are the
        new history: the prompt view and the accountant's terms take its messages and estimate from the
        run instead of reading it again, and the next retention carries on from it."""
        run, built_state, self._built = self.run, self._built, None
        if built_state is None or built.history is not built_state[0]:
            return  # nothing retained (empty input): the run follows no history
        built_history, history_ids = built_state
        retained = len(built_history) - 1
        at = initial_context_index(built_history) if history is not built_history else retained
        context = history[at : at + len(history) - len(built_history)]
        if any(i.is_tool or i.is_user_turn_boundary or i.encrypted_reasoning for i in context):
            return  # not a history whose candidates are the run's (never in practice): start again next time
        compaction, start = built_history[-1], run.start
        messages = run.messages[start:]
        estimate = run.estimates[-1] - run.estimates[start] + compaction.estimate
        if context:
            messages[at:at] = [i.message for i in context]
            estimate += sum(i.estimate for i in context)
            split = run.id_starts[start + at] - run.id_starts[start]
            history_ids = [*history_ids[:split], *item_ids_of(context), *history_ids[split:]]
        messages.append(compaction.message)
        self.prompt.adopt(history, self.base, messages, estimate)
        self.terms.adopt(history)
        run.follow(history, [*history_ids, *compaction.item_ids] if compaction.item_ids else history_ids)


class CodexRemoteV1(_Remote):
    """Remote compaction v1, `POST /responses/compact` emulated (§3)."""

    name = "codex-remote-v1"
    description = "Codex /responses/compact emulation: trailing tool-output pre-trim, retained user messages + opaque compaction item"
    spec = f"{SPEC} §1, §3, §4.3, §6"
    endpoint = "/responses/compact"


class CodexRemoteV2(_Remote):
    """Remote compaction v2, `compaction_trigger` on a normal request emulated (§4)."""

    name = "codex-remote-v2"
    description = "Codex compaction trigger: ≤ 64k retained message text + compaction item last"
    spec = f"{SPEC} §1, §4, §6"
    endpoint = "compaction_trigger"


class CodexTokenBudget(_Codex):
    """Token-budget mode (§5): a new window with the initial context and `<context_window>` only."""

    name = "codex-token-budget"
    description = "Codex token-budget mode: new window without summary, only the initial context and a <context_window> section"
    spec = f"{SPEC} §1, §5"
    Options = TokenBudgetOptions
    reinject_initial_context = False

    def __init__(self, ctx, options=None) -> None:
        super().__init__(ctx, options)
        self.reminder_delivered = False
        self.fallback_delivered = False

    def fallback_buffer(self) -> int:
        o = self.options
        return o.auto_compact_fallback_buffer_tokens if o.auto_compact_fallback_prompt else 0

    def window_items(self) -> tuple[CodexItem, CodexItem | None]:
        """The `<context_window>` developer message and the optional guidance fragment (§5.1);
        both bodies sit between their tags on lines of their own, as upstream renders them."""
        o, w = self.options, self.windows
        lines = [
            "<context_window>",
            f"Agent name: {o.agent_name}",
            f"First context window id: {w.first_id}",
            f"Current context window id: {w.current_id}",
        ]
        if w.previous_id:
            lines.append(f"Previous context window id: {w.previous_id}")
        if o.thread_hint:
            lines.append(o.thread_hint)
        lines.append("</context_window>")
        window = self.converter.make(type="message", role="developer", text="\n".join(lines), contextual=True)
        guidance = None
        if o.guidance_message:
            text = f"<context_window_guidance>\n{o.guidance_message}\n</context_window_guidance>"
            guidance = self.converter.make(type="message", role="developer", text=text, contextual=True)
        return window, guidance

    def initial_context_to_inject(self) -> list[CodexItem]:
        return with_window_section(self.initial_context, *self.window_items())

    def before_first_turn(self) -> None:
        context = {id(i) for i in self.initial_context}
        self.history = self.initial_context_to_inject() + [i for i in self.history if id(i) not in context]

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        super().on_response(items, usage, needs_follow_up)
        if any(i.kind == "tool_call" and i.tool_name == "new_context" for i in items):
            self.new_context_requested = True

    def build(self, phase: str, limits: ContextLimits) -> Built:
        """`start_new_context_window` (`session/mod.rs` L3705-3735): the initial context built from the
        turn's current state. Before a turn (ContextLimit) that state is the incoming turn's: its context
        updates are already in the initial context and a `<model_switch>` among them comes first (the
        full render puts the model-switch instructions at the head of the developer bundle, L3606-3614).
        A model-switch compaction builds it with the previous model, so without that message."""
        history = self.initial_context_to_inject()
        if phase == "pre-turn":
            history = [*(u for u in self.incoming if is_model_switch(u)), *history]
        window = next(i for i in history if i.text.startswith("<context_window>"))
        return Built(history=history, summary=None, summarized_ids=[], details={"window_section": window.text})

    def context_updates(self, updates: list[CodexItem]) -> list[CodexItem]:
        """After a rollover before this turn, the new window is the turn's baseline: `replace_compacted_history`
        (`session/mod.rs` L3311-3340) records the turn's context item as the reference and the window's
        world state as the baseline, so the context-update step (L3754-3808) finds nothing changed and
        records nothing; the turn's diffs are not sent a second time. A model-switch rollover built the
        window with the previous model: the model's diff, the `<model_switch>` message, is still recorded
        (`world_state/model.rs` `render_diff`)."""
        if self.rolled_over is None:
            return updates
        return [u for u in updates if is_model_switch(u)] if self.rolled_over == "model-switch" else []

    def on_new_window(self) -> None:
        self.reminder_delivered = False
        self.fallback_delivered = False

    def after_sampling(self, status: TokenStatus) -> None:
        """Reminder once per window at `remaining <= threshold`; fallback prompt once at 0 (§5.3) while the limit is
        not reached. §5.3 says only "no rollover is happening"; upstream, which wins, also withholds the prompt once
        the limit is reached (a final answer past it rolls over at the next turn instead): `allow_auto_compact_fallback
        = !should_roll_over && !token_limit_reached` (openai/codex:codex-rs/core/src/session/turn.rs@3aae5d8 L432),
        read by `maybe_record` (session/token_budget.rs L94). This hook runs only when no rollover happens."""
        o = self.options
        if o.reminder_threshold_tokens is not None and not self.reminder_delivered and status.remaining <= o.reminder_threshold_tokens:
            text = self.ctx.render_prompt(o.reminder_template, n_remaining=status.remaining)
            self.history.append(self.converter.make(type="message", role="developer", text=text, contextual=True))
            self.reminder_delivered = True
        fallback_allowed = not status.limit_reached
        if o.auto_compact_fallback_prompt and fallback_allowed and not self.fallback_delivered and status.remaining == 0:
            self.history.append(
                self.converter.make(type="message", role="developer", text=o.auto_compact_fallback_prompt, contextual=True)
            )
            self.fallback_delivered = True

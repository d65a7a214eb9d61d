"""Aider's chat-history summarisation as the `aider` strategy (docs/specs/aider.md, upstream
`Aider-AI/aider@5dc9490b`).

- §1 two lists: `done` (older history, the only part summarised) and `cur` (since the last edited
  turn); requests are `system, done, cur`. Aider has no tool-call protocol: tool calls are replayed
  as assistant text and tool output as user text, as Aider feeds shell output back (§9), so no
  pair can break. `cur` moves to `done` only after an edited turn (an `aider-output` marker saying
  an edit was applied, or that a reply's SEARCH/REPLACE blocks failed to match, which upstream still
  counts as edited, `FAILED_MATCH`; or, in other formats, a finished turn whose tool calls edited files:
  an edit tool by its name, a to-do list's tool not counting, a call whose arguments run Codex's
  `apply_patch`, or a result that is Codex's edit receipt, `edits_files`); then `summarize_start` runs
  and *then* the commit-message pair is appended (`move_back_cur_messages`); `/clear` and `/reset` (or a prefix Aider runs as one, `/cle`, `/res`)
  empty both lists and leave a pending summary to the next request;
- §3 the limit `min(max(window / 16, 1024), 8192)` (or `max_chat_history_tokens`), `too_big` on the
  per-message token counts of `json.dumps(message)`, with cl100k_base (`LITELLM_ENCODE_ENCODING`); §4 a list (the summary in §5's acceptance test) is
  counted as `litellm.token_counter(messages=...)` counts it, reproduced offline (`messages_token_count`);
- §5 the recursive head/tail split (`min_split` 4, depth > 3, tail strictly under half, head ends
  with an assistant message, head cut to the summariser window − 512 keeping the oldest, `< max`
  acceptance, recursion) and the final `"Ok."`; §6 `summarize_all` (`# USER` / `# ASSISTANT`
  transcript, the summary as a user message with its prefix);
- §2.3/§2.4/§11.3 the two modes: by default **as run** (the snapshot was taken before the pair was
  appended, so the summary is thrown away at the next request and `done` keeps growing; the calls
  are still paid, recorded as `discarded-summary`), and `applied=True`, the behaviour before
  2025-01-20 (the summary replaces `done`, losing the pair appended after the snapshot; a failed
  summary empties `done`).

Neither requests nor compactions report an estimate or a threshold (`Request.threshold`): the limit
applies to the `done` messages alone, never to the whole context whose true count the metrics hold.
A request's meta holds `history_limit` and, while `done` is within it, `done_tokens`; past it,
`done_over_limit`. Past the limit no total is kept: until `done` is replaced or cleared it only
grows, so `too_big` holds at every later check, and the split reads the counts of the messages it
keeps or cuts alone.

On Anthropic's API Aider's requests carry no cache breakpoint unless `cache_prompts` (its `--cache-prompts`, off
by default) is set, and then the system prompt's and one at the end of `done`, where upstream's chat-files mark
follows it (`Aider.cache_marks`): they are billed as read and written accordingly.

§7 the weak model: Aider summarises with it first (`WEAK_MODELS`, or the `weak_model` option). The offline
summarizer stands in for it: the engine sends its summary requests to that model's profile, counted, windowed and
cached as that model's (`Strategy.summary_model`); a summarizer named for the run is used as named. Their dollars
are still the session model's: the metrics price an offline summarizer's call at the run's profile. The split's
head window is the profile's: for the built-in models the weak model's is the same (gpt-5-nano's 272,000 is
gpt-5's, claude-haiku-4-5's 200,000 claude-sonnet-4-5's), and a study window shrinks both. Requests
are views of one append-only log of wire messages (compaction_bench.log_view), and the split reads
only the messages it keeps or cuts, so neither grows with an unbounded `done`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.caching import CacheMarks
from compaction_bench.log_view import LogView
from compaction_bench.profiles import ModelProfile
from compaction_bench.request import Message, Request
from compaction_bench.strategy import TOKEN_COUNT, Range, Strategy, StrategyContext, SummaryOverflow
from compaction_bench.tokens import litellm_messages_tokens, shared_counter
from compaction_bench.transcript import Item, Usage

#: §4 `litellm.encode`'s tokenizer: its default encoding, cl100k_base, for every model it maps to no tokenizer of its
#: own (OpenAI's, GPT-5 included, and Gemini: `litellm.utils._return_openai_tokenizer`, litellm 1.110). Claude 4 and
#: DeepSeek models get bundled Hugging Face tokenizers there, which the offline replay approximates with cl100k_base
#: as their profiles do. `litellm.token_counter` on a list counts with the model's own encoding (the profile's).
LITELLM_ENCODE_ENCODING = "cl100k_base"
#: §6 the summary message prefix, and the commit / no-repo messages of §2.4 (protocol strings).
SUMMARY_PREFIX = "I spoke to you previously about a number of things.\n"
COMMIT_MESSAGE = "I committed the changes with git hash {hash} & commit msg: {message}"
NO_REPO_MESSAGE = "I updated the files."
OK = "Ok."
APPLIED_EDIT = re.compile(r"^Applied edit to ", re.M)
COMMIT_LINE = re.compile(r"^Commit ([0-9a-f]{7,40}) (.+)$", re.M)
#: A reply whose SEARCH/REPLACE blocks parsed but did not all match: `apply_updates` catches `apply_edits`'s
#: `ValueError` and still returns the dry run's paths (`base_coder.py@5dc9490b` L2296-2316, `editblock_coder.py`
#: L38-41, L76, L124), so the turn is an edited one (§1). A parse error (no `failed to match` header) returns none.
FAILED_MATCH = re.compile(r"^The LLM did not conform to the edit format\.\n.*\n(?:\s*\n)*# \d+ SEARCH/REPLACE blocks? failed to match!$", re.M)
#: The failure text's note that the reply's other blocks changed files, which `auto_commit` then commits.
OTHERS_APPLIED = re.compile(r"^# The other \d+ SEARCH/REPLACE blocks? (?:was|were) applied successfully", re.M)
#: `files_content_gpt_no_edits`: `auto_commit`'s message when the edited files hold no change (`base_coder.py@5dc9490b`
#: L2375-2392, `base_prompts.py` L8).
NO_EDITS_MESSAGE = "I didn't see any properly formatted edits in your reply?!"
#: A commit whose hash and message the log does not hold: the partial edits of a failed reply, which the Aider that
#: wrote the corpus (23f89f1d) did not commit then, where the Aider this strategy follows does.
UNLOGGED_COMMIT = COMMIT_MESSAGE.format(hash="0000000", message="(not in the log)")
#: The launch banner's line for a session run outside a git repository (`--no-git`): no commit, `auto_commit` returns
#: nothing and the pair is `files_content_gpt_edits_no_repo`.
NO_GIT_REPO = re.compile(r"^Git repo: none\s*$", re.M)
EDIT_TOOL = re.compile(r"edit|write|apply_patch|str_replace|create_file|insert", re.I)
#: Edit tools whose names the pattern above misses: Gemini CLI's `replace` (`EDIT_TOOL_NAME`,
#: packages/core/src/tools/definitions/base-declarations.ts@5411f113 L65).
EDIT_TOOL_NAMES = frozenset({"replace"})
#: A tool call whose arguments run Codex's `apply_patch` (a here-document or the patch as its argument): Codex CLI
#: 0.34 edits every file as `shell` running `["bash", "-lc", "apply_patch << 'PATCH'\n*** Begin Patch…"]`.
RUNS_APPLY_PATCH = re.compile(r"\bapply_patch\b\W{0,8}(?:<<|\*\*\* Begin Patch)")
#: Codex's `apply_patch` receipt, `Success. Updated the following files:` and one `A|M|D path` line per file
#: (codex-rs/apply-patch/src/lib.rs, `print_summary`; bfloat16/codex@3aae5d88 L876), whichever tool ran it; a line of
#: its own, as bash's here-document warning can come before it.
EDIT_RECEIPT = re.compile(r"^Success\. Updated the following files:\n[AMD] ", re.M)
#: Tools whose names look like an edit's but edit no file: a to-do list (Claude Code's `TodoWrite`, OpenCode's
#: `todowrite`, Gemini CLI's `write_todos`); a turn of only these moves nothing (§1).
NOT_FILE_EDITS = re.compile(r"todo", re.I)
#: Commands that clear the history (`_clear_chat_history`, `commands.py@5dc9490b` L435-443: `/clear`, and `/reset`,
#: which also drops the files), as Aider runs any prefix no other command shares: from `/cle` and from `/res`.
CLEARING_COMMANDS = ("/clear", "/reset")
#: The shortest prefix of each that no other Aider command starts with (`/cl` was `/clipboard` too, `/re` `/report`).
SHORTEST_UNIQUE = 4
#: summary requests kept for reuse (`Aider._summary_request`)
SUMMARY_REQUESTS_KEPT = 8
#: §7 Aider's weak model (`weak_model_name`, `aider/resources/model-settings.yml@5dc9490b`) for the models of the
#: built-in profiles: the summariser tried first (`ChatSummary([weak_model, main_model])`, `base_coder.py` L510-513).
#: `claude-opus-4-5` has no settings entry and the generic ones name none (`models.py` L531-545), so its weak model is
#: the main model (`get_weak_model`, L608-610), as for any model missing here.
WEAK_MODELS = {
    "gpt-5": "gpt-5-nano",  # model-settings.yml L2166-2168
    "claude-sonnet-4-5": "claude-haiku-4-5",  # L1909-1911
}


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str
    item_ids: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class AiderOptions:
    """Upstream defaults (§3, §5); `applied` picks the mode of §11.3."""

    #: False: as run today (summary discarded); True: the pre-2025-01-20 behaviour (summary applied)
    applied: bool = False
    #: --max-chat-history-tokens (None: min(max(window/16, 1024), 8192))
    max_chat_history_tokens: float | None = None
    #: Floor of the default history limit, min(max(window / `window_divisor`, this), `max_history_tokens_cap`) (§3).
    min_history_tokens: int = 1_024
    #: Cap of the default history limit (§3).
    max_history_tokens_cap: int = 8_192
    #: The default history limit starts from the window divided by this (true division), then floor and cap (§3).
    window_divisor: int = field(default=16, metadata={"range": Range(1, what="a divisor")})
    #: Summarize everything in one call when there are at most this many messages, or the head before the tail would
    #: hold at most this many (§5).
    min_split: int = field(default=4, metadata={"range": Range(0, what="a number of messages")})
    #: Past this recursion depth, whatever is left is summarized in one call (§5).
    max_depth: int = field(default=3, metadata={"range": Range(0, what="a recursion depth")})
    #: --weak-model: the model summaries are sent to first (None: Aider's for the profile's model, `WEAK_MODELS`, or,
    #: where it has none, the profile's model); an offline summarizer stands in for it, counted, windowed and cached as
    #: that model (`Aider.summary_model`)
    weak_model: str | None = None
    #: the weak model's max_input_tokens (None: the profile's window)
    summarizer_max_input_tokens: int | None = None
    #: Tokens kept free in the summarizer's input: the head sent holds the oldest messages within its max input minus
    #: this; later head messages are dropped (§5).
    summarizer_head_margin: int = field(default=512, metadata={"range": TOKEN_COUNT})
    #: --cache-prompts (off by default upstream, `args.py`): Anthropic cache breakpoints on Aider's system, repo-map
    #: and chat-file blocks (`ChatChunks.add_cache_control_headers`); a replay marks the system prompt alone
    #: (`Aider.cache_marks`).
    cache_prompts: bool = False


class AiderSummaryFailed(Exception):
    """`ValueError("summarizer unexpectedly failed for all models")`."""


class Aider(Strategy):
    name = "aider"
    description = "Aider: done/cur lists, history limit window/16 (1k-8k), recursive head/tail summary; as run the summary is discarded (applied=true: replaced)"
    spec = "docs/specs/aider.md §1-§6, §11"
    Options = AiderOptions
    sends_inputs_verbatim = True

    @classmethod
    def cache_marks(cls, options: AiderOptions) -> CacheMarks:
        """Aider marks no Anthropic cache breakpoint unless run with `--cache-prompts` (`args.py@5dc9490b` L233-237,
        `base_coder.py` L426-427 and L1333-1337), and then the system prompt (or examples), the repo map (or read-only
        files) and the chat files (`chat_chunks.py` L28-41). The chat-files pair comes right after `done` (order
        L16-26; `get_chat_files_messages` always returns one, `base_coder.py` L789-806), so upstream caches `done`
        too. A replay holds no repo map or chat files: the system prompt's end and `done`'s are marked
        (`CacheMarks.SYSTEM_AND_PREFIX`, each request naming where `done` ends, `Request.cache_prefix_messages`), the
        chat-files pair's mark standing at `done`'s end, where the pair would begin. Its summary calls mark nothing;
        their system prompt is far below every Claude model's minimum cacheable length, so marking it would write
        nothing."""
        return CacheMarks.SYSTEM_AND_PREFIX if options.cache_prompts else CacheMarks.NONE

    @classmethod
    def summary_model(cls, options: AiderOptions, profile: ModelProfile) -> str | None:
        """§7 the weak model, where it is not the profile's: the `weak_model` option, else Aider's (`WEAK_MODELS`)."""
        weak = options.weak_model or WEAK_MODELS.get(profile.model)
        return weak if weak != profile.model else None

    def __init__(self, ctx: StrategyContext, options: Any = None) -> None:
        super().__init__(ctx, options)
        o = self.options
        window = ctx.profile.context_window
        self.max_tokens: float = o.max_chat_history_tokens or min(max(window / o.window_divisor, o.min_history_tokens), o.max_history_tokens_cap)
        self.head_limit = (o.summarizer_max_input_tokens or window) - o.summarizer_head_margin
        self.counter = shared_counter(ctx.profile.tokenizer)
        self.message_counter = shared_counter(LITELLM_ENCODE_ENCODING)
        self.system: list[Message] = []
        self.done: list[ChatMessage] = []
        self.cur: list[ChatMessage] = []
        self.snapshot: list[ChatMessage] | None = None
        self.summarized: list[ChatMessage] = []
        self._turn_edited = False
        #: the session's launch banner said it runs outside a git repository (`NO_GIT_REPO`)
        self._no_repo = False
        #: `sum(token_count(m) for m in done)` while it is at most the limit, kept as `done` changes (§3 `too_big`
        #: on `done` at every edited turn); None once it is over: `done` only grows until it is replaced or
        #: cleared, so `too_big` stays true and the total is not needed (nor counted)
        self._done_tokens: int | None = 0
        #: per-message memos: token counts by (role, content), wire messages by chat message
        self._counts: dict[tuple[str, str], int] = {}
        self._wire: dict[ChatMessage, Message] = {}
        #: `messages()`'s append-only log, and the lists it was built from (system length, `done` and `cur`
        #: with their lengths then)
        self._log: list[Message] = []
        self._log_state: tuple[int, list[ChatMessage] | None, int, list[ChatMessage] | None, int] = (0, None, 0, None, 0)
        #: the summary requests by the identities of the messages they summarise (the same head gives the
        #: same request object)
        self._summary_requests: dict[tuple[int, ...], tuple[Sequence[ChatMessage], Request]] = {}

    # ------------------------------------------------------------ tokens (§4)
    def token_count(self, message: ChatMessage) -> int:
        """The tokens of `json.dumps(message)` (§3, §4) by `litellm.encode`'s tokenizer, counted once per (role, content)."""
        key = (message.role, message.content)
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = self.message_counter.count(json.dumps(message.as_dict()))
        return count

    def messages_token_count(self, messages: Sequence[ChatMessage]) -> int:
        """The tokens of a list of messages (§4; upstream `models.py` L650-656): `litellm.token_counter(model,
        messages)`, that is per-message and reply-primer tokens plus each string's tokens, not the JSON of a
        message. Reproduced with this project's counter (`litellm_messages_tokens`): offline replay never
        calls litellm."""
        return litellm_messages_tokens(self.counter, [m.as_dict() for m in messages])

    # ------------------------------------------------------------ observing (§1)
    def on_user_turn(self, item: Item) -> None:
        text = item.text.strip()
        if clears_history(text):
            before = self.messages()
            # `_clear_chat_history` (`commands.py@5dc9490b L435-437`) empties both lists and nothing else: a
            # summary still pending is resolved at the next request, discarded as run (the snapshot is not the
            # empty `done`) and, with `applied`, put back in place of the cleared history
            self.done, self.cur = [], []
            self._count_done()
            self.ctx.record_compaction(trigger="clear", before=before, after=self.messages(), summary=None, probe=False)
            return
        if text.startswith("/"):
            return  # an in-chat command: not a chat message
        self.cur.append(ChatMessage("user", item.text, (item.id,)))

    def on_input(self, item: Item) -> None:
        if item.kind == "system":
            self.system.append(Message("system", item.text, item_ids=(item.id,)))
        elif item.kind == "user":
            self.cur.append(ChatMessage("user", item.text, (item.id,)))
        elif item.kind == "tool_result":
            self.cur.append(ChatMessage("user", item.text, (item.id,)))
            self._turn_edited = self._turn_edited or bool(EDIT_RECEIPT.search(item.text))

    def on_marker(self, item: Item) -> None:
        if item.meta.get("event") != "aider-output":
            return
        self._no_repo = self._no_repo or bool(NO_GIT_REPO.search(item.text))
        if APPLIED_EDIT.search(item.text):
            commit = COMMIT_LINE.search(item.text)
            message = COMMIT_MESSAGE.format(hash=commit.group(1), message=commit.group(2)) if commit else NO_REPO_MESSAGE
            self.move_back_cur_messages(message)
        elif FAILED_MATCH.search(item.text):
            # the edit-format error Aider sends back (`reflected_message`) comes after the marker: `cur` moves first
            if self._no_repo:
                self.move_back_cur_messages(NO_REPO_MESSAGE)
            else:
                self.move_back_cur_messages(UNLOGGED_COMMIT if OTHERS_APPLIED.search(item.text) else NO_EDITS_MESSAGE)

    def on_response(self, items: Sequence[Item], usage: Usage | None, needs_follow_up: bool) -> None:
        parts, ids = [], []
        for item in items:
            if item.kind == "assistant" and item.text:
                parts.append(item.text)
            elif item.kind == "tool_call":
                parts.append(f"{item.tool_name}({item.arguments or ''})")
                self._turn_edited = self._turn_edited or edits_files(item)
            else:
                continue
            ids.append(item.id)
        if parts:
            self.cur.append(ChatMessage("assistant", "\n".join(parts), tuple(ids)))
        if not needs_follow_up and self._turn_edited:
            self._turn_edited = False
            self.move_back_cur_messages(NO_REPO_MESSAGE)

    # ------------------------------------------------------------ the background summary (§2)
    def move_back_cur_messages(self, message: str) -> None:
        self._extend_done(self.cur)
        self.summarize_start()
        self._extend_done([ChatMessage("user", message), ChatMessage("assistant", OK)])
        self.cur = []

    def _extend_done(self, messages: Sequence[ChatMessage]) -> None:
        self.done.extend(messages)
        if self._done_tokens is not None:
            self._add_done_tokens(sum(self.token_count(m) for m in messages))

    def _count_done(self) -> None:
        """The total of a `done` that was replaced or cleared, counted anew."""
        self._done_tokens = 0
        self._add_done_tokens(sum(self.token_count(m) for m in self.done))

    def _add_done_tokens(self, tokens: int) -> None:
        total = (self._done_tokens or 0) + tokens
        self._done_tokens = None if total > self.max_tokens else total  # too_big(done), strict (§3)

    def summarize_start(self) -> None:
        if self._done_tokens is not None:  # not too_big(done) (§3)
            return
        self.summarize_end()
        self.snapshot = list(self.done)
        try:
            self.summarized = self.summarize(self.snapshot, over_limit=True)
        except AiderSummaryFailed:
            self.summarized = []

    def summarize_end(self) -> None:
        if self.snapshot is None:
            return
        before = self.messages()
        snapshot, summarized = self.snapshot, self.summarized
        self.snapshot, self.summarized = None, []
        same = _same_dicts(snapshot, self.done)
        if not (same or self.options.applied):
            self.ctx.record_compaction(trigger="discarded-summary", before=before, after=before, summary=_text(summarized),
                                       details={"snapshot_messages": len(snapshot), "done_messages": len(self.done)}, probe=False)
            return
        lost = len(self.done) - len(snapshot)  # messages appended after the snapshot (the commit pair)
        self.done = summarized
        self._count_done()
        kept = {i for m in summarized for i in m.item_ids}
        # No estimate and no threshold for the token-accuracy metrics: `too_big` (§3, strict `>`) sums the JSON
        # token counts of `done` alone, taken at the snapshot, while the record's true count is the whole context
        # at this request (system and `cur` besides, and later messages). No whole-context count corresponds to
        # the limit, so a premature verdict on it could be wrong either way; the rule's own numbers go in details.
        self.ctx.record_compaction(
            trigger="threshold", before=before, after=self.messages(), summary=_text(summarized),
            summarized_ids=[i for m in snapshot for i in m.item_ids if i not in kept],
            details={"snapshot_equal": same, "lost_after_snapshot": lost,
                     "done_tokens": sum(self.token_count(m) for m in snapshot), "history_limit": self.max_tokens},
        )

    # ------------------------------------------------------------ the split (§5, §6)
    def summarize(self, messages: Sequence[ChatMessage], *, over_limit: bool = False) -> list[ChatMessage]:
        """§5 `summarize`; `over_limit` when the caller knows the messages are over the limit (their total is
        then not counted)."""
        out = self.summarize_real(list(messages), 0, over_limit=over_limit)
        if out and out[-1].role != "assistant":
            out.append(ChatMessage("assistant", OK))
        return out

    def summarize_real(self, messages: list[ChatMessage], depth: int, *, over_limit: bool = False) -> list[ChatMessage]:
        """§5 the split; token counts are read only for the tail (from the end) and the head (from the
        start, up to the summariser's window), so the work does not grow with a long `done`. The total is
        read only at depth 0 (upstream counts it at every depth, and uses it there alone), and not when
        the caller knows it is over the limit."""
        o = self.options
        if depth == 0 and not over_limit and sum(self.token_count(m) for m in messages) <= self.max_tokens:
            return messages
        if len(messages) <= o.min_split or depth > o.max_depth:
            return self.summarize_all(messages)
        half = self.max_tokens // 2
        tail_tokens, split = 0, len(messages)
        for i in range(len(messages) - 1, -1, -1):
            tokens = self.token_count(messages[i])
            if tail_tokens + tokens < half:
                tail_tokens += tokens
                split = i
            else:
                break
        while messages[split - 1].role != "assistant" and split > 1:
            split -= 1
        if split <= o.min_split:
            return self.summarize_all(messages)
        tail = messages[split:]
        keep, running = [], 0
        for n in range(split):
            running += self.token_count(messages[n])
            if running > self.head_limit:
                break
            keep.append(messages[n])
        summary = self.summarize_all(keep)
        # `self.token_count(summary)` upstream (history.py L90): the summary is a list, counted by
        # litellm.token_counter (§4), not as the JSON of its message like the per-message sizes
        if self.messages_token_count(summary) + sum(self.token_count(m) for m in tail) < self.max_tokens:
            return summary + tail
        return self.summarize_real(summary + tail, depth + 1)

    def summarize_all(self, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        request = self._summary_request(messages)
        for _model in ("weak", "main"):
            try:
                answer = self.ctx.summarize(request).text
            except SummaryOverflow:
                continue
            return [ChatMessage("user", SUMMARY_PREFIX + answer)]
        raise AiderSummaryFailed("summarizer unexpectedly failed for all models")

    def _summary_request(self, messages: Sequence[ChatMessage]) -> Request:
        """§6 the request: the prompt, then the messages as one `# USER` / `# ASSISTANT` transcript. Built
        once per sequence of message objects (kept alive here, so an identity is never reused): as run,
        `done` keeps its oldest messages, and every summary sends the same head."""
        key = tuple(map(id, messages))
        hit = self._summary_requests.get(key)
        if hit is None:
            content = summary_transcript(messages)
            request = Request([Message("system", self.ctx.render_prompt("aider_summarize.j2")), Message("user", content)], kind="summary")
            if len(self._summary_requests) >= SUMMARY_REQUESTS_KEPT:
                self._summary_requests.clear()
            hit = self._summary_requests[key] = (tuple(messages), request)
        return hit[1]

    # ------------------------------------------------------------ requests
    def messages(self) -> LogView:
        """`system, done, cur` (§1), as a view of an append-only log of their wire messages
        (compaction_bench.log_view): appending to `cur`, and moving `cur` to the end of `done`, keep the
        order, so only a `done` that was replaced (a summary applied, `/clear`), a shorter one or a new
        system message start the log anew."""
        done, cur = self.done, self.cur
        system, old_done, done_len, old_cur, cur_len = self._log_state
        new: list[ChatMessage] | None = None
        if len(self.system) == system and done is old_done and len(done) >= done_len:
            if cur is old_cur and len(cur) >= cur_len and len(done) == done_len:
                new = cur[cur_len:]
            elif old_cur is not None and all(a is b for a, b in zip(done[done_len : done_len + cur_len], old_cur[:cur_len], strict=False)) and (
                len(done) >= done_len + cur_len
            ):
                new = [*done[done_len + cur_len :], *cur]  # `cur` moved to `done`, then more appended
        if new is None:
            self._log, new = list(self.system), [*done, *cur]
        self._log.extend(map(self._message, new))
        self._log_state = (len(self.system), done, len(done), cur, len(cur))
        return LogView(self._log, len(self._log))

    def _message(self, message: ChatMessage) -> Message:
        """The wire message of a chat message, built once (every request reuses the same object)."""
        wire = self._wire.get(message)
        if wire is None:
            wire = self._wire[message] = Message(message.role, message.content, item_ids=message.item_ids)
        return wire

    def request(self) -> Request:
        self.summarize_end()
        total = {"done_over_limit": True} if self._done_tokens is None else {"done_tokens": self._done_tokens}
        messages = self.messages()
        system, _, done, _, _ = self._log_state
        # `--cache-prompts`' last mark is on the chat-files pair right after `done` (`cache_marks`): the history's end
        return Request(messages, meta={**total, "history_limit": self.max_tokens}, cache_prefix_messages=system + done)


def clears_history(text: str) -> bool:
    """Whether a user's message is a command that clears the chat history: `/clear` or `/reset`, or a prefix of
    either that Aider runs as it (`CLEARING_COMMANDS`, `SHORTEST_UNIQUE`); its arguments do not matter."""
    word = text.split(maxsplit=1)[0] if text.startswith("/") else ""
    return len(word) >= SHORTEST_UNIQUE and any(command.startswith(word) for command in CLEARING_COMMANDS)


def edits_files(call: Item) -> bool:
    """Whether a tool call edits files (§1 `if edited:`): an edit tool by its name (`EDIT_TOOL`, `EDIT_TOOL_NAMES`;
    a to-do list's tool not counting), or any tool whose arguments run Codex's `apply_patch` (`RUNS_APPLY_PATCH`).
    A tool result that is an edit receipt (`EDIT_RECEIPT`) marks the turn edited too (`Aider.on_input`)."""
    name = call.tool_name or ""
    by_name = bool(EDIT_TOOL.search(name) or name in EDIT_TOOL_NAMES) and not NOT_FILE_EDITS.search(name)
    return by_name or bool(RUNS_APPLY_PATCH.search(call.arguments or ""))


def summary_transcript(messages: Sequence[ChatMessage]) -> str:
    """§6 the `# USER` / `# ASSISTANT` transcript (`history.py@5dc9490b L99-107`). The newline test reads the
    transcript built so far (`if not content.endswith(...)`), not the message: a message with empty content
    ends on its heading's own newline, so no blank line is added after it."""
    return "".join(
        f"# {m.role.upper()}\n{m.content}" + ("" if not m.content or m.content.endswith("\n") else "\n")
        for m in messages if m.role.lower() in ("user", "assistant")
    )


def _same_dicts(a: Sequence[ChatMessage], b: Sequence[ChatMessage]) -> bool:
    """`[m.as_dict() for m in a] == [m.as_dict() for m in b]` without building the dicts."""
    return len(a) == len(b) and all(x is y or (x.role == y.role and x.content == y.content) for x, y in zip(a, b, strict=True))


def _text(messages: Sequence[ChatMessage]) -> str | None:
    return "\n".join(m.content for m in messages) if messages else None

"""Tool call/result pair integrity, checked against each provider's wire rules separately.

A request's messages (`compaction_bench.request.Message`) are laid out as each API would receive them, and
every tool call and tool result is checked against that API's rules. A violation names the wire
format, its kind, the call id and the offending message indices (positions in the request's own
message list, so a report can point at them).

Kinds: ``orphan_call`` (a call no result answers), ``orphan_result`` (a result no call asked for),
``misplaced_result`` (the result exists but not where the format requires it), ``duplicate_id``
(two calls, or two results, with one id), ``misplaced_call`` (Gemini only: a call turn with no user
turn before it). Orphans the recorded session already had (an aborted call that never got a
result, or the calls a recording opens with) are told apart (`recorded_orphans`): replaying them
is not a strategy's fault, and the metrics report them separately.

The formats (docs/specs/evaluation.md §6: "our validator must run on each provider's wire format"):
- ``openai_chat`` (Chat Completions): reasoning has no input form and is not sent; every other
  message is its own wire message. An assistant message with tool calls must be followed directly
  by ``tool`` messages answering each of its ids, and every ``tool`` message must answer a call of
  the assistant message that heads its run of tool messages.
- ``openai_responses`` (Responses): every message, reasoning and compaction is an input item and
  each call is its own ``function_call`` item. A ``function_call_output`` needs a
  ``function_call`` with its id earlier in the input, and every call needs an output; adjacency is
  not required.
- ``anthropic`` (Messages): leading system/developer messages become the top-level ``system``
  parameter; later ones, compaction items and user text are user content; reasoning is a thinking
  block of the assistant turn; tool results are ``tool_result`` blocks of a user turn;
  consecutive turns of one role merge into one. Every ``tool_use`` must be answered in the very
  next turn, with the ``tool_result`` blocks before any text of that turn, and every
  ``tool_result`` must answer a ``tool_use`` of the turn right before it. The layout is that of an
  agent calling the Messages API itself, which has no system role inside ``messages``: a later system
  message is sent where it stands, as user text, so one between a call and its result is a
  ``misplaced_result``. It is not litellm's, which this project's own model calls go through
  (`compaction_bench.wire`): litellm 1.110 moves a system run caught between a call and its results
  behind them (``place_mid_conversation_system``), and earlier versions lifted every system message
  into ``system``; either way such a request would be sent valid. Not checked: with extended thinking
  on, the API refuses a final assistant turn whose ``tool_use`` blocks do not follow a thinking block
  ("Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a
  final `assistant` message must start with a thinking block", anomalyco/opencode#3077): whether
  thinking is on is the agent's request setting, which a request here does not carry, and a strategy
  that drops the current step's reasoning would break it.
- ``gemini`` (Gemini API ``generateContent``): ``contents`` of ``user`` and ``model`` turns, whose
  parts are ``text``, ``functionCall`` and ``functionResponse``. Every system or developer message,
  wherever it stands, goes to ``systemInstruction`` (litellm's ``transform_system_message`` lifts
  them all; gemini-cli has no system turn); assistant text, reasoning (a thought part) and calls
  are the parts of a model turn; user text, compaction items and tool results (``functionResponse``
  parts) of a user turn. Consecutive messages of one role make one turn, because the clients merge
  them before sending: gemini-cli's ``coalesceConsecutiveRoles`` (``packages/core/src/core/
  geminiChat.ts``, added "to prevent 400 Bad Request errors" in ``google-gemini/gemini-cli`` #28407)
  and litellm's ``gemini_convert_messages_with_history``, which joins runs of user/system, of
  assistant and of tool messages. The API itself merges nothing and checks content by content:
  gemini-cli #3333 fixed a client that sent the responses of one parallel step as separate user
  contents, which the API refused with a 400 ("all responses for a single multi-tool-call request
  [must] be bundled in a single user turn"; #28407 fixed the same in the a2a server). The rules,
  each known from the HTTP 400 (``INVALID_ARGUMENT``) that breaking it earns:

  - a turn with ``functionResponse`` parts must come right after a model turn with
    ``functionCall`` parts ("Please ensure that function response turn comes immediately after a
    function call turn", gemini-cli #14183, langchain-ai/langchain #27799);
  - that turn must hold as many responses as the call turn holds calls ("Please ensure that the
    number of function response parts is equal to the number of function call parts of the
    function call turn", gemini-cli #4217 and its many duplicates after interrupted or cancelled
    calls; microsoft/vscode #299295 for calls left without a response);
  - a model turn with calls must come right after a user turn, so ``contents`` cannot open with one
    ("Please ensure that function call turn comes immediately after a user turn or after a function
    response turn", gemini-cli #11814: a history that starts with a function call).

  A response answers the call of the previous turn with its id: ``FunctionCall.id`` is optional
  and, when set, "the client [is] to execute the function_call and return the response with the
  matching id"; ``FunctionResponse.id`` is "populated by the client to match the corresponding
  function call id" (Gemini API reference). litellm sends the ids to Gemini 3 and newer models
  ("for strict tool-call matching", ``VertexGeminiConfig._forward_gemini_function_call_id``) and
  none to older ones, where only the count above can be checked: matching by id is the stricter
  reading, and the one the newer models apply. A call
  without an id is answered by a response without one, by name (``FunctionResponse.name``
  "matches ``FunctionCall.name``"), else in order; gemini-cli's own history repair
  (``utils/historyHardening.ts``) pairs a call with a response of the next turn by id and name.
  The responses must lead their turn: litellm sends user text that precedes them as a content of
  its own, between the call turn and the responses, which breaks the first two rules (text after
  them is a separate content, or merged behind them, and harmless); gemini-cli's repair also puts
  the responses first. Kinds as above, plus ``misplaced_call`` for a call turn that opens
  ``contents``; an extra response for a call already answered is a ``duplicate_id``. Reusing an id
  in a later step is no Gemini error (each step is checked against its own call turn). Thought
  signatures (Gemini 3 wants the first ``functionCall`` of each step of the current turn signed)
  are not checked: a request here carries none, and both clients send Google's documented
  placeholder (``skip_thought_signature_validator``) where a call has none.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from compaction_bench.log_view import first_difference
from compaction_bench.request import Message
from compaction_bench.transcript import Transcript

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini")
KINDS = ("orphan_call", "orphan_result", "misplaced_result", "duplicate_id", "misplaced_call")


@dataclass(frozen=True)
class Violation:
    format: str
    kind: str
    call_id: str
    messages: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"format": self.format, "kind": self.kind, "call_id": self.call_id, "messages": list(self.messages)}


@dataclass(eq=False)
class _Block:
    kind: str  # "call" | "result" | "text"
    message: int  # index into the request's messages
    call_id: str = ""
    name: str = ""  # the tool's name (calls; results where the message names it)


@dataclass
class _Turn:
    role: str
    blocks: list[_Block]


def _blocks(index: int, message: Message) -> list[_Block]:
    blocks: list[_Block] = []
    if message.role == "tool":
        return [_Block("result", index, message.tool_call_id or "", message.name or "")]
    if message.content or not message.tool_calls:
        blocks.append(_Block("text", index))
    blocks.extend(_Block("call", index, c.id, c.name) for c in message.tool_calls)
    return blocks


def _duplicates(fmt: str, turns: Sequence[_Turn]) -> list[Violation]:
    seen: dict[tuple[str, str], list[int]] = defaultdict(list)
    for turn in turns:
        for block in turn.blocks:
            if block.kind in ("call", "result"):
                seen[(block.kind, block.call_id)].append(block.message)
    return [
        Violation(fmt, "duplicate_id", call_id, tuple(indices))
        for (kind, call_id), indices in seen.items()
        if len(indices) > 1
    ]


def _adjacency(fmt: str, turns: Sequence[_Turn], answers: list[set[str]], heads: list[set[str]]) -> list[Violation]:
    """Shared rule of Chat and Anthropic: calls answered right after, results answering right before.

    `answers[k]` are the result ids that count as answering turn k's calls; `heads[k]` the call ids
    a result in turn k may answer.
    """
    results: dict[str, list[int]] = defaultdict(list)
    calls: dict[str, list[int]] = defaultdict(list)
    for turn in turns:
        for block in turn.blocks:
            if block.kind == "result":
                results[block.call_id].append(block.message)
            elif block.kind == "call":
                calls[block.call_id].append(block.message)
    out: list[Violation] = []
    for k, turn in enumerate(turns):
        for block in turn.blocks:
            if block.kind == "call" and block.call_id not in answers[k]:
                if results.get(block.call_id):
                    out.append(Violation(fmt, "misplaced_result", block.call_id, (block.message, results[block.call_id][0])))
                else:
                    out.append(Violation(fmt, "orphan_call", block.call_id, (block.message,)))
            elif block.kind == "result" and block.call_id not in heads[k] and not calls.get(block.call_id):
                out.append(Violation(fmt, "orphan_result", block.call_id, (block.message,)))
    return out


def check_openai_chat(messages: Sequence[Message]) -> list[Violation]:
    turns = [_Turn(m.role, _blocks(i, m)) for i, m in enumerate(messages) if m.role != "reasoning"]
    answers: list[set[str]] = []
    heads: list[set[str]] = []
    head: set[str] = set()
    for k, turn in enumerate(turns):
        run: set[str] = set()
        for later in turns[k + 1 :]:
            if later.role != "tool":
                break
            run.update(b.call_id for b in later.blocks)
        answers.append(run)
        if turn.role != "tool":
            head = {b.call_id for b in turn.blocks if b.kind == "call"} if turn.role == "assistant" else set()
        heads.append(head)
    return _duplicates("openai_chat", turns) + _adjacency("openai_chat", turns, answers, heads)


def check_anthropic(messages: Sequence[Message]) -> list[Violation]:
    turns: list[_Turn] = []
    leading = True
    for i, m in enumerate(messages):
        if leading and m.role in ("system", "developer"):
            continue
        leading = False
        role = "assistant" if m.role in ("assistant", "reasoning") else "user"
        blocks = _blocks(i, m)
        if turns and turns[-1].role == role:
            turns[-1].blocks.extend(blocks)
        else:
            turns.append(_Turn(role, blocks))
    answers: list[set[str]] = []
    heads: list[set[str]] = []
    for k in range(len(turns)):
        following = turns[k + 1].blocks if k + 1 < len(turns) and turns[k + 1].role == "user" else []
        leading_results: set[str] = set()
        for block in following:
            if block.kind != "result":
                break
            leading_results.add(block.call_id)
        answers.append(leading_results)
        previous = turns[k - 1] if k > 0 and turns[k].role == "user" else None
        heads.append({b.call_id for b in previous.blocks if b.kind == "call"} if previous else set())
    return _duplicates("anthropic", turns) + _adjacency("anthropic", turns, answers, heads)


def check_openai_responses(messages: Sequence[Message]) -> list[Violation]:
    items = [_Turn(m.role, _blocks(i, m)) for i, m in enumerate(messages)]
    out = _duplicates("openai_responses", items)
    first_call: dict[str, int] = {}
    first_result: dict[str, int] = {}
    order: list[_Block] = [b for turn in items for b in turn.blocks if b.kind != "text"]
    for block in order:
        target = first_call if block.kind == "call" else first_result
        target.setdefault(block.call_id, block.message)
    seen_calls: set[str] = set()
    for block in order:
        if block.kind == "call":
            seen_calls.add(block.call_id)
            if block.call_id not in first_result:
                out.append(Violation("openai_responses", "orphan_call", block.call_id, (block.message,)))
        elif block.call_id not in seen_calls:
            if block.call_id in first_call:
                out.append(
                    Violation("openai_responses", "misplaced_result", block.call_id, (first_call[block.call_id], block.message))
                )
            else:
                out.append(Violation("openai_responses", "orphan_result", block.call_id, (block.message,)))
    return out


def _gemini_turns(messages: Sequence[Message]) -> list[_Turn]:
    """The request as Gemini ``contents``: system and developer messages left out (they are the
    ``systemInstruction``), consecutive messages of one side merged into one turn."""
    turns: list[_Turn] = []
    for i, m in enumerate(messages):
        role = m.role
        if role in ("system", "developer"):
            continue
        side = "model" if role in ("assistant", "reasoning") else "user"
        blocks = _blocks(i, m)
        if turns and turns[-1].role == side:
            turns[-1].blocks.extend(blocks)
        else:
            turns.append(_Turn(side, blocks))
    return turns


def _answers(call: _Block, responses: list[_Block], claimed: set[int]) -> _Block | None:
    """The first response of `responses` not yet `claimed` (by `id()`) that answers `call`: the same id,
    or, for a call without one, a response without one of the same name (or naming none)."""
    for response in responses:
        if id(response) in claimed:
            continue
        if call.call_id:
            if response.call_id == call.call_id:
                return response
        elif not response.call_id and (not response.name or response.name == call.name):
            return response
    return None


def check_gemini(messages: Sequence[Message]) -> list[Violation]:
    """The Gemini rules (module docstring): each call turn answered by the responses that open the
    next turn, one each; every other response a violation; no call turn first."""
    turns = _gemini_turns(messages)
    claimed: set[int] = set()  # id() of the responses that answer a call of the turn before theirs
    unanswered: list[_Block] = []
    call_ids: set[str] = set()
    out: list[Violation] = []
    for k, turn in enumerate(turns):
        if turn.role != "model":
            continue
        calls = [b for b in turn.blocks if b.kind == "call"]
        if not calls:
            continue
        if k == 0:  # nothing before the call turn: contents open with it
            out.extend(Violation("gemini", "misplaced_call", c.call_id, (c.message,)) for c in calls)
        leading: list[_Block] = []
        if k + 1 < len(turns):
            for block in turns[k + 1].blocks:
                if block.kind != "result":
                    break
                leading.append(block)
        for c in calls:
            call_ids.add(c.call_id)
            response = _answers(c, leading, claimed)
            if response is None:
                unanswered.append(c)
            else:
                claimed.add(id(response))
    stray: dict[str, list[_Block]] = defaultdict(list)  # by id, the responses that answer no call
    loose: list[_Block] = []
    for turn in turns:
        for block in turn.blocks:
            if block.kind == "result" and id(block) not in claimed:
                loose.append(block)
                if block.call_id:
                    stray[block.call_id].append(block)
    if not unanswered and not loose:
        return out
    explained: set[int] = set()
    for c in unanswered:
        elsewhere = stray.get(c.call_id) if c.call_id else None
        if elsewhere:
            response = elsewhere.pop(0)
            explained.add(id(response))
            out.append(Violation("gemini", "misplaced_result", c.call_id, (c.message, response.message)))
        else:
            out.append(Violation("gemini", "orphan_call", c.call_id, (c.message,)))
    extra: set[str] = set()
    for response in loose:
        if id(response) in explained:
            continue
        if response.call_id and response.call_id in call_ids:
            extra.add(response.call_id)
        else:
            out.append(Violation("gemini", "orphan_result", response.call_id, (response.message,)))
    if extra:
        # the call was answered (or is reported above): one more response for its id is one too many
        every: dict[str, list[int]] = defaultdict(list)
        for turn in turns:
            for block in turn.blocks:
                if block.kind == "result" and block.call_id in extra:
                    every[block.call_id].append(block.message)
        out.extend(Violation("gemini", "duplicate_id", call_id, tuple(every[call_id])) for call_id in extra)
    return out


CHECKS = {
    "openai_chat": check_openai_chat,
    "openai_responses": check_openai_responses,
    "anthropic": check_anthropic,
    "gemini": check_gemini,
}


class _Pairing:
    """The state of `unanswered_calls`'s pass after a request's first `position` messages."""

    __slots__ = ("opened", "pending", "position", "seen", "unanswered", "valid")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.pending: dict[str, int] = {}  # the calls of the last assistant message not answered yet, by id
        self.unanswered: list[tuple[str, int]] = []
        self.opened = False
        self.position = 0
        self.valid = True  # False once the layout left the fast path: so does every request that extends it

    def read(self, messages: Sequence[Message]) -> None:
        """Go on over `messages[self.position:]`."""
        seen, pending, unanswered, opened = self.seen, self.pending, self.unanswered, self.opened
        for index, m in enumerate(itertools.islice(messages, self.position, None), self.position):
            if m.role == "tool":
                if pending.pop(m.tool_call_id or "", None) is None:
                    self.valid = False
                    return
                continue
            if pending:
                unanswered.extend(pending.items())
                pending.clear()
            if m.tool_calls:
                ids = {c.id for c in m.tool_calls}
                # a call without an id is matched by name under Gemini's rules: left to the full checks
                if not opened or m.role != "assistant" or len(ids) != len(m.tool_calls) or not seen.isdisjoint(ids) or "" in ids:
                    self.valid = False
                    return
                seen |= ids
                pending.update((c.id, index) for c in m.tool_calls)
            elif m.role in ("user", "compaction"):
                opened = True
        self.opened, self.position = opened, len(messages)

    def result(self) -> list[tuple[str, int]] | None:
        return [*self.unanswered, *self.pending.items()] if self.valid else None


def unanswered_calls(messages: Sequence[Message]) -> list[tuple[str, int]] | None:
    """The calls no result answers, as (call id, message index), in a layout every format reads alike,
    else None (left to the full checks). The layout: each assistant's calls (unique, non-empty ids)
    answered by tool messages right after it, or by none at all; no other tool message; a user or
    compaction message before the first call (Gemini refuses ``contents`` that open with a call turn).
    There a call without a result has its id nowhere else in the request, and every format reports
    it as one ``orphan_call`` and nothing more; a request without one (most requests) is valid
    everywhere. One cheap pass, where the full checks cost about 20 times as much: an aborted call
    the recording already had (a session's first Ctrl-C) would otherwise send every later request
    of its session to them."""
    pairing = _Pairing()
    pairing.read(messages)
    return pairing.result()


def _violations(messages: Sequence[Message], unanswered: list[tuple[str, int]] | None) -> dict[str, list[Violation]]:
    if unanswered is None:
        return {fmt: CHECKS[fmt](messages) for fmt in FORMATS}
    return {fmt: [Violation(fmt, "orphan_call", call_id, (index,)) for call_id, index in unanswered] for fmt in FORMATS}


def check(messages: Sequence[Message]) -> dict[str, list[Violation]]:
    """Violations of one request under every wire format."""
    return _violations(messages, unanswered_calls(messages))


class RequestChecks:
    """`check` for a cell's requests in order: a request that extends the one before (same leading
    messages, `first_difference`) resumes `unanswered_calls`'s pass where that one ended, so a
    session whose context only grows is read once, not once per request."""

    def __init__(self) -> None:
        self._messages: Sequence[Message] = ()
        self._pairing = _Pairing()

    def check(self, messages: Sequence[Message]) -> dict[str, list[Violation]]:
        previous = self._messages
        if not (len(previous) <= len(messages) and first_difference(previous, messages) == len(previous)):
            self._pairing = _Pairing()
        self._messages = messages
        if self._pairing.valid:
            self._pairing.read(messages)
        return _violations(messages, self._pairing.result())


ANY_KIND = "*"


def recorded_orphans(transcript: Transcript) -> set[tuple[str, str]]:
    """(kind, call id) of the pairing faults the recorded session itself has: a strategy that
    replays them did not cause them. Orphans (an aborted call, say) are matched by kind; a call id
    the recording used for several calls or results is inherited for every kind (`ANY_KIND`); the
    calls of a recording that opens with a model response holding calls (a subagent's log without
    its prompt) are Gemini's ``misplaced_call`` wherever a request still opens with them."""
    opening: set[tuple[str, str]] = set()
    for item in transcript.items:
        if item.kind in ("system", "marker"):
            continue
        if not item.is_model_output:
            break
        if item.kind == "tool_call":
            opening.add(("misplaced_call", item.call_id or ""))
    orphans = transcript.orphans()
    by_id = transcript.by_id
    calls = {("orphan_call", by_id[i].call_id or "") for i in orphans["calls_without_result"]}
    results = {("orphan_result", by_id[i].call_id or "") for i in orphans["results_without_call"]}
    seen: dict[tuple[str, str], int] = {}
    for item in transcript.items:
        if item.kind in ("tool_call", "tool_result") and item.call_id:
            seen[(item.kind, item.call_id)] = seen.get((item.kind, item.call_id), 0) + 1
    reused = {(ANY_KIND, call_id) for (_, call_id), n in seen.items() if n > 1}
    return calls | results | reused | opening

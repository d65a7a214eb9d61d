"""Tool call/result pair integrity, checked against each provider's wire rules separately.

A request's messages (`compaction_bench.request.Message`) are laid out as each API would receive them, and
every tool call and tool result is checked against that API's rules. A violation names the wire
format, its kind, the call id and the offending message indices (positions in the request's own
message list, so a report can point at them).

Kinds: ``orphan_call`` (a call no result answers), ``orphan_result`` (a result no call asked for),
``misplaced_result`` (the result exists but not where the format requires it), ``duplicate_id``
(two calls, or two results, with one id). Orphans the recorded session already had (an aborted
call that never got a result) are told apart (`recorded_orphans`): replaying them is not a
strategy's fault, and the metrics report them separately.

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
  ``tool_result`` must answer a ``tool_use`` of the turn right before it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from compaction_bench.request import Message
from compaction_bench.transcript import Transcript

FORMATS = ("openai_chat", "openai_responses", "anthropic")
KINDS = ("orphan_call", "orphan_result", "misplaced_result", "duplicate_id")


@dataclass(frozen=True)
class Violation:
    format: str
    kind: str
    call_id: str
    messages: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"format": self.format, "kind": self.kind, "call_id": self.call_id, "messages": list(self.messages)}


@dataclass
class _Block:
    kind: str  # "call" | "result" | "text"
    message: int  # index into the request's messages
    call_id: str = ""


@dataclass
class _Turn:
    role: str
    blocks: list[_Block]


def _blocks(index: int, message: Message) -> list[_Block]:
    blocks: list[_Block] = []
    if message.role == "tool":
        return [_Block("result", index, message.tool_call_id or "")]
    if message.content or not message.tool_calls:
        blocks.append(_Block("text", index))
    blocks.extend(_Block("call", index, c.id) for c in message.tool_calls)
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


CHECKS = {"openai_chat": check_openai_chat, "openai_responses": check_openai_responses, "anthropic": check_anthropic}


def strictly_paired(messages: Sequence[Message]) -> bool:
    """The layout every format accepts: each assistant's calls (unique ids) answered by the tool
    messages right after it, and no other tool message. One cheap pass; most requests are like this."""
    seen: set[str] = set()
    pending: set[str] | None = None
    for m in messages:
        if m.role == "tool":
            if pending is None or m.tool_call_id not in pending:
                return False
            pending.discard(m.tool_call_id)
            continue
        if pending:
            return False
        pending = None
        if m.tool_calls:
            ids = {c.id for c in m.tool_calls}
            if m.role != "assistant" or len(ids) != len(m.tool_calls) or not seen.isdisjoint(ids):
                return False
            seen |= ids
            pending = set(ids)
    return not pending


def check(messages: Sequence[Message]) -> dict[str, list[Violation]]:
    """Violations of one request under every wire format."""
    if strictly_paired(messages):
        return {fmt: [] for fmt in FORMATS}
    return {fmt: CHECKS[fmt](messages) for fmt in FORMATS}


ANY_KIND = "*"


def recorded_orphans(transcript: Transcript) -> set[tuple[str, str]]:
    """(kind, call id) of the pairing faults the recorded session itself has: a strategy that
    replays them did not cause them. Orphans (an aborted call, say) are matched by kind; a call id
    the recording used for several calls or results is inherited for every kind (`ANY_KIND`)."""
    orphans = transcript.orphans()
    by_id = transcript.by_id
    calls = {("orphan_call", by_id[i].call_id or "") for i in orphans["calls_without_result"]}
    results = {("orphan_result", by_id[i].call_id or "") for i in orphans["results_without_call"]}
    seen: dict[tuple[str, str], int] = {}
    for item in transcript.items:
        if item.kind in ("tool_call", "tool_result") and item.call_id:
            seen[(item.kind, item.call_id)] = seen.get((item.kind, item.call_id), 0) + 1
    reused = {(ANY_KIND, call_id) for (_, call_id), n in seen.items() if n > 1}
    return calls | results | reused

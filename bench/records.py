"""Replay records: what one cell's replay produced, as plain data.

`RequestRecord` is one request (turn, summary or final) with its messages, the simulated
provider's numbers (true tokens, overflow, cached / written / re-billed tokens), which usage the
strategy was fed (`usage_source`), and for a summary request the summarizer call it led to
(`llm_call`). `CompactionRecord` is one installed compaction, reported by the strategy or found by
the engine (`trigger="unreported"`), with the ids summarized, kept (`KeptIds`, read from its context
when asked) and dropped and the indices of its summary requests (`summary_request_indices[i]` led
to `llm_calls[i]`). A request's messages and a compaction's context before and after are tuples or
`LogView`s (compaction_bench.log_view), which store only what they do not share. `ProbePoint` is a
context at which probes are asked; `ReplayResult` holds them all. The engine
(`compaction_bench.replay`) fills them; metrics and the run store read them.

`to_rows` / `from_rows` turn one replay's records into plain rows and back, so a run folder can
keep them (`compaction_bench.store`) and `bench score` can measure again without replaying:
`messages` holds each distinct message once, `requests` one row per request with its messages as
`shared` (how many leading messages it shares with the request before it) and `messages` (the
references of the rest), and its summarizer call, `replay` the compactions (without their
before/after messages, which no metric reads; each of their id lists as `{"shared": n, "ids": rest}`,
the leading ids it shares with the compaction before it and the rest, `COMPACTION_ID_LISTS`), the probe
points and the cell's settings. Stored
whole, each request's context made the records quadratic in a session's length wherever contexts
only grow (`none` on the 4M-token session: 67 M references, 1.8 GB); stored by difference they are
as long as what the requests add, and `from_rows` rebuilds them as `LogView`s of shared logs. Rows
written before `shared` existed (each request's references whole, with its `item_ids`) read as
sharing nothing. The compactions' ids likewise: where a strategy compacts before nearly every request and each
summary covers the one before it (Codex's remote pair on the 4M-token session: 795 compactions, 4.6 M ids
whole, 27 k by difference), whole lists made the records quadratic; a list stored whole (before the
fifty-third pass) reads as sharing nothing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction_bench.llm import LLMResult
from compaction_bench.log_view import LogView, common_prefix_length, first_difference, iter_from
from compaction_bench.profiles import ModelProfile, get_profile
from compaction_bench.provider import AGENT_REFUSAL
from compaction_bench.request import Message, ToolCall, message_item_ids
from compaction_bench.transcript import Attachment, Transcript, Usage

#: Request kinds the provider accepts and bills (a final context is only probed, never sent).
SENT_KINDS = ("turn", "summary")
#: The trigger of a compaction the engine found but the strategy did not report.
UNREPORTED = "unreported"


@dataclass
class RequestRecord:
    index: int
    step: int
    turn: int | None
    kind: str
    #: a tuple, or the `LogView` of a shared log the strategy sent (compaction_bench.log_view)
    messages: Sequence[Message]
    true_tokens: int
    estimate_tokens: int | None
    threshold: int | None
    overflow: bool
    error: dict[str, Any] | None
    prefix_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    attempt: int = 0
    timestamp: str | None = None
    usage: Usage | None = None
    #: the strategy's own notes on this request (`Request.meta`)
    meta: dict[str, Any] = field(default_factory=dict)
    #: uncached tokens of messages the cell had already sent in a still-cached request
    rebilled_tokens: int = 0
    #: "recorded" or "simulated" for an accepted turn or summary request, else None
    usage_source: str | None = None
    #: the summarizer call this summary request led to (None for other requests and overflows)
    llm_call: LLMResult | None = None

    @property
    def n_messages(self) -> int:
        return len(self.messages)

    @property
    def sent(self) -> bool:
        """A request the provider accepted and billed."""
        return self.kind in SENT_KINDS and not self.overflow

    @property
    def refused(self) -> bool:
        """A request the agent itself did not send (`StrategyContext.refuse_request`): it reached no model, as an
        overflowed one did (`overflow` is True), without the provider refusing it."""
        return self.error is not None and self.error.get("provider") == AGENT_REFUSAL

    def item_ids(self) -> list[str]:
        return list(message_item_ids(self.messages))


class KeptIds(Sequence[str]):
    """A compaction's kept ids, read from its context before it when asked: the item ids of `before`,
    in order and each once, except the removed ones. Not stored, so a rewrite recorded at every step
    (masking) holds no copy of the whole context's ids; equal to the tuple of those ids."""

    __slots__ = ("_before", "_removed")

    def __init__(self, before: Sequence[Message], removed: Collection[str]) -> None:
        self._before, self._removed = before, removed

    def _ids(self) -> tuple[str, ...]:
        removed = self._removed
        return tuple(dict.fromkeys(i for m in self._before for i in m.item_ids if i not in removed))

    def __len__(self) -> int:
        return len(self._ids())

    def __getitem__(self, index: Any) -> Any:
        return self._ids()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeptIds):
            return self._ids() == other._ids()
        return self._ids() == other if isinstance(other, tuple) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._ids())

    def __reduce__(self) -> tuple[type[tuple[str, ...]], tuple[tuple[str, ...]]]:
        """Pickled as the tuple it equals (a cell's rows sent from a worker): not its context."""
        return tuple, (self._ids(),)


@dataclass
class CompactionRecord:
    index: int
    step: int
    turn: int | None
    trigger: str
    tokens_before: int
    tokens_after: int
    estimate_tokens: int | None
    threshold: int | None
    summary: str | None
    summarized_ids: tuple[str, ...]
    kept_ids: Sequence[str]
    dropped_ids: tuple[str, ...]
    llm_calls: tuple[LLMResult, ...]
    details: dict[str, Any] = field(default_factory=dict)
    before: Sequence[Message] = ()
    after: Sequence[Message] = ()
    next_request: int | None = None
    probed: bool = True
    #: the summary request each of `llm_calls` answered (same order and length)
    summary_request_indices: tuple[int, ...] = ()

    @property
    def llm_input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.llm_calls)

    @property
    def llm_output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.llm_calls)


@dataclass
class ProbePoint:
    """A context at which probes are asked: after a compaction, or the final context."""

    step: int
    request: int
    reason: str  # "compaction" | "final"
    compaction: int | None = None


@dataclass
class ReplayResult:
    transcript: Transcript
    strategy: str
    profile: ModelProfile
    options: Any
    usage_mode: str
    requests: list[RequestRecord] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    points: list[ProbePoint] = field(default_factory=list)
    template_hashes: dict[str, str] = field(default_factory=dict)
    #: whether the model read the requests without earlier turns' thinking (the engine's `_strips_thinking`): the
    #: probes read them so too (`compaction_bench.metrics.retention`)
    drops_thinking: bool = False
    #: the profile of the model the summary requests went to when it is not the session's (`replay.summary_profile`: a
    #: summarizer of another model, or the offline one standing in for the model the agent summarizes with, Aider's
    #: weak model); an offline summarizer's requests are counted and priced by it (`metrics/measure.py`)
    summary_profile: ModelProfile | None = None
    #: the steps whose response was recorded before any message it answers: history, no request (`compaction_bench.replay`)
    unrequested_steps: list[int] = field(default_factory=list)

    @property
    def turn_requests(self) -> list[RequestRecord]:
        return [r for r in self.requests if r.kind == "turn"]

    @property
    def final(self) -> RequestRecord:
        return next(r for r in reversed(self.requests) if r.kind == "final")

    @property
    def overflows(self) -> int:
        """Turn requests the provider refused as too long (not those the agent refused itself)."""
        return sum(1 for r in self.requests if r.overflow and not r.refused and r.kind == "turn")


# ---------------------------------------------------------------------------- rows
#: Plain fields of a request record, stored as they are.
REQUEST_FIELDS = (
    "index", "step", "turn", "kind", "true_tokens", "estimate_tokens", "threshold", "overflow", "prefix_tokens",
    "cached_tokens", "cache_write_tokens", "output_tokens", "attempt", "timestamp", "rebilled_tokens", "usage_source",
)
#: Plain fields of a compaction record, stored as they are.
COMPACTION_FIELDS = (
    "index", "step", "turn", "trigger", "tokens_before", "tokens_after", "estimate_tokens", "threshold", "summary",
    "next_request", "probed",
)


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return "[]" if value == [] else json.dumps(value, sort_keys=True, default=str)  # most messages have no calls and no attachments


#: A compaction's id lists, each stored by difference with the compaction before it (`_ids_by_difference`).
COMPACTION_ID_LISTS = ("summarized_ids", "kept_ids", "dropped_ids")


def id_list(ids: Sequence[str]) -> list[str]:
    """A compaction's ids as a list, read once: `list()` asks a `KeptIds` for its length first, which
    reads its context as iterating does."""
    return list(iter(ids))


def _ids_by_difference(compactions: Sequence[CompactionRecord], name: str) -> Iterator[dict[str, Any]]:
    """Each compaction's id list `name` as `{"shared": n, "ids": rest}`: how many leading ids it shares with the
    list of the compaction before it, and the ids after those."""
    previous: list[str] = []
    for compaction in compactions:
        ids = id_list(getattr(compaction, name))
        shared = common_prefix_length(previous, ids)
        yield {"shared": shared, "ids": ids[shared:]}
        previous = ids


def _ids_from_difference(stored: list[str] | dict[str, Any], previous: tuple[str, ...]) -> tuple[str, ...]:
    """The ids `_ids_by_difference` stored, given the list of the compaction before (a list stored whole, as
    versions before the fifty-third pass wrote, is read as it is)."""
    if isinstance(stored, dict):
        shared = stored["shared"]
        if not isinstance(shared, int) or not 0 <= shared <= len(previous):
            raise ValueError(f"a compaction's ids share {shared!r} leading ids with the {len(previous)} of the compaction before it")
        return previous[:shared] + tuple(stored["ids"])
    return tuple(stored)


def _message_row(message: Message) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": message.content,
        "tool_calls": _json([c.to_dict() for c in message.tool_calls]),
        "tool_call_id": message.tool_call_id,
        "item_ids": list(message.item_ids),
        "attachments": _json([dataclasses.asdict(a) for a in message.attachments]),
        "name": message.name,
        "is_error": message.is_error,
    }


def _message(row: dict[str, Any]) -> Message:
    return Message(
        role=row["role"],
        content=row["content"],
        tool_calls=tuple(ToolCall(**c) for c in json.loads(row["tool_calls"] or "[]")),
        tool_call_id=row["tool_call_id"],
        item_ids=tuple(row["item_ids"] or ()),
        attachments=tuple(Attachment(**a) for a in json.loads(row["attachments"] or "[]")),
        name=row["name"],
        is_error=bool(row["is_error"]),
    )


def _options(options: Any) -> Any:
    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) and not isinstance(options, type) else options


def to_rows(result: ReplayResult) -> dict[str, Any]:
    """One replay's records as `{"messages": rows, "requests": rows, "replay": dict}` (module docstring)."""
    refs: dict[Message, int] = {}
    messages: list[dict[str, Any]] = []

    def ref(message: Message) -> int:
        n = refs.get(message)
        if n is None:
            n = refs[message] = len(messages)
            messages.append(_message_row(message))
        return n

    previous: Sequence[Message] = ()

    def difference(request: Sequence[Message]) -> dict[str, Any]:
        """A request's messages as the number it shares with the request before it (`first_difference`)
        and the rows of the rest (equal messages have one row)."""
        nonlocal previous
        shared = first_difference(previous, request)
        previous = request
        return {"shared": shared, "messages": [ref(m) for m in iter_from(request, shared)]}

    requests = [
        {
            **{name: getattr(r, name) for name in REQUEST_FIELDS},
            **difference(r.messages),
            "error": _json(r.error),
            "usage": _json(r.usage.to_dict() if r.usage is not None else None),
            "meta": _json(r.meta),
            "llm_call": _json(r.llm_call.to_dict() if r.llm_call is not None else None),
        }
        for r in result.requests
    ]
    replay = {
        "strategy": result.strategy,
        "profile": result.profile.name,
        "usage_mode": result.usage_mode,
        "options": _options(result.options),
        "template_hashes": dict(result.template_hashes),
        "drops_thinking": result.drops_thinking,
        "summary_profile": result.summary_profile.name if result.summary_profile is not None else None,
        "unrequested_steps": list(result.unrequested_steps),
        "compactions": [
            {
                **{name: getattr(c, name) for name in COMPACTION_FIELDS},
                **dict(zip(COMPACTION_ID_LISTS, ids, strict=True)),
                "llm_calls": [call.to_dict() for call in c.llm_calls],
                "summary_request_indices": list(c.summary_request_indices),
                "details": json.loads(_json(c.details) or "{}"),
            }
            for c, *ids in zip(result.compactions, *(_ids_by_difference(result.compactions, name) for name in COMPACTION_ID_LISTS), strict=True)
        ],
        "points": [dataclasses.asdict(p) for p in result.points],
    }
    return {"messages": messages, "requests": requests, "replay": replay}


def _next_context(previous: LogView, shared: int, new: list[Message]) -> LogView:
    """The request whose first `shared` messages are `previous`'s and the rest `new`, sharing their storage: a
    request that extends its log's end appends to that log; one that keeps part of the log and adds others holds
    those as its tail; one that keeps part of the previous request's tail starts a new log with it."""
    log, length = previous.log, previous.length
    if shared <= length:
        if shared == len(log):
            log.extend(new)
            return LogView(log, len(log))
        return LogView(log, shared, tuple(new))
    kept = previous.tail[: shared - length]
    if length == len(log):
        log.extend(kept)
        log.extend(new)
        return LogView(log, len(log))
    fresh = [*log[:length], *kept, *new]
    return LogView(fresh, len(fresh))


def from_rows(
    transcript: Transcript, profile: ModelProfile, messages: list[dict[str, Any]], requests: list[dict[str, Any]], replay: dict[str, Any]
) -> ReplayResult:
    """The `ReplayResult` that `to_rows` stored (compactions without their before/after messages)."""
    built = [_message(row) for row in messages]
    result = ReplayResult(transcript, replay["strategy"], profile, replay.get("options"), replay["usage_mode"])
    context = LogView([], 0)
    for row in requests:
        context = _next_context(context, row.get("shared") or 0, [built[n] for n in row["messages"]])
        usage = json.loads(row["usage"]) if row["usage"] else None
        call = json.loads(row["llm_call"]) if row["llm_call"] else None
        result.requests.append(
            RequestRecord(
                **{name: row[name] for name in REQUEST_FIELDS},
                messages=context,
                error=json.loads(row["error"]) if row["error"] else None,
                usage=Usage.from_dict(usage) if usage is not None else None,
                meta=json.loads(row["meta"] or "{}"),
                llm_call=LLMResult.from_dict(call) if call is not None else None,
            )
        )
    ids: dict[str, tuple[str, ...]] = dict.fromkeys(COMPACTION_ID_LISTS, ())
    for data in replay["compactions"]:
        ids = {name: _ids_from_difference(data[name], ids[name]) for name in COMPACTION_ID_LISTS}
        result.compactions.append(
            CompactionRecord(
                **{name: data[name] for name in COMPACTION_FIELDS},
                summarized_ids=ids["summarized_ids"],
                kept_ids=ids["kept_ids"],
                dropped_ids=ids["dropped_ids"],
                llm_calls=tuple(LLMResult.from_dict(call) for call in data["llm_calls"]),
                summary_request_indices=tuple(data["summary_request_indices"]),
                details=data["details"],
            )
        )
    result.points = [ProbePoint(**p) for p in replay["points"]]
    result.template_hashes = dict(replay.get("template_hashes", {}))
    result.drops_thinking = bool(replay.get("drops_thinking", False))  # replayed before it was modelled: none dropped
    # replayed before it was recorded: the summaries were priced as the session's model's; the session's own profile
    # where it stood in (a summarizer model the map lacks), which may be one no name finds (a profile built in Python)
    named = replay.get("summary_profile")
    result.summary_profile = None if not named else profile if named == profile.name else get_profile(named)
    result.unrequested_steps = [int(step) for step in replay.get("unrequested_steps") or ()]
    return result

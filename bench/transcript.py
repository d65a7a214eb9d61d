"""The canonical transcript: immutable `Transcript` and `Item`, and their JSONL file format.

Every importer produces a `Transcript`; every strategy consumes its items (DESIGN §2). The module
also owns the helpers every strategy needs: turns, model responses (replay steps), tool call and
result lookup (which call a result answers when a call id is reused: `answered_call`, which the probe
miner follows too), the distinction between real and synthetic user messages, and reading an item's
recorded time (`parse_timestamp`).

Canonical file: JSONL, first line the header ``{"format": "compaction-bench/transcript",
"version": 1, ...}``, then one item per line. `dumps`/`loads` round-trip losslessly. Reading checks every
field's type (`HEADER_FIELDS`, `ITEM_FIELDS`, `ATTACHMENT_FIELDS`, usage counts) and refuses a wrong one naming
the line and the field, so a hand-written file never reaches a strategy with, say, a number for a text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError, json_problem

FORMAT_NAME = "compaction-bench/transcript"
FORMAT_VERSION = 1

KINDS = ("system", "user", "assistant", "reasoning", "tool_call", "tool_result", "marker")
MODEL_OUTPUT_KINDS = frozenset({"assistant", "reasoning", "tool_call"})
#: The kinds of the messages a session gives the model besides its own outputs (a marker is no message).
INPUT_KINDS = frozenset({"system", "user", "tool_result"})



class FrozenMap(dict):
    """A read-only dict: JSON-serializable and picklable (unlike `types.MappingProxyType`)."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("transcript data is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenMap, (dict(self),))

    def __copy__(self) -> FrozenMap:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenMap:
        return self


_EMPTY: Mapping[str, Any] = FrozenMap()

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_timestamp(value: str | None) -> datetime | None:
    """A recorded ISO-8601 time (`Z` for UTC, as the formats write it) as a datetime; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def may_hold_surrogates(json_text: str) -> bool:
    """Cheap test before `scrub_surrogates`: JSON text with a `\\uD800`–`\\uDFFF` escape."""
    return _SURROGATE_ESCAPE.search(json_text) is not None


def scrub_surrogates(value: Any) -> tuple[Any, int]:
    """`value` with every lone UTF-16 surrogate (JSON `"\\udc80"`, not encodable as UTF-8) replaced by
    U+FFFD, and how many strings changed. Valid surrogate pairs are already one code point in Python."""
    if isinstance(value, str):
        fixed, count = _SURROGATE.subn("\ufffd", value)
        return fixed, int(count > 0)
    if isinstance(value, dict):
        changed = 0
        out: dict[Any, Any] = {}
        for key, item in value.items():
            new_key, n_key = scrub_surrogates(key)
            out[new_key], n_item = scrub_surrogates(item)
            changed += n_key + n_item
        return (out, changed) if changed else (value, 0)
    if isinstance(value, list):
        pairs = [scrub_surrogates(v) for v in value]
        changed = sum(n for _, n in pairs)
        return ([v for v, _ in pairs], changed) if changed else (value, 0)
    return value, 0


class TranscriptError(BenchError, ValueError):
    """A transcript (file or object) that cannot be used; the message names the place."""


def json_type(value: Any) -> str:
    """The JSON type of a parsed value, as messages name it: null, bool, int, float, string, list, object."""
    if value is None:
        return "null"
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"), (Mapping, "object"), ((list, tuple), "list")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_optional_text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_optional_index(value: Any) -> bool:
    return value is None or _is_whole(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _is_object(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_optional_object(value: Any) -> bool:
    return value is None or isinstance(value, Mapping)


#: What each field of a canonical item line may hold (a test, and the words a refusal uses).
ITEM_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "id": (_is_text, "a string"),
    "kind": (_is_text, "a string"),
    "text": (_is_text, "a string"),
    "call_id": (_is_optional_text, "a string or null"),
    "tool_name": (_is_optional_text, "a string or null"),
    "arguments": (_is_optional_text, "a string (the arguments' JSON text) or null"),
    "is_error": (_is_flag, "true or false"),
    "attachments": (_is_list, "a list"),
    "synthetic": (_is_flag, "true or false"),
    "usage": (_is_optional_object, "an object or null"),
    "response": (_is_optional_index, "a whole number or null"),
    "turn": (_is_optional_index, "a whole number or null"),
    "timestamp": (_is_optional_text, "a string or null"),
    "meta": (_is_object, "an object"),
}
#: What each field of an attachment (an entry of an item's `attachments`) may hold; `mime` is required.
ATTACHMENT_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "mime": (_is_text, "a string"),
    "name": (_is_text, "a string"),
    "size": (_is_whole, "a whole number"),
    "uri": (_is_text, "a string"),
}
#: What each field of the header line may hold (besides `format` and `version`, checked first).
HEADER_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "id": (_is_optional_text, "a string or null"),
    "model": (_is_optional_text, "a string or null"),
    "source": (_is_optional_object, "an object or null"),
    "meta": (_is_optional_object, "an object or null"),
}


def check_fields(data: Mapping[str, Any], rules: Mapping[str, tuple[Callable[[Any], bool], str]], what: str = "field") -> None:
    """Refuse the first field of `data` whose value `rules` does not allow: `field 'text' must be a string, got int`."""
    for name, (allowed, expected) in rules.items():
        if name in data and not allowed(data[name]):
            raise TranscriptError(f"{what} {name!r} must be {expected}, got {json_type(data[name])}")


def freeze(value: Any) -> Any:
    """Deep-freeze JSON-like data: dicts become read-only mappings, lists become tuples."""
    if isinstance(value, Mapping):
        return FrozenMap({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of `freeze`: plain dicts and lists, ready for `json.dumps`."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Attachment:
    """A non-text part of a message (image, file): its type, name, size and, where the format
    records one, the URI it was attached by (a file URL or data URL; "" when unknown)."""

    mime: str
    name: str = ""
    size: int = 0
    uri: str = ""

    @property
    def is_image(self) -> bool:
        return self.mime.startswith("image/")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model response, as providers report it.

    `input` includes `cached_input` and `cache_write` (OpenAI convention); importers of
    Anthropic-shaped usage add the cache fields into `input`. `total` is what the provider said,
    or input + output when it said nothing.
    """

    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0
    reasoning: int = 0
    total: int = 0

    def __post_init__(self) -> None:
        if not self.total:
            object.__setattr__(self, "total", self.input + self.output)

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise TranscriptError(f"unknown usage field(s): {', '.join(sorted(map(str, unknown)))}")
        return cls(**{f.name: _count(data.get(f.name), f.name) for f in fields(cls)})


def _count(value: Any, name: str) -> int:
    """A token count of a canonical usage dict: a whole number of at least 0 (`3.0` too; an error names the field)."""
    if value is None:
        return 0
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        raise TranscriptError(f"usage field {name!r} is {value!r}, expected a token count (a whole number of at least 0)")
    return int(value)


@dataclass(frozen=True, slots=True)
class Item:
    """One recorded event of a session.

    `kind` is one of `KINDS`. `response` is the index of the model response the item belongs to
    (model-output items only); `usage` sits on the last item of a recorded response; `turn` is the
    index of the real user turn. `synthetic` marks injected context (AGENTS.md, environment
    blocks) that is not a real user message. `marker` items are the recorded agent's own events
    that are not model input (native compactions, model switches, aborted turns, branch moves);
    their data is in `meta`. `meta` holds anything else the source format knew.
    """

    id: str
    kind: str
    text: str = ""
    call_id: str | None = None
    tool_name: str | None = None
    arguments: str | None = None
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    synthetic: bool = False
    usage: Usage | None = None
    response: int | None = None
    turn: int | None = None
    timestamp: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TranscriptError(f"item {self.id!r}: unknown kind {self.kind!r} (expected one of {', '.join(KINDS)})")
        if not isinstance(self.meta, FrozenMap):
            object.__setattr__(self, "meta", freeze(self.meta or {}))
        if self.kind in ("tool_call", "tool_result") and not self.call_id:
            raise TranscriptError(f"item {self.id!r}: a {self.kind} needs a call_id")

    @property
    def is_real_user(self) -> bool:
        return self.kind == "user" and not self.synthetic

    @property
    def is_model_output(self) -> bool:
        return self.kind in MODEL_OUTPUT_KINDS

    def to_dict(self) -> dict[str, Any]:
        """The item as it is written to the canonical file: default-valued fields are left out."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        for f in fields(self):
            if f.name in ("id", "kind"):
                continue
            value = getattr(self, f.name)
            if (f.name == "meta" and not value) or (f.name != "meta" and value == f.default):
                continue
            if f.name == "attachments":
                value = [{"mime": a.mime, "name": a.name, "size": a.size, **({"uri": a.uri} if a.uri else {})} for a in value]
            elif f.name == "usage":
                value = value.to_dict()
            elif f.name == "meta":
                value = thaw(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Item:
        """An item line of a canonical file; a field of the wrong type is refused, naming it (`ITEM_FIELDS`)."""
        unknown = set(data) - set(ITEM_FIELDS)
        if unknown:
            raise TranscriptError(f"unknown item field(s): {', '.join(sorted(unknown))}")
        if "id" not in data or "kind" not in data:
            raise TranscriptError("an item needs 'id' and 'kind'")
        check_fields(data, ITEM_FIELDS)
        kw = dict(data)
        kw["attachments"] = tuple(_attachment(n, a) for n, a in enumerate(kw.get("attachments") or (), start=1))
        if kw.get("usage") is not None:
            kw["usage"] = Usage.from_dict(kw["usage"])
        kw["meta"] = freeze(kw.get("meta") or {})
        return cls(**kw)


def _attachment(number: int, data: Any) -> Attachment:
    """Entry `number` (from 1) of an item line's `attachments`, its fields checked (`ATTACHMENT_FIELDS`)."""
    where = f"attachment {number}"
    if not isinstance(data, Mapping):
        raise TranscriptError(f"{where} must be an object, got {json_type(data)}")
    unknown = set(data) - set(ATTACHMENT_FIELDS)
    if unknown:
        raise TranscriptError(f"{where}: unknown field(s): {', '.join(sorted(unknown))}")
    if "mime" not in data:
        raise TranscriptError(f"{where} needs 'mime'")
    check_fields(data, ATTACHMENT_FIELDS, f"{where} field")
    return Attachment(**data)


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded model response: its output items and the usage the provider reported."""

    index: int
    items: tuple[Item, ...]
    usage: Usage | None
    turn: int | None

    @property
    def tool_calls(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.kind == "tool_call")

    @property
    def needs_follow_up(self) -> bool:
        """The model asked for tools, so the agent samples again within the same turn."""
        return any(i.kind == "tool_call" for i in self.items)


@dataclass(frozen=True, slots=True)
class Turn:
    """A real user message and every item up to the next real user message."""

    index: int
    items: tuple[Item, ...]

    @property
    def user(self) -> Item | None:
        return next((i for i in self.items if i.is_real_user), None)


@dataclass(frozen=True)
class Transcript:
    """A recorded session in canonical form (DESIGN §2)."""

    id: str
    items: tuple[Item, ...]
    source: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    model: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(self.items))
        object.__setattr__(self, "source", freeze(self.source or {}))
        object.__setattr__(self, "meta", freeze(self.meta or {}))
        seen: set[str] = set()
        for position, item in enumerate(self.items):
            if not isinstance(item, Item):
                raise TranscriptError(f"transcript {self.id!r}: entry {position} is not an Item")
            if item.id in seen:
                raise TranscriptError(f"transcript {self.id!r}: duplicate item id {item.id!r} at position {position}")
            seen.add(item.id)

    # ----------------------------------------------------------------- lookups
    @property
    def by_id(self) -> Mapping[str, Item]:
        cached = self.__dict__.get("_by_id")
        if cached is None:
            cached = {i.id: i for i in self.items}
            object.__setattr__(self, "_by_id", cached)
        return cached

    def position(self, item_id: str) -> int:
        positions = self.__dict__.get("_positions")
        if positions is None:
            positions = {i.id: n for n, i in enumerate(self.items)}
            object.__setattr__(self, "_positions", positions)
        return positions[item_id]

    def tool_call(self, call_id: str) -> Item | None:
        """The first tool call with this call id, or None."""
        return next((i for i in self.items if i.kind == "tool_call" and i.call_id == call_id), None)

    def tool_results(self, call_id: str) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.kind == "tool_result" and i.call_id == call_id)

    def orphans(self) -> dict[str, list[str]]:
        """Item ids of tool calls without a result and tool results without a call."""
        calls = {i.call_id for i in self.items if i.kind == "tool_call"}
        results = {i.call_id for i in self.items if i.kind == "tool_result"}
        return {
            "calls_without_result": [i.id for i in self.items if i.kind == "tool_call" and i.call_id not in results],
            "results_without_call": [i.id for i in self.items if i.kind == "tool_result" and i.call_id not in calls],
        }

    # ----------------------------------------------------------------- structure
    def steps(self) -> list[Step]:
        """Recorded model responses in order (items grouped by their `response` index); found once per
        transcript (the replay and every metric of a cell ask for them)."""
        steps = self.__dict__.get("_steps")
        if steps is None:
            groups: dict[int, list[Item]] = {}
            for item in self.items:
                if item.response is not None and item.is_model_output:
                    groups.setdefault(item.response, []).append(item)
            found = []
            for index, response in enumerate(sorted(groups)):
                items = tuple(groups[response])
                usage = next((i.usage for i in reversed(items) if i.usage is not None), None)
                found.append(Step(index=index, items=items, usage=usage, turn=items[0].turn))
            steps = tuple(found)
            object.__setattr__(self, "_steps", steps)
        return list(steps)

    def turns(self) -> list[Turn]:
        """Items split at each real user message; items before the first one form turn 0's prefix."""
        turns: list[list[Item]] = [[]]
        for item in self.items:
            if item.is_real_user and any(i.is_real_user for i in turns[-1]):
                turns.append([])
            turns[-1].append(item)
        return [Turn(index=n, items=tuple(t)) for n, t in enumerate(turns) if t]

    def real_user_messages(self) -> list[Item]:
        return [i for i in self.items if i.is_real_user]

    def markers(self, event: str | None = None) -> list[Item]:
        return [i for i in self.items if i.kind == "marker" and (event is None or i.meta.get("event") == event)]

    def recorded_usage(self) -> list[Usage]:
        return [i.usage for i in self.items if i.usage is not None]

    def with_items(self, items: Iterable[Item]) -> Transcript:
        return replace(self, items=tuple(items))

    # ----------------------------------------------------------------- file format
    def header(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "id": self.id,
            "model": self.model,
            "source": thaw(self.source),
            "meta": thaw(self.meta),
        }

    def iter_lines(self) -> Iterator[str]:
        yield json.dumps(self.header(), ensure_ascii=False)
        for item in self.items:
            yield json.dumps(item.to_dict(), ensure_ascii=False)

    def dumps(self) -> str:
        return "\n".join(self.iter_lines()) + "\n"

    def write(self, path: str | Path, *, exclusive: bool = False) -> Path:
        """Write the canonical JSONL file atomically (with `exclusive`, never over an existing file)."""
        from compaction_bench.atomic import atomic_write_text

        return atomic_write_text(Path(path), self.dumps(), exclusive=exclusive)

    @classmethod
    def loads(cls, text: str, *, origin: str = "<string>") -> Transcript:
        # Split on "\n" only: U+2028 and other separators may stand raw inside JSON strings.
        lines = text.split("\n")
        if not lines or not lines[0].strip():
            raise TranscriptError(f"{origin}:1: empty file, expected a compaction-bench transcript header")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"{origin}:1: header is not JSON ({exc.msg})") from None
        except (RecursionError, ValueError) as exc:
            raise TranscriptError(f"{origin}:1: header is not usable JSON ({type(exc).__name__})") from None
        if scrub_surrogates(header)[1]:
            raise TranscriptError(f"{origin}:1: a lone UTF-16 surrogate escape in the header (not valid Unicode text)")
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise TranscriptError(f"{origin}:1: not a compaction-bench transcript header")
        if header.get("version") != FORMAT_VERSION:
            raise TranscriptError(f"{origin}:1: unsupported transcript version {header.get('version')!r}")
        try:
            check_fields(header, HEADER_FIELDS, "header field")
        except TranscriptError as exc:
            raise TranscriptError(f"{origin}:1: {exc}") from None
        items = []
        line_of: dict[str, int] = {}
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise TranscriptError("an item line must be a JSON object")
                if may_hold_surrogates(line) and scrub_surrogates(data)[1]:
                    raise TranscriptError("a lone UTF-16 surrogate escape (not valid Unicode text)")
                item = Item.from_dict(data)
                if item.id in line_of:
                    raise TranscriptError(f"duplicate item id {item.id!r} (first on line {line_of[item.id]})")
                line_of[item.id] = number
                items.append(item)
            except json.JSONDecodeError as exc:
                raise TranscriptError(f"{origin}:{number}: malformed JSON ({json_problem(exc)})") from None
            except RecursionError:
                raise TranscriptError(f"{origin}:{number}: JSON nested too deeply") from None
            except (TranscriptError, TypeError, ValueError, OverflowError) as exc:
                raise TranscriptError(f"{origin}:{number}: {exc}") from None
        try:
            return cls(
                id=str(header.get("id") or Path(origin).stem),
                items=tuple(items),
                source=header.get("source") or {},
                model=header.get("model"),
                meta=header.get("meta") or {},
            )
        except TranscriptError as exc:
            raise TranscriptError(f"{origin}: {exc}") from None

    @classmethod
    def read(cls, path: str | Path) -> Transcript:
        """A canonical file, opened the one way transcripts are opened (`importing.open_input`: a
        regular file only, so a FIFO or a device is refused, never read)."""
        from compaction_bench.importing import open_input  # importing imports this module

        path = Path(path)
        with open_input(path) as fh:
            raw = fh.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TranscriptError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
        return cls.loads(text, origin=str(path))


def answered_call(waiting: list[int], calls: Sequence[Item]) -> int:
    """The call a result answers among `waiting`, the positions in `calls` of the unanswered calls of the
    result's id, oldest first (not empty): the oldest of them in the newest model response that has one,
    which is removed from `waiting`. That is the wire's pairing (compaction_bench.wire, `chat_messages`):
    a response's calls are answered by the results right after it, the k-th call of an id by the k-th
    result of it, so a session that reuses an id in later steps pairs each call with its own result, and a
    call left unanswered (aborted) never takes the result of a later call of its id."""
    newest = calls[waiting[-1]].response
    return waiting.pop(next(k for k, position in enumerate(waiting) if calls[position].response == newest))


def is_canonical(head: str) -> bool:
    """True when the first line of a file is a canonical transcript header."""
    try:
        data = json.loads(head.split("\n")[0]) if head.strip() else None
    except (ValueError, IndexError, RecursionError):  # not JSON, too deep, or a number beyond the digit limit
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT_NAME

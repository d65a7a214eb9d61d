"""The transcript builder shared by the importers: stable unique ids, turns, responses, usage, orphans.

Every importer walks its source in order and calls `TranscriptBuilder.add`; the builder owns the
rules DESIGN §2 sets for every format, so no importer re-implements them:

- item ids are the source's ids where it has some, else `<kind>-<position>`; a repeated id gets a
  `#n` suffix (never an error, never a lost item);
- `turn` is the index of the real user turn (items before the first real user message are turn 0);
- `response` groups the model-output items of one recorded model response; `usage` is put on the
  response's last item when the transcript is finished (so usage that is recorded after the
  response, or with interleaved items, still lands on the right item);
- tool results whose call is missing are kept and listed in `meta["orphans"]`; problems met while
  reading are listed in `meta["problems"]`;
- a recorded usage is read by `token_counts`: a count that is no whole number of at least 0 (text,
  `Infinity`, a negative number), or a usage object of another shape, is a problem naming the field,
  and that response's usage is unknown (None), never 0;
- an importer whose format sets its own turns and responses (Pi) builds its items itself and hands
  them over with `adopt`, so the pairing rules below still run on them in `finish`;
- results are paired with calls in order, by call id. A call id reused after its call was answered
  (call c1, result, call c1, result: some recorders do this) pairs unambiguously and is no problem;
  a call id repeated while an earlier call with it is still unanswered (which result answers which
  call cannot be told), and a result for a call that was already answered, are problems. Every item
  is kept either way.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from compaction_bench.errors import json_shown
from compaction_bench.transcript import MODEL_OUTPUT_KINDS, Attachment, Item, Transcript, Usage, json_type, scrub_surrogates


def as_text(value: Any) -> str:
    """Text of a content field that may be a string, a list of text parts, or other JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping) and isinstance(part.get("content"), (str, list)):
                parts.append(as_text(part["content"]))
        return "\n".join(parts)
    return json.dumps(value, ensure_ascii=False)


def text_of(value: Any, what: str, report: Callable[[str], None]) -> str:
    """A recorded text field: a string as it is, null as ""; anything else is reported (`what` names the
    field) and kept as its JSON text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    report(f"{what} is a JSON {json_type(value)}, not a string; kept as its JSON text")
    return json.dumps(value, ensure_ascii=False)


#: The meta key of an item holding the content blocks of its message of kinds its format does not write.
UNKNOWN_CONTENT = "unknown_content"


def unknown_block_text(block: Any, what: str, report: Callable[[str], None]) -> str:
    """The text of a content block of a kind the format does not write (`as_text`), which the message keeps, with
    the block itself kept in the item's `meta[UNKNOWN_CONTENT]` by the caller; reported as `what`."""
    kept = as_text([block])
    report(f"{what}; kept in the item's meta ({UNKNOWN_CONTENT})" + (", its text in the message" if kept else ""))
    return kept


def mapping_of(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty one (recorded fields may hold anything)."""
    return value if isinstance(value, Mapping) else {}


def list_of(value: Any) -> list[Any]:
    """`value` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def as_arguments(value: Any) -> str:
    """Tool-call arguments as JSON text (a string is kept as it was recorded)."""
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


#: More tokens than any request holds (no model's window comes near): a recorded count above it is damage. The
#: run's tables hold counts as 64-bit numbers, and a count of 10**20 failed every cell as they were written.
MAX_TOKEN_COUNT = 2**31


def _token_count(value: Any) -> int | None:
    """A recorded token count: a whole number from 0 to `MAX_TOKEN_COUNT` (`3.0` too); None for anything else
    (text, `Infinity`, a fraction, a negative or impossibly large number, true/false, an object)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= MAX_TOKEN_COUNT else None


def token_counts(usage: Any, names: Sequence[str], report: Callable[[str], None]) -> dict[str, int] | None:
    """The token counts `names` of a recorded usage object (a dotted name reaches into a nested object:
    `prompt_tokens_details.cached_tokens`); an absent or null count is 0.

    None, the usage unknown rather than zero, when `usage` is null or `{}` (nothing recorded), and, each
    said through `report` (a problem naming the field), when it is not an object, records none of
    `names`, or holds a count that is no token count (`_token_count`) or a nested part that is no object.
    """
    if usage is None or (isinstance(usage, Mapping) and not usage):
        return None
    if not isinstance(usage, Mapping):
        report(f"usage is a JSON {json_type(usage)}, not an object of token counts; the usage is left unknown")
        return None
    counts: dict[str, int] = {}
    bad: dict[str, str] = {}  # field -> what is wrong; a nested part that is no object is one field however many names pass it
    for name in names:
        value: Any = usage
        reached: list[str] = []
        for key in name.split("."):
            if not isinstance(value, Mapping):
                break
            reached.append(key)
            value = value.get(key)
        if value is None:  # absent or null, here or on the way
            continue
        if len(reached) <= name.count("."):
            bad[".".join(reached)] = f"is {json_shown(value)}, not an object of token counts"
        elif (count := _token_count(value)) is None:
            bad[name] = f"is {json_shown(value)}, not a token count (a whole number from 0 to {MAX_TOKEN_COUNT:,})"
        else:
            counts[name] = count
    for field, wrong in bad.items():
        report(f"usage field {field!r} {wrong}; the usage is left unknown")
    if bad:
        return None
    if not counts:
        report(f"usage records none of the token counts {', '.join(names)} (its fields: {json_shown(list(usage))}); the usage is left unknown")
        return None
    return {name: counts.get(name, 0) for name in names}


def unique_ids(ids: Sequence[str]) -> tuple[list[str], dict[int, tuple[str, list[int]]]]:
    """`ids` made unique: every row of an id that several rows share gets `#row<N>` appended (its own row
    index, so the new ids differ), until none is shared; and, per renamed row, the id it wanted and the
    rows that shared it."""
    out = list(ids)
    renamed: dict[int, tuple[str, list[int]]] = {}
    while True:
        rows_of: dict[str, list[int]] = defaultdict(list)
        for n, wanted in enumerate(out):
            rows_of[wanted].append(n)
        shared = {wanted: rows for wanted, rows in rows_of.items() if len(rows) > 1}
        if not shared:
            return out, renamed
        for wanted, rows in shared.items():
            for n in rows:
                renamed.setdefault(n, (wanted, rows))
                out[n] = f"{wanted}#row{n}"


def image_attachment(mime: str, data: Any, name: str = "") -> Attachment:
    """An image part; `size` is the decoded byte size of base64 data where there is some."""
    size = len(data) * 3 // 4 if isinstance(data, str) else 0
    return Attachment(mime=mime or "image/unknown", name=name, size=size)


class TranscriptBuilder:
    """Collects items in source order and produces one `Transcript`."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt
        self.items: list[Item] = []
        self.problems: list[str] = []
        self._ids: set[str] = set()
        self._turn = 0
        self._seen_user = False
        self._responses = 0
        self._usage: dict[int, Usage] = {}
        self.model: str | None = None

    # ----------------------------------------------------------------- items
    def problem(self, message: str, line: int | None = None) -> None:
        where = f"{self.path}:{line}" if line is not None else str(self.path)
        self.problems.append(f"{where}: {message}")

    def reporter(self, line: int | None = None, place: str = "") -> Callable[[str], None]:
        """`problem` bound to one place: its line of the file and, where the format has no lines, its name (`messages[3]`)."""
        return lambda message: self.problem(f"{place}: {message}" if place else message, line)

    def new_response(self) -> int:
        """Open a new model response and return its index."""
        self._responses += 1
        return self._responses - 1

    def set_usage(self, response: int, usage: Usage | None) -> None:
        """The usage of a response (the last call wins: streamed copies grow, the final one is complete)."""
        if usage is not None:
            self._usage[response] = usage

    def _unique(self, wanted: str | None, kind: str) -> str:
        base = wanted or f"{kind}-{len(self.items)}"
        candidate, n = base, 1
        while candidate in self._ids:
            n += 1
            candidate = f"{base}#{n}"
        self._ids.add(candidate)
        return candidate

    def add(self, kind: str, text: str = "", *, id: str | None = None, response: int | None = None, **fields: Any) -> Item:
        """Append an item; a real user message opens a new turn; model output needs a `response`."""
        if kind == "user" and not fields.get("synthetic"):
            if self._seen_user:
                self._turn += 1
            self._seen_user = True
        if kind in MODEL_OUTPUT_KINDS and response is None:
            response = self.new_response()
        (text, id, fields), changed = scrub_surrogates([text, id, fields])
        item = Item(id=self._unique(id, kind), kind=kind, text=text, response=response, turn=self._turn, **fields)
        if changed:
            self.problem(f"item {item.id}: {changed} string(s) with lone UTF-16 surrogates; replaced with U+FFFD")
        self.items.append(item)
        return item

    def adopt(self, items: Iterable[Item]) -> None:
        """Append items an importer built itself, exactly as they are (ids, turns, responses and usage kept)."""
        for item in items:
            self._ids.add(item.id)
            self.items.append(item)

    # ----------------------------------------------------------------- result
    def finish(
        self,
        transcript_id: str,
        *,
        source: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Transcript:
        items = list(self.items)
        last: dict[int, int] = {}
        for position, item in enumerate(items):
            if item.response is not None and item.is_model_output:
                last[item.response] = position
        for response, usage in self._usage.items():
            if response in last:
                items[last[response]] = replace(items[last[response]], usage=usage)
        calls: set[str] = set()
        orphans = []
        waiting: dict[str, list[str]] = {}  # call id -> item ids of its calls not answered yet
        for item in items:
            call_id = item.call_id or ""
            if item.kind == "tool_call":
                pending = waiting.setdefault(call_id, [])
                if pending:
                    self.problem(
                        f"tool call {item.id} repeats the call id {call_id!r} of {pending[0]}, which is not answered yet; "
                        "which result answers which call cannot be told"
                    )
                pending.append(item.id)
                calls.add(call_id)
            elif item.kind == "tool_result":
                if call_id not in calls:
                    orphans.append(item.id)
                elif waiting[call_id]:
                    waiting[call_id].pop(0)
                else:
                    self.problem(f"tool result {item.id} answers call id {call_id!r} again (its call was already answered)")
        out_meta = dict(meta or {})
        if orphans:
            out_meta["orphans"] = orphans
        if self.problems:
            out_meta["problems"] = list(self.problems)
        return Transcript(
            id=transcript_id,
            items=tuple(items),
            source={"format": self.format, "path": str(self.path), **dict(source or {})},
            model=self.model,
            meta=out_meta,
        )

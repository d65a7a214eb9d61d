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
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from compaction_bench.transcript import MODEL_OUTPUT_KINDS, Attachment, Item, Transcript, Usage, scrub_surrogates


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


def as_int(value: Any) -> int:
    """A token count from recorded JSON; anything that is not a finite number (`Infinity`, `NaN`, text) counts as 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return 0


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

"""Importer for Pi coding-agent session files (JSONL, versions 1–3): `PiSessionImporter`, format "pi".

Follows docs/specs/pi.md §1 (session storage) and §8 (fixtures):

- line 1 is the `session` header; every other line an entry with `id`, `parentId`, `timestamp`,
  `type`. v1 files (no ids) are migrated as Pi does on load: sequential ids, parent = the previous
  entry, and a compaction's legacy `firstKeptEntryIndex` (index into the file entries, header at 0)
  becomes `firstKeptEntryId`; v2's message role `hookMessage` becomes `custom` (§1.1).
- the entries form a tree. By default the transcript is the *active path* (leaf = last entry in
  file order, walked up by `parentId`); option `branch=<entry id>` takes the path ending at that
  entry, and `branch="tree"` replays every entry in file order, with a `branch` marker wherever
  the next entry does not continue from the previous one (the user navigated with `/tree`).
- every item keeps its entry's `id` and `parentId` in `meta["entry"]` / `meta["parent"]` (the
  entry type in `meta["type"]`, its 1-based file line in `meta["line"]`), so a strategy can rebuild Pi's tree. An assistant message becomes
  one item per content block (thinking → reasoning, text → assistant, toolCall → tool_call, ids
  `<entry>.<n>`), its usage on the last item (Anthropic-shaped usage: cache reads and writes are
  added into `input`, DESIGN §2), its `stopReason`, `errorMessage`, provider, model and epoch-ms
  timestamp in the first item's meta.
- bashExecution (`!cmd`) becomes a synthetic user item rendered as Pi renders it for the model
  (§1.4 step 5), or a `bash_execution` marker when `excludeFromContext` (`!!`); custom messages
  become synthetic user items.
- recorded `compaction` and `branch_summary` entries become markers with their recorded numbers
  (`tokensBefore`, `firstKeptEntryId`, `summary`, `details`, `fromHook`, `fromId`); settings,
  label, session-info and extension entries become markers too (they are cut-point material, §3.3).

What Pi does not write is a problem naming its line, and kept: a content block of another kind (on a user,
tool result or custom message its text stays in the item's text and the block in `meta["unknown_content"]`;
on an assistant message it is a marker `{"event": "unknown-block"}` holding the block), a list nested in a
content list (its blocks are read in its place), a text that is no string (kept as its JSON text); a usage
count that is no token count leaves the response's usage unknown.

An entry of a type Pi does not know here (a newer Pi's `context_edit` or `usage`, an extension's), or a message
entry without a known role, is kept as an inert marker `{"event": "unknown-entry"}` with its `entry` and `parent`
(and a problem naming its line): upstream keeps every parsed entry in the tree and renders nothing for such a
type (`sessionEntryToContextMessages`, `session-manager.ts@2efa728d` L383-408), so its children stay on the
path. Malformed lines (no JSON object with a string `type`) are skipped (as Pi does) and listed in
`meta["problems"]`. The items, built here with
Pi's own turn numbering, go through `TranscriptBuilder.adopt` / `finish` unchanged, so tool results
without a call are listed in `meta["orphans"]` and ambiguous call/result pairings in `meta["problems"]`
as for every other format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import (
    UNKNOWN_CONTENT,
    TranscriptBuilder,
    as_text,
    text_of,
    token_counts,
    unknown_block_text,
)
from compaction_bench.scenarios.readers import read_jsonl
from compaction_bench.transcript import Attachment, Item, Transcript, Usage, json_type

CURRENT_SESSION_VERSION = 3
ENTRY_TYPES = frozenset(
    {
        "message",
        "thinking_level_change",
        "model_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "session_info",
    }
)
MESSAGE_ROLES = frozenset({"user", "assistant", "toolResult", "bashExecution", "custom"})
#: The marker event of an entry Pi's types or message roles do not cover (kept in the tree, nothing rendered).
UNKNOWN_ENTRY = "unknown-entry"
#: Entry types whose fields (besides id/parentId/timestamp/type) are copied into the marker's meta.
MARKER_FIELDS = {
    "compaction": ("summary", "firstKeptEntryId", "tokensBefore", "details", "fromHook"),
    "branch_summary": ("fromId", "summary", "details", "fromHook"),
    "thinking_level_change": ("thinkingLevel",),
    "model_change": ("provider", "modelId"),
    "custom": ("customType", "data"),
    "label": ("targetId", "label"),
    "session_info": ("name",),
}


def render_bash_execution(message: Mapping[str, Any]) -> str:
    """The user-role text Pi sends for a `!cmd` execution (docs/specs/pi.md §1.4 step 5)."""
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output") or ""
    text += f"```\n{output}\n```" if output else "(no output)"
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif message.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {message.get('exitCode')}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message.get('fullOutputPath')}]"
    return text


def content_blocks(content: Any, report: Callable[[str], None]) -> list[Mapping[str, Any]]:
    """The blocks of a Pi `content` list. What Pi does not write there is reported and kept: a list inside
    the list gives its blocks in its place, a block that is no object becomes a text block of its text,
    and a `content` that is no list (an object: one block; anything else: a text block of its JSON text)."""
    if content is None:
        return []
    if isinstance(content, Mapping):
        report("content is a JSON object, not a list of blocks; read as one block")
        return [content]
    if not isinstance(content, list):
        report(f"content is a JSON {json_type(content)}, not a list of blocks; kept as a text block")
        return [{"type": "text", "text": as_text(content)}]
    blocks: list[Mapping[str, Any]] = []
    pending = content[::-1]
    while pending:
        block = pending.pop()
        if isinstance(block, Mapping):
            blocks.append(block)
        elif isinstance(block, list):
            report("a content block is a JSON list, not an object; the blocks in it are read in its place")
            pending.extend(block[::-1])
        else:
            report(f"a content block is a JSON {json_type(block)}, not an object; kept as a text block")
            blocks.append({"type": "text", "text": as_text(block)})
    return blocks


def content_parts(content: Any, report: Callable[[str], None]) -> tuple[list[str], list[Attachment], list[Mapping[str, Any]]]:
    """Text blocks, image attachments and blocks of other kinds (reported; their text is kept with the
    text blocks) of a Pi `content` (a string or a list of blocks, `content_blocks`)."""
    if isinstance(content, str):
        return [content], [], []
    texts: list[str] = []
    images: list[Attachment] = []
    unknown: list[Mapping[str, Any]] = []
    for block in content_blocks(content, report):
        if block.get("type") == "text":
            texts.append(text_of(block.get("text"), "a text block's text", report))
        elif block.get("type") == "image":
            data = block.get("data") or ""
            images.append(Attachment(mime=str(block.get("mimeType") or "image/png"), size=len(data) * 3 // 4))
        else:
            texts.append(unknown_block_text(block, f"unknown content block {block.get('type')!r}", report))
            unknown.append(block)
    return texts, images, unknown


def migrate(header: dict[str, Any], entries: list[dict[str, Any]]) -> int:
    """Bring raw entries to version 3 in place (docs/specs/pi.md §1.1); returns the file's version."""
    version = int(header.get("version") or 1)
    if version < 2:
        ids: list[str] = []
        for index, entry in enumerate(entries):
            entry["id"] = f"{index + 1:08x}"
            entry["parentId"] = ids[-1] if ids else None
            ids.append(entry["id"])
        for entry in entries:
            if entry.get("type") == "compaction" and "firstKeptEntryIndex" in entry:
                # The legacy index counts the header as file entry 0.
                index = int(entry.pop("firstKeptEntryIndex"))
                entry["firstKeptEntryId"] = ids[index - 1] if 1 <= index <= len(ids) else None
    if version < 3:
        for entry in entries:
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "hookMessage":
                message["role"] = "custom"
    return version


@dataclass
class _Builder:
    """Turns entries into items, numbering turns and model responses; what it meets that Pi does not
    write goes to `problems`, naming the entry's line."""

    path: Path
    problems: list[str]
    items: list[Item] = field(default_factory=list)
    turn: int = -1
    response: int = -1

    line_of: Mapping[int, int] = field(default_factory=dict)

    def base_meta(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        return {"entry": entry["id"], "parent": entry.get("parentId"), "type": entry["type"], "line": self.line_of.get(id(entry))}

    def reporter(self, entry: Mapping[str, Any]) -> Callable[[str], None]:
        """A problem of `entry`, named by its line."""
        return lambda message: self.problems.append(f"{self.path}:{self.line_of.get(id(entry))}: {message}")

    def parts(self, entry: Mapping[str, Any], content: Any, meta: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
        """The text and attachments of a user-side `content`; blocks of other kinds go to `meta["unknown_content"]`."""
        texts, images, unknown = content_parts(content, self.reporter(entry))
        if unknown:
            meta[UNKNOWN_CONTENT] = unknown
        return "".join(texts), tuple(images)

    def add(self, **kw: Any) -> None:
        self.items.append(Item(turn=self.turn if self.turn >= 0 else None, **kw))

    def entry(self, entry: Mapping[str, Any]) -> None:
        kind = entry["type"]
        meta = self.base_meta(entry)
        ts = entry.get("timestamp")
        if not is_known(entry):
            self.add(id=entry["id"], kind="marker", timestamp=ts, meta=meta | {"event": UNKNOWN_ENTRY})
        elif kind == "message":
            self.message(entry, meta, ts)
        elif kind == "custom_message":
            meta |= {"role": "custom", "customType": entry.get("customType"), "display": entry.get("display")}
            text, images = self.parts(entry, entry.get("content"), meta)
            self.add(id=entry["id"], kind="user", text=text, attachments=images, synthetic=True, timestamp=ts, meta=meta)
        else:
            meta |= {"event": kind} | {k: entry[k] for k in MARKER_FIELDS.get(kind, ()) if k in entry}
            self.add(id=entry["id"], kind="marker", text=str(entry.get("summary") or ""), timestamp=ts, meta=meta)

    def message(self, entry: Mapping[str, Any], meta: dict[str, Any], ts: str | None) -> None:
        message = entry["message"]
        role = message["role"]
        meta |= {"role": role, "message_ts": message.get("timestamp")}
        eid = entry["id"]
        if role == "user":
            self.turn += 1
            text, images = self.parts(entry, message.get("content"), meta)
            self.add(id=eid, kind="user", text=text, attachments=images, timestamp=ts, meta=meta)
        elif role == "assistant":
            self.assistant(entry, message, meta, ts)
        elif role == "toolResult":
            text, images = self.parts(entry, message.get("content"), meta)
            self.add(
                id=eid,
                kind="tool_result",
                text=text,
                call_id=str(message.get("toolCallId") or f"missing-{eid}"),
                tool_name=message.get("toolName"),
                is_error=bool(message.get("isError")),
                attachments=images,
                timestamp=ts,
                meta=meta,
            )
        elif role == "bashExecution":
            bash = {k: message.get(k) for k in ("command", "output", "exitCode", "cancelled", "truncated", "fullOutputPath", "excludeFromContext")}
            meta |= bash
            if message.get("excludeFromContext"):
                self.add(id=eid, kind="marker", timestamp=ts, meta=meta | {"event": "bash_execution"})
            else:
                self.add(id=eid, kind="user", text=render_bash_execution(message), synthetic=True, timestamp=ts, meta=meta)
        else:  # custom (legacy hook message)
            meta |= {"customType": message.get("customType")}
            text, images = self.parts(entry, message.get("content"), meta)
            self.add(id=eid, kind="user", text=text, attachments=images, synthetic=True, timestamp=ts, meta=meta)

    def assistant(self, entry: Mapping[str, Any], message: Mapping[str, Any], meta: dict[str, Any], ts: str | None) -> None:
        eid = entry["id"]
        report = self.reporter(entry)
        self.response += 1
        meta |= {
            "stopReason": message.get("stopReason"),
            "errorMessage": message.get("errorMessage"),
            "provider": message.get("provider"),
            "model": message.get("model"),
            "api": message.get("api"),
        }
        specs: list[dict[str, Any]] = []
        for block in content_blocks(message.get("content"), report):
            if block.get("type") == "thinking":
                specs.append({"kind": "reasoning", "text": text_of(block.get("thinking"), "a thinking block's thinking", report)})
            elif block.get("type") == "text":
                specs.append({"kind": "assistant", "text": text_of(block.get("text"), "a text block's text", report)})
            elif block.get("type") == "toolCall":
                specs.append(
                    {
                        "kind": "tool_call",
                        "call_id": str(block.get("id") or f"{eid}-call{len(specs)}"),
                        "tool_name": str(block.get("name") or ""),
                        "arguments": json.dumps(block.get("arguments") or {}, ensure_ascii=False, separators=(",", ":")),
                    }
                )
            else:  # no model output: a marker, which holds no usage and which Pi's tree leaves out (no "entry")
                report(f"unknown assistant content block {block.get('type')!r}; kept as a marker")
                specs.append({"kind": "marker", "text": json.dumps(block, ensure_ascii=False), "meta": {"event": "unknown-block"}})
        outputs = [n for n, spec in enumerate(specs) if spec["kind"] != "marker"]
        if not outputs:
            outputs.append(len(specs))
            specs.append({"kind": "assistant", "text": ""})
        usage = pi_usage(message.get("usage"), report)
        for n, spec in enumerate(specs):
            if spec["kind"] != "marker":
                first = n == outputs[0]
                spec |= {
                    "response": self.response,
                    "usage": usage if n == outputs[-1] else None,
                    "meta": meta if first else {"entry": eid, "parent": meta["parent"], "type": "message", "role": "assistant"},
                }
            self.add(id=f"{eid}.{n}", timestamp=ts, **spec)


#: The token counts of a Pi assistant message's `usage` that `pi_usage` reads.
PI_COUNTS = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")


def pi_usage(raw: Any, report: Callable[[str], None]) -> Usage | None:
    """Pi's usage {input, output, cacheRead, cacheWrite, totalTokens} in canonical form; None when there is
    none or a count is unusable (said through `report`)."""
    counts = token_counts(raw, PI_COUNTS, report)
    if counts is None:
        return None
    read, write = counts["cacheRead"], counts["cacheWrite"]
    return Usage(input=counts["input"] + read + write, cached_input=read, cache_write=write, output=counts["output"], total=counts["totalTokens"])


class PiSessionImporter(Importer):
    format: ClassVar[str] = "pi"
    description: ClassVar[str] = "Pi coding-agent session JSONL (v1–v3; tree, branches, recorded compactions)"
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl",)
    priority: ClassVar[int] = 10
    options: ClassVar[dict[str, str]] = {"branch": "leaf entry id of the branch to import; 'tree' records branch moves"}

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        first = head.split("\n", 1)[0]
        try:
            data = json.loads(first)
        except (ValueError, RecursionError):
            return False
        return isinstance(data, dict) and data.get("type") == "session" and "cwd" in data

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        branch = options.get("branch")
        lines = read_jsonl(path)
        problems = list(lines.problems)
        number, header = lines.lines[0]
        if lines.unreadable and lines.unreadable[0][0] < number:  # the header line itself is what could not be read
            first, reason = lines.unreadable[0]
            raise ImportFailure(f"{path}:{first}: {reason}, where a Pi session has its header (type 'session')")
        if not isinstance(header, dict) or header.get("type") != "session":
            raise ImportFailure(f"{path}:{number}: the first line is not a Pi session header (type 'session')")
        entries: list[dict[str, Any]] = []
        line_of: dict[int, int] = {}
        has_ids = int(header.get("version") or 1) >= 2  # v1 entries get theirs from `migrate`
        for number, data in lines.lines[1:]:
            if not isinstance(data, dict) or not isinstance(data.get("type"), str):
                problems.append(f"{path}:{number}: not a Pi entry (type {data.get('type') if isinstance(data, dict) else type(data).__name__!r}); skipped")
                continue
            if not is_known(data):
                what = "message entry without a known role" if data["type"] == "message" else f"unknown entry type {data['type']!r}"
                if has_ids and not data.get("id"):  # no entry can hang below it
                    problems.append(f"{path}:{number}: {what} without an id; skipped")
                    continue
                problems.append(f"{path}:{number}: {what}; kept as a marker")
            line_of[id(data)] = number
            entries.append(data)
        version = migrate(header, entries)
        by_id: dict[str, dict[str, Any]] = {}
        for entry in entries:
            if not entry.get("id"):
                raise ImportFailure(f"{path}:{line_of[id(entry)]}: entry without an id in a version {version} session")
            if entry["id"] in by_id:
                raise ImportFailure(f"{path}:{line_of[id(entry)]}: duplicate entry id {entry['id']!r}")
            by_id[entry["id"]] = entry
        for entry in entries:
            parent = entry.get("parentId")
            if parent is not None and parent not in by_id:
                problems.append(f"{path}:{line_of[id(entry)]}: parentId {parent!r} not in the file; entry treated as a root")
                entry["parentId"] = None
        leaves = sorted(set(by_id) - {e.get("parentId") for e in entries})
        builder = _Builder(path, problems, line_of=line_of)
        if branch == "tree":
            for previous, entry in _with_previous(entries):
                if previous is not None and entry.get("parentId") != previous["id"]:
                    builder.add(
                        id=f"branch-{entry['id']}",
                        kind="marker",
                        timestamp=entry.get("timestamp"),
                        meta={"event": "branch", "from": previous["id"], "to": entry.get("parentId")},
                    )
                builder.entry(entry)
            leaf = entries[-1]["id"] if entries else None
        else:
            leaf = branch if branch is not None else (entries[-1]["id"] if entries else None)
            if leaf is not None and leaf not in by_id:
                raise ImportFailure(f"{path}: branch={leaf!r} is not an entry id of this session (leaves: {', '.join(leaves)})")
            for entry in active_path(by_id, leaf):
                builder.entry(entry)
        meta = {
            "version": version,
            "migrated_from": version if version < CURRENT_SESSION_VERSION else None,
            "cwd": header.get("cwd"),
            "leaf": leaf,
            "leaves": leaves,
            "branch": branch,
            "entries": len(entries),
            "problems": problems,
        }
        pairing = TranscriptBuilder(path, "pi")
        pairing.adopt(builder.items)
        pairing.problems.extend(problems)
        pairing.model = header.get("modelId") or next((i.meta.get("model") for i in builder.items if i.meta.get("model")), None)
        source = {"session_id": header.get("id"), "provider": header.get("provider")}
        return [pairing.finish(str(header.get("id") or path.stem), source=source, meta=meta)]


def is_known(entry: Mapping[str, Any]) -> bool:
    """Whether an entry is of a type Pi writes (a message entry: with a role it knows, v2's `hookMessage` too)."""
    if entry["type"] == "message":
        message = entry.get("message")
        return isinstance(message, dict) and message.get("role") in MESSAGE_ROLES | {"hookMessage"}
    return entry["type"] in ENTRY_TYPES


def _with_previous(entries: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any]]]:
    previous = None
    for entry in entries:
        yield previous, entry
        previous = entry


def active_path(by_id: Mapping[str, dict[str, Any]], leaf: str | None) -> list[dict[str, Any]]:
    """Entries from the root to `leaf` (docs/specs/pi.md §1.1 `getBranch`)."""
    path: list[dict[str, Any]] = []
    seen: set[str] = set()
    current = leaf
    while current is not None and current not in seen:
        seen.add(current)
        path.append(by_id[current])
        current = by_id[current].get("parentId")
    return path[::-1]

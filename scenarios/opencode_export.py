"""Importer for OpenCode sessions: `OpenCodeImporter`, format "opencode" (docs/specs/opencode.md §7).

Two sources hold the same message/part objects (schema `packages/schema/src/v1/session.ts`):

- the JSON that ``opencode export [sessionID]`` writes (§7.3): ``{"info": Session.Info,
  "messages": [{"info": Message, "parts": [Part, ...]}, ...]}`` in chronological order;
- the SQLite database (§7.1, ``opencode.db``): tables ``session``, ``message`` (``data`` = the
  message info without ``id``/``sessionID``) and ``part`` (``data`` = the part without
  ``id``/``sessionID``/``messageID``); messages ordered by ``(time_created, id)``, parts by id. Every
  session of the database becomes one transcript.

Reading rules:

- user messages: the non-synthetic text parts form the real user item (file parts are its
  attachments: mime, filename, decoded size of a data URL); synthetic text parts (the automatic
  "Continue…" message, injected file contents) are synthetic user items; a ``compaction`` part is
  a marker ``{"event": "compaction", "auto", "overflow", "tail_start_id"}``;
- assistant messages: each ``step-start`` … ``step-finish`` span is one model response (a
  message without step parts is one response); ``text`` → assistant, ``reasoning`` → reasoning,
  ``tool`` → a tool call (input as JSON) and, after the response, its result: the output of a
  completed call (``meta["compacted"]`` when prune cleared it), the error text of a failed one,
  none for a call still pending or running; the ``step-finish`` tokens are the response's usage,
  on its last item (``input`` includes cache reads and writes, ``output`` includes reasoning:
  DESIGN §2);
- a summary assistant (``summary: true``, OpenCode's own compaction) is a marker
  ``{"event": "compaction-summary"}`` holding the summary text; an assistant ``error`` is a marker
  ``{"event": "error"}``;
- parts that are not model input (patch, snapshot, retry, agent, subtask, step parts themselves)
  are counted in ``meta["ignored_parts"]``; unusable messages and parts are listed in
  ``meta["problems"]``.

The legacy directory layout (§7.2, one JSON file per object) is not read.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import TranscriptBuilder, as_arguments, as_int, as_text
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Attachment, Transcript, Usage

FORMAT = "opencode"
SQLITE_MAGIC = "SQLite format 3"


def opencode_usage(tokens: Any) -> Usage | None:
    """OpenCode's normalized `tokens` (§1.2: input without cache, output without reasoning) as `Usage`."""
    if not isinstance(tokens, Mapping):
        return None
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), Mapping) else {}
    read, write = as_int(cache.get("read")), as_int(cache.get("write"))
    reasoning = as_int(tokens.get("reasoning"))
    usage = Usage(
        input=as_int(tokens.get("input")) + read + write,
        cached_input=read,
        cache_write=write,
        output=as_int(tokens.get("output")) + reasoning,
        reasoning=reasoning,
        total=as_int(tokens.get("total")),
    )
    return usage if usage.total else None


def file_attachment(part: Mapping[str, Any]) -> Attachment:
    """A file part: mime, filename, and the decoded size of a base64 data URL."""
    url = part.get("url") if isinstance(part.get("url"), str) else ""
    size = 0
    if url.startswith("data:") and ";base64," in url:
        size = len(url.split(";base64,", 1)[1]) * 3 // 4
    return Attachment(mime=str(part.get("mime") or "application/octet-stream"), name=str(part.get("filename") or ""), size=size)


class _Session:
    """Builds one transcript from OpenCode messages (each `{"info", "parts"}`)."""

    def __init__(self, path: Path) -> None:
        self.builder = TranscriptBuilder(path, FORMAT)
        self.ignored: Counter[str] = Counter()

    def add_message(self, where: str, info: Any, parts: Any) -> None:
        b = self.builder
        if not isinstance(info, Mapping) or info.get("role") not in ("user", "assistant"):
            b.problem(f"{where}: message without a user/assistant role; skipped")
            return
        if not isinstance(parts, list):
            b.problem(f"{where}: parts is not a list; message skipped")
            return
        parts = [p for p in parts if self._usable_part(where, p)]
        stamp = _timestamp(info)
        if info["role"] == "user":
            self._user(info, parts, stamp)
        elif info.get("summary"):
            text = "\n\n".join(str(p.get("text") or "").strip() for p in parts if p.get("type") == "text")
            b.add("marker", text, id=info.get("id"), timestamp=stamp, meta={"event": "compaction-summary", "parent": info.get("parentID")})
        else:
            self._assistant(info, parts, stamp)

    def _usable_part(self, where: str, part: Any) -> bool:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            self.builder.problem(f"{where}: a part without a type; skipped")
            return False
        return True

    def _user(self, info: Mapping[str, Any], parts: list[Mapping[str, Any]], stamp: str | None) -> None:
        b = self.builder
        real = [p for p in parts if p["type"] == "text" and not p.get("synthetic") and not p.get("ignored")]
        files = tuple(file_attachment(p) for p in parts if p["type"] == "file")
        for part in parts:
            if part["type"] == "compaction":
                meta = {"event": "compaction", "auto": bool(part.get("auto")), "overflow": bool(part.get("overflow"))}
                if part.get("tail_start_id"):
                    meta["tail_start_id"] = part["tail_start_id"]
                b.add("marker", id=part.get("id"), timestamp=stamp, meta=meta)
            elif part["type"] == "text" and (part.get("synthetic") or part.get("ignored")):
                b.add("user", str(part.get("text") or ""), id=part.get("id"), synthetic=True, timestamp=stamp)
            elif part["type"] not in ("text", "file"):
                self.ignored[part["type"]] += 1
        if real or files:
            text = "\n".join(str(p.get("text") or "") for p in real)
            b.add("user", text, id=info.get("id"), attachments=files, timestamp=stamp)

    def _assistant(self, info: Mapping[str, Any], parts: list[Mapping[str, Any]], stamp: str | None) -> None:
        b = self.builder
        if info.get("modelID"):
            b.model = str(info["modelID"])
        response: int | None = None
        results: list[Mapping[str, Any]] = []
        usage_seen = False

        def close() -> None:
            nonlocal response, results
            for part in results:
                self._result(part, stamp)
            response, results = None, []

        for part in parts:
            kind = part["type"]
            if kind == "step-start":
                close()
                self.ignored[kind] += 1
                continue
            if kind == "step-finish":
                if response is not None:
                    b.set_usage(response, opencode_usage(part.get("tokens")))
                    usage_seen = True
                close()
                self.ignored[kind] += 1
                continue
            if kind not in ("text", "reasoning", "tool"):
                self.ignored[kind] += 1
                continue
            if response is None:
                response = b.new_response()
            if kind == "text":
                b.add("assistant", str(part.get("text") or ""), id=part.get("id"), response=response, timestamp=stamp)
            elif kind == "reasoning":
                b.add("reasoning", str(part.get("text") or ""), id=part.get("id"), response=response, timestamp=stamp)
            else:
                state = part.get("state") if isinstance(part.get("state"), Mapping) else {}
                b.add(
                    "tool_call",
                    id=part.get("id"),
                    call_id=str(part.get("callID") or part.get("id")),
                    tool_name=str(part.get("tool") or ""),
                    arguments=as_arguments(state.get("input")),
                    response=response,
                    timestamp=stamp,
                )
                results.append(part)
        if response is not None and not usage_seen:
            b.set_usage(response, opencode_usage(info.get("tokens")))
        close()
        error = info.get("error")
        if isinstance(error, Mapping):
            data = error.get("data") if isinstance(error.get("data"), Mapping) else {}
            b.add("marker", str(data.get("message") or ""), timestamp=stamp, meta={"event": "error", "name": str(error.get("name") or "")})

    def _result(self, part: Mapping[str, Any], stamp: str | None) -> None:
        state = part.get("state") if isinstance(part.get("state"), Mapping) else {}
        status = state.get("status")
        if status not in ("completed", "error"):
            return
        times = state.get("time") if isinstance(state.get("time"), Mapping) else {}
        meta = {"compacted": times["compacted"]} if times.get("compacted") else {}
        attachments = tuple(file_attachment(a) for a in state.get("attachments") or () if isinstance(a, Mapping))
        self.builder.add(
            "tool_result",
            as_text(state.get("output") if status == "completed" else state.get("error")),
            id=f"{part.get('id')}.result" if part.get("id") else None,
            call_id=str(part.get("callID") or part.get("id")),
            tool_name=str(part.get("tool") or ""),
            is_error=status == "error",
            attachments=attachments,
            timestamp=stamp,
            meta=meta,
        )

    def finish(self, info: Mapping[str, Any], source: Mapping[str, Any]) -> Transcript:
        meta: dict[str, Any] = {}
        for key in ("title", "directory", "version", "slug"):
            if info.get(key):
                meta[key] = info[key]
        if self.ignored:
            meta["ignored_parts"] = dict(sorted(self.ignored.items()))
        return self.builder.finish(str(info.get("id") or self.builder.path.stem), source=source, meta=meta)


def _timestamp(info: Mapping[str, Any]) -> str | None:
    created = info.get("time", {}).get("created") if isinstance(info.get("time"), Mapping) else None
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        return None
    from datetime import datetime

    return datetime.fromtimestamp(created / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


class OpenCodeImporter(Importer):
    format = FORMAT
    description = "OpenCode sessions: `opencode export` JSON or the opencode.db SQLite database"
    suffixes = (".json", ".db")
    priority = 10

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if head.startswith(SQLITE_MAGIC):
            return _has_tables(path)
        stripped = head.lstrip()
        return stripped.startswith("{") and '"messages"' in head and '"parts"' in head and '"sessionID"' in head

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        if path.read_bytes()[: len(SQLITE_MAGIC)] == SQLITE_MAGIC.encode():
            return list(self._load_db(path))
        return [self._load_export(path)]

    def _load_export(self, path: Path) -> Transcript:
        data, utf8_problems = read_json_reported(path)
        if not isinstance(data, Mapping) or not isinstance(data.get("messages"), list):
            raise ImportFailure(f"{path}: not an `opencode export` file (expected an object with a 'messages' list)")
        info = data.get("info") if isinstance(data.get("info"), Mapping) else {}
        session = _Session(path)
        session.builder.problems.extend(utf8_problems)
        for n, message in enumerate(data["messages"]):
            if not isinstance(message, Mapping):
                session.builder.problem(f"messages[{n}]: not an object; skipped")
                continue
            session.add_message(f"messages[{n}]", message.get("info"), message.get("parts"))
        return session.finish(info, {"session": info.get("id"), "layout": "export"})

    def _load_db(self, path: Path) -> Iterable[Transcript]:
        try:
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise ImportFailure(f"{path}: cannot open the OpenCode database ({exc})") from None
        try:
            sessions = con.execute("SELECT * FROM session ORDER BY time_created, id").fetchall()
            columns = [c[0] for c in con.execute("SELECT * FROM session LIMIT 0").description]
            out = []
            for row in sessions:
                info = dict(zip(columns, row))
                out.append(self._db_session(path, con, info))
            return out
        except sqlite3.Error as exc:
            raise ImportFailure(f"{path}: not a readable OpenCode database ({exc})") from None
        finally:
            con.close()

    def _db_session(self, path: Path, con: sqlite3.Connection, info: Mapping[str, Any]) -> Transcript:
        sid = info["id"]
        session = _Session(path)
        parts: dict[str, list[Mapping[str, Any]]] = {}
        for part_id, message_id, data in con.execute(
            "SELECT id, message_id, data FROM part WHERE session_id = ? ORDER BY id", (sid,)
        ):
            loaded = _row_json(session, f"part {part_id}", data)
            if loaded is not None:
                parts.setdefault(message_id, []).append({**loaded, "id": part_id, "sessionID": sid, "messageID": message_id})
        for message_id, data in con.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (sid,)
        ):
            loaded = _row_json(session, f"message {message_id}", data)
            if loaded is not None:
                session.add_message(f"message {message_id}", {**loaded, "id": message_id, "sessionID": sid}, parts.get(message_id, []))
        return session.finish(info, {"session": sid, "layout": "sqlite"})


def _row_json(session: _Session, where: str, data: Any) -> dict[str, Any] | None:
    try:
        loaded = json.loads(data)
    except (TypeError, json.JSONDecodeError) as exc:
        session.builder.problem(f"{where}: data is not JSON ({exc}); skipped")
        return None
    if not isinstance(loaded, dict):
        session.builder.problem(f"{where}: data is not a JSON object; skipped")
        return None
    return loaded


def _has_tables(path: Path) -> bool:
    """An SQLite file with OpenCode's session, message and part tables."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return {"session", "message", "part"} <= names

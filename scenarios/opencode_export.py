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
  attachments: mime, filename, URL, decoded size of a data URL); synthetic text parts (the automatic
  "Continue…" message, injected file contents) are synthetic user items; ``ignored`` text parts
  are not model input (counted in ``meta["ignored_parts"]`` as ``text:ignored``); a
  ``compaction`` part is a marker ``{"event": "compaction", "auto", "overflow", "tail_start_id"}``;
  the items keep the stored order of the parts (the real user item where its first part is);
- assistant messages: each ``step-start`` … ``step-finish`` span is one model response (a
  message without step parts is one response); ``text`` → assistant, ``reasoning`` → reasoning,
  ``tool`` → a tool call (input as JSON) and, after the response, its result: the output of a
  completed call (``meta["compacted"]`` when prune cleared it), the error text of a failed one,
  and for a call still pending or running the error OpenCode sends for it, ``[Tool execution was
  interrupted]`` (§3.2); a tool part whose ``state`` is not an object, of an unknown status, or completed
  without ``output`` is a problem naming the part (read as a call without a result, or with an empty one);
  the ``step-finish`` tokens are the response's usage,
  on its last item (``input`` includes cache reads and writes, ``output`` includes reasoning:
  DESIGN §2; a count that is no token count is a problem and leaves the usage unknown);
- a summary assistant (``summary: true``, OpenCode's own compaction) is a marker
  ``{"event": "compaction-summary"}`` holding the summary text; an assistant ``error`` is a marker
  ``{"event": "error"}``. OpenCode never sends an errored assistant message again, unless it is a
  ``MessageAbortedError`` with a part other than step-start or reasoning (§3.2, ``skipped_by_opencode``):
  such a message is the marker alone, its text, reasoning, tool and step-finish parts kept in ``meta["parts"]``
  and its ``tokens`` in ``meta["tokens"]``, no conversation item and no response;
- parts that are not model input (patch, snapshot, retry, agent, subtask, step parts themselves)
  are counted in ``meta["ignored_parts"]``; unusable messages and parts are listed in
  ``meta["problems"]``.

Also read:

- the V2 ``session_message`` table of the database (§6.2, §7.1; schema
  `packages/schema/src/session-message.ts`), for sessions with no V1 ``message`` rows, in ``seq``
  order: ``user`` (text; files named by ``name``, located by ``source.uri``) → the real user item, then each
  of its activated ``skills`` with a text → a synthetic user item ``[Skill activated: name]`` and the text
  (upstream's `serializeRecentMessage`, compaction.ts@031a4a9c); ``synthetic``, ``system``, ``skill`` and
  ``shell`` (command, then ``output.output``) → synthetic user items; ``assistant`` (content: text,
  reasoning, tool with its state; tokens) → one model response and its tool results (a completed tool's
  text content, its files as attachments; a failed one's error message; a pending, running or streaming
  one the interrupted error, as V1's; tool states checked as V1's, with ``content``); a ``compaction`` row → a
  ``compaction-summary`` marker with its summary and recent text; switches and idle markers are
  not model input;
- the legacy per-file JSON storage (§7.2): the path of ``storage/session/<projectID>/<sessionID>.json``;
  its messages are ``storage/message/<sessionID>/*.json`` ordered by ``(time.created, id)`` and
  each message's parts ``storage/part/<messageID>/*.json`` ordered by id.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure, open_input
from compaction_bench.scenarios.builder import TranscriptBuilder, as_arguments, as_text, token_counts
from compaction_bench.scenarios.readers import read_json_reported
from compaction_bench.transcript import Attachment, Transcript, Usage

FORMAT = "opencode"
SQLITE_MAGIC = "SQLite format 3"
#: The error result OpenCode sends for a tool call still pending or running (§3.2).
INTERRUPTED_TOOL = "[Tool execution was interrupted]"
#: The parts of an assistant message that are model input.
MODEL_INPUT_PARTS = ("text", "reasoning", "tool")
#: What a skipped errored assistant message keeps in its marker: its model input and its steps' usage.
SKIPPED_KEPT_PARTS = (*MODEL_INPUT_PARTS, "step-finish")
#: The statuses of a V1 tool part's `state` (§3.2).
V1_TOOL_STATUSES = ("completed", "error", "pending", "running")
#: The statuses of a V2 tool's `state` (`packages/schema/src/session-message.ts` `ToolState`: streaming, running,
#: completed, error; pending as V1's).
V2_TOOL_STATUSES = ("completed", "error", "pending", "running", "streaming")


#: The token counts of OpenCode's `tokens` that `opencode_usage` reads.
OPENCODE_COUNTS = ("input", "output", "reasoning", "total", "cache.read", "cache.write")


def opencode_usage(tokens: Any, report: Callable[[str], None]) -> Usage | None:
    """OpenCode's normalized `tokens` (§1.2: input without cache, output without reasoning) as `Usage`; None
    when they are all 0, absent, or one is unusable (said through `report`)."""
    counts = token_counts(tokens, OPENCODE_COUNTS, report)
    if counts is None:
        return None
    read, write, reasoning = counts["cache.read"], counts["cache.write"], counts["reasoning"]
    usage = Usage(
        input=counts["input"] + read + write,
        cached_input=read,
        cache_write=write,
        output=counts["output"] + reasoning,
        reasoning=reasoning,
        total=counts["total"],
    )
    return usage if usage.total else None


def file_attachment(part: Mapping[str, Any]) -> Attachment:
    """A file part: mime, filename (V2: `name`), its URL (V2: `uri`, or `source.uri` when `source.type` is "uri", the
    location upstream's `serializeRecentMessage` names a file by, compaction.ts@031a4a9c) and the decoded size of a
    base64 data URL."""
    source = _mapping(part.get("source"))
    raw = part.get("url", part.get("uri", source.get("uri") if source.get("type") == "uri" else None))
    url = raw if isinstance(raw, str) else ""
    size = 0
    if url.startswith("data:") and ";base64," in url:
        size = len(url.split(";base64,", 1)[1]) * 3 // 4
    name = part.get("filename", part.get("name"))
    return Attachment(mime=str(part.get("mime") or "application/octet-stream"), name=str(name or ""), size=size, uri=url)


def skipped_by_opencode(info: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> bool:
    """Whether OpenCode leaves an assistant message out of every later request: it has an `error`, unless that is a
    `MessageAbortedError` and a part is other than step-start or reasoning (§3.2; anomalyco/opencode@007a9409
    packages/opencode/src/session/message-v2.ts `toModelMessagesEffect`)."""
    error = info.get("error")
    if not error:
        return False
    aborted = isinstance(error, Mapping) and error.get("name") == "MessageAbortedError"
    return not (aborted and any(p["type"] not in ("step-start", "reasoning") for p in parts))


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
        elif skipped_by_opencode(info, parts):
            self._skipped_assistant(info, parts, stamp)
        else:
            self._assistant(where, info, parts, stamp)

    def _usable_part(self, where: str, part: Any) -> bool:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            self.builder.problem(f"{where}: a part without a type; skipped")
            return False
        return True

    def _user(self, info: Mapping[str, Any], parts: list[Mapping[str, Any]], stamp: str | None) -> None:
        b = self.builder
        real = [p for p in parts if p["type"] == "text" and not p.get("synthetic") and not p.get("ignored")]
        files = tuple(file_attachment(p) for p in parts if p["type"] == "file")
        user_added = False

        def add_user() -> None:
            nonlocal user_added
            if not user_added:
                text = "\n".join(str(p.get("text") or "") for p in real)
                b.add("user", text, id=info.get("id"), attachments=files, timestamp=stamp)
                user_added = True

        for part in parts:
            kind = part["type"]
            if kind == "compaction":
                meta = {"event": "compaction", "auto": bool(part.get("auto")), "overflow": bool(part.get("overflow"))}
                if part.get("tail_start_id"):
                    meta["tail_start_id"] = part["tail_start_id"]
                b.add("marker", id=part.get("id"), timestamp=stamp, meta=meta)
            elif kind == "text" and part.get("ignored"):
                self.ignored["text:ignored"] += 1
            elif kind == "text" and part.get("synthetic"):
                b.add("user", str(part.get("text") or ""), id=part.get("id"), synthetic=True, timestamp=stamp)
            elif kind in ("text", "file"):
                add_user()
            else:
                self.ignored[kind] += 1

    def _assistant(self, where: str, info: Mapping[str, Any], parts: list[Mapping[str, Any]], stamp: str | None) -> None:
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
                    b.set_usage(response, opencode_usage(part.get("tokens"), b.reporter(place=where)))
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
                state = _tool_state(part, f"{where}: part {part.get('id')}", V1_TOOL_STATUSES, "output", b.problem)
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
            b.set_usage(response, opencode_usage(info.get("tokens"), b.reporter(place=where)))
        close()
        if info.get("error"):
            self._error_marker(info, stamp, {})

    def _skipped_assistant(self, info: Mapping[str, Any], parts: list[Mapping[str, Any]], stamp: str | None) -> None:
        """An errored assistant message OpenCode never sends again (`skipped_by_opencode`): its error marker, holding
        its model input and usage (`SKIPPED_KEPT_PARTS`, its `tokens`), so nothing is lost; the parts that are no
        model input are counted as ignored, as in any assistant message."""
        if info.get("modelID"):
            self.builder.model = str(info["modelID"])
        kept = [dict(p) for p in parts if p["type"] in SKIPPED_KEPT_PARTS]
        for part in parts:
            if part["type"] not in MODEL_INPUT_PARTS:
                self.ignored[part["type"]] += 1
        tokens = {"tokens": info["tokens"]} if info.get("tokens") else {}
        self._error_marker(info, stamp, ({"parts": kept} if kept else {}) | tokens)

    def _error_marker(self, info: Mapping[str, Any], stamp: str | None, kept: Mapping[str, Any]) -> None:
        """The marker `{"event": "error", "name"}` of an assistant message's error, its text the error's message."""
        error = _mapping(info.get("error"))
        data = _mapping(error.get("data"))
        meta = {"event": "error", "name": str(error.get("name") or ""), **kept}
        self.builder.add("marker", str(data.get("message") or ""), timestamp=stamp, meta=meta)

    def _result(self, part: Mapping[str, Any], stamp: str | None) -> None:
        """A tool part's result as OpenCode sends it (§3.2): a completed call's output, a failed call's error, and
        `INTERRUPTED_TOOL` as the error of a call still pending or running; a part of another status has none."""
        state = _mapping(part.get("state"))
        status = state.get("status")
        if status not in ("completed", "error", "pending", "running"):
            return
        times = _mapping(state.get("time"))
        meta = {"compacted": times["compacted"]} if times.get("compacted") else {}
        attachments = tuple(file_attachment(a) for a in state.get("attachments") or () if isinstance(a, Mapping))
        text = {"completed": state.get("output"), "error": state.get("error")}.get(status, INTERRUPTED_TOOL)
        self.builder.add(
            "tool_result",
            as_text(text),
            id=f"{part.get('id')}.result" if part.get("id") else None,
            call_id=str(part.get("callID") or part.get("id")),
            tool_name=str(part.get("tool") or ""),
            is_error=status != "completed",
            attachments=attachments,
            timestamp=stamp,
            meta=meta,
        )

    def add_v2(self, where: str, row: Mapping[str, Any]) -> None:
        """One V2 `session_message` row (§6.2, §6.3)."""
        b = self.builder
        kind = row.get("type")
        stamp = _timestamp(row)
        rid = str(row.get("id") or "")
        if kind == "user":
            files = tuple(file_attachment(f) for f in row.get("files") or () if isinstance(f, Mapping))
            b.add("user", as_text(row.get("text")), id=rid, attachments=files, timestamp=stamp)
            self._skills_v2(where, rid, row.get("skills"), stamp)
        elif kind in ("synthetic", "system", "skill"):
            b.add("user", as_text(row.get("text")), id=rid, synthetic=True, timestamp=stamp, meta={"opencode_type": kind})
        elif kind == "shell":
            output = row.get("output")
            output = output.get("output") if isinstance(output, Mapping) else output
            text = as_text(row.get("command")) + ("\n" + as_text(output) if output else "")
            b.add("user", text, id=rid, synthetic=True, timestamp=stamp, meta={"opencode_type": "shell"})
        elif kind == "assistant":
            self._assistant_v2(where, row, stamp)
        elif kind == "compaction":
            meta = {"event": "compaction-summary", "recent": as_text(row.get("recent")), "status": row.get("status"), "reason": row.get("reason")}
            b.add("marker", as_text(row.get("summary")), id=rid, timestamp=stamp, meta=meta)
        elif isinstance(kind, str):
            self.ignored[kind] += 1
        else:
            b.problem(f"{where}: a row without a type; skipped")

    def _skills_v2(self, where: str, rid: str, skills: Any, stamp: str | None) -> None:
        """A V2 user row's activated `skills`, each with a text a synthetic user item after the user's (a part of
        that message, as the V1 reader's synthetic parts): ``[Skill activated: name]`` and the text, as upstream's
        `serializeRecentMessage` writes them (compaction.ts@031a4a9c); a skill that is not an object is a problem."""
        for n, skill in enumerate(skills if isinstance(skills, list) else ()):
            if not isinstance(skill, Mapping):
                self.builder.problem(f"{where}: skills[{n}] is not an object; skipped")
            elif skill.get("text") is not None:
                name = as_text(skill.get("name"))
                text = f"[Skill activated: {name}]\n{as_text(skill['text'])}"
                self.builder.add("user", text, id=f"{rid}.skill{n}", synthetic=True, timestamp=stamp,
                                 meta={"opencode_type": "skill", "name": name})

    def _assistant_v2(self, where: str, row: Mapping[str, Any], stamp: str | None) -> None:
        b = self.builder
        content = row.get("content")
        if not isinstance(content, list):
            b.problem(f"{where}: assistant content is not a list; skipped")
            return
        model = row.get("model")
        if isinstance(model, Mapping) and model.get("id"):
            b.model = str(model["id"])
        response = b.new_response()
        tools = []
        for n, part in enumerate(content):
            if not isinstance(part, Mapping):
                b.problem(f"{where}: content[{n}] is not an object; skipped")
                continue
            pid = f"{row.get('id')}.{n}"
            if part.get("type") == "text":
                b.add("assistant", as_text(part.get("text")), id=pid, response=response, timestamp=stamp)
            elif part.get("type") == "reasoning":
                b.add("reasoning", as_text(part.get("text")), id=pid, response=response, timestamp=stamp)
            elif part.get("type") == "tool":
                state = _tool_state(part, f"{where}: content[{n}]", V2_TOOL_STATUSES, "content", b.problem)
                b.add("tool_call", id=pid, call_id=str(part.get("id") or pid), tool_name=str(part.get("name") or ""),
                      arguments=as_arguments(state.get("input")), response=response, timestamp=stamp)
                tools.append((pid, part, state))
            else:
                self.ignored[str(part.get("type"))] += 1
        b.set_usage(response, opencode_usage(row.get("tokens"), b.reporter(place=where)))
        for pid, part, state in tools:
            status = state.get("status")
            if status not in V2_TOOL_STATUSES:
                continue
            content = [c for c in state.get("content") or () if isinstance(c, Mapping)]
            texts = [as_text(c.get("text")) for c in content if c.get("type") == "text"]
            # `serializeToolContent`: an item that is not text is a file, `[Attached mime: name]`
            files = tuple(file_attachment(c) for c in content if c.get("type") != "text")
            error = state.get("error")
            if status == "error":
                texts, files = [as_text(error.get("message") if isinstance(error, Mapping) else error)], ()
            elif status != "completed":
                texts = [INTERRUPTED_TOOL]
            b.add("tool_result", "\n".join(texts), id=f"{pid}.result", call_id=str(part.get("id") or pid),
                  tool_name=str(part.get("name") or ""), is_error=status != "completed", attachments=files,
                  timestamp=stamp)

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
        if stripped.startswith("{") and _legacy_root(path) is not None:
            return True
        return stripped.startswith("{") and '"messages"' in head and '"parts"' in head and '"sessionID"' in head

    def load(self, path: Path, **options: Any) -> list[Transcript]:
        with open_input(path) as fh:
            database = fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC.encode()
        if database:
            return list(self._load_db(path))
        root = _legacy_root(path)
        if root is not None:
            return [self._load_legacy(path, root)]
        return [self._load_export(path)]

    def _load_legacy(self, path: Path, root: Path) -> Transcript:
        """§7.2: the session file, its message files and their part files."""
        data, problems = read_json_reported(path)
        if not isinstance(data, Mapping):
            raise ImportFailure(f"{path}: not an OpenCode session file (expected a JSON object)")
        info: Mapping[str, Any] = data
        sid = str(info.get("id") or path.stem)
        session = _Session(path)
        session.builder.problems.extend(problems)
        messages = []
        for file in sorted((root / "message" / sid).glob("*.json")):
            data, file_problems = read_json_reported(file)
            session.builder.problems.extend(file_problems)
            if not isinstance(data, Mapping):
                session.builder.problem(f"{file}: not a JSON object; skipped")
                continue
            messages.append((_created(data), str(data.get("id") or file.stem), file, data))
        for _, mid, file, data in sorted(messages, key=lambda m: (m[0], m[1])):
            parts = []
            for part_file in sorted((root / "part" / mid).glob("*.json")):
                part, part_problems = read_json_reported(part_file)
                session.builder.problems.extend(part_problems)
                parts.append(part)
            parts.sort(key=lambda p: str(p.get("id") or "") if isinstance(p, Mapping) else "")
            session.add_message(str(file.name), data, parts)
        return session.finish(info, {"session": sid, "layout": "legacy-storage"})

    def _load_export(self, path: Path) -> Transcript:
        data, utf8_problems = read_json_reported(path)
        if not isinstance(data, Mapping) or not isinstance(data.get("messages"), list):
            raise ImportFailure(f"{path}: not an `opencode export` file (expected an object with a 'messages' list)")
        info = _mapping(data.get("info"))
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
                info = dict(zip(columns, row, strict=True))
                out.append(self._db_session(path, con, info))
            return out
        except sqlite3.Error as exc:
            raise ImportFailure(f"{path}: not a readable OpenCode database ({exc})") from None
        finally:
            con.close()

    def _db_session(self, path: Path, con: sqlite3.Connection, info: Mapping[str, Any]) -> Transcript:
        sid = info["id"]
        session = _Session(path)
        v1_rows = _table_exists(con, "message") and con.execute("SELECT 1 FROM message WHERE session_id = ? LIMIT 1", (sid,)).fetchone()
        if _table_exists(con, "session_message") and not v1_rows:
            for row_id, kind, data in con.execute(
                "SELECT id, type, data FROM session_message WHERE session_id = ? ORDER BY seq", (sid,)
            ):
                loaded = _row_json(session, f"session_message {row_id}", data)
                if loaded is not None:
                    session.add_v2(f"session_message {row_id}", {**loaded, "id": row_id, "type": kind})
            return session.finish(info, {"session": sid, "layout": "sqlite-v2"})
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


def _tool_state(
    part: Mapping[str, Any], where: str, statuses: tuple[str, ...], output: str, problem: Callable[[str], None]
) -> Mapping[str, Any]:
    """A tool part's `state`; a state that is not an object, of a status not in `statuses`, or completed without
    its `output` field (V1 `output`, V2 `content`) is a problem naming the part (the part is read as before all the
    same: a call without a result, or an empty result)."""
    state = part.get("state")
    if not isinstance(state, Mapping):
        problem(f"{where}: tool state is not an object")
        return {}
    status = state.get("status")
    if status not in statuses:
        problem(f"{where}: unknown tool status {status!r}")
    elif status == "completed" and output not in state:
        problem(f"{where}: completed tool without {output!r}")
    return state


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def _created(info: Mapping[str, Any]) -> float:
    created = info.get("time", {}).get("created") if isinstance(info.get("time"), Mapping) else None
    return float(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else 0.0


def _legacy_root(path: Path) -> Path | None:
    """`<root>` when `path` is `<root>/session/<projectID>/<sessionID>.json` and `<root>/message` exists."""
    if path.suffix != ".json" or len(path.parents) < 3 or path.parents[1].name != "session":
        return None
    root = path.parents[2]
    return root if (root / "message").is_dir() else None


def _table_exists(con: sqlite3.Connection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


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
    return {"session", "message", "part"} <= names or {"session", "session_message"} <= names

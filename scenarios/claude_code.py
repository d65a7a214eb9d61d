"""Importer for Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`).

Owns the Claude Code reading rules (MANIFEST "claude-code-jsonl"):

- the file is a tree of lines linked by `parentUuid`; the live branch is followed back from the
  chain's last line (across a compaction, `compact_boundary.logicalParentUuid` links the branch
  to the history it compacted). Lines of the same chain that are not on the live branch are
  counted in `meta["off_branch"]`;
- `isSidechain` lines (Task subagents) are kept apart: `chain="main"` (default) imports the main
  chain, `chain="sidechains"` one transcript per subagent run, `chain="all"` both. A file where
  every line is a sidechain (a subagent transcript, `agent-*.jsonl`) imports its sidechains;
- assistant lines are grouped by `message.id` into one model response whose usage counts once
  (the last copy wins: streamed copies grow); Anthropic usage becomes `Usage(input = input +
  cache_read + cache_creation, cached_input = cache_read, cache_write = cache_creation, output)`
  (a count that is no token count is a problem, and that copy's usage is not used: `builder.token_counts`);
- Claude Code writes an assistant line of model `<synthetic>` for what no API call answered. One that records a
  failed call (`isApiErrorMessage: true`: "API Error: 529 …", "Prompt is too long", a usage limit) is an
  `{"event": "api-error", "error"}` marker holding its text: the API normaliser drops it from every request
  (2.0.57 `Py3` in `BZ`, cc@2.0.57 cli.js L4125; 2.1.112 `sY7` in `K0`, cc@2.1.112 cli.js L5257, L5262), and the
  call billed nothing. Any other (2.0.57 `xD`: "No response requested." after a resumed conversation that ended
  with a user message, L1923) is sent as an assistant message by both normalisers, so its items are kept, but
  without a `response`: no model answered it, so the replay sends and bills no request for it and hands its items
  to the strategy as input. `meta["api_errors"]` and `meta["unsent_responses"]` count these lines;
- `tool_use` blocks are tool calls, `tool_result` blocks in user lines their results (placed
  before the line's own text, which opens a new turn: the results answer the previous response);
  `isMeta` user lines (command caveats, injected notes) are synthetic;
- `system/compact_boundary` is a marker `{"event": "compaction", "trigger", "preTokens"}` (a manual
  one also `"instructions"`: the text typed after `/compact`, from the command line Claude Code
  records after the boundary and its summary, up to the next model response; "" when none), the
  `isCompactSummary` user line that follows it a marker `{"event": "compaction-summary"}` holding
  the summary text. A `local_command` line (a slash command and its output, `<local-command-stdout>…`) is a
  synthetic user item (`meta["event"] = "local-command"`) when the line's `version` is 2.1.63 or later, whose
  normaliser sends it as user text (`case"system"`, cc@2.1.63 cli.js L5869; 2.1.112 `mq7`, L5260, L5262); 2.1.62
  (L5860) and earlier, 2.0.57 among them (`BZ`, L4125), drop every system line, so there, and for a line without a
  readable version, it is a `system-notice` marker like every other system line;
- Claude Code's own lines that are not messages are counted in `meta["skipped"]` by type: title
  `summary`, `file-history-snapshot`, `queue-operation`, and any other line that carries the session
  envelope (`sessionId`; e.g. `attachment` or `progress` lines of later versions). A parent link
  through such a line is followed to the message it hangs from. Every other line (a Codex or
  OpenAI-message line pasted into the file, a user/assistant/system line without a `uuid`) is a
  problem naming its line (`meta["problems"]`): nothing is left out unreported;
- the transcript's `source` holds `session_id`, `chain` and `version`, and where the lines record them
  `cwd`, `slug` (the session's plan-file name) and `agent_id` (a sub-agent's id): the first value on the
  branch.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from compaction_bench.importing import Importer, ImportFailure
from compaction_bench.scenarios.builder import (
    TranscriptBuilder,
    as_arguments,
    as_text,
    image_attachment,
    mapping_of,
    token_counts,
)
from compaction_bench.scenarios.readers import read_jsonl
from compaction_bench.transcript import Item, Transcript, Usage

FORMAT = "claude-code"
CHAINS = ("main", "sidechains", "all")
NODE_TYPES = ("user", "assistant", "system")
#: Claude Code's own non-message lines that carry no session envelope (MANIFEST, specs/claude-code.md §1.1).
OWN_TYPES = frozenset({"summary", "file-history-snapshot", "queue-operation"})
#: The model name of an assistant line Claude Code wrote itself, no model (2.0.57 `bH9`, cc@2.0.57 cli.js L4125).
SYNTHETIC_MODEL = "<synthetic>"
#: What `_synthetic_kind` says of such a line: a failed API call's (also its marker's event), or another.
API_ERROR = "api-error"
UNSENT = "unsent"
#: The first version whose API normaliser sends `system/local_command` lines as user text (bisected on the npm
#: tarballs: 2.1.62 drops them, 2.1.63 keeps them; 2.0.57, 2.0.77, 2.1.0, 2.1.30, 2.1.41, 2.1.53, 2.1.58 and 2.1.61
#: drop them, 2.1.69 and 2.1.112 keep them).
LOCAL_COMMANDS_SENT_FROM = (2, 1, 63)
VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


#: The token counts of an Anthropic `usage` object that `anthropic_usage` reads.
ANTHROPIC_COUNTS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


def anthropic_usage(data: Any, report: Callable[[str], None]) -> Usage | None:
    """Anthropic usage as `Usage`; None when none is recorded or a count is unusable (said through `report`)."""
    counts = token_counts(data, ANTHROPIC_COUNTS, report)
    if counts is None:
        return None
    read, write = counts["cache_read_input_tokens"], counts["cache_creation_input_tokens"]
    return Usage(input=counts["input_tokens"] + read + write, cached_input=read, cache_write=write, output=counts["output_tokens"])


def _first_text(branch: list[_Line], field: str) -> str | None:
    """The first non-empty string a line of the branch has in `field` (None when no line has one)."""
    return next((n.data[field] for n in branch if isinstance(n.data.get(field), str) and n.data[field]), None)


class _Line:
    """One tree node: a user, assistant or system line with its line number."""

    __slots__ = ("number", "data", "uuid", "parent")

    def __init__(self, number: int, data: Mapping[str, Any]) -> None:
        self.number = number
        self.data = data
        self.uuid = str(data["uuid"])
        parent = data.get("parentUuid")
        if parent is None and data.get("subtype") == "compact_boundary":
            parent = data.get("logicalParentUuid")
        self.parent = str(parent) if parent else None


class ClaudeCodeImporter(Importer):
    format = FORMAT
    description = "Claude Code session JSONL (~/.claude/projects/*/<session>.jsonl), main chain or subagent sidechains"
    suffixes = (".jsonl",)
    priority = 50
    options = {"chain": "main (default), sidechains or all"}

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return ('"parentUuid"' in head and '"sessionId"' in head) or (
            head.lstrip().startswith('{"type":"summary"') and '"leafUuid"' in head
        )

    def load(self, path: Path, *, chain: str = "main", **options: Any) -> list[Transcript]:
        if chain not in CHAINS:
            raise ImportFailure(f"{path}: unknown chain {chain!r}; expected one of {', '.join(CHAINS)}")
        read = read_jsonl(path)
        problems = list(read.problems)
        nodes: dict[str, _Line] = {}
        order: list[_Line] = []
        skipped: Counter[str] = Counter()
        links: dict[str, str | None] = {}  # uuid -> parent of the skipped lines that sit in the tree
        for number, data in read.lines:
            if not isinstance(data, Mapping):
                problems.append(f"{path}:{number}: expected a JSON object, got {type(data).__name__}; line kept out")
                continue
            kind = data.get("type")
            if kind not in NODE_TYPES or not data.get("uuid"):
                self._not_a_node(path, number, data, skipped, links, problems)
                continue
            node = _Line(number, data)
            if node.uuid in nodes:
                problems.append(f"{path}:{number}: repeated uuid {node.uuid} (first on line {nodes[node.uuid].number}); the later line wins")
            nodes[node.uuid] = node
            order.append(node)
        if not order:
            raise ImportFailure(f"{path}: no user, assistant or system line (is this a Claude Code session log?)")
        if links:
            self._link_through(order, nodes, links)
        main = [n for n in order if not n.data.get("isSidechain")]
        side = [n for n in order if n.data.get("isSidechain")]
        chains: list[tuple[str, list[_Line]]] = []
        if chain in ("main", "all") and main:
            chains.append(("main", main))
        if chain in ("sidechains", "all") or not main:
            chains.extend((f"sidechain-{n}", group) for n, group in enumerate(self._sidechains(side, nodes)))
        if not chains:
            raise ImportFailure(f"{path}: no {chain} chain in this file")
        base_meta = {"skipped": dict(skipped)} if skipped else {}
        return [self._transcript(path, name, group, nodes, problems, base_meta) for name, group in chains]

    @staticmethod
    def _not_a_node(
        path: Path, number: int, data: Mapping[str, Any], skipped: Counter[str], links: dict[str, str | None], problems: list[str]
    ) -> None:
        """A line that is no message of the tree: Claude Code's own (counted in `skipped`, its parent
        link kept in `links`), or foreign or damaged (a problem)."""
        kind = data.get("type")
        if kind in NODE_TYPES:
            problems.append(f"{path}:{number}: a {kind} line without a uuid cannot be placed in the session; line kept out")
        elif kind in OWN_TYPES or (isinstance(kind, str) and "sessionId" in data):
            skipped[kind] += 1
            if data.get("uuid"):
                parent = data.get("parentUuid")
                links[str(data["uuid"])] = str(parent) if parent else None
        else:
            what = f"type {kind!r}" if "type" in data else f"no type field; keys {', '.join(map(str, list(data)[:4]))}"
            problems.append(f"{path}:{number}: not a Claude Code line ({what}); line kept out")

    @staticmethod
    def _link_through(order: list[_Line], nodes: Mapping[str, _Line], links: Mapping[str, str | None]) -> None:
        """Point a message whose parent is a skipped line (an attachment, a progress line) at the
        message that line hangs from."""
        for node in order:
            parent, seen = node.parent, set()
            while parent is not None and parent not in nodes and parent in links and parent not in seen:
                seen.add(parent)
                parent = links[parent]
            node.parent = parent

    @staticmethod
    def _root(node: _Line, nodes: Mapping[str, _Line]) -> str:
        seen = {node.uuid}
        while node.parent is not None and node.parent in nodes and node.parent not in seen:
            node = nodes[node.parent]
            seen.add(node.uuid)
        return node.uuid

    def _sidechains(self, side: list[_Line], nodes: Mapping[str, _Line]) -> list[list[_Line]]:
        """Sidechain lines grouped by the root they descend from (one group per subagent run)."""
        groups: dict[str, list[_Line]] = {}
        for node in side:
            groups.setdefault(self._root(node, nodes), []).append(node)
        return list(groups.values())

    @staticmethod
    def _branch(group: list[_Line], nodes: Mapping[str, _Line], problems: list[str], path: Path) -> list[_Line]:
        """The live branch: from the group's last line back along parent links, in file order."""
        branch = [group[-1]]
        seen = {group[-1].uuid}
        while branch[-1].parent is not None:
            parent = branch[-1].parent
            if parent in seen:
                problems.append(f"{path}:{branch[-1].number}: parent link loops back to {parent}; branch cut here")
                break
            if parent not in nodes:
                problems.append(f"{path}:{branch[-1].number}: parent {parent} is not in the file; branch starts here")
                break
            branch.append(nodes[parent])
            seen.add(parent)
        return branch[::-1]

    def _transcript(
        self,
        path: Path,
        name: str,
        group: list[_Line],
        nodes: Mapping[str, _Line],
        problems: list[str],
        base_meta: Mapping[str, Any],
    ) -> Transcript:
        builder = TranscriptBuilder(path, FORMAT)
        builder.problems.extend(problems)
        branch = self._branch(group, nodes, builder.problems, path)
        responses: dict[str, int] = {}
        for node in branch:
            data = node.data
            timestamp = data.get("timestamp") if isinstance(data.get("timestamp"), str) else None
            if data["type"] == "assistant":
                self._assistant(builder, node, responses, timestamp)
            elif data["type"] == "user":
                self._user(builder, node, timestamp)
            else:
                self._system(builder, node, timestamp)
        _attach_compact_instructions(builder.items)
        on_branch = {n.uuid for n in branch}
        meta = dict(base_meta)
        meta["chain"] = name
        off = sum(1 for n in group if n.uuid not in on_branch)
        if off:
            meta["off_branch"] = off
        synthetic = Counter(_synthetic_kind(n.data) for n in branch if n.data["type"] == "assistant")
        for key, kind in (("api_errors", API_ERROR), ("unsent_responses", UNSENT)):
            if synthetic[kind]:
                meta[key] = synthetic[kind]
        session = next((n.data.get("sessionId") for n in branch if n.data.get("sessionId")), path.stem)
        cwd = _first_text(branch, "cwd")
        source = {"session_id": session, "chain": name, "version": branch[-1].data.get("version"), **({"cwd": cwd} if cwd else {})}
        # The session's plan-file name and the sub-agent's id (2.0.x+ lines), which name the files a compaction
        # leaves out (specs/claude-code.md §4.2): the first slug, as Claude Code's resume takes it (2.0.57 `s01`).
        for key, field in (("slug", "slug"), ("agent_id", "agentId")):
            if (value := _first_text(branch, field)) is not None:
                source[key] = value
        return builder.finish(str(session) if name == "main" else f"{session}:{name}", source=source, meta=meta)

    @staticmethod
    def _assistant(builder: TranscriptBuilder, node: _Line, responses: dict[str, int], timestamp: str | None) -> None:
        message = node.data.get("message")
        if not isinstance(message, Mapping):
            builder.problem("assistant line without a message object; kept as a marker", node.number)
            builder.add("marker", id=node.uuid, meta={"event": "unreadable-line"}, timestamp=timestamp)
            return
        content = message.get("content")
        synthetic = _synthetic_kind(node.data)
        if synthetic == API_ERROR:
            error = node.data.get("error")
            meta = {"event": API_ERROR, **({"error": error} if isinstance(error, str) else {})}
            builder.add("marker", as_text(content), id=node.uuid, timestamp=timestamp, meta=meta)
            return
        first = len(builder.items)
        message_id = str(message.get("id") or node.uuid)
        response: int | None = None
        if synthetic is None:
            if message_id not in responses:
                responses[message_id] = builder.new_response()
            response = responses[message_id]
            model = message.get("model")
            if isinstance(model, str) and not model.startswith("<"):
                builder.model = builder.model or model
            builder.set_usage(response, anthropic_usage(message.get("usage"), builder.reporter(node.number)))
        ClaudeCodeImporter._content(builder, node, content, message_id, response, timestamp)
        if synthetic is not None:  # no model answered it: its items are input, no response (no request is sent for it)
            for n in range(first, len(builder.items)):
                if builder.items[n].is_model_output:
                    builder.items[n] = replace(builder.items[n], response=None)

    @staticmethod
    def _content(
        builder: TranscriptBuilder, node: _Line, content: Any, message_id: str, response: int | None, timestamp: str | None
    ) -> None:
        """The items of an assistant line's content (a string or content blocks), in `response` (None: each model-output
        item opens one, which `_assistant` takes off again)."""
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            builder.add("assistant", id=node.uuid, response=response, timestamp=timestamp, meta={"message_id": message_id})
            return
        for block in blocks:
            kind = block.get("type") if isinstance(block, Mapping) else None
            common: dict[str, Any] = {"response": response, "timestamp": timestamp}
            if kind == "text":
                builder.add("assistant", as_text(block.get("text")), id=node.uuid, meta={"message_id": message_id}, **common)
            elif kind in ("thinking", "redacted_thinking"):
                text = block.get("thinking") if kind == "thinking" else ""
                builder.add("reasoning", as_text(text), id=node.uuid, meta={"redacted": kind == "redacted_thinking"}, **common)
            elif kind in ("tool_use", "server_tool_use"):
                call_id = str(block.get("id") or f"{node.uuid}-call")
                builder.add(
                    "tool_call",
                    id=call_id,
                    call_id=call_id,
                    tool_name=str(block.get("name") or ""),
                    arguments=as_arguments(block.get("input")),
                    **common,
                )
            else:
                builder.problem(f"unknown assistant content block {kind!r}; kept as a marker", node.number)
                builder.add("marker", json.dumps(block, ensure_ascii=False), id=node.uuid, meta={"event": "unknown-block"}, timestamp=timestamp)

    @staticmethod
    def _user(builder: TranscriptBuilder, node: _Line, timestamp: str | None) -> None:
        data = node.data
        message = data.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if data.get("isCompactSummary"):
            builder.add("marker", as_text(content), id=node.uuid, timestamp=timestamp, meta={"event": "compaction-summary"})
            return
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            builder.problem("user line without message content; kept as an empty user message", node.number)
            blocks = []
        texts, attachments = [], []
        for block in blocks:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind == "tool_result":
                result = block.get("content")
                images = [b for b in result if isinstance(b, Mapping) and b.get("type") == "image"] if isinstance(result, list) else []
                builder.add(
                    "tool_result",
                    as_text(result),
                    id=f"{node.uuid}:{block.get('tool_use_id')}",
                    call_id=str(block.get("tool_use_id") or f"missing-call-{node.uuid}"),
                    is_error=bool(block.get("is_error")),
                    attachments=tuple(_image(b) for b in images),
                    timestamp=timestamp,
                )
            elif kind == "image":
                attachments.append(_image(block))
            elif kind == "text":
                texts.append(as_text(block.get("text")))
            else:
                builder.problem(f"unknown user content block {kind!r}; its text is kept in the user message", node.number)
                texts.append(as_text([block]))
        if texts or attachments or not blocks:
            builder.add(
                "user",
                "\n".join(texts),
                id=node.uuid,
                attachments=tuple(attachments),
                synthetic=bool(data.get("isMeta")),
                timestamp=timestamp,
            )

    @staticmethod
    def _system(builder: TranscriptBuilder, node: _Line, timestamp: str | None) -> None:
        data = node.data
        if data.get("subtype") == "compact_boundary":
            recorded = mapping_of(data.get("compactMetadata"))
            meta = {"event": "compaction", "trigger": recorded.get("trigger"), "preTokens": recorded.get("preTokens")}
            builder.add("marker", as_text(data.get("content")), id=node.uuid, timestamp=timestamp, meta=meta)
        elif data.get("subtype") == "local_command" and _version(data) >= LOCAL_COMMANDS_SENT_FROM:
            builder.add("user", as_text(data.get("content")), id=node.uuid, synthetic=True, timestamp=timestamp, meta={"event": "local-command"})
        else:
            meta = {"event": "system-notice", "subtype": data.get("subtype"), "level": data.get("level")}
            builder.add("marker", as_text(data.get("content")), id=node.uuid, timestamp=timestamp, meta=meta)


#: The line Claude Code records for a typed `/compact`, and the text typed after it.
COMPACT_COMMAND = "<command-name>/compact</command-name>"
COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def _attach_compact_instructions(items: list[Item]) -> None:
    """Give each manual compaction's marker `meta["instructions"]`: the text typed after `/compact`
    (trimmed), read from the command line recorded after the boundary and its summary, up to the next
    model response or compaction (typed before the compaction, it is written after it)."""
    for n, item in enumerate(items):
        if item.kind != "marker" or item.meta.get("event") != "compaction" or item.meta.get("trigger") != "manual":
            continue
        for later in items[n + 1 :]:
            if later.is_model_output or (later.kind == "marker" and later.meta.get("event") == "compaction"):
                break
            if later.kind == "user" and COMPACT_COMMAND in later.text:
                found = COMMAND_ARGS.search(later.text)
                items[n] = replace(item, meta={**item.meta, "instructions": found.group(1).strip() if found else ""})
                break


def _synthetic_kind(data: Mapping[str, Any]) -> str | None:
    """Of an assistant line Claude Code wrote itself (model `SYNTHETIC_MODEL`): `API_ERROR` for a failed call's (the
    normaliser's predicate, `isApiErrorMessage === true` and that model: 2.0.57 `Py3`, 2.1.112 `sY7`), `UNSENT` for any
    other; None for a model's response."""
    message = mapping_of(data.get("message"))
    if message.get("model") != SYNTHETIC_MODEL:
        return None
    return API_ERROR if data.get("isApiErrorMessage") is True else UNSENT


def _version(data: Mapping[str, Any]) -> tuple[int, ...]:
    """The Claude Code version a line records (`"2.1.63"` → (2, 1, 63)); () when it records none readable."""
    version = data.get("version")
    found = VERSION.match(version) if isinstance(version, str) else None
    return tuple(map(int, found.groups())) if found else ()


def _image(block: Mapping[str, Any]) -> Any:
    source = mapping_of(block.get("source"))
    return image_attachment(str(source.get("media_type") or ""), source.get("data"))

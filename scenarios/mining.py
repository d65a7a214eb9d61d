"""Probe mining: deterministic probes from any transcript (`bench probes mine FILE`).

Six families (DESIGN §6), each probe with the item where its fact first appears (`source`) and an
answer that occurs verbatim in the transcript:
- artifact: the files read and the files modified while handling one user request (set match),
  from file-tool arguments and `apply_patch` headers;
- error: the exact error line of a failing tool result (the last exception/error line, or the
  first line of a result flagged as an error; file reads count only when flagged);
- constraint: a user instruction sentence with must / never / don't / do not / always / only;
- recall: the exit code a command reported in its output (number match, the command as evidence)
  and the exact command behind a described shell call;
- continuation: a plan the assistant stated ("next", "I'll", "let me", ...), judged;
- decision: a choice the assistant gave a reason for ("because", "instead of", ...), judged.

The first four are graded without a model; the two judged families are capped so they make up at
most 30% of the probes (the issue's "at least 70% without a model"). Within a family, candidates
are taken evenly across the session, at most `per_kind` of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from compaction_bench.probes import Probe
from compaction_bench.transcript import Item, Transcript

PER_KIND = 8
JUDGED_SHARE = 0.3
MAX_ANSWER = 300
MIN_SENTENCE = 12

PATH_KEYS = ("file_path", "path", "filePath", "filename", "notebook_path", "file")
READ_TOOLS = frozenset({"read", "read_file", "readfile", "view", "view_file", "open", "open_file", "cat", "notebookread"})
MODIFY_TOOLS = frozenset(
    {"edit", "write", "multiedit", "create", "write_file", "edit_file", "create_file", "str_replace", "notebookedit", "replace", "patch"}
)
EDITOR_TOOLS = frozenset({"str_replace_based_edit_tool", "str_replace_editor", "text_editor"})
PATCH_HEADER = re.compile(r"\*\*\* (?:Update|Add|Delete) File: ([^\n\\\"]+)")
COMMAND_KEYS = ("command", "cmd", "script")
EXIT_PHRASE = re.compile(r"(?:exit code|exited with code|exit status|returned non-zero exit status)[:\s]+(-?\d+)", re.I)
ERROR_LINE = re.compile(
    r"^\s*(?:[\w.]*(?:Error|Exception)\b:?.*|(?:KeyboardInterrupt|SystemExit)\b.*|error(?:\[\w+\])?:.*|fatal:.*|FAILED\b.*|E\s{2,}\S.*|.*\berror TS\d+:.*)$"
)
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
CONSTRAINT = re.compile(r"\b(must|never|don't|do not|always|only)\b", re.I)
CONTINUATION = re.compile(r"\b(next,? I|I'll|I will|let me|then I|my plan|the plan is|I'm going to|I am going to)\b", re.I)
DECISION = re.compile(r"\b(because|instead of|rather than|decided|I chose|we chose|so that)\b", re.I)
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{3,}")
STOPWORDS = frozenset(
    "this that with from have will would should could there their them then than what when where which while "
    "your yours into about just also only must never always don't make sure like want need here some more "
    "because instead rather decided next plan going let's".split()
)


@dataclass(frozen=True)
class _Candidate:
    kind: str
    question: str
    answer: str | list[str]
    match: str
    source: str
    evidence: tuple[str, ...] = ()


def _arguments(item: Item) -> dict:
    try:
        data = json.loads(item.arguments or "")
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _command(item: Item) -> str:
    args = _arguments(item)
    for key in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, list) and value:
            value = value[-1]  # ["bash", "-lc", "..."]: the script
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _file_access(item: Item) -> tuple[list[str], list[str]]:
    """(paths read, paths modified) by one tool call."""
    name = (item.tool_name or "").lower()
    args = _arguments(item)
    path = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
    patched = PATCH_HEADER.findall(item.arguments or "")
    if patched:
        return [], [p.strip() for p in patched]
    if path is None:
        return [], []
    if name in EDITOR_TOOLS:
        return ([path], []) if args.get("command") == "view" else ([], [path])
    if name in READ_TOOLS:
        return [path], []
    if name in MODIFY_TOOLS:
        return [], [path]
    return [], []


def _sentences(text: str) -> Iterator[str]:
    for raw in SENTENCE_SPLIT.split(text):
        sentence = raw.strip(" \t-*>#")
        if MIN_SENTENCE <= len(sentence) <= MAX_ANSWER and sentence in text:
            yield sentence


def _topic(sentence: str, exclude: re.Pattern[str]) -> str:
    """A few content words of the sentence (not the trigger word) that point the question at it."""
    words = [w for w in WORD.findall(exclude.sub(" ", sentence)) if w.lower() not in STOPWORDS]
    return ", ".join(words[:4])


def _short(text: str, limit: int = 80) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _request_label(user: Item | None) -> str:
    return f"the user request that begins {_short(user.text, 60)!r}" if user and user.text.strip() else "the opening request"


def _artifacts(transcript: Transcript) -> Iterator[_Candidate]:
    for turn in transcript.turns():
        label = _request_label(turn.user)
        for role, question in ((1, "modified"), (0, "read")):
            files: list[str] = []
            source = ""
            for item in turn.items:
                if item.kind != "tool_call":
                    continue
                for path in _file_access(item)[role]:
                    if path not in files and path in (item.arguments or ""):
                        files.append(path)
                        source = item.id
            if files:
                yield _Candidate("artifact", f"Which files were {question} while working on {label}?", files, "set", source)


def _error_line(text: str, flagged: bool) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    matches = [line for line in lines if ERROR_LINE.match(line)]
    if matches:
        return matches[-1]
    return lines[0] if flagged and lines else None


def _errors(transcript: Transcript) -> Iterator[_Candidate]:
    for item in transcript.items:
        if item.kind != "tool_result" or not item.text:
            continue
        call = transcript.tool_call(item.call_id or "")
        if call is not None and _file_access(call)[0] and not item.is_error:
            continue  # a file's contents: an error-looking line there is code, not a failure
        line = _error_line(item.text, item.is_error)
        if not line or len(line) < 8 or len(line) > MAX_ANSWER:
            continue
        what = _short(_command(call) or call.arguments or "", 80) if call else ""
        tool = (call.tool_name if call else item.tool_name) or "tool"
        subject = f"the `{tool}` call `{what}`" if what else f"the `{tool}` call"
        yield _Candidate("error", f"What exact error did {subject} report?", line, "contains", item.id)


def _constraints(transcript: Transcript) -> Iterator[_Candidate]:
    for item in transcript.real_user_messages():
        for sentence in _sentences(item.text):
            if CONSTRAINT.search(sentence):
                topic = _topic(sentence, CONSTRAINT)
                if topic:
                    yield _Candidate("constraint", f"What instruction did the user give (keywords: {topic})?", sentence, "contains", item.id)


def _recalls(transcript: Transcript) -> Iterator[_Candidate]:
    for item in transcript.items:
        if item.kind != "tool_call":
            continue
        command = _command(item)
        if not command or len(command) > MAX_ANSWER or command not in (item.arguments or ""):
            continue  # a command JSON had to escape is not verbatim in the transcript
        short = _short(command, 120)
        for result in transcript.tool_results(item.call_id or ""):
            code = EXIT_PHRASE.search(result.text)
            if code:
                yield _Candidate(
                    "recall", f"What exit code did the command `{short}` report?", code.group(1), "number", result.id, (command,)
                )
                break
        description = _arguments(item).get("description")
        if isinstance(description, str) and description.strip():
            yield _Candidate(
                "recall", f"What exact command did the assistant run to {description.strip().rstrip('.').lower()}?", command, "contains", item.id
            )


def _assistant_sentences(transcript: Transcript, pattern: re.Pattern[str], kind: str, template: str) -> Iterator[_Candidate]:
    for item in transcript.items:
        if item.kind != "assistant":
            continue
        for sentence in _sentences(item.text):
            if pattern.search(sentence):
                topic = _topic(sentence, pattern)
                if topic:
                    yield _Candidate(kind, template.format(topic=topic), sentence, "judge", item.id)


def _spread(candidates: Sequence[_Candidate], limit: int) -> list[_Candidate]:
    """At most `limit` candidates, taken evenly across the session, without repeated answers."""
    unique: list[_Candidate] = []
    seen: set[str] = set()
    for c in candidates:
        key = json.dumps(c.answer)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    if len(unique) <= limit:
        return unique
    if limit <= 1:
        return unique[:limit]
    return [unique[round(i * (len(unique) - 1) / (limit - 1))] for i in range(limit)]


DETERMINISTIC: tuple[Callable[[Transcript], Iterator[_Candidate]], ...] = (_artifacts, _errors, _constraints, _recalls)


def mine_probes(transcript: Transcript, *, per_kind: int = PER_KIND) -> list[Probe]:
    """Deterministic probes for one transcript (same transcript, same probes)."""
    chosen: list[_Candidate] = []
    for miner in DETERMINISTIC:
        chosen += _spread(list(miner(transcript)), per_kind)
    judged_budget = int(len(chosen) * JUDGED_SHARE / (1 - JUDGED_SHARE))
    judged = [
        _spread(list(_assistant_sentences(transcript, CONTINUATION, "continuation", "What did the assistant say it would do next (keywords: {topic})?")), per_kind),
        _spread(list(_assistant_sentences(transcript, DECISION, "decision", "What did the assistant decide, and why (keywords: {topic})?")), per_kind),
    ]
    while judged_budget > 0 and any(judged):
        for family in judged:
            if family and judged_budget > 0:
                chosen.append(family.pop(0))
                judged_budget -= 1
    counters: dict[str, int] = {}
    probes = []
    for c in sorted(chosen, key=lambda c: transcript.position(c.source)):
        counters[c.kind] = counters.get(c.kind, 0) + 1
        meta = {"mined": True, **({"evidence": list(c.evidence)} if c.evidence else {})}
        probes.append(
            Probe(
                id=f"{c.kind}-{counters[c.kind]:02d}",
                kind=c.kind,
                question=c.question,
                answer=c.answer,
                match=c.match,
                source=c.source,
                meta=meta,
            )
        )
    return probes

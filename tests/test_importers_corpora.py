"""Every file of the shared corpora imports, and its transcript matches counts taken from the raw file.

The raw counters below read each recorded file with nothing but `json` / `re` and the format's
documented schema (../shared/corpora/MANIFEST.md; docs/specs/codex.md §7, docs/specs/pi.md §1); they never
call an importer. Every file is parametrized (none skipped): a format whose importer is not
registered fails here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.importing import detect, formats, load_transcripts
from compaction_bench.transcript import Transcript
from tests.conftest import CORPORA, corpus_files
from tests.test_aider_audit5 import raw_command_messages, reply_headings
from tests.test_import_audit_aider_edit_errors import raw_edit_errors
from tests.test_import_audit_aider_output import raw_command_outputs
from tests.test_import_audit_aider_prompts import raw_reflections

#: corpus folder → importer format that must claim its files by content.
FOLDER_FORMAT = {
    "claude-code-jsonl": "claude-code",
    "codex-rollout-jsonl": "codex",
    "pi-session-jsonl": "pi",
    "mini-swe-agent-traj": "mini-swe-agent",
    "swe-agent-traj": "swe-agent",
    "openhands-events": "openhands",
    "aider-chat-history-md": "aider",
    "tau-bench-traj": "openai-messages",
}
CORE = ("transcripts", "user", "tool_calls", "tool_results", "usage_responses", "compactions", "input", "output")


# --------------------------------------------------------------------------- raw reading helpers
def jsonl(path: Path) -> Iterator[Any]:
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            yield json.loads(line)


def counts(**values: int) -> Counter[str]:
    out: Counter[str] = Counter({key: 0 for key in CORE})
    out.update(values)
    return out


def oa_usage(usage: dict[str, Any] | None) -> tuple[int, int]:
    return (usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0) if usage else (0, 0)


def oa_messages(messages: list[dict[str, Any]], usage_of: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Counter[str]:
    """Counts of an OpenAI-style chat list, as recorded."""
    c = counts(transcripts=1)
    for m in messages:
        role = m.get("role")
        if role == "user":
            c["user"] += 1
        elif role == "system":
            c["system"] += 1
        elif role == "tool":
            c["tool_results"] += 1
        elif role == "assistant":
            c["responses"] += 1
            c["tool_calls"] += len(m.get("tool_calls") or [])
            usage = usage_of(m)
            if usage:
                c["usage_responses"] += 1
                c["input"] += usage[0]
                c["output"] += usage[1]
    return c


# --------------------------------------------------------------------------- raw counters
def raw_claude_code(path: Path) -> Counter[str]:
    nodes = [r for r in jsonl(path) if r.get("type") in ("user", "assistant", "system") and r.get("uuid")]
    main = [r for r in nodes if not r.get("isSidechain")]
    chosen = main or nodes
    c = counts(transcripts=1 if main else sum(1 for r in nodes if r.get("parentUuid") is None))
    last_usage: dict[str, dict[str, int]] = {}
    for r in chosen:
        content = (r.get("message") or {}).get("content")
        if r["type"] == "system":
            c["compactions"] += r.get("subtype") == "compact_boundary"
        elif r["type"] == "assistant":
            last_usage[r["message"]["id"]] = r["message"].get("usage") or {}
            c["tool_calls"] += sum(1 for b in content if b.get("type") == "tool_use")
        elif not r.get("isCompactSummary"):
            blocks = [{"type": "text"}] if isinstance(content, str) else content
            c["tool_results"] += sum(1 for b in blocks if b.get("type") == "tool_result")
            c["user"] += any(b.get("type") != "tool_result" for b in blocks)
    c["responses"] = len(last_usage)
    for u in last_usage.values():
        if u:
            c["usage_responses"] += 1
            c["input"] += u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
            c["output"] += u["output_tokens"]
    return c


def raw_codex(path: Path) -> Counter[str]:
    """docs/specs/codex.md §7: a usage event is a `token_count` whose cumulative total moved (the CLI
    repeats the last one at the next step); model output = reasoning / assistant message / calls."""
    c = counts(transcripts=1)
    previous_total = None
    in_output = False
    for line in jsonl(path):
        kind, payload = line.get("type"), line.get("payload") or {}
        if kind == "compacted":
            c["compactions"] += 1
        elif kind == "response_item":
            item = payload.get("type")
            output = item in ("reasoning", "function_call", "custom_tool_call", "local_shell_call") or (
                item == "message" and payload.get("role") == "assistant"
            )
            c["responses"] += output and not in_output
            if item != "ghost_snapshot":
                in_output = output
            c["user"] += item == "message" and payload.get("role") == "user"
            c["tool_calls"] += item in ("function_call", "custom_tool_call", "local_shell_call")
            c["tool_results"] += item in ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
        elif kind == "event_msg" and payload.get("type") == "token_count" and payload.get("info"):
            total = payload["info"]["total_token_usage"]
            if total != previous_total:
                last = payload["info"]["last_token_usage"]
                c["usage_responses"] += 1
                c["input"] += last["input_tokens"]
                c["output"] += last["output_tokens"]
            previous_total = total
    return c


def raw_pi(path: Path) -> Counter[str]:
    """docs/specs/pi.md §1: the active path (leaf = last entry, walk parentId; v1 files have no ids and
    are one chain); user-role entries are user messages and bashExecution runs."""
    entries = list(jsonl(path))[1:]
    if entries and "id" in entries[0]:
        by_id = {e["id"]: e for e in entries}
        path_entries, cursor = [], entries[-1]
        while cursor is not None:
            path_entries.append(cursor)
            cursor = by_id.get(cursor.get("parentId"))
        entries = path_entries[::-1]
    c = counts(transcripts=1)
    for e in entries:
        c["compactions"] += e.get("type") == "compaction"
        message = e.get("message") or {}
        role = message.get("role")
        if e.get("type") != "message":
            continue
        if role in ("user", "custom") or (role == "bashExecution" and not message.get("excludeFromContext")):
            c["user"] += 1
        elif role == "toolResult":
            c["tool_results"] += 1
        elif role == "assistant":
            c["responses"] += 1
            c["tool_calls"] += sum(1 for b in message["content"] if b.get("type") == "toolCall")
            usage = message.get("usage")
            if usage:
                c["usage_responses"] += 1
                c["input"] += usage["input"] + usage.get("cacheRead", 0) + usage.get("cacheWrite", 0)
                c["output"] += usage["output"]
    return c


def text_protocol(messages: list[dict[str, Any]], action: Callable[[dict[str, Any]], bool]) -> Counter[str]:
    """Counts of a chat whose assistant messages may carry a text action: such a message is a tool
    call, and the user message right after it is the call's output (not a user message)."""
    c = counts(transcripts=1)
    after_action = False
    for m in messages:
        role = m["role"]
        if role == "assistant":
            c["responses"] += 1
            c["tool_calls"] += len(m.get("tool_calls") or []) or action(m)
        elif role == "tool":
            c["tool_results"] += len(m.get("tool_call_ids") or [1])
        elif role == "user":
            c["tool_results" if after_action else "user"] += 1
        elif role == "system":
            c["system"] += 1
        after_action = role == "assistant" and not m.get("tool_calls") and action(m)
    return c


def raw_mini_swe_agent(path: Path) -> Counter[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):  # legacy: the command is a bash block in the assistant text
        return text_protocol(data, lambda m: bool(re.search(r"```(mswea_bash_command|bash)\n", m["content"] or "")))
    return oa_messages(data["messages"], lambda m: oa_usage(((m.get("extra") or {}).get("response") or {}).get("usage")))


def raw_swe_agent(path: Path) -> Counter[str]:
    return text_protocol(json.loads(path.read_text(encoding="utf-8"))["history"], lambda m: bool((m.get("action") or "").strip()))


def raw_openhands(path: Path) -> Counter[str]:
    """A `condensation` action is the agent's compaction and a `condensation_request` without tool-call metadata the
    controller's request for one: neither is model output. A recall observation is a user message only with prompt
    extensions on: every evaluation harness (a run line with `instance_id`) turns them off, and the corpus's other
    files hold no recall (V0 `conversation_memory.py@156d0686 L531-666`, `run_infer.py` L344-350)."""
    lines = [] if path.suffix == ".json" else list(jsonl(path))
    runs = [json.loads(path.read_text(encoding="utf-8"))] if path.suffix == ".json" else [r["history"] for r in lines]
    extensions = [True] if path.suffix == ".json" else ["instance_id" not in r for r in lines]
    c = counts(transcripts=len(runs), responses=0)
    for events, extensions_on in zip(runs, extensions, strict=True):
        usage_by_response: dict[str, Any] = {}
        for n, e in enumerate(events):
            meta = e.get("tool_call_metadata") or {}
            if "model_response" in meta:
                usage_by_response[meta["model_response"]["id"]] = meta["model_response"].get("usage")
            action = e.get("action")
            source = e.get("source") or ("user" if n == 0 else "agent")
            if action == "condensation_request" and not meta:
                continue
            if action and source == "agent" and action not in ("system", "recall", "change_agent_state", "condensation"):
                c["responses"] += "model_response" not in meta
            if action == "message" and source == "user":
                c["user"] += 1
            elif action == "system":
                c["system"] += 1
            elif action == "condensation":
                c["compactions"] += 1
            elif action and action not in ("message", "recall", "change_agent_state"):
                c["tool_calls"] += 1
            elif e.get("observation") == "recall":
                c["user"] += extensions_on
            elif e.get("observation") == "error" and not meta and "cause" not in e:
                c["user"] += 1
            elif "observation" in e and e["observation"] not in ("null", "agent_state_changed"):
                c["tool_results"] += 1
        c["responses"] += len(usage_by_response)
        for usage in usage_by_response.values():
            if usage:
                c["usage_responses"] += 1
                c["input"] += usage["prompt_tokens"]
                c["output"] += usage["completion_tokens"]
    return c


def raw_aider(path: Path) -> Counter[str]:
    """MANIFEST: sessions start at `# aider chat started`; a user message is a run of `####` lines, and a
    command output added to the chat is one more (`raw_command_outputs`, by Aider's logging rules), and so
    is a message Aider sent itself after a yes (`raw_reflections`) or an edit-format error it sent back
    (`raw_edit_errors`);
    a `/web` page or a clipboard image a request followed is one more (`raw_command_messages`), and a `####` line Aider
    did not write as the user's (`reply_headings`) is one less;
    each `> Tokens:` line is one LLM request (its reply is the text before it, if any); its whole prompt is "sent"
    plus the cache parts where "sent" leaves them out: beside `cached`, unless the session's model is DeepSeek's
    (whose prompt_tokens hold the hits), and beside `cache write`/`cache hit` only where "sent" is smaller than
    them (Aider's development lines before v0.51.0 made "sent" whole)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    c = counts(transcripts=sum(1 for line in lines if line.startswith("# aider chat started at ")))
    c["transcripts"] += any(line.strip() for line in lines[: next(i for i, line in enumerate(lines) if line.startswith("# aider chat started"))])
    previous, model = "", ""
    for line in lines:
        if line.startswith("# aider chat started at "):
            model = ""
        banner = re.match(r"> (?:Main model|Models?): (\S+)", line)
        if banner and not model:
            model = banner.group(1)
        if line.startswith("####") and not previous.startswith("####"):
            c["user"] += 1
        match = re.match(r"> Tokens: (.*?)received", line)
        if match:
            parts = {name: n for n, name in re.findall(r"([\d.,]+k?) (sent|cached|cache write|cache hit|received)", line)}
            value = {k: int(float(v.replace(",", "").rstrip("k")) * (1000 if v.endswith("k") else 1)) for k, v in parts.items()}
            sent, cache = value.get("sent", 0), sum(value.get(k, 0) for k in ("cached", "cache write", "cache hit"))
            whole = "deepseek" in model if "cached" in value else sent >= cache
            c["usage_responses"] += 1
            c["input"] += sent if whole else sent + cache
            c["output"] += value.get("received", 0)
        previous = line
    c["user"] += sum(case["added"] for case in raw_command_outputs(lines))
    c["user"] += sum(case["sent"] for case in raw_reflections(lines))
    c["user"] += sum(case["sent"] for case in raw_edit_errors(lines))
    c["user"] += raw_command_messages(lines) - len(reply_headings(lines))
    return c


def raw_tau_bench(path: Path) -> Counter[str]:
    total = counts()
    for run in json.loads(path.read_text(encoding="utf-8")):
        total.update(oa_messages(run["traj"], lambda m: None))
    return total


RAW: dict[str, Callable[[Path], Counter[str]]] = {
    "claude-code-jsonl": raw_claude_code,
    "codex-rollout-jsonl": raw_codex,
    "pi-session-jsonl": raw_pi,
    "mini-swe-agent-traj": raw_mini_swe_agent,
    "swe-agent-traj": raw_swe_agent,
    "openhands-events": raw_openhands,
    "aider-chat-history-md": raw_aider,
    "tau-bench-traj": raw_tau_bench,
}


# --------------------------------------------------------------------------- transcript side
def imported(transcripts: list[Transcript], keys: set[str]) -> Counter[str]:
    c = counts(transcripts=len(transcripts))
    for t in transcripts:
        kinds = Counter(i.kind for i in t.items)
        c["user"] += kinds["user"]
        c["system"] += kinds["system"]
        c["tool_calls"] += kinds["tool_call"]
        c["tool_results"] += kinds["tool_result"]
        c["responses"] += len(t.steps())
        c["compactions"] += len(t.markers("compaction"))
        for usage in t.recorded_usage():
            c["usage_responses"] += 1
            c["input"] += usage.input
            c["output"] += usage.output
    return Counter({k: v for k, v in c.items() if k in keys})


def folder(path: Path) -> str:
    return path.relative_to(CORPORA).parts[0]


CORPUS = corpus_files()


def test_corpus_is_there_and_every_folder_has_a_counter():
    assert len(CORPUS) >= 57, f"expected the 57 corpus files of MANIFEST.md, found {len(CORPUS)}"
    assert {folder(p) for p in CORPUS} == set(RAW)


@pytest.mark.corpora
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{folder(p)}/{p.name[:60]}")
def test_corpus_file_imports_with_raw_counts(path: Path):
    fmt = FOLDER_FORMAT[folder(path)]
    assert fmt in formats(), f"importer {fmt!r} is not registered (or failed to load)"
    assert detect(path).format == fmt
    transcripts = load_transcripts(path)
    expected = RAW[folder(path)](path)
    got = imported(transcripts, set(expected))
    assert got == expected, f"imported {dict(got)} but the raw file has {dict(expected)}"
    for t in transcripts:
        assert t.source["format"] == fmt and t.source["path"] == str(path)
        calls = {i.call_id for i in t.items if i.kind == "tool_call"}
        orphans = set(t.meta.get("orphans", ()))
        for item in t.items:
            if item.kind == "tool_result" and item.call_id not in calls:
                assert item.id in orphans, f"{item.id}: result without a call, not reported in meta['orphans']"
        # the one repair a corpus file needs: Aider replies logged after another session's header (test_aider_audit5)
        problems = [p for p in t.meta.get("problems", ()) if "model output logged after the session header" not in p]
        assert not problems, problems[:3]


@pytest.mark.corpora
@pytest.mark.parametrize("path", corpus_files("swe-agent-traj")[:3] + corpus_files("swe-agent-traj")[-12:-9], ids=lambda p: p.name[:50])
def test_swe_agent_aggregate_usage_is_kept_as_recorded(path: Path):
    recorded = json.loads(path.read_text(encoding="utf-8")).get("info", {}).get("model_stats")
    (transcript,) = load_transcripts(path)
    assert transcript.meta.get("aggregate_usage") == recorded
    assert transcript.recorded_usage() == []  # aggregate only: never spread over responses


@pytest.mark.corpora
@pytest.mark.parametrize("path", corpus_files("claude-code-jsonl"), ids=lambda p: p.name[:20])
def test_claude_code_compactions_keep_recorded_numbers(path: Path):
    boundaries = [r for r in jsonl(path) if r.get("subtype") == "compact_boundary"]
    summaries = [r for r in jsonl(path) if r.get("isCompactSummary")]
    (transcript,) = load_transcripts(path)
    markers = transcript.markers("compaction")
    assert [m.meta["preTokens"] for m in markers] == [b["compactMetadata"]["preTokens"] for b in boundaries]
    assert [m.meta["trigger"] for m in markers] == [b["compactMetadata"]["trigger"] for b in boundaries]
    texts = [m.text for m in transcript.markers("compaction-summary")]
    assert texts == [s["message"]["content"] if isinstance(s["message"]["content"], str) else s["message"]["content"][0]["text"] for s in summaries]
    # each summary follows its boundary, and the history before the first compaction is kept
    positions = [transcript.position(m.id) for m in markers]
    assert all(transcript.items[p + 1].meta.get("event") == "compaction-summary" for p in positions)
    assert not positions or positions[0] > 0


@pytest.mark.corpora
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{folder(p)}/{p.name[:60]}")
def test_corpus_file_round_trips_through_the_canonical_form(path: Path, tmp_path: Path):
    transcripts = load_transcripts(path)
    for n, transcript in enumerate(transcripts[:3]):
        out = transcript.write(tmp_path / f"{n}.jsonl")
        (again,) = load_transcripts(out)
        assert again == transcript
        assert again.dumps() == transcript.dumps()


@pytest.mark.corpora
@pytest.mark.parametrize("name", sorted(FOLDER_FORMAT))
def test_smallest_file_of_each_format_replays_without_compaction(name: str):
    from compaction_bench.replay import replay

    path = min(corpus_files(name), key=lambda p: p.stat().st_size)
    transcript = load_transcripts(path)[0]
    result = replay(transcript, "none", profile="1m")
    assert [r.kind for r in result.requests].count("final") == 1
    # a request per step, but a reply recorded before anything it answers (Aider's headerless start), which is history
    assert len(result.requests) >= len(transcript.steps()) - len(result.unrequested_steps) + 1

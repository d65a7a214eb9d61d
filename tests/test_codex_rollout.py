"""The Codex rollout importer (docs/specs/codex.md §7, corpora/MANIFEST.md) and the Codex strategies on
the real rollouts of ../shared/corpora/codex-rollout-jsonl.

Corpus expectations (item counts, usage events, trigger steps) are computed in the tests from the
raw JSONL lines, independently of the importer and of the strategies.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import zstandard

from compaction_bench.importing import ImportFailure, load_transcript
from compaction_bench.replay import replay
from compaction_bench.scenarios.codex_rollout import CodexRolloutImporter
from tests.conftest import corpus_files
from tests.test_codex_strategies import CODEX, assert_pairs_after_compaction

ROLLOUTS = [p for p in corpus_files("codex-rollout-jsonl") if p.name.endswith((".jsonl", ".jsonl.zst"))]
CONTEXTUAL = ("# agents.md instructions for ", "<environment_context>", "<user_instructions>")


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def line(type_: str, payload: dict, ts: str = "2026-08-08T10:00:00.000Z") -> str:
    return json.dumps({"timestamp": ts, "type": type_, "payload": payload})


def message(role: str, text: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def token_count(total: int, last: int) -> dict:
    usage = lambda t: {"input_tokens": t - 10, "cached_input_tokens": 0, "output_tokens": 10, "reasoning_output_tokens": 0, "total_tokens": t}  # noqa: E731
    return {"type": "token_count", "info": {"total_token_usage": usage(total), "last_token_usage": usage(last), "model_context_window": 258400}}


# --------------------------------------------------------------------------- hand-built files
def current_rollout() -> list[str]:
    """Newer Codex order: items stream first, `token_count` follows the response (spec §7.4)."""
    exec_output = json.dumps({"output": "1 failed", "metadata": {"exit_code": 1, "duration_seconds": 1.2}}, separators=(",", ":"))
    return [
        line("session_meta", {"id": "sess-1", "cwd": "/repo", "cli_version": "0.146.0", "base_instructions": {"text": "You are Codex."}}),
        line("response_item", message("developer", "<permissions instructions>sandboxed</permissions instructions>")),
        line("response_item", message("user", "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>")),
        line("response_item", message("user", "Fix the failing test")),
        line("turn_context", {"turn_id": "t1", "model": "gpt-5.5", "comp_hash": "2911"}),
        line("event_msg", {"type": "user_message", "message": "Fix the failing test"}),
        line("response_item", {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Looking"}], "encrypted_content": "E" * 1000}),
        line("response_item", {"type": "function_call", "id": "fc_1", "name": "exec_command", "arguments": "{\"cmd\":\"pytest\"}", "call_id": "call_1"}),
        line("event_msg", token_count(1000, 1000)),
        line("response_item", {"type": "function_call_output", "call_id": "call_1", "output": exec_output}),
        line("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"}),
        line("event_msg", token_count(2500, 1500)),
        line("event_msg", token_count(2500, 1500)),  # a repeated event adds nothing
        line("response_item", {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success."}),
        line("response_item", message("assistant", "Fixed.")),
        line("event_msg", token_count(4600, 2100)),
        line("compacted", {"message": "summary text", "replacement_history": [message("user", "Fix the failing test")], "window_number": 1}),
        line("response_item", {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}),
        line("response_item", message("user", "Now switch models")),
        line("turn_context", {"turn_id": "t2", "model": "gpt-5.6-sol", "comp_hash": "3000"}),
        line("response_item", message("assistant", "Switched.")),
        line("event_msg", token_count(7000, 2400)),
    ]


def test_imports_envelope_rollout_with_usage_after_each_response(tmp_path):
    path = tmp_path / "rollout-new.jsonl"
    path.write_text("\n".join(current_rollout()) + "\n", encoding="utf-8")
    t = load_transcript(path)
    assert t.source["format"] == "codex" and t.meta["usage_alignment"] == "after_response"
    kinds = [(i.kind, i.text[:12], i.synthetic) for i in t.items]
    assert kinds[:4] == [("system", "You are Code", True), ("system", "<permissions", True), ("user", "<environment", True),
                         ("marker", "model: gpt-5", False)]
    assert t.items[1].meta["role"] == "developer"
    assert [i.id for i in t.real_user_messages()] == ["user-4", "user-14"]
    steps = t.steps()
    assert [[i.kind for i in s.items] for s in steps] == [["reasoning", "tool_call"], ["tool_call"], ["assistant"], ["assistant"]]
    assert [s.usage.total for s in steps] == [1000, 1500, 2100, 2400]
    assert t.by_id["rs_1"].meta["encrypted_len"] == 1000
    result = t.by_id["tool_result-7"]
    assert (result.text, result.is_error, dict(result.meta["output_envelope"]["metadata"])) == (
        "1 failed", True, {"exit_code": 1, "duration_seconds": 1.2})
    assert t.by_id["tool_call-8"].meta["codex_type"] == "custom_tool_call"
    switches = t.markers("model_switch")
    assert [(m.meta["model"], m.meta["previous_model"], m.meta["comp_hash"]) for m in switches] == [
        ("gpt-5.5", None, "2911"), ("gpt-5.6-sol", "gpt-5.5", "3000")]
    # the turn's model switch is placed before the turn's user message (pre-turn check order)
    positions = {i.id: n for n, i in enumerate(t.items)}
    assert positions[switches[1].id] < positions["user-14"]
    compaction = t.markers("compaction")[0]
    assert (compaction.text, compaction.meta["window_number"], compaction.meta["replacement_items"]) == ("summary text", 1, 1)
    assert t.markers("ghost_snapshot")
    assert t.meta["skipped"]["token_count repeated"] == 1 and t.meta["skipped"]["event_msg:user_message"] == 1


def test_zstd_rollout_imports_like_the_plain_file(tmp_path):
    plain = tmp_path / "rollout-a.jsonl"
    plain.write_text("\n".join(current_rollout()) + "\n", encoding="utf-8")
    packed = tmp_path / "rollout-a.jsonl.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    a, b = load_transcript(plain), load_transcript(packed)
    assert [i.to_dict() for i in a.items] == [i.to_dict() for i in b.items]


def test_legacy_pre_envelope_rollout(tmp_path):
    lines = [
        json.dumps({"id": "legacy-1", "timestamp": "2025-09-01T10:00:00Z", "instructions": "be brief", "git": {"branch": "main"}}),
        json.dumps({"record_type": "state"}),
        json.dumps(message("user", "List the files")),
        json.dumps({"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": "c1"}),
        json.dumps({"type": "function_call_output", "call_id": "c1", "output": json.dumps({"output": "a.py", "metadata": {"exit_code": 0}}, separators=(",", ":"))}),
        json.dumps({"record_type": "state"}),
        json.dumps(message("assistant", "One file.")),
    ]
    path = tmp_path / "rollout-legacy.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    t = load_transcript(path)
    assert t.id == "legacy-1" and t.meta["variant"] == "legacy" and t.meta["skipped"] == {"state": 2}
    assert [i.kind for i in t.items] == ["user", "tool_call", "tool_result", "assistant"]
    assert t.items[2].text == "a.py" and not t.items[2].is_error
    assert len(t.steps()) == 2 and all(s.usage is None for s in t.steps())


def test_bad_lines_are_reported_and_non_rollouts_rejected(tmp_path):
    lines = current_rollout()
    lines.insert(3, '{"timestamp": "x", "type": "response_item", "payload": {"type": "mess')
    lines.insert(5, json.dumps({"type": "response_item", "payload": {"type": "function_call", "name": "x", "arguments": "{}"}}))
    path = tmp_path / "rollout-bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems = load_transcript(path).meta["problems"]
    assert any(":4: malformed JSON" in p for p in problems) and any(":6: function_call without call_id" in p for p in problems)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n", encoding="utf-8")
    assert not CodexRolloutImporter.sniff(other, other.read_text())
    with pytest.raises(ImportFailure, match=r"other\.jsonl:1: not a Codex rollout line"):
        CodexRolloutImporter().load(other)


# --------------------------------------------------------------------------- the real rollouts
def raw_counts(path: Path) -> tuple[Counter, int]:
    """Response items by (type, role) and the number of token_count events with a new total."""
    counts: Counter = Counter()
    usage_events, last = 0, None
    for data in raw_lines(path):
        payload = data["payload"]
        if data["type"] == "response_item":
            role = payload.get("role") if payload["type"] == "message" else None
            if role == "user":
                text = "".join(p.get("text", "") for p in payload["content"])
                role = "context" if text.lstrip().lower().startswith(CONTEXTUAL) else "user"
            counts[(payload["type"], role)] += 1
        elif data["type"] == "event_msg" and payload["type"] == "token_count" and payload.get("info"):
            total = payload["info"]["total_token_usage"]
            usage_events += total != last
            last = total
    return counts, usage_events


def imported_counts(path: Path) -> tuple[Counter, int]:
    t = load_transcript(path)
    counts: Counter = Counter()
    for item in t.items:
        codex_type = item.meta.get("codex_type")
        if codex_type is None:
            continue
        role = None
        if codex_type == "message":
            role = {"assistant": "assistant", "system": item.meta.get("role")}.get(item.kind) or ("context" if item.synthetic else "user")
        counts[(codex_type, role)] += 1
    return counts, sum(1 for s in t.steps() if s.usage is not None)


@pytest.mark.corpora
@pytest.mark.parametrize("path", ROLLOUTS, ids=lambda p: p.name[:30])
def test_real_rollouts_import_every_response_item_and_usage_event(path):
    assert imported_counts(path) == raw_counts(path)


def recorded_peak(path: Path) -> int:
    return max(d["payload"]["info"]["last_token_usage"]["total_tokens"] for d in raw_lines(path)
               if d["type"] == "event_msg" and d["payload"]["type"] == "token_count" and d["payload"].get("info"))


@pytest.mark.corpora
@pytest.mark.parametrize("path", ROLLOUTS, ids=lambda p: p.name[:30])
def test_real_rollouts_replay_with_all_codex_strategies(path):
    transcript = load_transcript(path)
    # 64k profile: auto-compact limit 64,000 * 9 // 10 = 57,600. A session whose recorded context
    # never reached it cannot compact faithfully there; it must at half the window.
    profile = "64k" if recorded_peak(path) >= 57_600 else "32k"
    for strategy in CODEX:
        result = replay(transcript, strategy, profile=profile)
        assert len(result.turn_requests) >= len(transcript.steps())
        assert len(result.compactions) >= 1, (strategy, profile)
        assert_pairs_after_compaction(result)
        for record in result.compactions:
            assert record.summarized_ids or strategy == "codex-token-budget"
            assert record.kept_ids or record.after


# --------------------------------------------------------------------------- recorded triggers
def approx(n_bytes: int) -> int:
    return math.ceil(n_bytes / 4)


def item_estimate(payload: dict) -> int:
    """docs/specs/codex.md §6, from the raw payload."""
    if payload["type"] == "reasoning" and payload.get("encrypted_content"):
        return approx(max(0, len(payload["encrypted_content"]) * 3 // 4 - 650))
    return approx(len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()))


def expected_first_trigger(path: Path, limit: int = 244_800) -> tuple[str, int]:
    """Walk the raw rollout as §1.2-§1.4 describe (gpt-5: 272,000 window, auto limit 244,800):
    server `total_tokens` of the last response + estimates of the items after the last model item
    + encrypted reasoning before the last user message; the pre-turn check before each real user
    message, the mid-turn check before the next sampling request after a response with a tool call.
    Returns (phase, index of the model response sent right after the compaction)."""
    history: list[tuple[dict, int]] = []
    last_total, pending_total = 0, None
    responses, in_response, had_call, mid_due = 0, False, False, False
    last_seen_total = None

    def is_model(p: dict) -> bool:
        return p["type"] in ("reasoning", "function_call", "custom_tool_call") or (p["type"] == "message" and p["role"] == "assistant")

    def is_user(p: dict) -> bool:
        return p["type"] == "message" and p["role"] == "user" and not "".join(
            c.get("text", "") for c in p["content"]).lstrip().lower().startswith(CONTEXTUAL)

    def active() -> int:
        last_model = max((n for n, (p, _) in enumerate(history) if is_model(p)), default=None)
        tail = 0 if last_model is None else sum(e for _, e in history[last_model + 1:])
        last_user = max((n for n, (p, _) in enumerate(history) if is_user(p)), default=0)
        reasoning = sum(e for p, e in history[:last_user] if p["type"] == "reasoning")
        return last_total + tail + reasoning

    def end_response() -> None:
        nonlocal in_response, last_total, mid_due
        if in_response:
            in_response = False
            last_total = current_total
            mid_due = had_call

    current_total = 0
    for data in raw_lines(path):
        payload = data["payload"]
        if data["type"] == "event_msg" and payload["type"] == "token_count" and payload.get("info"):
            total = payload["info"]["total_token_usage"]
            if total != last_seen_total:
                end_response()
                pending_total = payload["info"]["last_token_usage"]["total_tokens"]
                last_seen_total = total
            continue
        if data["type"] != "response_item" or payload["type"] == "ghost_snapshot":
            continue
        assert not (payload["type"].endswith("_output") and len(payload["output"].encode()) > 48_000)
        if is_model(payload):
            if not in_response:
                if mid_due and active() >= limit:
                    return "mid-turn", responses
                mid_due = False
                in_response, had_call = True, False
                current_total, pending_total = pending_total, None
                responses += 1
            had_call = had_call or payload["type"] in ("function_call", "custom_tool_call")
        else:
            end_response()
            if is_user(payload):
                if mid_due and active() >= limit:
                    return "mid-turn", responses
                mid_due = False
                if active() >= limit:
                    return "pre-turn", responses
        history.append((payload, item_estimate(payload)))
    raise AssertionError(f"{path.name}: no trigger at the gpt-5 limit")


MONOTOBA = [p for p in ROLLOUTS if "OpenPrintKit" in str(p)]


@pytest.mark.corpora
@pytest.mark.parametrize("path", MONOTOBA, ids=lambda p: p.name[:30])
def test_recorded_usage_trigger_steps_match_the_spec(path):
    phase, step = expected_first_trigger(path)
    result = replay(load_transcript(path), "codex-local", profile="gpt-5", usage="recorded")
    first = result.compactions[0]
    assert (first.trigger, result.requests[first.next_request].step) == (phase, step)
    assert first.threshold == 244_800 and first.estimate_tokens >= 244_800


@pytest.mark.corpora
def test_both_trigger_phases_are_exercised_by_the_recorded_rollouts():
    assert sorted(expected_first_trigger(p)[0] for p in MONOTOBA) == ["mid-turn", "pre-turn"]

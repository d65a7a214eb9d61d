"""Audit 4 of the model client: what a reply without usage costs, credentials in URLs, the endpoint an
environment variable chooses, replies cut off at max_tokens, and `bench score` reading the run's own replies.

Each right answer is known without the code: the local servers (tests/model_servers.py) are told what to send
(no `usage` block, finish_reason "length"), the endpoints are the servers' own addresses, and a run's calls are
counted by the server that answered them.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from compaction_bench import llm
from compaction_bench.llm import CallSettings, LLMClient, LLMResult, export_responses, redact, request_key
from compaction_bench.reports.gate import GateError, Run, check_comparable
from compaction_bench.runner import score
from tests.conftest import assert_user_error, bench_cli, run_once
from tests.model_servers import ModelServer

SUMMARIZER = "openai/gpt-4o-mini"  # priced in litellm's map: a reply with usage has a cost
SECRET = "pw-secret-5e8d1c"
PROMPT = [{"role": "user", "content": "Summarize: the retry limit in ledger/retry.py is 7."}]


class NoUsageServer(ModelServer):
    """The local OpenAI server, its replies without a `usage` block (an OpenAI-compatible server may omit it)."""

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        status, body, extra = super()._answer(path, headers, raw)
        body.pop("usage", None)
        return status, body, extra


@pytest.fixture
def no_usage_server():
    server = NoUsageServer("openai")
    yield server
    server.close()


def stored_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted((run_dir / "responses").glob("*.jsonl")) for line in path.read_text().splitlines()]


def notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "compaction_bench.runner" and r.getMessage().startswith("note:")]


# --------------------------------------------------------------------------- 1: a reply without usage is not free
def test_a_reply_without_usage_has_unknown_tokens_and_no_price(no_usage_server, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    settings = CallSettings(api_base=no_usage_server.base_url, max_retries=0, cache_dir=str(tmp_path / "cache"), record_dir=str(tmp_path / "rec"))
    reply = LLMClient(SUMMARIZER, settings).complete(PROMPT, max_tokens=100)
    assert reply.text.startswith("reply ")  # the reply is kept
    assert (reply.usage_known, reply.cost, reply.to_dict()["priced"]) == (False, None, False)
    again = LLMClient(SUMMARIZER, settings).complete(PROMPT, max_tokens=100)
    assert again.cache_hit and (again.usage_known, again.cost) == (False, None) and no_usage_server.calls == 1
    assert [(line["usage_known"], line["cost"], line["priced"]) for line in stored_lines_in(tmp_path / "rec")] == [(False, None, False)] * 2


def stored_lines_in(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()]


def test_responses_stored_before_usage_was_recorded_load_as_they_were_meant():
    """An old line of a real model with 0 input tokens was a reply without usage that litellm priced at $0; one with
    counts keeps them; an offline model's counts are its own; none of them knew its finish reason."""
    old_free = {"text": "s", "model": SUMMARIZER, "input_tokens": 0, "output_tokens": 0, "cost": 0.0, "priced": True}
    old_counted = {"text": "s", "model": SUMMARIZER, "input_tokens": 1000, "output_tokens": 50, "cost": 0.00018, "priced": True}
    old_offline = {"text": "s", "model": "offline/extractive", "input_tokens": 0, "output_tokens": 0, "cost": None, "priced": False}
    assert (LLMResult.from_dict(old_free).usage_known, LLMResult.from_dict(old_free).cost) == (False, None)
    counted = LLMResult.from_dict(old_counted)
    assert (counted.usage_known, counted.cost, counted.input_tokens, counted.finish_reason) == (True, 0.00018, 1000, None)
    assert LLMResult.from_dict(old_offline).usage_known
    assert LLMResult.from_dict(counted.to_dict()) == counted  # a new line reads back as written


def test_a_run_whose_summarizer_reports_no_usage_shows_no_free_summaries(no_usage_server, compacting_case, monkeypatch, tmp_path, caplog):
    """Before: summarizer_tokens 0 and summarizer_cost_usd $0.00 per cell, said nowhere."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with caplog.at_level(logging.WARNING, logger="compaction_bench.runner"):
        run = run_once(compacting_case, tmp_path, "no-usage", summarizer=SUMMARIZER, api_base=no_usage_server.base_url)
    lines = stored_lines(run)
    assert lines and all(line["usage_known"] is False and line["cost"] is None for line in lines)
    summary = pd.read_parquet(run / "summary.parquet")
    assert summary["summarizer_cost_usd"].isna().all(), summary["summarizer_cost_usd"].tolist()  # unknown, not $0
    assert (summary["summarizer_tokens"] > 0).all()  # counted by the provider, as the offline summarizer's are
    said = [n for n in notes(caplog) if "no token usage" in n]
    assert len(said) == 1 and said[0].startswith(f"note: {len({line['key'] for line in lines})} model repl"), notes(caplog)


# --------------------------------------------------------------------------- 2: no credentials in what is written
def test_credentials_are_taken_out_of_urls_and_the_endpoint_stays():
    assert llm.redact_url(f"http://user:{SECRET}@127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"
    assert llm.redact_url(f"https://h.example/v1?api_key={SECRET}&api-version=2024-10-21") == "https://h.example/v1?api-version=2024-10-21"
    assert llm.redact_url(f"https://h.example/v1beta?key={SECRET}") == "https://h.example/v1beta"
    assert llm.redact_url(f"https://h.example/v1?token={SECRET}&sig={SECRET}#x") == "https://h.example/v1#x"
    assert llm.redact_url("https://h.example/v1") == "https://h.example/v1" and llm.redact_url(None) is None
    text = f"APIConnectionError: cannot reach http://u:{SECRET}@h.example/v1 (path /v1/?api-key={SECRET}chat/completions)"
    assert SECRET not in redact(text) and "http://h.example/v1" in redact(text)
    # The request key names the endpoint: another host is another request, another password for it is not.
    key = lambda base: request_key(SUMMARIZER, PROMPT, {}, base)  # noqa: E731
    assert key(f"http://a:{SECRET}@h1.example/v1") == key("http://h1.example/v1") != key("http://h2.example/v1")


def test_a_url_password_reaches_no_file_of_the_run_nor_its_export(openai_server, compacting_case, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with_password = openai_server.base_url.replace("http://", f"http://user:{SECRET}@")
    run = run_once(compacting_case, tmp_path / "runs", "url", summarizer=SUMMARIZER, api_base=with_password)
    assert openai_server.calls > 0 and openai_server.rejected == []
    exported = tmp_path / "export.jsonl"
    assert export_responses(run, exported) > 0
    written = [p for p in [*run.rglob("*"), exported] if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert written == []
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config"]["api_base"] == openai_server.base_url == manifest["config"]["endpoints"]["summarizer"]
    assert {line["api_base"] for line in stored_lines(run)} == {openai_server.base_url}
    # A run stored before this carries the password in its lines: the export leaves it out all the same.
    old = tmp_path / "old"
    shutil.copytree(run, old)
    for path in (old / "responses").glob("*.jsonl"):
        path.write_text(path.read_text().replace(json.dumps(openai_server.base_url), json.dumps(with_password)))
    assert SECRET in (next((old / "responses").glob("*.jsonl"))).read_text()
    export_responses(old, tmp_path / "old-export.jsonl")
    assert SECRET not in (tmp_path / "old-export.jsonl").read_text()


# --------------------------------------------------------------------------- 3: the endpoint an environment variable chose
def test_runs_against_endpoints_chosen_by_environment_variable_are_not_comparable(compacting_case, monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    first, second = ModelServer("openai"), ModelServer("openai")
    try:
        runs = []
        for name, server in (("a", first), ("b", second)):
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url.replace("http://", f"http://user:{SECRET}@"))
            runs.append(run_once(compacting_case, tmp_path, name, summarizer=SUMMARIZER))
    finally:
        first.close()
        second.close()
    assert first.calls > 0 and second.calls > 0  # each run's summaries came from its own server
    recorded = [json.loads((run / "manifest.json").read_text())["config"] for run in runs]
    assert [c["endpoints"] for c in recorded] == [{"summarizer": s.base_url, "answerer": None, "judge": None} for s in (first, second)]
    assert all(c["api_base"] is None for c in recorded)
    with pytest.raises(GateError, match="the summarizer's endpoint differs") as refused:
        check_comparable(Run.load(runs[0]), Run.load(runs[1]))
    assert first.base_url in str(refused.value) and second.base_url in str(refused.value)
    proc = bench_cli("compare", str(runs[0]), str(runs[1]))
    assert_user_error(proc, "the summarizer's endpoint differs", first.base_url, second.base_url)
    assert check_comparable(Run.load(runs[0]), Run.load(runs[0])) == []
    # Runs made before the record (no `endpoints`) compare as they did: by --api-base, the same here.
    for run in runs:
        manifest = json.loads((run / "manifest.json").read_text())
        del manifest["config"]["endpoints"]
        (run / "manifest.json").write_text(json.dumps(manifest))
    assert check_comparable(Run.load(runs[0]), Run.load(runs[1])) == []


# --------------------------------------------------------------------------- 4: a reply cut off at max_tokens
@pytest.mark.parametrize(("api", "model"), [("openai", SUMMARIZER), ("anthropic", "anthropic/claude-sonnet-4-5")])
def test_a_reply_cut_off_at_max_tokens_says_so_and_keeps_saying_it(api, model, monkeypatch, tmp_path):
    """OpenAI's finish_reason "length" and Anthropic's stop_reason "max_tokens" (the servers send them) are "length"."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local")
    server = ModelServer(api, finish_reason="length")
    try:
        settings = CallSettings(api_base=server.base_url, max_retries=0, cache_dir=str(tmp_path / "cache"), record_dir=str(tmp_path / "run" / "responses"))
        cut = LLMClient(model, settings).complete(PROMPT, max_tokens=20)
        server.finish_reason = "stop"
        whole = LLMClient(model, settings).complete([*PROMPT, {"role": "user", "content": "Again."}], max_tokens=20)
    finally:
        server.close()
    assert (cut.finish_reason, whole.finish_reason) == ("length", "stop")
    assert [line["finish_reason"] for line in stored_lines_in(tmp_path / "run" / "responses")] == ["length", "stop"]
    assert LLMClient(model, settings).complete(PROMPT, max_tokens=20).finish_reason == "length"  # from the cache
    (tmp_path / "run" / "manifest.json").write_text("{}")
    export_responses(tmp_path / "run", tmp_path / "export.jsonl")
    from_export = CallSettings(api_base=server.base_url, offline=True, use_cache=False, responses=str(tmp_path / "export.jsonl"))
    assert LLMClient(model, from_export).complete(PROMPT, max_tokens=20).finish_reason == "length"


def test_a_run_notes_its_cut_off_summaries(compacting_case, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    server = ModelServer("openai", finish_reason="length")
    try:
        with caplog.at_level(logging.WARNING, logger="compaction_bench.runner"):
            run = run_once(compacting_case, tmp_path, "cut", summarizer=SUMMARIZER, api_base=server.base_url)
    finally:
        server.close()
    keys = {line["key"] for line in stored_lines(run) if line["finish_reason"] == "length"}
    said = [n for n in notes(caplog) if "cut off at max_tokens" in n]
    assert keys and len(said) == 1, notes(caplog)
    replies = "1 model reply (1 summary) was" if len(keys) == 1 else f"{len(keys)} model replies ({len(keys)} summary) were"
    assert said[0].startswith(f"note: {replies} cut off at max_tokens")
    compactions = pd.read_parquet(run / "compactions.parquet")
    summarized = compactions[compactions["llm_calls"] > 0]
    assert len(summarized) and summarized["summary_cut"].all()  # each compaction's summary says it was cut


# --------------------------------------------------------------------------- 5: bench score reads the run's replies
@pytest.fixture
def answered_run(compacting_case, monkeypatch, tmp_path):
    """A run graded by a real answerer at the local server, with its own cache; the server stays up for scores."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "run-cache"))
    server = ModelServer("openai")
    run = run_once(compacting_case, tmp_path / "runs", "answered", strategies=["truncate"], answerer=SUMMARIZER, api_base=server.base_url)
    yield run, server
    server.close()


def test_score_answers_from_the_runs_replies_without_calling_the_model(answered_run, monkeypatch, tmp_path, caplog):
    run, server = answered_run
    asked = server.calls
    assert asked > 0
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
    with caplog.at_level(logging.WARNING, logger="compaction_bench.runner"):
        scored = score(run, out=tmp_path / "scored", report=False)
    assert server.calls == asked  # before: every answer asked again
    stored = len(stored_lines(run))  # a line per request the run's cells made, a request made again included
    assert [n for n in notes(caplog) if "bench score sent" in n] == [
        f"note: bench score sent 0 of {stored} model request(s) to the model; the other {stored} were answered by the run's "
        f"stored replies ({run / 'responses'}) or the cache"]
    columns = ["scenario", "strategy", "probe_id", "request", "correct"]
    probes = [pd.read_parquet(folder / "probes.parquet") for folder in (run, scored)]
    pd.testing.assert_frame_equal(*(p[[c for c in columns if c in p]].reset_index(drop=True) for p in probes))


def test_score_calls_the_model_only_for_replies_the_run_lacks_and_says_how_many(answered_run, monkeypatch, tmp_path, caplog):
    run, server = answered_run
    asked = server.calls
    (responses,) = (run / "responses").glob("*.jsonl")
    lines = responses.read_text().splitlines()
    keys = list(dict.fromkeys(json.loads(line)["key"] for line in lines))
    dropped = set(keys[:3])
    responses.write_text("".join(line + "\n" for line in lines if json.loads(line)["key"] not in dropped))
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
    with caplog.at_level(logging.WARNING, logger="compaction_bench.runner"):
        score(run, out=tmp_path / "scored", report=False)
    assert server.calls - asked == len(dropped)
    said = [n for n in notes(caplog) if "bench score sent" in n]
    assert len(said) == 1 and said[0].startswith(f"note: bench score sent {len(dropped)} of {len(lines)} model request(s)"), said


def test_every_call_is_sent_at_temperature_0_unless_the_model_takes_none(openai_server, anthropic_server, monkeypatch):
    """What the README says: every summary, answer and verdict is asked for at temperature 0, but for OpenAI's
    reasoning models, which take no temperature but 1 (litellm drops it: they sample at their default)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local")
    for server, model in ((openai_server, SUMMARIZER), (anthropic_server, "anthropic/claude-sonnet-4-5")):
        LLMClient(model, CallSettings(api_base=server.base_url, max_retries=0, use_cache=False)).complete(PROMPT, max_tokens=20)
        assert server.log[-1]["temperature"] == 0
    LLMClient("openai/gpt-5-mini", CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False)).complete(PROMPT, max_tokens=20)
    assert "temperature" not in openai_server.log[-1] and openai_server.rejected == []


def test_a_run_recorded_with_a_password_in_its_url_resumes_under_the_same_endpoint():
    """A manifest written before URLs were recorded without credentials holds `http://user:secret@host/v1`; the same
    `--api-base` now records `http://host/v1`: the same configuration, so `--resume` takes it (it refused it); another
    host is still another configuration."""
    from compaction_bench.run_folder import config_difference

    old = {"config": {"api_base": f"http://proxyuser:{SECRET}@127.0.0.1:8080/v1", "summarizer": SUMMARIZER}}
    same = {"config": {"api_base": "http://127.0.0.1:8080/v1", "summarizer": SUMMARIZER}}
    other = {"config": {"api_base": "http://127.0.0.1:9090/v1", "summarizer": SUMMARIZER}}
    assert config_difference(old, same) == []
    assert [d.split(":")[0] for d in config_difference(old, other)] == ["api_base"]

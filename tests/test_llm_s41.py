"""The real-model path's leftovers (s41): one rule for a model's endpoint, the run's replies read once per score,
`bench score` of a run whose credentials were only in its URL, and no made-up tool on Anthropic requests.

Each right answer is known without the code: the endpoints are the local servers' own addresses and the variables
the test sets (litellm routes a bare `claude-…` id to Anthropic, a bare `gpt-…` id to OpenAI), the servers count
the requests that reach them and keep their payloads, and a folder listing is counted where the operating system
is asked for it (`os.scandir`, `os.listdir`).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from compaction_bench.llm import CallSettings, LLMClient, MissingCredentials, model_endpoint, with_credentials
from compaction_bench.runner import RunConfig, score
from tests.conftest import bench_cli, run_once
from tests.model_servers import ModelServer

SUMMARIZER = "openai/gpt-4o-mini"
SECRET = "pw-s41-7c1f0e"
PROMPT = [{"role": "user", "content": "Summarize: the retry limit in ledger/retry.py is 7."}]


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-local")
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE"):
        monkeypatch.delenv(name, raising=False)


def with_password(url: str) -> str:
    return url.replace("http://", f"http://user:{SECRET}@")


# --------------------------------------------------------------------------- 1: one rule for a model's endpoint
OPENAI_BASE = "http://openai-proxy.example/v1"
ANTHROPIC_BASE = "http://anthropic-proxy.example"
GIVEN = f"http://key:{SECRET}@gateway.example/v1"


@pytest.mark.parametrize(("model", "api_base", "expected"), [
    ("openai/gpt-4o-mini", None, OPENAI_BASE),
    ("anthropic/claude-sonnet-4-5", None, ANTHROPIC_BASE),
    ("claude-sonnet-4-5", None, ANTHROPIC_BASE),  # litellm routes a bare claude id to Anthropic
    ("gpt-4o", None, OPENAI_BASE),
    ("openai/gpt-4o-mini", GIVEN, "http://gateway.example/v1"),
    ("anthropic/claude-sonnet-4-5", GIVEN, "http://gateway.example/v1"),
    ("claude-sonnet-4-5", GIVEN, "http://gateway.example/v1"),
    ("gpt-4o", GIVEN, "http://gateway.example/v1"),
    ("offline/reader", GIVEN, None),
])
def test_the_manifest_the_request_key_and_the_client_name_one_endpoint(model, api_base, expected, monkeypatch):
    """Before: `LLMClient.endpoint` gave the URL with its credentials where the manifest's `model_endpoint` left them out."""
    monkeypatch.setenv("OPENAI_BASE_URL", OPENAI_BASE)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", ANTHROPIC_BASE.replace("http://", f"http://u:{SECRET}@"))
    client = LLMClient(model, CallSettings(api_base=api_base, use_cache=False))
    recorded = RunConfig(strategies=("truncate",), summarizer=model, api_base=api_base).endpoints()["summarizer"]
    assert client.endpoint() == model_endpoint(model, api_base) == recorded == expected


def test_a_bare_claude_id_goes_where_its_endpoint_says_and_is_recorded_so(monkeypatch, tmp_path):
    """ANTHROPIC_BASE_URL takes a bare `claude-…` id's calls (OPENAI_BASE_URL, which a bare id's wire provider names,
    gets none); the stored reply names the endpoint the manifest would."""
    anthropic, openai = ModelServer("anthropic"), ModelServer("openai")
    try:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", openai.base_url)
        settings = CallSettings(max_retries=0, use_cache=False, record_dir=str(tmp_path / "responses"))
        LLMClient("claude-sonnet-4-5", settings).complete(PROMPT, max_tokens=20)
    finally:
        anthropic.close()
        openai.close()
    assert (anthropic.calls, openai.received) == (1, 0)
    (line,) = [json.loads(text) for text in next((tmp_path / "responses").glob("*.jsonl")).read_text().splitlines()]
    assert line["api_base"] == model_endpoint("claude-sonnet-4-5", None) == anthropic.base_url


# --------------------------------------------------------------------------- 2: the run's replies are read once per score
class Listings:
    """Counts the directory listings the operating system is asked for, by folder."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folders: list[str] = []
        for name in ("scandir", "listdir"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._counting(real))

    def _counting(self, real: Any) -> Any:
        def listing(path: Any = ".") -> Any:
            if not isinstance(path, int):  # a folder by name (`shutil.rmtree` lists open descriptors)
                self.folders.append(os.path.realpath(os.fspath(path)))
            return real(path)
        return listing

    def of(self, folder: Path) -> int:
        return self.folders.count(os.path.realpath(folder))


def test_a_score_lists_the_runs_replies_once_and_sees_the_ones_it_appends(openai_server, monkeypatch, tmp_path):
    run = tmp_path / "run"
    prompts = [[{"role": "user", "content": f"Summarize: fact {n}."}] for n in range(3)]
    recording = CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False, record_dir=str(run / "responses"))
    for prompt in prompts:
        LLMClient(SUMMARIZER, recording).complete(prompt, max_tokens=20)
    assert openai_server.calls == 3
    # A score --in-place: it reads the run's replies and appends its own to the same folder (no cache: the run's own
    # replies are all it has).
    scoring = CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False, record_dir=str(run / "responses"),
                           run_responses=str(run))
    listings = Listings(monkeypatch)
    client = LLMClient(SUMMARIZER, scoring)
    client.complete(prompts[0], max_tokens=20)
    assert listings.of(run / "responses") == 1
    for prompt in prompts[1:]:
        client.complete(prompt, max_tokens=20)
    new = [{"role": "user", "content": "Summarize: fact 3."}]
    client.complete(new, max_tokens=20)  # no stored reply: sent, and appended to the run's folder
    assert openai_server.calls == 4
    LLMClient(SUMMARIZER, scoring).complete(new, max_tokens=20)  # another client of the same score finds it
    assert openai_server.calls == 4 and (client.stored, client.fetched) == (3, 1)
    assert listings.of(run / "responses") == 1  # before: once per lookup, every file stat'ed each time
    # Another score reads the folder as it is now.
    rescoring = CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False, run_responses=str(run))
    LLMClient(SUMMARIZER, rescoring).complete(new, max_tokens=20)
    assert openai_server.calls == 4 and listings.of(run / "responses") == 2


def test_bench_score_lists_the_runs_replies_once(compacting_case, openai_server, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "run-cache"))
    run = run_once(compacting_case, tmp_path / "runs", "answered", strategies=["truncate"], answerer=SUMMARIZER,
                   api_base=openai_server.base_url)
    asked = openai_server.calls
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
    listings = Listings(monkeypatch)
    score(run, out=tmp_path / "scored", report=False)
    assert openai_server.calls == asked  # every answer from the run's replies
    assert listings.of(run / "responses") == 1  # before: one listing per lookup (350 here)


# --------------------------------------------------------------------------- 3: a score of a run whose credentials were in its URL
class CredentialServer(ModelServer):
    """The local OpenAI server behind a proxy that takes only `user:SECRET` in the URL (HTTP Basic, as httpx sends a
    URL's user name and password)."""

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        wanted = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
        if {k.lower(): v for k, v in headers.items()}.get("authorization") != wanted:
            return 401, self._error(401, "invalid_api_key", "the proxy wants its credentials"), {}
        return super()._answer(path, headers, raw)


@pytest.fixture
def credential_run(compacting_case, monkeypatch, tmp_path):
    """A run answered at an endpoint whose credentials were only in `--api-base`, three of its replies lost."""
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "run-cache"))
    server = CredentialServer("openai")
    run = run_once(compacting_case, tmp_path / "runs", "url", strategies=["truncate"], answerer=SUMMARIZER,
                   api_base=with_password(server.base_url))
    assert server.calls > 0 and server.calls == server.received  # every call carried the credentials
    assert json.loads((run / "manifest.json").read_text())["config"]["api_base"] == server.base_url
    (responses,) = (run / "responses").glob("*.jsonl")
    lines = responses.read_text().splitlines()
    dropped = set(list(dict.fromkeys(json.loads(line)["key"] for line in lines))[:3])
    responses.write_text("".join(line + "\n" for line in lines if json.loads(line)["key"] not in dropped))
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
    yield run, server, len(dropped)
    server.close()


def test_a_score_without_the_credentials_stops_and_names_the_variable_to_set(credential_run, tmp_path):
    """Before: each lost reply was asked without credentials, refused (401) and scored as an answer error."""
    run, server, _ = credential_run
    received = server.received
    with pytest.raises(MissingCredentials, match=f"called {server.base_url} with credentials in the URL.*set OPENAI_BASE_URL"):
        score(run, out=tmp_path / "scored", report=False)
    assert server.received == received and not (tmp_path / "scored").exists()  # nothing sent, no half score left
    proc = bench_cli("score", str(run), "--out", str(tmp_path / "scored-cli"), "--no-report")
    last = proc.stderr.strip().splitlines()[-1]  # after the progress line
    assert (proc.returncode, "Traceback" in proc.stderr) == (2, False), proc.stderr
    assert last.startswith("error: ") and "set OPENAI_BASE_URL" in last and server.base_url in last, proc.stderr
    assert server.received == received


def test_a_score_sends_the_lost_requests_with_the_credentials_from_the_environment(credential_run, monkeypatch, tmp_path):
    run, server, lost = credential_run
    asked = server.calls
    monkeypatch.setenv("OPENAI_BASE_URL", with_password(server.base_url))
    scored = score(run, out=tmp_path / "scored", report=False)
    assert server.calls - asked == lost and server.received == server.calls  # sent, and none refused
    written = [p for folder in (run, scored) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert written == []
    assert json.loads((scored / "manifest.json").read_text())["config"]["api_base"] == server.base_url


def test_credentials_come_from_a_variable_that_names_the_same_endpoint(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://user:{SECRET}@h.example/v1")
    assert with_credentials("openai", "http://h.example/v1") == f"http://user:{SECRET}@h.example/v1"
    assert with_credentials("openai", "http://other.example/v1") == "http://other.example/v1"  # another endpoint
    assert with_credentials("anthropic", "http://h.example/v1") == "http://h.example/v1"  # another provider's variable
    assert with_credentials("openai", "http://me:mine@h.example/v1") == "http://me:mine@h.example/v1"  # its own stay
    assert with_credentials("openai", None) is None


# --------------------------------------------------------------------------- 4: no dummy_tool on Anthropic requests
HISTORY = [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "setup.py\nREADME.md"},
    {"role": "user", "content": "Summarize the conversation so far."},
]


@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"])
def test_an_anthropic_request_with_tool_calls_in_its_history_declares_no_tool(model, anthropic_server):
    """Before: litellm added `tools: [{"name": "dummy_tool", ...}]`, a tool the agent never had."""
    LLMClient(model, CallSettings(api_base=anthropic_server.base_url, max_retries=0, use_cache=False)).complete(HISTORY, max_tokens=50)
    assert anthropic_server.rejected == [] and anthropic_server.calls == 1
    sent = anthropic_server.log[-1]
    assert any(block.get("type") == "tool_use" for m in sent["messages"] if isinstance(m["content"], list) for block in m["content"])
    assert sent.get("tools", []) == [] and "tool_choice" not in sent


def test_an_openai_request_is_sent_without_tools_as_before(openai_server):
    LLMClient(SUMMARIZER, CallSettings(api_base=openai_server.base_url, max_retries=0, use_cache=False)).complete(HISTORY, max_tokens=50)
    assert openai_server.rejected == [] and "tools" not in openai_server.log[-1]


def test_an_agents_summary_request_reaches_anthropic_without_a_made_up_tool(compacting_case, anthropic_server, tmp_path):
    run_once(compacting_case, tmp_path, "anthropic", summarizer="anthropic/claude-sonnet-4-5", api_base=anthropic_server.base_url)
    assert anthropic_server.calls > 0 and anthropic_server.rejected == []
    with_calls = [p for p in anthropic_server.log
                  if any(b.get("type") == "tool_use" for m in p["messages"] if isinstance(m["content"], list) for b in m["content"])]
    assert with_calls  # codex-local's summary request carries the session's tool calls
    assert [p.get("tools", []) for p in with_calls] == [[]] * len(with_calls)


# --------------------------------------------------------------------------- a score whose endpoint moved since the run
def test_a_score_refuses_an_answerer_whose_base_url_variable_changed_since_the_run(compacting_case, monkeypatch, tmp_path):
    """The run's answerer endpoint came from OPENAI_BASE_URL. Scored with the variable unset, its replies (keyed by
    endpoint) answered nothing and every request went to OpenAI's own endpoint, silently; now the score stops,
    naming both endpoints and the variable. With the variable as the run had it, the run's replies answer all."""
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "run-cache"))
    server = ModelServer("openai")
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_once(compacting_case, tmp_path / "runs", "env", strategies=["truncate"], answerer=SUMMARIZER)
        assert json.loads((run / "manifest.json").read_text())["config"]["endpoints"]["answerer"] == server.base_url
        asked = server.received
        monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
        monkeypatch.delenv("OPENAI_BASE_URL")
        proc = bench_cli("score", str(run), "--out", str(tmp_path / "moved"), "--no-report")
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: the run called its answerer openai/gpt-4o-mini at " + server.base_url), last
        assert "the provider's default endpoint" in last and "set OPENAI_BASE_URL or OPENAI_API_BASE" in last, last
        assert server.received == asked and not (tmp_path / "moved").exists()
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        score(run, out=tmp_path / "scored", report=False)
        assert server.received == asked  # the run's own replies answered every request
    finally:
        server.close()

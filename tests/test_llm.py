"""Model calls: offline models without litellm; real models against local servers on 127.0.0.1.

No mock of litellm or of the client: every real-model call crosses HTTP to `tests/model_servers.py`,
which counts calls, injects failures and records the key header it received.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from compaction_bench.llm import CallSettings, LLMClient, LLMError, MissingResponse, ModelUnavailable, export_responses, redact
from compaction_bench.runner import RunError
from compaction_bench.runner import run as run_benchmark
from compaction_bench.tokens import shared_counter
from tests.conftest import CORPORA

QUESTION = [{"role": "user", "content": "The build failed: ModuleNotFoundError: No module named 'yaml'.\nAll else fine."},
            {"role": "user", "content": "Which module was missing?"}]
PLANTED = "sk-planted-7f3c9a1e5b2d4c6e8a0f"
CODEX = CORPORA / "codex-rollout-jsonl/MoonLadderStudios__MoonMind/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl"


def settings(server, **overrides) -> CallSettings:
    return CallSettings(**{"api_base": server.base_url, "max_retries": 0, "backoff_seconds": 0.01, **overrides})


def test_offline_models_answer_without_network(no_network):
    reader = LLMClient("offline/reader")
    assert "No module named 'yaml'" in reader.complete(QUESTION).text
    summary = LLMClient("offline/extractive").complete(
        [{"role": "user", "content": "Never edit setup.py.\nRan pytest: FAILED tests/test_io.py"},
         {"role": "user", "content": "Summarize.\n## Constraints\n## Errors"}],
        max_tokens=200,
    )
    assert "## Constraints\n- Never edit setup.py." in summary.text
    assert "FAILED tests/test_io.py" in summary.text.split("## Errors")[1]
    assert summary.cost is None  # no price: the offline models are not priced
    # Usage is the tokenizer's count, not a chars/4 guess: 4 framing tokens per message plus the text.
    encoding = shared_counter("o200k_base")
    assert summary.output_tokens == len(encoding.encode(summary.text))
    assert summary.input_tokens == sum(4 + len(encoding.encode(m["content"])) for m in [
        {"content": "Never edit setup.py.\nRan pytest: FAILED tests/test_io.py"}, {"content": "Summarize.\n## Constraints\n## Errors"}])


def test_offline_models_do_not_import_litellm():
    code = (
        "import sys\nfrom compaction_bench.llm import LLMClient\n"
        "LLMClient('offline/reader').complete([{'role': 'user', 'content': 'a b'}, {'role': 'user', 'content': 'b?'}])\n"
        "LLMClient('offline/extractive').complete([{'role': 'user', 'content': 'x\\n## Goal'}], max_tokens=50)\n"
        "print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_responses_are_cached_per_endpoint_sample_and_repeat(openai_server, tmp_path, monkeypatch):
    from tests.model_servers import ModelServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    first = LLMClient("openai/gpt-5-mini", settings(openai_server, cache_dir=str(tmp_path)))
    reply = first.complete(QUESTION, purpose="answer")
    assert reply.text.startswith("reply ") and not reply.cache_hit and openai_server.calls == 1
    assert reply.input_tokens > 0 and reply.output_tokens > 0 and reply.cost > 0  # gpt-5-mini has a price in litellm's map
    again = LLMClient("openai/gpt-5-mini", settings(openai_server, cache_dir=str(tmp_path))).complete(QUESTION)
    assert again.cache_hit and again.text == reply.text and openai_server.calls == 1
    assert not first.complete(QUESTION, sample=1).cache_hit and openai_server.calls == 2
    repeat = LLMClient("openai/gpt-5-mini", settings(openai_server, cache_dir=str(tmp_path)), repeat=1)
    assert not repeat.complete(QUESTION).cache_hit and openai_server.calls == 3
    other = ModelServer("openai")  # the same model name at a second endpoint is not answered from the first one's cache
    try:
        assert not LLMClient("openai/gpt-5-mini", settings(other, cache_dir=str(tmp_path))).complete(QUESTION).cache_hit
        assert other.calls == 1
    finally:
        other.close()


def test_rate_limit_is_retried_and_a_persistent_error_is_not_cached(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    client = LLMClient("openai/m", settings(openai_server, cache_dir=str(tmp_path), max_retries=2))
    openai_server.fail(429)
    assert client.complete(QUESTION).text.startswith("reply ")
    assert openai_server.received == 2 and openai_server.calls == 1
    openai_server.fail(500, times=10)
    failing = [{"role": "user", "content": "this one fails"}]
    with pytest.raises(ModelUnavailable, match="failed after 3 attempts: .*The server had an error while processing your request"):
        client.complete(failing)
    assert openai_server.received == 5
    openai_server.failures.clear()
    assert not client.complete(failing).cache_hit and openai_server.calls == 2  # nothing was cached: called again
    openai_server.context_window = 10  # a refused request is not retried; its message is the provider's
    with pytest.raises(LLMError, match="refused the request: .*maximum context length is 10 tokens"):
        client.complete([{"role": "user", "content": "a question far longer than ten tokens, " * 3}])
    assert openai_server.received == 7


def test_an_unresponsive_endpoint_times_out_quickly(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    openai_server.stall(30, times=2)
    client = LLMClient("openai/m", settings(openai_server, cache_dir=str(tmp_path), max_retries=1, timeout=0.5))
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="Timeout"):
        client.complete(QUESTION)
    assert time.monotonic() - started < 10 and openai_server.received == 2


def test_one_concurrency_limit_across_clients(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    openai_server.stall(0.3, times=6)
    shared = settings(openai_server, cache_dir=str(tmp_path), max_concurrency=2, slots_dir=str(tmp_path / "slots"))
    errors: list[BaseException] = []

    def ask(n: int) -> None:
        try:  # one client per thread, as each worker process has its own
            LLMClient("openai/m", shared).complete([{"role": "user", "content": f"question {n}"}])
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and openai_server.calls == 6 and openai_server.max_in_flight == 2


def test_offline_mode_and_recorded_responses(openai_server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    with pytest.raises(MissingResponse, match="--offline: no recorded or cached response"):
        LLMClient("openai/m", settings(openai_server, cache_dir=str(tmp_path / "c1"), offline=True)).complete(QUESTION)
    assert openai_server.received == 0
    with pytest.raises(LLMError, match="no such file"):
        CallSettings(responses=str(tmp_path / "missing.jsonl"))


def test_keys_are_redacted_from_error_text(monkeypatch):
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", PLANTED)
    assert redact(f"Incorrect API key provided: {PLANTED}.") == "Incorrect API key provided: [redacted]."


def _grep(folder: Path, needle: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_bench_run_against_the_local_server_end_to_end(openai_server, tmp_path, monkeypatch):
    """Summarizer and answerer at the local server: valid payloads, a free re-run, export, --offline, failures."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(cache))
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
    common = dict(
        strategies=["codex-local", "opencode-v1", "truncate"], profiles=["64k"], out=tmp_path / "runs", jobs=1, progress=False,
        report=False, summarizer="openai/gpt-5-mini", answerer="openai/gpt-5-mini", api_base=openai_server.base_url,
        max_retries=0,
    )
    first = run_benchmark([CODEX], run_id="first", **common)
    calls = openai_server.calls
    assert calls > 0 and openai_server.rejected == []
    assert set(openai_server.auth_headers) == {f"Bearer {PLANTED}"}  # the key came from the environment
    second = run_benchmark([CODEX], run_id="second", **common)
    assert openai_server.calls == calls  # zero calls: every response came from the cache
    for table in ("summary", "probes"):
        a, b = pd.read_parquet(first / f"{table}.parquet"), pd.read_parquet(second / f"{table}.parquet")
        pd.testing.assert_frame_equal(a.drop(columns=["answer_cached"], errors="ignore"), b.drop(columns=["answer_cached"], errors="ignore"))
    stored = sorted((first / "responses").glob("*.jsonl"))
    assert stored, "every model response is stored in the run folder"
    # CI: export, then re-run with an empty cache, --offline and the export: still zero calls.
    exported = tmp_path / "responses.jsonl"
    assert export_responses(first, exported) > 0
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "empty-cache"))
    third = run_benchmark([CODEX], run_id="third", offline=True, responses=str(exported), **common)
    assert openai_server.calls == calls
    pd.testing.assert_frame_equal(pd.read_parquet(first / "summary.parquet"), pd.read_parquet(third / "summary.parquet"))
    # The planted key is nowhere in the runs or the cache.
    assert _grep(tmp_path / "runs", PLANTED) == [] and _grep(cache, PLANTED) == []
    # A persistent 500 fails the cell with the provider's message; the next run calls again.
    monkeypatch.setenv("COMPACTION_BENCH_CACHE", str(tmp_path / "fresh-cache"))
    openai_server.fail(500, times=1000)
    with pytest.raises(RunError, match="The server had an error"):
        run_benchmark([CODEX], run_id="failing", **{**common, "strategies": ["codex-local"]})
    openai_server.failures.clear()
    run_benchmark([CODEX], run_id="after", **{**common, "strategies": ["codex-local"]})
    assert openai_server.calls > calls


def test_the_command_line_reaches_the_server_and_replays_from_an_export(openai_server, tmp_path):
    """`bench run --api-base`, `bench cache export` and `bench run --offline --responses` as a user types them."""
    import os

    env = {**os.environ, "OPENAI_API_KEY": PLANTED, "COMPACTION_BENCH_CACHE": str(tmp_path / "cache")}
    bench = [sys.executable, "-m", "compaction_bench.cli"]
    common = [str(CODEX), "-s", "codex-local", "-p", "64k", "--summarizer", "openai/gpt-5-mini", "--answerer", "openai/gpt-5-mini",
              "--api-base", openai_server.base_url, "--max-retries", "0", "--model-timeout", "30", "--max-concurrency", "2",
              "-o", str(tmp_path / "runs"), "-j", "1", "--no-report"]
    first = subprocess.run([*bench, "run", *common, "--run-id", "cli"], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    calls = openai_server.calls
    assert calls > 0 and openai_server.rejected == []
    exported = tmp_path / "export.jsonl"
    out = subprocess.run([*bench, "cache", "export", str(tmp_path / "runs" / "cli"), "-o", str(exported)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and f"{len(exported.read_text().splitlines())} responses written" in out.stdout
    env["COMPACTION_BENCH_CACHE"] = str(tmp_path / "empty")
    again = subprocess.run([*bench, "run", *common, "--run-id", "ci", "--offline", "--responses", str(exported)],
                           capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert openai_server.calls == calls
    missing = subprocess.run([*bench, "run", *common, "--run-id", "bad", "--responses", str(tmp_path / "nope.jsonl")],
                             capture_output=True, text=True, timeout=300, env=env)
    assert missing.returncode == 2 and "no such file" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_empty_reply_cut_off_at_max_tokens_is_an_error_and_never_cached(api, tmp_path, monkeypatch):
    """finish_reason 'length' with no text (the budget went to reasoning): the caller gets an LLMError
    (an unscored answer or verdict, a failed summary) and the next run asks again."""
    from compaction_bench.llm import EmptyReply
    from tests.model_servers import ModelServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-local")
    server = ModelServer(api, reply=lambda call: "", finish_reason="length")
    model = "openai/gpt-5-mini" if api == "openai" else "anthropic/claude-sonnet-4-5"
    try:
        client = LLMClient(model, settings(server, cache_dir=str(tmp_path), record_dir=str(tmp_path / "responses")))
        with pytest.raises(EmptyReply, match="cut off at max_tokens=50"):
            client.complete(QUESTION, max_tokens=50, purpose="judge")
        assert issubclass(EmptyReply, LLMError) and server.calls == 1
        assert not (tmp_path / "responses").exists()  # nothing stored for re-grading either
        server.reply, server.finish_reason = (lambda call: "module yaml"), "stop"
        again = LLMClient(model, settings(server, cache_dir=str(tmp_path))).complete(QUESTION, max_tokens=50, purpose="judge")
        assert not again.cache_hit and again.text == "module yaml" and server.calls == 2
        server.reply, server.finish_reason = (lambda call: "a cut-off but useful reply"), "length"
        kept = client.complete([{"role": "user", "content": "other"}], max_tokens=50)
        assert kept.text == "a cut-off but useful reply"  # text that was cut off is still a reply
    finally:
        server.close()


def test_the_cache_key_names_the_endpoint_chosen_by_the_environment(tmp_path, monkeypatch):
    """OPENAI_BASE_URL (no --api-base) picks the endpoint: a second endpoint is a new request, not a cache hit."""
    from compaction_bench.llm import effective_api_base
    from tests.model_servers import ModelServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-local")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_BASE", raising=False)
    one, two = ModelServer("openai", reply=lambda call: "from one"), ModelServer("openai", reply=lambda call: "from two")
    a_one, a_two = ModelServer("anthropic", reply=lambda call: "from a1"), ModelServer("anthropic", reply=lambda call: "from a2")
    plain = CallSettings(max_retries=0, cache_dir=str(tmp_path))
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", one.base_url)
        assert LLMClient("openai/gpt-4o", plain).complete(QUESTION).text == "from one"
        assert LLMClient("openai/gpt-4o", plain).complete(QUESTION).cache_hit
        monkeypatch.setenv("OPENAI_BASE_URL", two.base_url)
        second = LLMClient("openai/gpt-4o", plain).complete(QUESTION)
        assert second.text == "from two" and not second.cache_hit and (one.calls, two.calls) == (1, 1)
        monkeypatch.delenv("OPENAI_BASE_URL")
        monkeypatch.setenv("OPENAI_API_BASE", one.base_url)  # litellm's second name
        assert LLMClient("openai/gpt-4o", plain).complete(QUESTION).cache_hit  # the same endpoint as the first call
        assert LLMClient("gpt-4o", plain).complete(QUESTION).text == "from one"  # a bare id routes to openai too
        # An explicit --api-base wins over the environment, in the call and in the key.
        assert LLMClient("openai/gpt-4o", settings(two, cache_dir=str(tmp_path))).complete(QUESTION).cache_hit
        monkeypatch.setenv("ANTHROPIC_BASE_URL", a_one.base_url)
        assert LLMClient("anthropic/claude-sonnet-4-5", plain).complete(QUESTION).text == "from a1"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", a_two.base_url)
        assert LLMClient("anthropic/claude-sonnet-4-5", plain).complete(QUESTION).text == "from a2"
        assert (a_one.calls, a_two.calls) == (1, 1)
        monkeypatch.setenv("ANTHROPIC_API_BASE", a_one.base_url)  # litellm reads this name first
        assert effective_api_base("anthropic", None) == a_one.base_url
        assert LLMClient("anthropic/claude-sonnet-4-5", plain).complete(QUESTION).cache_hit and a_one.calls == 1
    finally:
        for server in (one, two, a_one, a_two):
            server.close()

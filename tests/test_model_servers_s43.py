"""The local model servers refuse the tool pairings the real APIs refuse (`tests/model_servers.py`), sent as raw HTTP.

- Gemini: the three rules `metrics/integrity.py` quotes: a call turn right after a user turn (gemini-cli #11814),
  one function response per call in the next turn (gemini-cli #4217), matched by id where the calls have ids, and
  a response turn right after a call turn (gemini-cli #14183). The server agrees with the project's oracle
  `tests/test_integrity_gemini.api_accepts` on every layout of that file, as litellm builds its `contents`.
- Anthropic: "each tool_use must have a single result. Found multiple `tool_result` blocks with id …"
  (tests/test_integrity_rules_providers.py).
- Responses: "Duplicate function_call_output for call_id …" (NousResearch/hermes-agent#102629, fixed by #111443).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.model_servers import ModelServer
from tests.test_integrity_gemini import LAYOUTS, api_accepts, litellm_contents


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
    """(HTTP status, the error's message or "") of one raw request."""
    request = urllib.request.Request(url, data=json.dumps(body, default=str).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["error"]["message"]


@pytest.fixture(scope="module")
def gemini_server():
    server = ModelServer("gemini")
    yield server
    server.close()


def ask_gemini(server: ModelServer, contents: list[dict[str, Any]]) -> tuple[int, str]:
    return post(f"{server.base_url}/models/gemini-3-pro-preview:generateContent", {"contents": contents}, {"x-goog-api-key": "local"})


def text(role: str, words: str = "go") -> dict[str, Any]:
    return {"role": role, "parts": [{"text": words}]}


def calls(*ids: str | None) -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}, **({"id": i} if i else {})}} for i in ids]}


def responses(*ids: str | None) -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {"output": "x"}, **({"id": i} if i else {})}}
                                      for i in ids]}


def test_gemini_accepts_a_call_turn_answered_in_the_next_turn(gemini_server):
    assert ask_gemini(gemini_server, [text("user"), calls("a", "b"), responses("b", "a"), text("model", "done")]) == (200, "")
    assert ask_gemini(gemini_server, [text("user"), calls(None), responses(None)]) == (200, "")  # no ids (Gemini 2.x)


def test_gemini_refuses_contents_that_open_with_a_call_turn(gemini_server):
    status, message = ask_gemini(gemini_server, [calls("a"), responses("a"), text("model", "done")])
    assert (status, message) == (400, "Please ensure that function call turn comes immediately after a user turn or after a function "
                                      "response turn.")
    # a model text turn before it is no user turn either
    assert ask_gemini(gemini_server, [text("model", "plan"), calls("a"), responses("a")])[0] == 400


@pytest.mark.parametrize("answer", [responses("a"), responses("a", "b", "b"), text("user", "never mind")])
def test_gemini_refuses_a_response_count_other_than_the_call_count(gemini_server, answer):
    status, message = ask_gemini(gemini_server, [text("user"), calls("a", "b"), answer])
    assert (status, message) == (400, "Please ensure that the number of function response parts is equal to the number of function "
                                      "call parts of the function call turn.")
    # a call turn that ends the contents has no response turn at all
    assert ask_gemini(gemini_server, [text("user"), calls("a")])[0] == 400


def test_gemini_refuses_a_response_for_another_id(gemini_server):
    status, message = ask_gemini(gemini_server, [text("user"), calls("a", "b"), responses("a", "c")])
    assert status == 400 and message.startswith("Please ensure that each function response part answers a function call part")


def test_gemini_refuses_a_response_turn_after_no_call_turn(gemini_server):
    status, message = ask_gemini(gemini_server, [text("user"), text("model", "summary"), responses("a")])
    assert (status, message) == (400, "Please ensure that function response turn comes immediately after a function call turn.")


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_gemini_server_agrees_with_the_api_rules_on_litellm_s_contents(gemini_server, name):
    contents = litellm_contents(LAYOUTS[name])
    status, message = ask_gemini(gemini_server, contents)
    assert (status == 200) == api_accepts(contents), (message, json.dumps(contents, default=str))


def test_anthropic_refuses_two_results_for_one_tool_use(anthropic_server):
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]}

    def result(*ids: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "out"} for i in ids]}

    def ask(messages: list[dict[str, Any]]) -> tuple[int, str]:
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}
        return post(f"{anthropic_server.base_url}/v1/messages", body, {"x-api-key": "local", "anthropic-version": "2023-06-01"})

    start = {"role": "user", "content": "go"}
    assert ask([start, use, result("toolu_1")]) == (200, "")
    status, message = ask([start, use, result("toolu_1", "toolu_1")])
    assert status == 400 and "each tool_use must have a single result. Found multiple `tool_result` blocks with id: toolu_1" in message


def test_responses_refuses_two_outputs_for_one_call(openai_server):
    call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "done"}

    def ask(items: list[dict[str, Any]]) -> tuple[int, str]:
        return post(f"{openai_server.base_url}/responses", {"model": "gpt-5-codex", "input": items}, {"authorization": "Bearer sk-local"})

    start = {"role": "user", "content": "list the files"}
    assert ask([start, call, output]) == (200, "")
    status, message = ask([start, call, output, output])
    assert status == 400 and message.startswith("Duplicate function_call_output for call_id call_1.")

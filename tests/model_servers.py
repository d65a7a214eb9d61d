"""Local model API servers for the tests: OpenAI (Chat Completions and Responses), Anthropic Messages
and Gemini `generateContent` on 127.0.0.1.

Each server is a stdlib `ThreadingHTTPServer` in a daemon thread. It validates a request the way
the real API does and answers a rejected one with that API's error shape and HTTP status:

- OpenAI (`POST /v1/chat/completions`): roles system/developer/user/assistant/tool only; no keys a
  message of that role does not have; text or content-part content (`text`, `image_url`), never
  empty (an assistant may leave it empty only when it calls tools); tool calls
  `{id, type: "function", function: {name, arguments: str}}`; every tool message answers a call of
  the assistant message before it, and every call is answered before the next non-tool message;
  a tool call id used once per request; `max_tokens` and `max_completion_tokens` never both, and a
  gpt-5/o-series model takes neither `max_tokens` nor a temperature other than 1; a prompt over the
  model's window, or prompt + max tokens over it → 400 `context_length_exceeded`.
- Anthropic (`POST /v1/messages`): `max_tokens` required; roles user/assistant only, system as a
  top-level field; text/image/tool_use/tool_result/thinking blocks; non-empty text; each
  `tool_result` answers a `tool_use` of the previous assistant message, and each `tool_use` is
  answered in the next message, its results first in that message, by one `tool_result` each ("each
  tool_use must have a single result. Found multiple `tool_result` blocks with id …"); tool_use ids
  unique in the request and matching `^[A-Za-z0-9_-]+$`; temperature in 0..1; a final assistant message (prefill) not
  ending in whitespace; a prompt over the window → 400 `prompt is too long: N tokens > M maximum`,
  prompt + `max_tokens` over it → 400 `input length and `max_tokens` exceed context limit`.
  `finish_reason = "length"` makes every answer report a cut-off reply (Anthropic `max_tokens`).
- OpenAI Responses (`POST /v1/responses`, on the OpenAI server): only the body keys the API knows
  (`max_tokens` is refused: it is `max_output_tokens` there, at least 16); `input` a string or items:
  messages (user/system/developer with `input_text`/`input_image` parts, assistant with
  `output_text`/`refusal` parts, or string content), `function_call` {call_id, name, arguments: str},
  `function_call_output` {call_id, output} answering an earlier call of the request (every call
  answered once: "Duplicate function_call_output for call_id …", NousResearch/hermes-agent#102629; a
  call id used once), `reasoning` items; a gpt-5/o-series model takes no
  `temperature`; a prompt over the window → 400 `context_length_exceeded`. `paths` records which
  endpoint each answered call used.
- Gemini (`POST /v1beta/models/{model}:generateContent`, key in `x-goog-api-key` or `?key=`, 403
  otherwise): only the body fields the API knows (camelCase or snake_case, as proto JSON reads
  them); `contents` of user/model turns with non-empty parts (text, inline data, function calls,
  function responses), paired as `metrics/integrity.py`'s Gemini format states the API's three rules
  (the test oracle `tests/test_integrity_gemini.api_accepts` applies the same): a turn of function
  calls right after a user turn (so `contents` cannot open with one, gemini-cli #11814), the next
  turn holding one function response per call (gemini-cli #4217), answering them by id where the
  calls carry ids (Gemini 3; that refusal's wording is the server's own) and by a called name, and
  a turn of function responses only right after a call turn; `systemInstruction` of text parts,
  `generationConfig` with a temperature in 0..2 and a positive `maxOutputTokens`; a prompt over the
  window → 400 INVALID_ARGUMENT "The input token count (N) exceeds the maximum number of tokens
  allowed (M)." (the limit is on input only); errors as `{"error": {"code", "message", "status"}}`.

Each requires an API key (401 otherwise; Gemini 403), counts accepted and rejected calls, keeps every
payload in `log`, and answers through a pluggable `reply` function that sees the request as plain
`(role, text)` turns (`Call`). Failures can be injected: `fail(status, times, retry_after)` answers the
next `times` calls with that status (a 429 carries `retry-after: <retry_after>`, "0" unless told;
None sends no header), `stall(seconds, times)` delays answers.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import dropwhile
from typing import Any

from compaction_bench.tokens import shared_counter

TOOL_USE_ID = re.compile(r"[A-Za-z0-9_-]+")
OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
OPENAI_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}


#: A Gemini API request path: the model and the method.
GEMINI_PATH = re.compile(r"/v1beta/models/([^/:]+):generateContent")
#: Google's canonical status names of the HTTP statuses the Gemini API answers with.
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
#: The body keys OpenAI's Responses API takes.
RESPONSES_KEYS = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning", "text", "store", "stream", "stream_options", "metadata", "previous_response_id", "include", "truncation", "user",
    "prompt_cache_key", "prompt_cache_retention", "service_tier", "safety_identifier", "background", "max_tool_calls",
    "top_logprobs", "conversation", "prompt",
}


@dataclass(frozen=True)
class Call:
    """A validated request, as a reply function sees it."""

    api: str  # "openai", "anthropic" or "gemini"
    model: str
    system: str
    turns: tuple[tuple[str, str], ...]  # (role, text) after the system part; tool results have role "tool"
    max_tokens: int | None
    payload: dict[str, Any]

    @property
    def last_user(self) -> str:
        return next((text for role, text in reversed(self.turns) if role == "user"), "")

    @property
    def text(self) -> str:
        """Everything the model reads, system first."""
        return "\n".join([self.system, *(text for _, text in self.turns)]).strip()


def echo_reply(call: Call) -> str:
    """Deterministic default answer: names the request by a hash of what the model reads."""
    digest = hashlib.sha256(call.text.encode("utf-8")).hexdigest()[:12]
    return f"reply {digest}: {call.last_user[:120]}"


class Invalid(Exception):
    """A request the real API would refuse: HTTP status, error type/code and message."""

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param


@dataclass
class ModelServer:
    """One local API server; `base_url` is what `--api-base` takes."""

    api: str
    context_window: int = 400_000
    reply: Callable[[Call], str] = echo_reply
    finish_reason: str = "stop"  # OpenAI's finish_reason of every answer ("length": cut at max_tokens; Anthropic "max_tokens")
    log: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0  # requests answered with a completion
    rejected: list[dict[str, Any]] = field(default_factory=list)  # (payload, error) of refused requests
    failures: list[tuple[tuple[int, str | None], int]] = field(default_factory=list)  # [(status, retry-after), remaining] injected
    stalls: list[tuple[float, int]] = field(default_factory=list)  # [seconds, remaining]
    received: int = 0  # every HTTP request, failures included
    received_at: list[float] = field(default_factory=list)  # the monotonic clock at each of them
    auth_headers: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0  # the most requests this server was handling at once
    paths: list[str] = field(default_factory=list)  # the endpoint of each answered call (`log`'s order)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """OpenAI clients append `/chat/completions` or `/responses`; Anthropic clients append
        `/v1/messages`; Gemini clients append `/models/{model}:generateContent`."""
        root = f"http://127.0.0.1:{self.port}"
        return {"openai": f"{root}/v1", "gemini": f"{root}/v1beta"}.get(self.api, root)

    def fail(self, status: int, times: int = 1, retry_after: str | None = "0") -> None:
        """Answer the next `times` calls with `status`; a 429 carries `retry-after: <retry_after>` (None: no header)."""
        with self._lock:
            self.failures.append(((status, retry_after), times))

    def stall(self, seconds: float, times: int = 1) -> None:
        with self._lock:
            self.stalls.append((seconds, times))

    def reset(self) -> None:
        with self._lock:
            self.log.clear()
            self.rejected.clear()
            self.calls = self.received = self.max_in_flight = 0
            self.auth_headers.clear()
            self.paths.clear()
            self.received_at.clear()

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ handling
    def _take(self, queue: list[tuple[Any, int]]) -> Any:
        with self._lock:
            if not queue:
                return None
            value, remaining = queue[0]
            if remaining <= 1:
                queue.pop(0)
            else:
                queue[0] = (value, remaining - 1)
            return value

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # The headers and the body are two writes: with Nagle's algorithm the body waits for the client's delayed
            # ACK of the headers, about 40 ms a reply, which would make every local model call that slow.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                return

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                with server._lock:
                    server.received += 1
                    server.received_at.append(time.monotonic())
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.auth_headers.append(
                        self.headers.get("authorization") or self.headers.get("x-api-key") or self.headers.get("x-goog-api-key") or "")
                try:
                    status, body, headers = server._answer(self.path, dict(self.headers), raw)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._send(status, body, headers)

        return Handler

    def _error(self, status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
        if self.api == "anthropic":
            return {"type": "error", "error": {"type": kind, "message": message}}
        if self.api == "gemini":
            return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(status, "INVALID_ARGUMENT")}}
        code = {"rate_limit": "rate_limit_exceeded", "context": "context_length_exceeded"}.get(kind, None)
        error_type = {401: "invalid_request_error", 429: "requests", 500: "server_error"}.get(status, "invalid_request_error")
        return {"error": {"message": message, "type": error_type, "param": param, "code": code or kind}}

    def _endpoint(self, path: str) -> tuple[str, str | None] | None:
        """(endpoint, the model named in the path) of a request path, or None for a path this API lacks."""
        route, _, query = path.partition("?")
        route = route.rstrip("/")
        if self.api == "openai" and route in ("/v1/chat/completions", "/v1/responses"):
            return route, None
        if self.api == "anthropic" and route == "/v1/messages":
            return route, None
        match = GEMINI_PATH.fullmatch(route)
        if self.api == "gemini" and match:
            return "generateContent", urllib.parse.unquote(match.group(1))
        return None

    def _answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        lowered = {k.lower(): v for k, v in headers.items()}
        found = self._endpoint(path)
        if found is None:
            serves = {"openai": "/v1/chat/completions and /v1/responses", "anthropic": "/v1/messages",
                      "gemini": "/v1beta/models/{model}:generateContent"}[self.api]
            return 404, self._error(404, "not_found_error", f"unknown path {path}; this server serves {serves}"), {}
        endpoint, path_model = found
        stall = self._take(self.stalls)
        if stall:
            self._stop.wait(stall)
        failure = self._take(self.failures)
        if failure:
            status, retry_after = failure
            if status == 429:
                text = "Resource has been exhausted (e.g. check quota)." if self.api == "gemini" else \
                    "Rate limit reached for requests. Please try again in 1s."
                return 429, self._error(429, "rate_limit", text), ({} if retry_after is None else {"retry-after": retry_after})
            return status, self._error(status, "api_error" if self.api == "anthropic" else "server_error",
                                       "The server had an error while processing your request."), {}
        if self.api == "gemini":
            query = urllib.parse.parse_qs(path.partition("?")[2])
            key = lowered.get("x-goog-api-key") or (query.get("key") or [""])[0]
            if not key:
                return 403, self._error(403, "permission_denied",
                                        "Method doesn't allow unregistered callers (callers without established identity). "
                                        "Please use API Key or other form of API consumer identity to call this API."), {}
        else:
            key = lowered.get("x-api-key") if self.api == "anthropic" else lowered.get("authorization", "").removeprefix("Bearer ")
        if not key:
            kind = "authentication_error" if self.api == "anthropic" else "invalid_api_key"
            return 401, self._error(401, kind, "missing API key"), {}
        try:
            payload = json.loads(raw or b"null")
            if not isinstance(payload, dict):
                raise Invalid(400, "invalid_request_error", "the request body must be a JSON object")
            if self.api == "gemini":
                call = validate_gemini(payload, path_model or "")
            elif endpoint == "/v1/responses":
                call = validate_responses(payload)
            else:
                call = validate_openai(payload) if self.api == "openai" else validate_anthropic(payload)
            tokens = count_prompt(call)
            if self.api == "gemini" and tokens > self.context_window:  # Gemini's limit is on the input alone
                raise Invalid(400, "invalid_argument",
                              f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({self.context_window}).")
            if call.api == "responses" and tokens > self.context_window:
                raise Invalid(400, "context", "Your input exceeds the context window of this model. Please adjust your input and try again.",
                              "input")
            if tokens > self.context_window:
                if self.api == "anthropic":
                    raise Invalid(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {self.context_window} maximum")
                raise Invalid(
                    400,
                    "context",
                    f"This model's maximum context length is {self.context_window} tokens. However, your messages resulted "
                    f"in {tokens} tokens. Please reduce the length of the messages.",
                    "messages",
                )
            reserved = call.max_tokens or 0
            if call.api in ("openai", "anthropic") and tokens + reserved > self.context_window:  # the prompt and the reply it may write
                if self.api == "anthropic":
                    raise Invalid(400, "invalid_request_error",
                                  f"input length and `max_tokens` exceed context limit: {tokens} + {reserved} > {self.context_window}, "
                                  "decrease input length or `max_tokens` and try again")
                raise Invalid(
                    400,
                    "context",
                    f"This model's maximum context length is {self.context_window} tokens. However, you requested "
                    f"{tokens + reserved} tokens ({tokens} in the messages, {reserved} in the completion). "
                    "Please reduce the length of the messages or completion.",
                    "messages",
                )
        except Invalid as exc:
            with self._lock:
                self.rejected.append({"payload": json.loads(raw or b"null") if _is_json(raw) else None, "error": exc.message})
            return exc.status, self._error(exc.status, exc.kind, exc.message, exc.param), {}
        text = self.reply(call)
        output = len(shared_counter("o200k_base").encode(text))
        with self._lock:
            self.calls += 1
            self.log.append(payload)
            self.paths.append(endpoint)
        finish = self.finish_reason
        if self.api == "gemini":
            return 200, {
                "candidates": [{"content": {"role": "model", **({"parts": [{"text": text}]} if text else {})},
                                "finishReason": {"stop": "STOP", "length": "MAX_TOKENS"}.get(finish, finish), "index": 0}],
                "usageMetadata": {"promptTokenCount": tokens, "candidatesTokenCount": output, "totalTokenCount": tokens + output},
                "modelVersion": call.model,
                "responseId": f"gemini-{self.calls:06d}",
            }, {}
        if call.api == "responses":
            cut = finish == "length"
            return 200, {
                "id": f"resp_{self.calls:06d}",
                "object": "response",
                "created_at": int(time.time()),
                "status": "incomplete" if cut else "completed",
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
                "error": None,
                "model": call.model,
                "output": [{"type": "message", "id": f"msg_{self.calls:06d}", "status": "incomplete" if cut else "completed",
                            "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}] if text else [],
                "usage": {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output,
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": tokens + output},
            }, {}
        if self.api == "anthropic":
            return 200, {
                "id": f"msg_{self.calls:06d}",
                "type": "message",
                "role": "assistant",
                "model": call.model,
                "content": [{"type": "text", "text": text}] if text else [],
                "stop_reason": {"stop": "end_turn", "length": "max_tokens"}.get(finish, finish),
                "stop_sequence": None,
                "usage": {"input_tokens": tokens, "output_tokens": output},
            }, {}
        return 200, {
            "id": f"chatcmpl-{self.calls:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": output, "total_tokens": tokens + output},
        }, {}


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except ValueError:
        return False


def count_prompt(call: Call) -> int:
    """Prompt tokens as the server bills them: o200k_base over the text plus 4 per turn."""
    counter = shared_counter("o200k_base")
    return counter.count(call.system) + sum(4 + counter.count(text) for _, text in call.turns)


# ---------------------------------------------------------------------- OpenAI
def _openai_content(content: Any, where: str, *, may_be_empty: bool) -> str:
    if isinstance(content, str):
        if not content.strip() and not may_be_empty:
            raise Invalid(400, "invalid_value", f"Invalid '{where}.content': string too short. Expected a non-empty string.", where)
        return content
    if content is None:
        if may_be_empty:
            return ""
        raise Invalid(400, "invalid_type", f"Invalid type for '{where}.content': expected a string or array, got null.", where)
    if not isinstance(content, list) or (not content and not may_be_empty):
        raise Invalid(400, "invalid_type", f"Invalid '{where}.content': expected a non-empty string or array of content parts.", where)
    texts = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
            raise Invalid(400, "invalid_value", f"Invalid value for '{at}.type': expected 'text' or 'image_url'.", at)
        if part["type"] == "text":
            if set(part) - {"type", "text", "cache_control"} or not isinstance(part.get("text"), str) or not part["text"].strip():
                raise Invalid(400, "invalid_value", f"Invalid '{at}': a text part needs a non-empty 'text' string and nothing else.", at)
            texts.append(part["text"])
        else:
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str) or not image["url"]:
                raise Invalid(400, "invalid_value", f"Invalid '{at}.image_url': expected an object with a 'url'.", at)
            texts.append("[image]")
    return "\n".join(texts)


def validate_openai(payload: dict[str, Any]) -> Call:
    """The OpenAI Chat Completions checks of a request body (raises `Invalid`)."""
    model, messages = payload.get("model"), payload.get("messages")
    if not isinstance(model, str) or not model:
        raise Invalid(400, "missing_required_parameter", "you must provide a model parameter", "model")
    if not isinstance(messages, list) or not messages:
        raise Invalid(400, "invalid_value", "Invalid 'messages': empty array. Expected an array with minimum length 1.", "messages")
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    open_calls: dict[str, str] = {}  # id -> where, calls of the latest assistant message still unanswered
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise Invalid(400, "invalid_type", f"Invalid type for '{where}': expected an object.", where)
        role = message.get("role")
        if role not in OPENAI_ROLES:
            raise Invalid(
                400,
                "invalid_value",
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
                f"{where}.role",
            )
        extra = sorted(set(message) - OPENAI_KEYS[role])
        if extra:
            raise Invalid(400, "invalid_request_error",
                          f"Additional properties are not allowed ({', '.join(repr(k) for k in extra)} was unexpected) - '{where}'", where)
        if role != "tool" and open_calls:
            ids = ", ".join(sorted(open_calls))
            raise Invalid(
                400,
                "invalid_request_error",
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
                f"The following tool_call_ids did not have response messages: {ids}",
                "messages",
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in open_calls:
                raise Invalid(
                    400,
                    "invalid_request_error",
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    f"{where}.role",
                )
            open_calls.pop(call_id)
            content = message.get("content")
            if not isinstance(content, str | list):
                raise Invalid(400, "invalid_type", f"Invalid type for '{where}.content': expected a string or array.", where)
            text = _openai_content(content, where, may_be_empty=True)
            turns.append(("tool", text))
            continue
        if role == "assistant":
            calls = message.get("tool_calls")
            text = _openai_content(message.get("content"), where, may_be_empty=bool(calls))
            if calls is not None:
                if not isinstance(calls, list) or not calls:
                    raise Invalid(400, "invalid_value", f"Invalid '{where}.tool_calls': empty array.", f"{where}.tool_calls")
                for j, tool_call in enumerate(calls):
                    at = f"{where}.tool_calls[{j}]"
                    if not isinstance(tool_call, dict) or set(tool_call) != {"id", "type", "function"}:
                        raise Invalid(400, "invalid_value",
                                      f"Invalid '{at}': expected exactly the keys 'id', 'type' and 'function'.", at)
                    if tool_call["type"] != "function":
                        raise Invalid(400, "invalid_value", f"Invalid value for '{at}.type': expected 'function'.", f"{at}.type")
                    function = tool_call["function"]
                    if not isinstance(tool_call["id"], str) or not tool_call["id"]:
                        raise Invalid(400, "invalid_value", f"Invalid '{at}.id': expected a non-empty string.", f"{at}.id")
                    if not isinstance(function, dict) or set(function) != {"name", "arguments"}:
                        raise Invalid(400, "invalid_value", f"Invalid '{at}.function': expected 'name' and 'arguments'.", f"{at}.function")
                    if not isinstance(function["name"], str) or not function["name"]:
                        raise Invalid(400, "invalid_value", f"Invalid '{at}.function.name': empty string.", f"{at}.function.name")
                    if not isinstance(function["arguments"], str):
                        raise Invalid(400, "invalid_type",
                                      f"Invalid type for '{at}.function.arguments': expected a string, got {type(function['arguments']).__name__}.",
                                      f"{at}.function.arguments")
                    if tool_call["id"] in open_calls:
                        raise Invalid(400, "invalid_value", f"Duplicate tool call id {tool_call['id']!r}.", f"{at}.id")
                    open_calls[tool_call["id"]] = at
                    text += f"\n{function['name']}({function['arguments']})"
            turns.append(("assistant", text))
            continue
        text = _openai_content(message.get("content"), where, may_be_empty=False)
        if role in ("system", "developer") and not turns:
            system.append(text)
        else:
            turns.append((role, text))
    if open_calls:
        ids = ", ".join(sorted(open_calls))
        raise Invalid(400, "invalid_request_error",
                      f"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. "
                      f"The following tool_call_ids did not have response messages: {ids}", "messages")
    if "max_tokens" in payload and "max_completion_tokens" in payload:
        raise Invalid(400, "invalid_request_error",
                      "max_tokens and max_completion_tokens cannot both be set. Please use max_completion_tokens.", "max_tokens")
    bare = model.rsplit("/", 1)[-1]
    if re.match(r"(gpt-5|o\d)", bare):  # reasoning models
        if "max_tokens" in payload:
            raise Invalid(400, "unsupported_parameter",
                          "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                          "max_tokens")
        temperature = payload.get("temperature")
        if temperature is not None and temperature != 1:
            raise Invalid(400, "unsupported_value",
                          f"Unsupported value: 'temperature' does not support {temperature} with this model. "
                          "Only the default (1) value is supported.", "temperature")
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise Invalid(400, "invalid_value", "Invalid 'max_tokens': expected a positive integer.", "max_tokens")
    return Call("openai", model, "\n".join(system), tuple(turns), max_tokens, payload)


# ---------------------------------------------------------------------- Anthropic
def _anthropic_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        if not content.strip():
            raise Invalid(400, "invalid_request_error", f"{where}: text content blocks must be non-empty")
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise Invalid(400, "invalid_request_error", f"{where}: all messages must have non-empty content")
    for index, block in enumerate(content):
        at = f"{where}.content.{index}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"):
            raise Invalid(400, "invalid_request_error", f"{at}: Input tag '{kind}' found using 'type' does not match any of the expected tags")
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"].strip()):
            raise Invalid(400, "invalid_request_error", f"{at}.text: text content blocks must be non-empty")
        if kind == "tool_use" and (not block.get("id") or not block.get("name") or not isinstance(block.get("input"), dict)):
            raise Invalid(400, "invalid_request_error", f"{at}: tool_use needs an id, a name and an object input")
        if kind == "tool_use" and not TOOL_USE_ID.fullmatch(str(block["id"])):
            raise Invalid(400, "invalid_request_error", f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
        if kind == "tool_result" and not block.get("tool_use_id"):
            raise Invalid(400, "invalid_request_error", f"{at}.tool_use_id: Field required")
        if kind == "thinking" and not block.get("signature"):
            raise Invalid(400, "invalid_request_error", f"{at}.signature: Field required")
    return content


def _block_text(block: dict[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        return str(block["text"])
    if kind == "tool_use":
        return f"{block['name']}({json.dumps(block['input'], sort_keys=True)})"
    if kind == "tool_result":
        inner = block.get("content", "")
        if isinstance(inner, list):
            return "\n".join(_block_text(b) for b in inner if isinstance(b, dict) and b.get("type") in ("text", "image"))
        return str(inner)
    if kind == "image":
        return "[image]"
    return ""


def validate_anthropic(payload: dict[str, Any]) -> Call:
    """The Anthropic Messages checks of a request body (raises `Invalid`)."""
    model, messages, max_tokens = payload.get("model"), payload.get("messages"), payload.get("max_tokens")
    if not isinstance(model, str) or not model:
        raise Invalid(400, "invalid_request_error", "model: Field required")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise Invalid(400, "invalid_request_error", "max_tokens: Field required")
    if not isinstance(messages, list) or not messages:
        raise Invalid(400, "invalid_request_error", "messages: at least one message is required")
    system = payload.get("system", "")
    if isinstance(system, list):
        for index, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not str(block.get("text", "")).strip():
                raise Invalid(400, "invalid_request_error", f"system.{index}: system blocks must be non-empty text blocks")
        system = "\n".join(block["text"] for block in system)
    elif not isinstance(system, str):
        raise Invalid(400, "invalid_request_error", "system: Input should be a valid string or list of text blocks")
    temperature = payload.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or not 0 <= temperature <= 1):
        raise Invalid(400, "invalid_request_error", "temperature: range: 0..1")
    turns: list[tuple[str, str]] = []
    pending: set[str] = set()
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid(400, "invalid_request_error", f"{where}.role: Input should be 'user' or 'assistant'")
        blocks = _anthropic_blocks(message.get("content"), where)
        for j, block in enumerate(blocks):
            if block["type"] == "tool_use":
                if block["id"] in seen_ids:
                    raise Invalid(400, "invalid_request_error", f"{where}.content.{j}: `tool_use` ids must be unique")
                seen_ids.add(block["id"])
        kinds = [b["type"] for b in blocks]
        leading = len(kinds) - len(list(dropwhile(lambda k: k == "tool_result", kinds)))
        if role == "user" and "tool_result" in kinds[leading:]:  # a tool_result after other content
            raise Invalid(
                400,
                "invalid_request_error",
                f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after. "
                "Each `tool_use` block must have a corresponding `tool_result` block in the next message, "
                "and tool_result blocks must come first in the user message's content.",
            )
        if role == "assistant" and index == len(messages) - 1:
            last = blocks[-1]
            if last["type"] == "text" and last["text"] != last["text"].rstrip():
                raise Invalid(400, "invalid_request_error", "final assistant content cannot end with trailing whitespace")
        answers = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        results = set(answers)
        repeated = sorted({i for i in answers if answers.count(i) > 1})
        if repeated:
            raise Invalid(400, "invalid_request_error",
                          f"{where}: each tool_use must have a single result. Found multiple `tool_result` blocks with id: {repeated[0]}")
        if role == "assistant" and results:
            raise Invalid(400, "invalid_request_error", f"{where}: tool_result blocks are only allowed in user messages")
        if pending - results:
            raise Invalid(
                400,
                "invalid_request_error",
                f"messages.{index - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(sorted(pending - results))}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            )
        unexpected = results - pending
        if unexpected:
            raise Invalid(
                400,
                "invalid_request_error",
                f"{where}.content: unexpected `tool_use_id` found in `tool_result` blocks: {', '.join(sorted(unexpected))}. "
                "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
            )
        pending = {b["id"] for b in blocks if b["type"] == "tool_use"} if role == "assistant" else set()
        for block in blocks:
            turns.append(("tool" if block["type"] == "tool_result" else role, _block_text(block)))
    if pending:
        raise Invalid(400, "invalid_request_error",
                      f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                      f"{', '.join(sorted(pending))}")
    return Call("anthropic", model, system, tuple(turns), max_tokens, payload)


# ---------------------------------------------------------------------- OpenAI Responses
def _responses_parts(content: Any, where: str, role: str) -> str:
    """The text of a Responses message's content: a string, or parts of the kinds its role may send."""
    if isinstance(content, str):
        if not content.strip():
            raise Invalid(400, "invalid_value", f"Invalid '{where}.content': string too short. Expected a non-empty string.", f"{where}.content")
        return content
    if not isinstance(content, list) or not content:
        raise Invalid(400, "invalid_type", f"Invalid type for '{where}.content': expected a non-empty string or array.", f"{where}.content")
    kinds = {"output_text", "refusal"} if role == "assistant" else {"input_text", "input_image", "input_file"}
    texts = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise Invalid(400, "invalid_value", f"Invalid value: '{kind}'. Supported values are: {', '.join(sorted(map(repr, kinds)))}.",
                          f"{at}.type")
        assert isinstance(part, dict)
        if kind in ("input_text", "output_text"):
            allowed = {"type", "text"} | ({"annotations", "logprobs"} if kind == "output_text" else set())
            if set(part) - allowed or not isinstance(part.get("text"), str):
                raise Invalid(400, "invalid_value", f"Invalid '{at}': a {kind} part takes a 'text' string"
                              + (" and 'annotations'" if kind == "output_text" else "") + ".", at)
            texts.append(part["text"])
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        else:
            if not (part.get("image_url") or part.get("file_id") or part.get("file_data")):
                raise Invalid(400, "missing_required_parameter", f"Missing required parameter: '{at}.image_url'.", at)
            texts.append("[image]" if kind == "input_image" else "[file]")
    return "\n".join(texts)


def validate_responses(payload: dict[str, Any]) -> Call:
    """The OpenAI Responses API checks of a request body (raises `Invalid`)."""
    for key in payload:
        if key not in RESPONSES_KEYS:
            moved = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens", "messages": "input"}.get(key)
            text = f"Unsupported parameter: '{key}'. In the Responses API, this parameter has moved to '{moved}'." if moved else \
                f"Unknown parameter: '{key}'."
            raise Invalid(400, "unknown_parameter", text, key)
    model, items = payload.get("model"), payload.get("input")
    if not isinstance(model, str) or not model:
        raise Invalid(400, "missing_required_parameter", "Missing required parameter: 'model'.", "model")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise Invalid(400, "invalid_value", "Invalid 'input': expected a non-empty string or array of input items.", "input")
    instructions = payload.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise Invalid(400, "invalid_type", "Invalid type for 'instructions': expected a string.", "instructions")
    system: list[str] = [instructions] if instructions else []
    turns: list[tuple[str, str]] = []
    calls: dict[str, str] = {}  # call_id -> where, every function_call of the request
    answered: set[str] = set()
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise Invalid(400, "invalid_type", f"Invalid type for '{where}': expected an object.", where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise Invalid(400, "invalid_value",
                              f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", f"{where}.role")
            extra = sorted(set(item) - {"type", "role", "content", "id", "status"})
            if extra:
                raise Invalid(400, "unknown_parameter", f"Unknown parameter: '{where}.{extra[0]}'.", f"{where}.{extra[0]}")
            text = _responses_parts(item.get("content"), where, role)
            if role in ("system", "developer") and not turns:
                system.append(text)
            else:
                turns.append((role, text))
        elif kind == "function_call":
            extra = sorted(set(item) - {"type", "call_id", "name", "arguments", "id", "status"})
            if extra:
                raise Invalid(400, "unknown_parameter", f"Unknown parameter: '{where}.{extra[0]}'.", f"{where}.{extra[0]}")
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if not isinstance(call_id, str) or not call_id:
                raise Invalid(400, "missing_required_parameter", f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
            if not isinstance(name, str) or not name:
                raise Invalid(400, "missing_required_parameter", f"Missing required parameter: '{where}.name'.", f"{where}.name")
            if not isinstance(arguments, str):
                raise Invalid(400, "invalid_type", f"Invalid type for '{where}.arguments': expected a string.", f"{where}.arguments")
            if call_id in calls:
                raise Invalid(400, "invalid_value", f"Duplicate value for 'call_id' of {call_id} in '{where}'.", f"{where}.call_id")
            calls[call_id] = where
            turns.append(("assistant", f"{name}({arguments})"))
        elif kind == "function_call_output":
            extra = sorted(set(item) - {"type", "call_id", "output", "id", "status"})
            if extra:
                raise Invalid(400, "unknown_parameter", f"Unknown parameter: '{where}.{extra[0]}'.", f"{where}.{extra[0]}")
            call_id = item.get("call_id")
            if call_id not in calls:
                raise Invalid(400, "invalid_request_error", f"No tool call found for function call output with call_id {call_id}.", "input")
            if call_id in answered:
                raise Invalid(400, "invalid_request_error", f"Duplicate function_call_output for call_id {call_id}. "
                              "Each function_call must have exactly one matching function_call_output.", "input")
            output = item.get("output")
            text = output if isinstance(output, str) else _responses_parts(output, where, "user") if isinstance(output, list) else None
            if text is None:
                raise Invalid(400, "invalid_type", f"Invalid type for '{where}.output': expected a string or array.", f"{where}.output")
            answered.add(str(call_id))
            turns.append(("tool", text))
        elif kind == "reasoning":
            if not isinstance(item.get("summary"), list):
                raise Invalid(400, "missing_required_parameter", f"Missing required parameter: '{where}.summary'.", f"{where}.summary")
        else:
            raise Invalid(400, "invalid_value", f"Invalid value: '{kind}'. Supported values are: 'message', 'function_call', "
                          "'function_call_output' and 'reasoning'.", f"{where}.type")
    unanswered = sorted(set(calls) - answered)
    if unanswered:
        raise Invalid(400, "invalid_request_error", f"No tool output found for function call {unanswered[0]}.", "input")
    max_tokens = payload.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 16):
        raise Invalid(400, "integer_below_min_value",
                      f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {max_tokens} instead.",
                      "max_output_tokens")
    if re.match(r"(gpt-5|o\d)", model.rsplit("/", 1)[-1]) and "temperature" in payload:
        raise Invalid(400, "unsupported_parameter", "Unsupported parameter: 'temperature' is not supported with this model.", "temperature")
    return Call("responses", model, "\n".join(system), tuple(turns), max_tokens, payload)


# ---------------------------------------------------------------------- Gemini
def _proto(data: dict[str, Any], where: str, fields: dict[str, str]) -> dict[str, Any]:
    """A proto-JSON object read as the API reads it: each field under its camelCase or snake_case name
    (`fields`: camelCase -> snake_case), once; any other name is refused."""
    out: dict[str, Any] = {}
    names = {**{camel: camel for camel in fields}, **{snake: camel for camel, snake in fields.items()}}
    for key, value in data.items():
        camel = names.get(key)
        if camel is None:
            raise Invalid(400, "invalid_argument",
                          f'Invalid JSON payload received. Unknown name "{key}" at \'{where}\': Cannot find field.')
        if camel in out:
            raise Invalid(400, "invalid_argument", f'Invalid JSON payload received. Duplicate field "{key}" at \'{where}\'.')
        out[camel] = value
    return out


GEMINI_REQUEST = {"contents": "contents", "systemInstruction": "system_instruction", "generationConfig": "generation_config",
                  "tools": "tools", "toolConfig": "tool_config", "safetySettings": "safety_settings", "cachedContent": "cached_content",
                  "labels": "labels"}
GEMINI_PART = {"text": "text", "inlineData": "inline_data", "fileData": "file_data", "functionCall": "function_call",
               "functionResponse": "function_response", "thought": "thought", "thoughtSignature": "thought_signature"}
GEMINI_CONFIG = {"temperature": "temperature", "maxOutputTokens": "max_output_tokens", "topP": "top_p", "topK": "top_k",
                 "candidateCount": "candidate_count", "stopSequences": "stop_sequences", "seed": "seed",
                 "presencePenalty": "presence_penalty", "frequencyPenalty": "frequency_penalty", "responseMimeType": "response_mime_type",
                 "responseSchema": "response_schema", "responseJsonSchema": "response_json_schema", "thinkingConfig": "thinking_config",
                 "responseModalities": "response_modalities", "mediaResolution": "media_resolution", "logprobs": "logprobs",
                 "responseLogprobs": "response_logprobs"}


def _gemini_parts(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, dict):
        raise Invalid(400, "invalid_argument", f"Invalid JSON payload received. '{where}' must be an object.")
    content = _proto(content, where, {"role": "role", "parts": "parts"})
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise Invalid(400, "invalid_argument", f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.")
    read = []
    for index, part in enumerate(parts):
        at = f"{where}.parts[{index}]"
        if not isinstance(part, dict):
            raise Invalid(400, "invalid_argument", f"Invalid JSON payload received. '{at}' must be an object.")
        part = _proto(part, at, GEMINI_PART)
        data = [k for k in ("text", "inlineData", "fileData", "functionCall", "functionResponse") if k in part]
        if len(data) != 1:
            raise Invalid(400, "invalid_argument", f"* GenerateContentRequest.{at}.data: required oneof field 'data' must have one initialized field")
        if "text" in part and (not isinstance(part["text"], str) or (not part["text"] and not part.get("thought"))):
            raise Invalid(400, "invalid_argument", "Unable to submit request because it has an empty text parameter. "
                          "Add a value to the parameter and try again.")
        for key in ("functionCall", "functionResponse"):
            if key in part and (not isinstance(part[key], dict) or not part[key].get("name")):
                raise Invalid(400, "invalid_argument", f"* GenerateContentRequest.{at}.{key}.name: Name cannot be empty.")
        read.append(part)
    content["parts"] = read
    return [content]


def _gemini_pairing(contents: list[dict[str, Any]]) -> None:
    """The API's function call rules on `contents` (read turns, camelCase parts), content by content (raises
    `Invalid`): a call turn is a model turn right after a user turn; the turn after it holds one response per call,
    with the calls' ids (a call without an id is answered by a response without one) and names; a response turn
    comes right after a call turn."""
    def parts(turn: dict[str, Any] | None, kind: str) -> list[dict[str, Any]]:
        return [part[kind] for part in turn["parts"] if kind in part] if turn is not None else []

    for index, turn in enumerate(contents):
        before = contents[index - 1] if index else None
        after = contents[index + 1] if index + 1 < len(contents) else None
        calls, responses = parts(turn, "functionCall"), parts(turn, "functionResponse")
        if calls and (turn["role"] != "model" or before is None or before["role"] != "user"):
            raise Invalid(400, "invalid_argument", "Please ensure that function call turn comes immediately after a user turn "
                          "or after a function response turn.")
        if responses and (turn["role"] != "user" or not parts(before, "functionCall")):
            raise Invalid(400, "invalid_argument", "Please ensure that function response turn comes immediately after a function call turn.")
        if not calls:
            continue
        answers = parts(after, "functionResponse")
        if len(answers) != len(calls):
            raise Invalid(400, "invalid_argument", "Please ensure that the number of function response parts is equal to the number "
                          "of function call parts of the function call turn.")
        called, answered = sorted(str(c.get("id")) for c in calls), sorted(str(r.get("id")) for r in answers)
        if called != answered:
            raise Invalid(400, "invalid_argument", "Please ensure that each function response part answers a function call part of "
                          f"the function call turn by its id (called {called}, answered {answered}).")
        if {r["name"] for r in answers} - {c["name"] for c in calls}:
            raise Invalid(400, "invalid_argument", "Please ensure that function response turn comes immediately after a function call turn.")


def validate_gemini(payload: dict[str, Any], model: str) -> Call:
    """The Gemini `generateContent` checks of a request body (raises `Invalid`); the model is the path's."""
    body = _proto(payload, "GenerateContentRequest", GEMINI_REQUEST)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise Invalid(400, "invalid_argument", "* GenerateContentRequest.contents: contents is not specified")
    system = ""
    if "systemInstruction" in body:
        instruction = _gemini_parts(body["systemInstruction"], "system_instruction")[0]
        if any("text" not in part for part in instruction["parts"]):
            raise Invalid(400, "invalid_argument", "* GenerateContentRequest.system_instruction: only text parts are supported")
        system = "\n".join(part["text"] for part in instruction["parts"])
    read = []
    for index, content in enumerate(contents):
        where = f"contents[{index}]"
        turn = _gemini_parts(content, where)[0]
        if turn.get("role") not in ("user", "model"):
            raise Invalid(400, "invalid_argument", f"* GenerateContentRequest.{where}.role: Please use a valid role: user, model.")
        read.append(turn)
    _gemini_pairing(read)
    turns: list[tuple[str, str]] = []
    for turn in read:
        role = turn["role"]
        for part in turn["parts"]:
            if "functionResponse" in part:
                turns.append(("tool", json.dumps(part["functionResponse"].get("response", {}), sort_keys=True)))
            elif "functionCall" in part:
                call = part["functionCall"]
                turns.append(("assistant", f"{call['name']}({json.dumps(call.get('args', {}), sort_keys=True)})"))
            elif "text" in part and not part.get("thought"):
                turns.append(("assistant" if role == "model" else "user", part["text"]))
            elif "text" not in part:
                turns.append((role, "[data]"))
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        raise Invalid(400, "invalid_argument", "Invalid JSON payload received. 'generation_config' must be an object.")
    config = _proto(config, "generation_config", GEMINI_CONFIG)
    temperature = config.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or not 0 <= temperature <= 2):
        raise Invalid(400, "invalid_argument", f"* GenerateContentRequest.generation_config.temperature: must be in [0, 2], got {temperature}")
    max_tokens = config.get("maxOutputTokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise Invalid(400, "invalid_argument", "* GenerateContentRequest.generation_config.max_output_tokens: must be positive")
    return Call("gemini", model, system, tuple(turns), max_tokens, payload)


class RefusingHandler(BaseHTTPRequestHandler):
    """A model endpoint that refuses every call with 401 (a wrong key), counting the calls it got."""

    calls = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).calls += 1
        body = b'{"error": {"message": "invalid api key", "type": "invalid_request_error", "code": "invalid_api_key"}}'
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass

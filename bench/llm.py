"""Model calls: every summary, answer and judgement goes through `LLMClient.complete`.

What a call does, in order:

1. The messages become a valid OpenAI Chat Completions payload (`compaction_bench.wire`); a context
   asked many questions is converted once (`PreparedContext`).
2. The offline models (`offline/extractive`, `offline/reader`, `compaction_bench.offline_models`)
   answer in-process, without importing litellm; their token usage is counted with o200k_base
   (input: 4 tokens of framing per message, as `compaction_bench.provider` counts requests;
   output: the completion's text, `text_tokens`). That input count is the offline model's own
   (whatever the profile, and of all it read, e.g. an emulated server's instructions): no model
   reports it, so the metrics count and price an offline summary's input as the simulated provider
   counts its summary request (`compaction_bench.metrics.measure`), and use only its output. A
   request of `Message`s is converted, counted and read in runs of messages, each run once per
   process, a request costing the messages around
   what it shares with the last one (`_WireRuns`): its input tokens are the last request's less its
   runs that left plus its new ones, and the summarizer splits it from the last request's `Split`
   (`split_readings`). A request sent again (the same message objects) gets its completion from a memo.
3. Any other model id is a litellm model. Its response is looked up by request key in a recorded
   responses file (`--responses`, written by `bench cache export`), then in the persistent cache
   (diskcache under `COMPACTION_BENCH_CACHE`); with `offline=True` a miss is a `MissingResponse`
   error, never a call. The key is the sha256 of the model id, the api base, the wire payload, the
   parameters, the sample and the repeat index, so a second endpoint or a second repeat is a new call.
   The api base in the key is the one litellm actually sends to, by one rule (`model_endpoint`, which the
   manifest, the key and the ceiling cache all use): `--api-base`, else the base-URL environment variable
   litellm reads for the provider it routes the model to (`OPENAI_BASE_URL`/`OPENAI_API_BASE`,
   `ANTHROPIC_API_BASE`/`ANTHROPIC_BASE_URL`, ...; a bare `claude-…` id is Anthropic's), else the provider's
   default (None), without its credentials (`redact_url`: a password in the URL or an `?api_key=` names no
   other endpoint). `bench score` looks in the scored run's own `responses/` before the cache
   (`CallSettings.run_responses`), read once per score (`RunReplies`). A run's files keep no credentials, so
   a score sends a request to an endpoint the run called with credentials in its URL only with them taken
   from the provider's base-URL variable (`with_credentials`); without them it stops (`MissingCredentials`).
   Every request is sent with temperature 0 (litellm drops it, `drop_params`, for a model that takes no
   other, OpenAI's reasoning models), so that a stored reply stands for what the model says again. A
   request to Anthropic whose history holds tool calls declares no tools (`tools=[]`), as the agents' tool
   definitions are not recorded, rather than litellm's made-up `dummy_tool` (`anthropic_declares_no_tools`).
4. A call takes one of `max_concurrency` slots, shared by every worker process of a run (file
   locks in the run folder), and is retried with exponential backoff on 429, 5xx, timeouts and
   connection errors, at most `max_retries` times, each retry logged on stderr. When the refusal
   says how long to wait (`Retry-After`, in seconds or as an HTTP date, or OpenAI's
   `retry-after-ms`), the retry waits that long instead, at most `max_retry_after` seconds
   (`retry_after_seconds`). A call that finally fails is never cached: `ModelUnavailable` (retries
   exhausted; the cell fails) or `LLMError` (the provider refused the request), both with the
   provider's message. A refusal because the request does not fit the model's context, in any of
   the wordings OpenAI, Anthropic and Gemini use (`OVERFLOW_MARKERS`), is a `ContextOverflow` (an
   `LLMError`) that carries the refusal as a `ProviderError` in the provider's own words. A reply with
   nothing to score (no choice; no text, e.g. cut off at `max_tokens` after the model spent its budget
   on reasoning; a refusal; a stop by the content filter) is an `EmptyReply` (an `LLMError`), never
   cached: an unscored answer or judge verdict, a failed summary. The backoff between retries doubles
   up to `max_retry_after` seconds, as a `Retry-After` wait does, and an error's text is one line.
5. The response is cached and appended to the run folder (`responses/*.jsonl`), so re-grading
   (`bench score`, which reads them) and reports never need the model again. A reply records its
   `finish_reason` (litellm's OpenAI wording: "length" is a reply cut off at `max_tokens`) and whether
   it reported its usage: a server that sends no usage block gets zero counts and a $0 price from
   litellm, which are no counts (`usage_known` False, cost None: unpriced).

API keys are read by litellm from the environment only (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
...). Nothing here writes a key: the cache and the stored responses hold the request key (a hash
of model, endpoint and payload), the endpoint without its credentials (`redact_url`) and the reply
only, and any error text is scrubbed of the values of secret-looking environment variables and of the
credentials of any URL in it (`redact`).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import datetime
import email.utils
import fcntl
import functools
import hashlib
import itertools
import json
import logging
import math
import operator
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from compaction_bench.errors import BenchError, closest, json_problem, json_shown, no_file, one_line
from compaction_bench.log_view import as_messages, common_prefix_length
from compaction_bench.offline_models import (
    ReaderContext,
    Reading,
    Shared,
    Split,
    extractive_summary,
    read_payload,
    reader_answer,
    remember_summary,
    split_readings,
    summarize_split,
)
from compaction_bench.profiles import ModelProfile, ProfileError, get_profile, model_family
from compaction_bench.request import Message
from compaction_bench.wire import WireInput, chat_messages, provider_of

if TYPE_CHECKING:
    from compaction_bench.provider import ProviderError
    from compaction_bench.tokens import TokenCounter

OFFLINE_PROVIDER = "offline"
DEFAULT_SUMMARIZER = "offline/extractive"
DEFAULT_ANSWERER = "offline/reader"
OFFLINE_MODELS = (DEFAULT_SUMMARIZER, DEFAULT_ANSWERER)
#: Tokens of framing per message in the offline models' usage (as `compaction_bench.provider` counts).
MESSAGE_OVERHEAD = 4
#: Environment variable names whose values are treated as secrets in error text.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
RETRYABLE_STATUS = (408, 409, 429)
#: The default bound on a wait a `Retry-After` header asks for (OpenAI's Python SDK and litellm obey
#: the header up to 60 seconds).
MAX_RETRY_AFTER_SECONDS = 60.0
#: The most `--max-retries` (at `MAX_RETRY_AFTER_SECONDS` between retries, about 1.7 hours of waiting for one call).
MAX_RETRIES = 100
#: The longest `--model-timeout` (a day; Python's clock cannot schedule a wait near float's range).
MAX_TIMEOUT_SECONDS = 86_400
#: How each API words a refusal of a request that does not fit the model's context (lower case):
#: OpenAI's error code and its two messages; Anthropic's two messages ("prompt is too long: N tokens >
#: M maximum", and input + `max_tokens` over the context); Gemini's 400 INVALID_ARGUMENT "The input
#: token count (N) exceeds the maximum number of tokens allowed (M)." (AI Studio and Vertex AI; litellm
#: matches the same words, `ExceptionCheckers.is_error_str_context_window_exceeded`).
OVERFLOW_MARKERS: dict[str, tuple[str, ...]] = {
    "gemini": ("exceeds the maximum number of tokens allowed",),
    "anthropic": ("prompt is too long", "input length and `max_tokens` exceed context limit"),
    "openai": ("context_length_exceeded", "maximum context length is", "exceeds the context window"),
}

log = logging.getLogger("compaction_bench.llm")


@dataclasses.dataclass(frozen=True)
class LLMResult:
    """One model call (summary, answer or judgement) and what it cost.

    `cost` is the dollars litellm priced the call at, 0.0 for a model its map lists as free, and
    None where no price is known (the offline models, a model missing from the map, a reply without usage).

    `usage_known` is False for a real model's reply that reported no usage (an OpenAI-compatible server may
    omit the `usage` block; litellm then gives 0 prompt and 0 completion tokens and prices the call at $0):
    its `input_tokens` and `output_tokens` are then 0 as no count, not a count of 0, and its cost is None.
    The counts stay ints (0) because the strategies read them as a usage (Codex's token account) and the
    metrics add them; whoever prices or counts the call reads `usage_known` first.
    `finish_reason` is why the reply ended, in litellm's OpenAI wording ("stop"; "length": cut off at
    `max_tokens`, Anthropic's "max_tokens" mapped to it), None where unknown (the offline models, a call
    stored before it was recorded)."""

    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    cache_hit: bool = False
    purpose: str = "summary"
    usage_known: bool = True
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as stored, and `priced`, which tells a free call (cost 0.0) from one without a price."""
        return {**dataclasses.asdict(self), "priced": self.cost is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **fields: Any) -> LLMResult:
        """A call stored by `to_dict` (other keys ignored), with `fields` set. One stored before
        `priced` existed said 0.0 for a call without a price, so there 0.0 is read as no price, as
        it was priced when stored. One stored before `usage_known` existed is a reply without usage
        when a real model's input count is 0 (no request reads nothing: that 0 was litellm's for a
        missing usage block, priced $0), and then has no price either; its finish reason is unknown."""
        known = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        if "usage_known" not in data:
            kept["usage_known"] = is_offline(str(data.get("model", ""))) or bool(kept.get("input_tokens"))
        priced = data.get("priced")
        if priced is False or (priced is None and not kept.get("cost")) or not kept["usage_known"]:
            kept["cost"] = None
        return cls(**{**kept, **fields})


class LLMError(BenchError, RuntimeError):
    """A model call that failed after its retries, or an unknown offline model."""


class EmptyReply(LLMError):
    """A completion with nothing to score: no choice, no text (say cut off at its token limit), a refusal, or a stop by
    the provider's content filter."""


class ContextOverflow(LLMError):
    """A request the provider refused because it does not fit the model's context (`OVERFLOW_MARKERS`).

    `error` is the refusal as the simulated provider would give it (`ProviderError`: the API family,
    HTTP status, the API's error code — OpenAI's `code`, Anthropic's error `type`, Gemini's `status` —
    and the API's own message), so a caller can hand it to a strategy as a summary overflow."""

    def __init__(self, message: str, error: ProviderError) -> None:
        super().__init__(message)
        self.error = error


class ModelUnavailable(BenchError, RuntimeError):
    """A model that kept failing with retryable errors (429, 5xx, timeouts) after every retry.

    Not an `LLMError`: measuring code records an `LLMError` on the probe row (a request the model
    refuses, e.g. over its window) but lets this one fail the whole cell, which the next run redoes.
    """


class MissingResponse(BenchError, LookupError):
    """`--offline`: a request whose response is neither recorded nor cached."""


class MissingCredentials(BenchError, LookupError):
    """`bench score`: a request no store answered, to an endpoint the run called with credentials in its URL, which no
    file keeps and the environment does not give (`LLMClient._refuse_unsendable`). Not an `LLMError`: the score stops,
    naming the variable to set, instead of recording a refusal as every probe's answer."""


@dataclasses.dataclass(frozen=True)
class CallSettings:
    """How a run calls models (the `bench run` flags of the same names)."""

    api_base: str | None = None
    max_retries: int = 3
    max_concurrency: int = 4
    timeout: float = 60.0
    backoff_seconds: float = 1.0
    max_retry_after: float = MAX_RETRY_AFTER_SECONDS  # the longest `Retry-After` wait obeyed; longer ones are cut to it
    offline: bool = False
    responses: str | None = None  # a file written by `bench cache export`
    run_responses: str | None = None  # a run folder whose `responses/` answer before the cache (`bench score` of that run)
    cache_dir: str | None = None
    use_cache: bool = True
    record_dir: str | None = None  # where every response is appended (the run folder's responses/)
    slots_dir: str | None = None  # lock files limiting concurrent calls across processes

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= MAX_RETRIES:
            raise LLMError(f"--max-retries must be 0 to {MAX_RETRIES}, got {self.max_retries}")
        if self.max_concurrency < 1:
            raise LLMError(f"--max-concurrency must be ≥ 1, got {self.max_concurrency}")
        if not 0 < self.timeout <= MAX_TIMEOUT_SECONDS:
            raise LLMError(f"--model-timeout must be more than 0 and at most {MAX_TIMEOUT_SECONDS:,} seconds, got {self.timeout:g}")
        if self.max_retry_after < 0:
            raise LLMError(f"the longest Retry-After wait must be ≥ 0 seconds, got {self.max_retry_after}")
        if self.responses and not Path(self.responses).is_file():
            raise LLMError(f"--responses {self.responses}: {no_file(self.responses)} (write one with `bench cache export RUN -o FILE`)")
        if self.responses:
            _recorded(self.responses)  # read whole now: a malformed line is named before any cell, not at a call

    @functools.cached_property
    def run_replies(self) -> RunReplies | None:
        """The replies of the run `run_responses` names, read at the first lookup and kept with these settings (a score
        makes them once: its every lookup reads no folder again); None without `run_responses`."""
        return RunReplies(self.run_responses) if self.run_responses else None


def default_cache_dir() -> Path:
    return Path(os.environ.get("COMPACTION_BENCH_CACHE") or Path.home() / ".cache" / "compaction-bench" / "llm")


def is_offline(model: str) -> bool:
    return model.startswith(OFFLINE_PROVIDER + "/")


def model_problem(model: str, offline: Sequence[str], api_base: str | None = None) -> str | None:
    """Why `model` cannot be called in a role whose offline models are `offline` (the first is the one
    a name beginning with "offline" is taken to mean; none for the judge), told before a run starts
    (None: nothing known against it): an `offline/` name that is not one of them, or a name litellm
    cannot route to a provider (`offline` alone, a bare name it does not know), which would otherwise
    fail on every call of the run. Naming a real model imports litellm (routing is its own rule)."""
    guess = closest(model, offline) or (offline[0] if offline and model.casefold().startswith(OFFLINE_PROVIDER) else None)
    hint = f" (did you mean {guess!r}?)" if guess and guess != model else ""
    if is_offline(model):
        if model in offline:
            return None
        return f"no such offline model{hint}; offline models: {', '.join(offline)}" if offline else "no offline model writes a verdict; name a real model"
    try:
        _litellm().get_llm_provider(model, api_base=api_base)
    except Exception as exc:  # litellm's BadRequestError ("LLM Provider NOT provided") and kin
        reason = str(exc).splitlines()[0].removeprefix("litellm.BadRequestError: ")
        return f"litellm cannot route it to a provider{hint}; name it as provider/model (e.g. openai/gpt-5-mini): {reason}"
    return None


def redact(text: str) -> str:
    """`text` with the value of every secret-looking environment variable replaced, every URL in it without
    its credentials (`redact_url`), and the value of any secret-looking query parameter it quotes without
    its URL (a server echoing the path it was sent, `/v1/?api-key=...`) replaced."""
    for name, value in os.environ.items():
        if len(value) >= 8 and any(marker in name.upper() for marker in SECRET_MARKERS) and value in text:
            text = text.replace(value, "[redacted]")
    text = URL_IN_TEXT.sub(lambda found: redact_url(found.group(0)) or "", text)
    return SECRET_PARAMETER_IN_TEXT.sub(r"\1\2=[redacted]", text)


#: Query parameters whose values are credentials, by a word in their name (lower case): API keys (`?key=` is
#: how Google's APIs take one, `?api_key=`, `?api-key=`), tokens, an Azure SAS URL's signature (`sig=`),
#: passwords, other auth values. Azure OpenAI's `api-version` and the like name none of them and stay.
SECRET_PARAMETER_WORDS = ("key", "token", "secret", "passw", "pwd", "sig", "auth", "credential")
_SECRET_NAME = r"[\w.~-]*(?:" + "|".join(SECRET_PARAMETER_WORDS) + r")[\w.~-]*"
#: A URL quoted in text (an error message): a scheme, then up to a space or a quote.
URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: A secret-looking query parameter quoted in text without its URL: what follows `?`, `&` or `;`.
SECRET_PARAMETER_IN_TEXT = re.compile(r"([?&;])(" + _SECRET_NAME + r")=[^&;#\s'\"<>]*", re.IGNORECASE)
#: A URL's user name and password (RFC 3986 §3.2.1 userinfo): what comes before `@` in the authority.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@\s]*@")


def redact_url(url: str | None) -> str | None:
    """`url` without its credentials, the one rule for every URL the bench writes (the manifest, the stored
    responses, `bench cache export`, the request key) and for URLs in error text: no user name and password
    (`http://user:secret@host/v1`, RFC 3986 §3.2.1, which says a password there is deprecated because it
    leaks), no query parameter whose name says it holds a credential (`SECRET_PARAMETER_WORDS`). The scheme,
    host, port, path and the other parameters stay, so two endpoints stay two; None stays None."""
    if not url:
        return url
    url = _USERINFO.sub(r"\1", url, count=1)
    head, mark, rest = url.partition("?")
    if not mark:
        return url
    query, hash_mark, fragment = rest.partition("#")
    kept = [pair for pair in re.split(r"[&;]", query) if pair and not _secret_parameter(pair.partition("=")[0])]
    return head + ("?" + "&".join(kept) if kept else "") + hash_mark + fragment


def _secret_parameter(name: str) -> bool:
    """Whether a query parameter's name (percent-encoded as written) says it holds a credential."""
    return re.fullmatch(_SECRET_NAME, urllib.parse.unquote_plus(name), re.IGNORECASE) is not None


def request_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any], api_base: str | None = None) -> str:
    """The sha256 naming a request: model, endpoint (without its credentials, `redact_url`: the same endpoint
    with another key is the same request, and the key the manifest's redacted endpoint gives is the run's),
    wire payload and parameters."""
    canonical = json.dumps(
        {"model": model, "api_base": redact_url(api_base), "messages": list(messages), "params": dict(params)},
        sort_keys=True, ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


#: The base-URL environment variables litellm reads per provider, in litellm's order (litellm/main.py).
BASE_URL_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "text-completion-openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
    "azure": ("AZURE_API_BASE",),
    "gemini": ("GEMINI_API_BASE",),
    "vertex_ai": ("VERTEXAI_API_BASE",),
    "openai_like": ("OPENAI_LIKE_API_BASE",),
}


def effective_api_base(provider: str, api_base: str | None) -> str | None:
    """The endpoint a call goes to, as litellm chooses it: the explicit `api_base`, else the first
    set base-URL environment variable of the provider (`BASE_URL_VARIABLES`; `<PROVIDER>_API_BASE`
    for others), else None (the provider's default endpoint)."""
    if api_base:
        return api_base
    return next((os.environ[name] for name in base_url_variables(provider) if os.environ.get(name)), None)


def base_url_variables(provider: str) -> tuple[str, ...]:
    """The base-URL environment variables litellm reads for `provider`, in its order (`BASE_URL_VARIABLES`)."""
    return BASE_URL_VARIABLES.get(provider, (f"{provider.upper().replace('-', '_')}_API_BASE",))


def has_credentials(url: str | None) -> bool:
    """Whether `url` holds credentials `redact_url` leaves out (a user name and password, a `?api_key=`)."""
    return bool(url) and redact_url(url) != url


def with_credentials(provider: str, api_base: str | None) -> str | None:
    """`api_base` as a call sends it: as given, or, when it holds no credentials, the URL of the provider's
    base-URL variable (`base_url_variables`) that is the same endpoint with credentials (`redact_url` of it is
    `api_base`). The bench writes every URL without its credentials, so `bench score` calls the endpoint a run
    recorded without them; like API keys, they then come from the environment (a variable is never written)."""
    if not api_base or has_credentials(api_base):
        return api_base
    for name in base_url_variables(provider):
        url = os.environ.get(name)
        if has_credentials(url) and redact_url(url) == api_base:
            return url
    return api_base


def litellm_provider(model: str) -> str:
    """The provider litellm routes a real model to (`gpt-4o` → openai, `claude-…` → anthropic), whose base-URL
    variables it reads; the model id's own prefix for a model litellm cannot route (its call then fails with
    litellm's message). Asked each time (a few microseconds): a model registered with litellm later routes anew."""
    try:
        return str(_litellm().get_llm_provider(model)[1])
    except Exception:  # litellm's BadRequestError ("LLM Provider NOT provided") and kin
        return provider_of(model)


def endpoint_url(model: str | None, api_base: str | None) -> str | None:
    """The URL the calls to `model` are sent to, credentials included: `effective_api_base` for the provider
    litellm routes the model to (`litellm_provider`) of `api_base` as a call sends it (`with_credentials`); None
    for no model, an offline one (no call: litellm is not imported) and a provider's own default endpoint. Never
    written: `model_endpoint` is the same URL without its credentials."""
    if not model or is_offline(model):
        return None
    provider = litellm_provider(model)
    return effective_api_base(provider, with_credentials(provider, api_base))


def model_endpoint(model: str | None, api_base: str | None) -> str | None:
    """The endpoint the calls to `model` go to, the one rule for it: `endpoint_url` (`--api-base`, else the base-URL
    environment variable litellm reads for the provider it routes the model to) without its credentials
    (`redact_url`). The manifest records it per role (`RunConfig.endpoints`), a request key names it
    (`LLMClient.endpoint`), and the ceiling cache tells clients apart by it."""
    return redact_url(endpoint_url(model, api_base))


def _litellm() -> Any:
    """Import litellm with its offline switches (docs/specs/environment.md §2); only for real models."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


# ------------------------------------------------------------------ offline models
class PreparedContext:
    """A context converted once to its wire payload (`chat_messages`), to ask many questions of it.

    `LLMClient.complete(messages, context=prepared)` sends the context's payload followed by the
    call's own messages, converted again as one call: a real model gets exactly the payload it would
    get from `complete([*prepared.payload, *messages])`. The offline reader instead reads the
    prepared payload's lines, indexed once for every question (converting a converted payload again
    changes no line it reads), and its input tokens are the prepared payload's plus the call's own."""

    def __init__(self, messages: Sequence[WireInput]) -> None:
        self.payload = chat_messages(messages)
        self._reader: ReaderContext | None = None
        self._tokens: int | None = None

    def reader(self) -> ReaderContext:
        """The offline reader's index of the payload, built once."""
        if self._reader is None:
            self._reader = ReaderContext(self.payload)
        return self._reader

    def tokens(self) -> int:
        if self._tokens is None:
            self._tokens = payload_tokens(self.payload)
        return self._tokens


#: The offline completions kept per process (oldest dropped first), by model, wire provider, max_tokens, the
#: number of messages and the identities of the first and the last: (the messages, the text, the input tokens).
OFFLINE_COMPLETIONS_KEPT = 64
_offline_completions: dict[tuple[Any, ...], tuple[Sequence[Message], str, int]] = {}


def _offline_text(model: str, payload: list[dict[str, Any]], max_tokens: int | None) -> str:
    if model == DEFAULT_ANSWERER:
        return reader_answer(payload)
    if model == DEFAULT_SUMMARIZER:
        return extractive_summary(payload, max_tokens)
    raise LLMError(f"unknown offline model {model!r}; offline models: {', '.join(OFFLINE_MODELS)}")


class _Run(NamedTuple):
    """A run of request messages converted on its own: the messages (kept alive, so the memo's
    identities stay theirs), their wire payload, its input tokens and the summarizer's reading."""

    messages: tuple[Message, ...]
    payload: list[dict[str, Any]]
    tokens: int
    reading: Reading


class _Sent(NamedTuple):
    """The last request `_WireRuns` read for a model and provider: its messages (kept alive, so their
    identities stay theirs), their ids once `position` needed them, whether the last message the
    conversion keeps is an assistant's after each, the first message of each run (then the number of
    messages), the runs, their readings, their input tokens, and the summarizer's `Split` of the runs
    once it is made."""

    messages: Sequence[Message]
    ids: list[tuple[int, ...]]
    after: list[bool]
    starts: list[int]
    runs: list[_Run]
    readings: list[Reading]
    tokens: int
    split: list[Split]

    def position(self, message: Message) -> int:
        """The first position of this very message object among `messages`, else -1: looked for among the
        first `FIRST_TRIED` by identity (where a request that shares a piece with this one finds it), else
        among all of their ids (made once)."""
        messages = self.messages
        for q in range(min(FIRST_TRIED, len(messages))):
            if messages[q] is message:
                return q
        if len(messages) <= FIRST_TRIED:
            return -1
        if not self.ids:
            self.ids.append(tuple(map(id, messages)))
        try:
            return self.ids[0].index(id(message), FIRST_TRIED)
        except ValueError:
            return -1


class _Read(NamedTuple):
    """A request as `_WireRuns` read it (`sent`), and the runs it shares with the one read before it:
    sent.runs[where:where + length] are earlier.runs[first:first + length]."""

    sent: _Sent
    earlier: _Sent | None
    where: int
    first: int
    length: int


#: How many of a request's first messages `_WireRuns` looks for in the last request (a request often
#: starts with a new system message, then the messages it shares with the last one).
FIRST_TRIED = 8


class _WireRuns:
    """The offline models' input, converted per run of messages, each run once per process.

    `chat_messages` reads a request in runs that never affect each other but for the tool call ids
    they get (which the offline models do not read): a run starts at every message the conversion
    keeps as a user, system or developer message (a non-empty compaction is a user message), at an
    assistant message without tool calls (a reasoning item with text is one), and at an assistant
    message with tool calls that does not follow an assistant message (else the two merge); tool
    results and dropped items (empty reasoning or compaction) continue the run before them. So a
    request's payload is its runs' payloads in order, its input tokens their sum, and the
    summarizer's reading their readings (`split_readings`). A request sent after a compaction costs
    what is new in it: the longest piece it shares with the last request of the same model and
    provider (found by the identity of one of its first messages, then compared in C by slices)
    keeps that request's run starts and runs from where the two agree on whether an assistant message
    came last (which is all the rule reads of earlier messages), and only the messages around it are
    walked and their runs converted, or found among the last request's runs outside that piece by the
    identity of their first message."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, str], _Sent] = {}

    def read_request(self, messages: Sequence[WireInput], model: str, provider: str) -> _Read | None:
        """The request read (its runs in order: `sent.runs`) with the runs it shares with the last request of the same model and
        provider, or None unless its messages are all `Message`s. Its input tokens and readings are the
        last request's less those of its runs outside the shared ones, plus those of its own other runs."""
        sequence = as_messages(cast("Sequence[Message]", messages))  # a `LogView` is not copied
        size = len(sequence)
        last = self.sent.get((model, provider))
        if not size:
            return _Read(_Sent(sequence, [], [], [], [], [], 0, []), last, 0, 0, 0)
        start = shared = k = 0  # sequence[start:start + shared] is last.messages[k:k + shared]
        if last is not None:
            # the longest piece that starts among the first messages (the same system message may come
            # first and the shared run of history after a few new messages)
            p, tried = 0, min(FIRST_TRIED, size)
            while p < tried:
                at = last.position(sequence[p])
                if at < 0:
                    p += 1
                    continue
                # compared in C by slices: the same objects pass without a look, and equal messages convert alike
                end = min(len(last.messages) - at, size - p)
                length = common_prefix_length(last.messages[at : at + end], sequence[p : p + end])
                if length > shared:
                    start, shared, k = p, length, at
                if length >= size - p - length:
                    break  # no later piece can be longer
                p += length
        starts: list[int] = []
        after: list[bool] = []
        adopted = (0, 0, 0)  # (where in `starts`, from, to): the runs last.runs[from:to] start at starts[where:]
        after_assistant = False  # whether the last message the conversion keeps is an assistant's
        n = 0
        while n < size:
            if start < n < start + shared and last is not None and after_assistant == last.after[k + n - start - 1]:
                # From here to the piece's end the two requests read the same messages in the same state.
                first, stop = bisect.bisect_left(last.starts, k + n - start), bisect.bisect_left(last.starts, k + shared)
                adopted = (len(starts), first, stop)
                held = itertools.islice(last.starts, first, stop)
                starts += held if start == k else map((start - k).__add__, held)
                after += itertools.islice(last.after, k + n - start, k + shared)
                after_assistant = after[-1]
                n = start + shared
                continue
            m = sequence[n]
            if not isinstance(m, Message):  # the shared piece's messages were the last request's, all `Message`s
                return None
            role = m.role
            if role == "tool":
                begins, after_assistant = False, False
            elif role == "assistant":
                begins = not (m.tool_calls and after_assistant)  # else merged into the assistant message before it
                after_assistant = True
            elif role in ("reasoning", "compaction"):
                begins = bool(m.content.strip())  # else dropped by the conversion
                if begins:
                    after_assistant = role == "reasoning"
            else:
                begins, after_assistant = True, False
            if begins or not n:
                starts.append(n)
            after.append(after_assistant)
            n += 1
        starts.append(size)
        where, first, stop = adopted
        count = max(stop - 1 - first, 0) if last is not None else 0
        outside: list[_Run] = []  # the last request's runs outside the shared piece
        if last is not None:
            low, high = (bisect.bisect_left(last.starts, k), bisect.bisect_left(last.starts, k + shared)) if shared else (0, 0)
            outside = [*last.runs[:low], *last.runs[high:]]
        found = {id(held.messages[0]): held for held in outside}  # by the identity of their first message
        equal: dict[Message, _Run] = {}  # by their first message, built when first needed

        def run(a: int, b: int) -> _Run:
            """The run of sequence[a:b]: the last request's if it is one of the shared piece's runs, else
            one of `outside` that holds the same message objects, else the conversion of one of
            `outside` that holds equal messages (a system message or a prompt made again for each
            request), else converted."""
            if last is not None and start <= a and b <= start + shared:
                i = bisect.bisect_left(last.starts, a + k - start)
                if last.starts[i] == a + k - start and last.starts[i + 1] == b + k - start:
                    return last.runs[i]
            messages = tuple(sequence[a:b])  # a tuple already (a `LogView`'s slice is one): not copied
            held = found.get(id(sequence[a]))
            if held is not None and held.messages[0] is sequence[a] and len(held.messages) == b - a and all(map(operator.is_, held.messages, messages)):
                return held
            if outside and not equal:
                equal.update((held.messages[0], held) for held in reversed(outside))  # the first one of equal ones
            held = equal.get(sequence[a])
            if held is not None and held.messages == messages:
                return _Run(messages, held.payload, held.tokens, held.reading)
            payload = chat_messages(messages, provider=provider)
            return _Run(messages, payload, payload_tokens(payload), read_payload(payload))

        runs = list(itertools.starmap(run, itertools.pairwise(starts[: where + 1])))
        if count:
            runs += itertools.islice(cast("_Sent", last).runs, first, first + count)
        runs += itertools.starmap(run, itertools.pairwise(starts[where + count :]))
        new = (runs[:where], runs[where + count :])  # the runs outside the shared ones
        tokens = sum(map(_TOKENS, itertools.chain(*new)))
        if last is not None and count:
            tokens += last.tokens - sum(map(_TOKENS, itertools.chain(last.runs[:first], last.runs[first + count :])))
            readings = list(map(_READING, new[0]))
            readings += itertools.islice(last.readings, first, first + count)
            readings += map(_READING, new[1])
        else:
            readings = list(map(_READING, runs))
        sent = self.sent[model, provider] = _Sent(sequence, [], after, starts, runs, readings, tokens, [])
        return _Read(sent, last, where, first, count)


_TOKENS, _READING = operator.attrgetter("tokens"), operator.attrgetter("reading")


_wire_runs = _WireRuns()


def _payload_parts(message: Mapping[str, Any]) -> list[str]:
    """The texts a model reads in one wire message: its content, then each tool call's name and arguments."""
    content = message.get("content")
    text = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping)) if isinstance(content, list) else str(content or "")
    parts = [text]
    for call in message.get("tool_calls") or ():
        parts += (call["function"]["name"], call["function"]["arguments"])
    return parts


def _counter(encoding: str = "o200k_base") -> TokenCounter:
    from compaction_bench.tokens import shared_counter

    return shared_counter(encoding)


def payload_tokens(payload: Sequence[Mapping[str, Any]], encoding: str = "o200k_base") -> int:
    """Input tokens of a wire payload: the tokenizer's count of every message's texts (each counted on
    its own, so the per-text memo the replay's provider filled answers them) plus its framing."""
    count = _counter(encoding).count
    return sum(MESSAGE_OVERHEAD + sum(map(count, _payload_parts(m))) for m in payload)


@functools.lru_cache(maxsize=1 << 8)
def text_tokens(text: str, encoding: str = "o200k_base") -> int:
    """The tokenizer's count of one text, as the sum of its lines' counts: `LINE_CUT` only cuts where
    the tokenizer's pieces end, so the sum is the whole text's count, and an offline summary, which
    carries most of the previous one's lines, is tokenized only in its new lines (each line's count is
    memoized). Memoized per text: a strategy that compacts often gets the same summary again."""
    from compaction_bench.tokens import LINE_CUT

    return sum(map(_counter(encoding).count, LINE_CUT.split(text)))


# ------------------------------------------------------------------ concurrency
_process_semaphores: dict[int, threading.BoundedSemaphore] = {}
_semaphore_lock = threading.Lock()


def _process_semaphore(limit: int) -> threading.BoundedSemaphore:
    with _semaphore_lock:
        if limit not in _process_semaphores:
            _process_semaphores[limit] = threading.BoundedSemaphore(limit)
        return _process_semaphores[limit]


@contextmanager
def call_slot(settings: CallSettings) -> Iterator[None]:
    """Hold one of `max_concurrency` slots: lock files in `slots_dir` across processes, else a process semaphore."""
    if not settings.slots_dir:
        with _process_semaphore(settings.max_concurrency):
            yield
        return
    folder = Path(settings.slots_dir)
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for index in range(settings.max_concurrency):
            handle = open(folder / f"slot-{index}.lock", "a+")  # noqa: SIM115 (held across the yield)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(0.02)


# ------------------------------------------------------------------ stored responses
#: The numbers and flags of a stored response, with what each must be when present (a count, a price or none, ...).
STORED_NUMBERS: dict[str, Callable[[Any], bool]] = {
    "input_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "output_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "cost": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0),
    "usage_known": lambda v: isinstance(v, bool),
    "finish_reason": lambda v: v is None or isinstance(v, str),
}
STORED_NUMBER_WORDS = {"input_tokens": "a token count", "output_tokens": "a token count", "cost": "a price in dollars or null",
                       "usage_known": "true or false", "finish_reason": "a string or null"}


def _response_lines(path: Path, where: str, fields: tuple[str, ...], fix: str) -> Iterator[dict[str, Any]]:
    """The stored responses of one JSONL file, a line at a time (blank lines skipped): each a JSON object whose
    `fields` are strings. A line that is not is refused as `{where}:{line}: not a stored response, …; {fix}`; each
    line is decoded on its own, so a killed run's half-written last line, which may end inside a character, is named
    by its number."""
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        place = f"{where}:{number}: not a stored response"
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise LLMError(f"{place}, not UTF-8 (byte {exc.start + 1} of the line); {fix}") from None
        except json.JSONDecodeError as exc:
            raise LLMError(f"{place}, not JSON ({json_problem(exc)}); {fix}") from None
        except RecursionError:
            raise LLMError(f"{place} (nested too deeply); {fix}") from None
        if not (isinstance(record, dict) and all(isinstance(record.get(f), str) for f in fields)):
            quoted = [f"'{f}'" for f in fields]
            names = " and ".join(filter(None, (", ".join(quoted[:-1]), quoted[-1])))
            raise LLMError(f"{place} (expected a JSON object with {names} as {'strings' if len(fields) > 1 else 'a string'}); {fix}")
        wrong = next((f for f, ok in STORED_NUMBERS.items() if f in record and not ok(record[f])), None)
        if wrong is not None:  # read back, it would fail a cell mid-run (a count of null added to another)
            raise LLMError(f"{place} ('{wrong}' is {json_shown(record[wrong])}, not {STORED_NUMBER_WORDS[wrong]}); {fix}")
        yield record


@functools.cache
def _recorded(path: str) -> dict[str, dict[str, Any]]:
    """A responses file (JSONL of stored responses) by request key."""
    where = f"--responses {path}"
    fix = "write the file with `bench cache export RUN -o FILE`"
    try:
        return {r["key"]: r for r in _response_lines(Path(path), where, ("key", "text", "model"), fix)}
    except OSError as exc:
        raise LLMError(f"{where}: {exc.strerror or exc}") from None


_append_lock = threading.Lock()


def _store(record_dir: str, record: Mapping[str, Any]) -> None:
    folder = Path(record_dir)
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
    with _append_lock, open(folder / f"responses-{os.getpid()}.jsonl", "a", encoding="utf-8") as handle:
        handle.write(line)


def stored_responses(run_dir: str | Path, fields: tuple[str, ...] = ("key",), fix: str = "remove the line to export the rest") -> list[dict[str, Any]]:
    """Every model response stored in a run folder, one per request key, in key order; each line must have
    `fields` as strings (else an `LLMError` naming it, with `fix`)."""
    folder = Path(run_dir) / "responses"
    records: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("responses-*.jsonl")):
        for record in _response_lines(path, str(path), fields, fix):
            records[record["key"]] = record
    return [records[k] for k in sorted(records)]


class RunReplies:
    """The replies a run folder stored (`responses/*.jsonl`), by request key, as `bench score` looks them up: the folder
    is listed and its files read once, at the first lookup (one `RunReplies` per `CallSettings`: once per score), and the
    replies the same score appends to that folder (`--in-place`) are added as it stores them (`add`). `credentialed`:
    the endpoints (without credentials) the run called with credentials in the URL (`credentials_left_out`, or a line
    written before URLs were stored without them)."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.folder = (Path(run_dir) / "responses").resolve()
        self._records: dict[str, dict[str, Any]] | None = None
        self._credentialed: set[str] = set()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[RunReplies], tuple[str]]:
        return RunReplies, (self.run_dir,)  # a copy in another process reads the folder itself

    def get(self, key: str) -> dict[str, Any] | None:
        return self._read().get(key)

    @property
    def credentialed(self) -> set[str]:
        self._read()
        return self._credentialed

    def holds(self, record_dir: str) -> bool:
        """Whether replies stored in `record_dir` are this run's (a score `--in-place` appends to its folder)."""
        return Path(record_dir).resolve() == self.folder

    def add(self, record: dict[str, Any]) -> None:
        """A reply appended to the folder after it was read (unread, the read will find it in its file)."""
        with self._lock:
            if self._records is not None:
                self._records[record["key"]] = record
                self._note(record)

    def _read(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            if self._records is None:
                fix = "remove the line (its request is then sent to the model again)"
                records = {r["key"]: r for r in stored_responses(self.run_dir, ("key", "text", "model"), fix)}
                for record in records.values():
                    self._note(record)
                self._records = records
            return self._records

    def _note(self, record: Mapping[str, Any]) -> None:
        api_base = record.get("api_base")
        if isinstance(api_base, str) and (record.get("credentials_left_out") is True or has_credentials(api_base)):
            self._credentialed.add(cast(str, redact_url(api_base)))


def export_responses(run_dir: str | Path, out: str | Path, *, replace: bool = False) -> int:
    """`bench cache export`: write a run's stored responses to one JSONL file (an existing one only
    with `replace`); returns how many. Each endpoint is written without its credentials (`redact_url`), also
    from a run stored before responses were written so: the README's CI recipe commits the file."""
    from compaction_bench.atomic import write_output

    if not (Path(run_dir) / "manifest.json").is_file():
        raise LLMError(f"{run_dir}: not a run folder (no manifest.json)")
    records = [_without_credentials(r) for r in stored_responses(run_dir)]
    write_output(Path(out), "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records), replace=replace)
    return len(records)


def _without_credentials(record: dict[str, Any]) -> dict[str, Any]:
    """A stored response with its `api_base` redacted (`redact_url`)."""
    api_base = record.get("api_base")
    return {**record, "api_base": redact_url(api_base)} if isinstance(api_base, str) else record


# ------------------------------------------------------------------ the client
def reported_usage(response: Any) -> tuple[int, int]:
    """A reply's (prompt, completion) tokens as litellm read its usage; (0, 0) when it had none (litellm fills a
    missing OpenAI `usage` block with zeros). A reply with text read some input and wrote some output, so a zero
    is no count: the caller treats a reply with one as one without usage."""
    usage = getattr(response, "usage", None)
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


def finish_reason(response: Any) -> str | None:
    """Why the reply's first choice ended, as litellm gives it (OpenAI's `finish_reason` wording, other APIs'
    stop reasons mapped onto it: Anthropic's `max_tokens` and Gemini's `MAX_TOKENS` are "length"); None if absent."""
    choices = getattr(response, "choices", None) or ()
    reason = getattr(choices[0], "finish_reason", None) if choices else None
    return str(reason) if reason else None


def anthropic_declares_no_tools(provider: str, payload: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a request to a model litellm routes to Anthropic (`provider`) must say it declares no tools: its history
    holds tool calls. Without a `tools` parameter litellm then adds one of its own, a `dummy_tool` with an empty schema
    (litellm 1.110.2 `llms/anthropic/chat/transformation.py` `transform_request`: `"tools" not in optional_params and
    has_tool_call_blocks(messages)`, `utils.add_dummy_tool`, for litellm#5388 and #5747, when Anthropic refused "Requests
    which include `tool_use` or `tool_result` blocks must define tools"). Anthropic dropped that rule on 2025-02-27 (API
    release notes: tools need not be given with tool_use and tool_result blocks; anthropics/anthropic-sdk-python#849),
    and the bench records no agent's tool definitions: a tool it never had, offered to the summarizer (which may call it
    instead of writing the summary) and billed as the tool-use prompt, is not the agent's request. An empty `tools`
    list is what litellm sends as given (`"tools": []`), and no tool is added."""
    return provider == "anthropic" and any(message.get("tool_calls") is not None for message in payload)


def _retryable(litellm: Any, exc: Exception) -> bool:
    if isinstance(exc, (litellm.Timeout, litellm.APIConnectionError, litellm.RateLimitError, litellm.InternalServerError)):
        return True
    if isinstance(exc, (litellm.AuthenticationError, litellm.BadRequestError, litellm.NotFoundError, litellm.PermissionDeniedError)):
        return False
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def retry_after_seconds(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """How long a refused response asks the client to wait before retrying, in seconds, or None.

    OpenAI's `retry-after-ms` (milliseconds) first, then `Retry-After` (RFC 9110 §10.2.3): a number of
    seconds, or an HTTP date (`now`, a Unix time, defaults to the clock). None when neither header is
    present and readable, or when it asks for no positive wait (0, or a date already past): then our
    own backoff applies, as in OpenAI's SDK. An endless wait (`1e400`) is `inf`, which the caller cuts."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v).strip() for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        with contextlib.suppress(ValueError):
            wait = float(millis) / 1000
            if wait > 0:  # an endless one (`1e400`) is cut to the longest wait obeyed, as any long one is
                return wait
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        wait = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": a UTC time
            when = when.replace(tzinfo=datetime.UTC)
        wait = when.timestamp() - (time.time() if now is None else now)
    return wait if wait > 0 else None  # NaN is no wait


def _response_headers(exc: Exception) -> Mapping[str, str] | None:
    """The HTTP headers of the response behind a litellm exception: those litellm attaches
    (`litellm_response_headers`, kept for every provider), else the raw response's."""
    for source in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None), "headers", None),
                   getattr(exc, "headers", None)):
        if source is not None and hasattr(source, "items") and len(source):
            return cast("Mapping[str, str]", source)
    return None


def _error_body(text: str) -> dict[str, Any] | None:
    """The provider's JSON error object (`{"error": {...}}`, or Anthropic's `{"type": "error", "error": {...}}`)
    quoted in an exception's text, if any."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("error"), dict):
            return cast("dict[str, Any]", value["error"])
        start = text.find("{", start + 1)
    return None


def overflow_family(text: str) -> str | None:
    """The API (`openai`, `anthropic`, `gemini`) whose context-overflow wording `text` carries, or None."""
    lowered = text.lower()
    return next((family for family, markers in OVERFLOW_MARKERS.items() if any(m in lowered for m in markers)), None)


def context_overflow(exc: Exception, family: str, windowed: bool = False) -> ProviderError | None:
    """The refusal `exc` as a `ProviderError` in the API's own words if it says the request does not
    fit the model's context, else None. `windowed`: litellm already classed it so
    (`ContextWindowExceededError`); then `family` (the model's API) names it when no wording does."""
    from compaction_bench.provider import ProviderError

    text = str(exc)
    body = _error_body(text) or {}
    message = body.get("message") if isinstance(body.get("message"), str) else None
    found = overflow_family(f"{message or text} {body.get('code') or ''}")  # OpenAI's code says it even where its text does not
    if found is None and not windowed:
        return None
    family = found or family
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else int(body["code"]) if isinstance(body.get("code"), int) else 400
    code = {"openai": body.get("code"), "anthropic": body.get("type"), "gemini": body.get("status")}.get(family)
    default = {"openai": "context_length_exceeded", "anthropic": "invalid_request_error", "gemini": "INVALID_ARGUMENT"}.get(
        family, "context_length_exceeded")
    if message is None:  # litellm's text: "...Exception - <the provider's message>"
        message = text.rsplit("Exception - ", 1)[-1].strip()
    return ProviderError(family, status, code if isinstance(code, str) and code else default, message)


class LLMClient:
    """Calls one model: wire conversion, recorded/cached responses, slots, retries and cost."""

    def __init__(
        self,
        model: str = DEFAULT_SUMMARIZER,
        settings: CallSettings | None = None,
        *,
        repeat: int = 0,
        cache_dir: str | Path | None = None,
        max_retries: int | None = None,
    ) -> None:
        settings = settings or CallSettings()
        if cache_dir is not None:
            settings = dataclasses.replace(settings, cache_dir=str(cache_dir))
        if max_retries is not None:
            settings = dataclasses.replace(settings, max_retries=max_retries)
        self.model = model
        self.settings = settings
        self.repeat = repeat
        self.calls = 0  # requests sent to the provider by this client (retries included)
        self.stored = 0  # completions found stored (a responses file, the run's responses, the cache)
        self.fetched = 0  # completions no store held, got from the model
        self._cache: Any = None
        if settings.use_cache and not is_offline(model):
            import diskcache

            self._cache = diskcache.Cache(str(settings.cache_dir or default_cache_dir()))

    @functools.cached_property
    def provider(self) -> str:
        """The provider the requests go to, whose wire rules `chat_messages` applies: litellm's routing for a real
        model (a bare `gemini-2.5-pro` goes to Vertex AI and its Gemini `contents`, a bare `claude-…` to Anthropic),
        the name's prefix for an offline one (litellm is not imported for it)."""
        return provider_of(self.model) if is_offline(self.model) else litellm_provider(self.model)

    @functools.cached_property
    def limits(self) -> ModelProfile | None:
        """The model's limits from litellm's map (its window decides what reaches it); None for the
        offline models and for models the map lacks (a local server's, say)."""
        if is_offline(self.model):
            return None
        try:
            return get_profile(self.model)
        except ProfileError:
            return None

    def complete(
        self,
        messages: Sequence[WireInput],
        *,
        max_tokens: int | None = None,
        purpose: str = "summary",
        sample: int = 0,
        context: PreparedContext | None = None,
        **params: Any,
    ) -> LLMResult:
        """One completion. `sample` distinguishes repeated samples of the same request; `context`:
        messages converted once that come before `messages` (`PreparedContext`)."""
        if context is not None and self.model == DEFAULT_ANSWERER:
            own = chat_messages(messages, provider=self.provider)
            text = reader_answer(own, context.reader())
            return self._offline_result(text, payload_tokens(own) + context.tokens(), purpose)
        if is_offline(self.model) and context is None:
            done = self._offline_completion(messages, max_tokens)
            if done is not None:
                return self._offline_result(*done, purpose)
        payload = chat_messages([*context.payload, *messages] if context is not None else messages, provider=self.provider)
        if is_offline(self.model):
            return self._offline_result(_offline_text(self.model, payload, max_tokens), payload_tokens(payload), purpose)
        params = {"temperature": 0, **params}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        api_base = self.endpoint()
        key = request_key(self.model, payload, {**params, "sample": sample, "repeat": self.repeat}, api_base)
        found = self._lookup(key)
        if found is not None:
            self.stored += 1
            result = LLMResult.from_dict(found, cache_hit=True, purpose=purpose)
        else:
            self._refuse_unsendable(key, purpose)
            result = self._call(payload, params, purpose)
            self.fetched += 1
            if self._cache is not None:
                self._cache.set(key, self._stored_fields(result))
        if self.settings.record_dir:
            self._record({"key": key, "api_base": api_base, "repeat": self.repeat, "sample": sample, "purpose": purpose,
                          **self._stored_fields(result)})
        return result

    def _refuse_unsendable(self, key: str, purpose: str) -> None:
        """Refuse a request no store answered that must not or cannot be sent: any with `--offline` (`MissingResponse`),
        and, in `bench score`, one to an endpoint the scored run called with credentials in its URL when the URL now has
        none (`MissingCredentials`: sent, it would be refused, each answer a row's error, the score a half one)."""
        if self.settings.offline:
            raise MissingResponse(
                f"--offline: no recorded or cached response for a {purpose} request to {self.model} (key {key[:12]}); "
                "run once without --offline, or pass the run's export with --responses"
            )
        replies = self.settings.run_replies
        endpoint = self.endpoint() if replies is not None else None
        if replies is None or endpoint not in replies.credentialed or has_credentials(endpoint_url(self.model, self.settings.api_base)):
            return
        variable = base_url_variables(litellm_provider(self.model))[0]
        raise MissingCredentials(
            f"{self.model} ({purpose}): the run {replies.run_dir} has no stored reply to a request (key {key[:12]}), and it called "
            f"{endpoint} with credentials in the URL, which none of its files keeps; set {variable} to that URL with its "
            "credentials (scheme://USER:PASSWORD@host/path, or its ?key=...) and score again: bench score then sends the request "
            "there (the variable is read for the call and never written)"
        )

    def _record(self, record: dict[str, Any]) -> None:
        """Append a reply to the run folder (`record_dir`), its endpoint without credentials, `credentials_left_out`
        when the URL called held some; a score `--in-place` adds it to the run's replies it reads (`RunReplies.add`)."""
        if has_credentials(endpoint_url(self.model, self.settings.api_base)):
            record["credentials_left_out"] = True
        record_dir = cast(str, self.settings.record_dir)
        _store(record_dir, record)
        replies = self.settings.run_replies
        if replies is not None and replies.holds(record_dir):
            replies.add(record)

    def endpoint(self) -> str | None:
        """The endpoint this client's calls go to, without credentials, as the manifest records it: `model_endpoint`
        (the one rule) of the model and `--api-base`, the environment read now; None for an offline model (no call)."""
        return model_endpoint(self.model, self.settings.api_base)

    def _offline_completion(self, messages: Sequence[WireInput], max_tokens: int | None) -> tuple[str, int] | None:
        """An offline model's (text, input tokens) for request messages, or None unless all are `Message`s.
        The offline models are functions of their input: a request sent again (the same message
        objects, e.g. Aider's unchanged head on every edited turn) gets the same completion without
        the work (the memo holds the messages, so their identities stay theirs), and a new request
        costs its runs of messages that are new (`_WireRuns`, which also tells whether its messages
        are all `Message`s)."""
        sent = as_messages(cast("Sequence[Message]", messages))  # a `LogView` is not copied
        # the memo's entry for a request of this length that starts and ends with the same objects, if it
        # holds these very messages (compared by identity: the entry keeps its messages alive)
        same_request = (self.model, self.provider, max_tokens, len(sent), id(sent[0]) if sent else 0, id(sent[-1]) if sent else 0)
        done = _offline_completions.get(same_request)
        if done is not None and not all(map(operator.is_, done[0], sent)):
            done = None
        if done is None:
            read = _wire_runs.read_request(sent, self.model, self.provider)
            if read is None:
                return None
            request, earlier, where, first, count = read
            tokens = request.tokens
            if self.model == DEFAULT_SUMMARIZER:
                shared = Shared(earlier.split[0], where, first, count) if earlier is not None and earlier.split else None
                split = split_readings(request.readings, shared)
                request.split[:] = [split]
                text = summarize_split(split, max_tokens)
            else:
                text = _offline_text(self.model, list(itertools.chain.from_iterable(map(operator.attrgetter("payload"), request.runs))), max_tokens)
            done = _offline_completions[same_request] = (sent, text, tokens)
            if len(_offline_completions) > OFFLINE_COMPLETIONS_KEPT:
                del _offline_completions[next(iter(_offline_completions))]
        elif self.model == DEFAULT_SUMMARIZER:
            remember_summary(done[1])
        return done[1], done[2]

    def _offline_result(self, text: str, input_tokens: int, purpose: str) -> LLMResult:
        return LLMResult(
            text=text,
            model=self.model,
            input_tokens=input_tokens,
            output_tokens=text_tokens(text),
            purpose=purpose,
        )

    @staticmethod
    def _stored_fields(result: LLMResult) -> dict[str, Any]:
        return {k: v for k, v in result.to_dict().items() if k not in ("cache_hit", "purpose")}

    def _lookup(self, key: str) -> Mapping[str, Any] | None:
        """A stored response to the request `key`: from the responses file, else the run's responses, else the cache."""
        if self.settings.responses:
            record = _recorded(self.settings.responses).get(key)
            if record is not None:
                return record
        replies = self.settings.run_replies
        if replies is not None:
            record = replies.get(key)
            if record is not None:
                return record
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                return cast(Mapping[str, Any], hit)
        return None

    def _reply_text(self, response: Any, params: Mapping[str, Any], purpose: str) -> str:
        """The reply's text; an `EmptyReply` (never cached: an unscored answer or verdict, a failed summary) when there is
        none to score: no choice, no text, a refusal or a stop by the provider's content filter. Scored, such a reply
        read as a wrong answer, or as a summary that kept nothing, and its cached copy repeated that on every re-run."""
        who = f"{self.model} ({purpose})"
        choices = getattr(response, "choices", None) or ()
        if not choices:
            raise EmptyReply(f"{who} returned no choice (a response without `choices`); not cached")
        choice = choices[0]
        message = getattr(choice, "message", None)
        content = getattr(message, "content", None)
        reason = getattr(choice, "finish_reason", None)
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise EmptyReply(f"{who} refused to answer ({one_line(str(refusal))}); not cached")
        if reason == "content_filter":
            raise EmptyReply(f"{who} was stopped by the provider's content filter (finish_reason 'content_filter'); not cached")
        if content is not None and not isinstance(content, str):
            raise EmptyReply(f"{who} returned content that is no text ({type(content).__name__}); not cached")
        text = content or ""
        if not text.strip():
            cut = (f"the reply was cut off at max_tokens={params.get('max_tokens')} (finish_reason 'length') before any text"
                   if reason == "length" else f"an empty reply (finish_reason {reason!r})")
            raise EmptyReply(f"{who} returned no text: {cut}; not cached")
        return text

    def _call(self, payload: list[dict[str, Any]], params: dict[str, Any], purpose: str) -> LLMResult:
        litellm = _litellm()
        settings = self.settings
        extra = self._call_options(payload, params)
        attempt = 0
        while True:
            try:
                with call_slot(settings):
                    self.calls += 1
                    response = litellm.completion(
                        model=self.model, messages=payload, timeout=settings.timeout, max_retries=0, drop_params=True, **extra, **params
                    )
                break
            except Exception as exc:  # litellm maps provider errors onto many classes
                attempt += 1
                message = one_line(redact(f"{type(exc).__name__}: {exc}"))
                if not _retryable(litellm, exc):
                    refused = f"{self.model} ({purpose}) refused the request: {message}"
                    family = model_family(litellm_provider(self.model), self.model.rpartition("/")[2])
                    overflow = context_overflow(exc, family, isinstance(exc, litellm.ContextWindowExceededError))
                    if overflow is not None:
                        raise ContextOverflow(refused, dataclasses.replace(overflow, message=redact(overflow.message))) from None
                    raise LLMError(refused) from None
                if attempt > settings.max_retries:
                    raise ModelUnavailable(f"{self.model} ({purpose}) failed after {attempt} attempts: {message}") from None
                delay, why = min(settings.backoff_seconds * 2.0 ** min(attempt - 1, 60), settings.max_retry_after), ""
                asked = retry_after_seconds(_response_headers(exc))
                if asked is not None:
                    delay = min(asked, settings.max_retry_after)
                    why = f" (Retry-After {asked:g} s" + (f", cut to {settings.max_retry_after:g} s)" if asked > delay else ")")
                log.warning("%s (%s): %s; retry %d/%d in %.1f s%s", self.model, purpose, message, attempt, settings.max_retries, delay, why)
                time.sleep(delay)
        text = self._reply_text(response, params, purpose)
        input_tokens, output_tokens = reported_usage(response)
        known = input_tokens > 0 and output_tokens > 0  # a zero is litellm's for a missing usage block (`reported_usage`)
        return LLMResult(
            text=text,
            model=self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=self._price(litellm, response) if known else None,
            purpose=purpose,
            usage_known=known,
            finish_reason=finish_reason(response),
        )

    def _call_options(self, payload: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
        """What litellm gets besides the model, the payload and `params`: `--api-base` with its credentials
        (`with_credentials`), and `tools=[]` for a request litellm sends to Anthropic's Messages API whose history holds
        tool calls and that declares no tools (`anthropic_declares_no_tools`)."""
        options: dict[str, Any] = {}
        if self.settings.api_base:
            options["api_base"] = with_credentials(litellm_provider(self.model), self.settings.api_base)
        if "tools" not in params and anthropic_declares_no_tools(litellm_provider(self.model), payload):
            options["tools"] = []
        return options

    def _price(self, litellm: Any, response: Any) -> float | None:
        """litellm's dollars for a reply with usage; None for a model without a price in its map."""
        try:
            return float(litellm.completion_cost(completion_response=response, model=self.model))
        except Exception:  # a model without a price in litellm's map: cost unknown
            return None

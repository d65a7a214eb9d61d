"""LLM access: every model call (summaries, probe answers, judges) goes through litellm.

The kernel adds a persistent response cache (diskcache, keyed by the sha256 of the canonical
request; errors are never cached; the deterministic offline models are not cached at all),
bounded concurrency, retries with exponential backoff, and cost accounting from litellm's prices.

The offline models (`compaction_bench.offline_models`) are registered as a litellm custom provider named
`offline`, so `offline/extractive` and `offline/reader` take the same code path as any remote
model id (`openai/gpt-5-mini`, `anthropic/claude-haiku-4-5`, ...).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compaction_bench.errors import BenchError
from compaction_bench.strategy import LLMResult

OFFLINE_PROVIDER = "offline"
DEFAULT_SUMMARIZER = "offline/extractive"
DEFAULT_ANSWERER = "offline/reader"
OFFLINE_MODELS = (DEFAULT_SUMMARIZER, DEFAULT_ANSWERER)


class LLMError(BenchError, RuntimeError):
    """A model call that failed after its retries (or a model that cannot be used offline)."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("COMPACTION_BENCH_CACHE") or Path.home() / ".cache" / "compaction-bench" / "llm")


def is_offline(model: str) -> bool:
    return model.startswith(OFFLINE_PROVIDER + "/")


_registered = False
_register_lock = threading.Lock()


def _litellm() -> Any:
    """Import litellm with its offline switches, registering the offline models once."""
    global _registered
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import litellm

    with _register_lock:
        if not _registered:
            from compaction_bench.offline_models import extractive_summary, reader_answer

            class OfflineModels(litellm.CustomLLM):
                def completion(self, *args: Any, **kwargs: Any) -> Any:
                    model = str(kwargs.get("model", ""))
                    messages = kwargs.get("messages") or []
                    params = kwargs.get("optional_params") or {}
                    max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
                    if model.endswith("reader"):
                        text = reader_answer(messages)
                    elif model.endswith("extractive"):
                        text = extractive_summary(messages, max_tokens)
                    else:
                        raise LLMError(f"unknown offline model {model!r}; offline models: {', '.join(OFFLINE_MODELS)}")
                    prompt_chars = sum(len(json.dumps(m.get("content", ""))) for m in messages)
                    return litellm.ModelResponse(
                        model=model,
                        choices=[{"message": {"role": "assistant", "content": text}, "finish_reason": "stop", "index": 0}],
                        usage=litellm.types.utils.Usage(
                            prompt_tokens=(prompt_chars + 3) // 4,
                            completion_tokens=(len(text) + 3) // 4,
                            total_tokens=(prompt_chars + 3) // 4 + (len(text) + 3) // 4,
                        ),
                    )

                async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
                    return self.completion(*args, **kwargs)

            handler = OfflineModels()
            existing = [p for p in (litellm.custom_provider_map or []) if p.get("provider") != OFFLINE_PROVIDER]
            litellm.custom_provider_map = existing + [{"provider": OFFLINE_PROVIDER, "custom_handler": handler}]
            for model in OFFLINE_MODELS:
                litellm.register_model(
                    {
                        model: {
                            "max_input_tokens": 10_000_000,
                            "max_output_tokens": 1_000_000,
                            "input_cost_per_token": 0.0,
                            "output_cost_per_token": 0.0,
                            "cache_read_input_token_cost": 0.0,
                            "cache_creation_input_token_cost": 0.0,
                            "litellm_provider": OFFLINE_PROVIDER,
                            "mode": "chat",
                        }
                    }
                )
            litellm.suppress_debug_info = True
            _registered = True
    return litellm


def request_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    canonical = json.dumps({"model": model, "messages": list(messages), "params": dict(params)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LLMClient:
    """Calls one model through litellm, with caching, bounded concurrency, retries and cost."""

    def __init__(
        self,
        model: str = DEFAULT_SUMMARIZER,
        *,
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
        concurrency: int = 4,
        max_retries: int = 3,
        backoff_seconds: float = 1.0,
        timeout: float = 120.0,
    ) -> None:
        self.model = model
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self.timeout = timeout
        self._semaphore = threading.BoundedSemaphore(max(1, concurrency))
        self._cache = None
        if use_cache and not is_offline(model):
            import diskcache

            self._cache = diskcache.Cache(str(cache_dir or default_cache_dir()))

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None = None,
        purpose: str = "summary",
        sample: int = 0,
        **params: Any,
    ) -> LLMResult:
        """One completion. `sample` distinguishes repeated samples of the same request in the cache."""
        params = {"temperature": 0, **params}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        key = request_key(self.model, messages, {**params, "sample": sample})
        if self._cache is not None:
            hit = self._cache.get(key)
            if hit is not None:
                return LLMResult(**{**hit, "cache_hit": True, "purpose": purpose})
        litellm = _litellm()
        attempt = 0
        while True:
            try:
                with self._semaphore:
                    response = litellm.completion(model=self.model, messages=list(messages), timeout=self.timeout, **params)
                break
            except LLMError:
                raise
            except Exception as exc:  # litellm maps provider errors onto many classes
                attempt += 1
                retryable = not isinstance(exc, (litellm.AuthenticationError, litellm.BadRequestError, litellm.NotFoundError))
                if attempt > self.max_retries or not retryable:
                    raise LLMError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0
        if not is_offline(self.model):
            try:
                cost = float(litellm.completion_cost(completion_response=response))
            except Exception:  # a model without a price: cost unknown, reported as 0
                cost = 0.0
        result = LLMResult(
            text=text, model=self.model, input_tokens=input_tokens, output_tokens=output_tokens, cost=cost, purpose=purpose
        )
        if self._cache is not None:
            self._cache.set(key, {k: v for k, v in result.to_dict().items() if k not in ("cache_hit", "purpose")})
        return result

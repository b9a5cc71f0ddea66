"""Retrying model calls, and reading a provider's error answer into the right error.

Both clients share this: an error status becomes :class:`ContextOverflowError`
(never retried), :class:`RateLimitError` or :class:`ModelHTTPError`; a
:class:`Retrier` runs one attempt after another while the error is worth
retrying (429, 500, 502, 503, 504, 529, a broken or refused connection, a
timeout), waiting what the provider asked for (``retry-after-ms``,
``retry-after`` in seconds or as an HTTP date) or an exponential backoff with
jitter, and gives up after ``max_retries`` retries or when the next wait would
pass the time budget. Every retry is logged with its reason.

The sleep and the clock are parameters, so tests run retries without waiting.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from threads.llm.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    RateLimitError,
)

if TYPE_CHECKING:
    from config.models import ProviderConfig

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]

log = logging.getLogger("threads.llm")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
"""Statuses worth another attempt: rate limits, server errors, Anthropic's overload."""

_OVERFLOW_STATUSES = frozenset({400, 413, 422})
_OVERFLOW_PHRASES = (
    "context_length_exceeded",  # OpenAI's error code
    "maximum context length",  # OpenAI, OpenRouter, vLLM
    "prompt is too long",  # Anthropic
    "exceed context limit",  # Anthropic: input + max_tokens past the window
    "context window",  # "exceeds the context window"
    "context length",  # LM Studio, Ollama
    "context size",  # llama.cpp server
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how long to retry.

    The n-th retry (from 0) without a provider hint waits a random time in
    ``[d/2, d]`` with ``d = min(max_delay, base_delay * 2**n)``. A provider's
    hint is honoured as given, even past ``max_delay``, but never past the
    budget: when the next wait would end more than ``budget_seconds`` after the
    first attempt started, the last error is raised instead.
    """

    max_retries: int = 4
    budget_seconds: float = 60.0
    base_delay: float = 0.5
    max_delay: float = 20.0

    @classmethod
    def from_config(cls, config: ProviderConfig) -> RetryPolicy:
        return cls(max_retries=config.max_retries, budget_seconds=config.retry_budget_seconds)

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The jittered wait before retry number ``retry`` (0-based)."""
        ceiling = min(self.max_delay, self.base_delay * (2.0**retry))
        return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


def parse_retry_after(headers: Mapping[str, str], now: Clock = time.time) -> float | None:
    """The wait a provider asked for, in seconds, or None when it did not ask.

    ``headers`` must look keys up case-insensitively (aiohttp's headers do).
    ``retry-after-ms`` wins over ``retry-after``; the latter is seconds or an
    HTTP date (measured against ``now``, wall-clock seconds). Nonsense is ignored.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0.0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when.timestamp() - now())
    return seconds if seconds >= 0.0 else None


def error_text(body: bytes | str) -> str:
    """The human part of an error body: ``error.message`` when the body is JSON, else the text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text.strip()
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return text.strip()


def is_context_overflow(status: int, body: str) -> bool:
    """Whether an error answer says the request does not fit the model's window."""
    if status == 413:
        return True
    if status not in _OVERFLOW_STATUSES:
        return False
    lowered = body.lower()
    return any(phrase in lowered for phrase in _OVERFLOW_PHRASES)


def error_for_status(
    provider: str, model: str, status: int, headers: Mapping[str, str], body: str
) -> ModelError:
    """The error for a non-success answer. ``body`` must already be free of secrets."""
    if is_context_overflow(status, body):
        return ContextOverflowError(
            f"{provider}: the request for model {model} does not fit its context window "
            f"(HTTP {status}: {_short(error_text(body))}); compact the session and retry"
        )
    retry_after = parse_retry_after(headers)
    kind = RateLimitError if status == 429 else ModelHTTPError
    return kind(provider, status, error_text(body), model=model, retry_after=retry_after)


def is_retryable(exc: ModelError) -> bool:
    """Whether another attempt may succeed where this one failed."""
    if isinstance(exc, ModelHTTPError):
        return exc.status in RETRY_STATUSES
    if isinstance(exc, ModelConnectionError):
        return not exc.partial
    return False


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(exc: ModelError) -> str:
    if isinstance(exc, ModelHTTPError):
        return f"HTTP {exc.status}"
    return str(exc)


class Retrier:
    """Runs an attempt until it succeeds, fails for good, or the retries run out.

    One per client; it holds no per-call state, so concurrent calls share it.
    """

    __slots__ = ("_clock", "_provider", "_rng", "_sleep", "policy")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        provider: str,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self._provider = provider
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()

    async def call(self, attempt: Callable[[], Awaitable[T]], *, model: str) -> T:
        """The result of the first attempt that succeeds; else the last attempt's error."""
        policy = self.policy
        started = self._clock()
        retries = 0
        while True:
            try:
                return await attempt()
            except ModelError as exc:
                if not is_retryable(exc):
                    raise
                if retries >= policy.max_retries:
                    log.warning(
                        "%s: model %s failed (%s); giving up after %d retries",
                        self._provider,
                        model,
                        _reason(exc),
                        retries,
                    )
                    exc.add_note(f"gave up after {retries} retries")
                    raise
                hint = exc.retry_after if isinstance(exc, ModelHTTPError) else None
                delay = hint if hint is not None else policy.backoff(retries, self._rng)
                elapsed = self._clock() - started
                if elapsed + delay > policy.budget_seconds:
                    log.warning(
                        "%s: model %s failed (%s); giving up: waiting %.2fs more would pass "
                        "the %.1fs retry budget (%.2fs spent, %d retries)",
                        self._provider,
                        model,
                        _reason(exc),
                        delay,
                        policy.budget_seconds,
                        elapsed,
                        retries,
                    )
                    exc.add_note(
                        f"gave up after {retries} retries: the next wait of {delay:.2f}s "
                        f"would pass the {policy.budget_seconds:.1f}s retry budget"
                    )
                    raise
                retries += 1
                log.warning(
                    "%s: model %s failed (%s); retry %d of %d in %.2fs%s",
                    self._provider,
                    model,
                    _reason(exc),
                    retries,
                    policy.max_retries,
                    delay,
                    " as the provider asked" if hint is not None else "",
                )
                await self._sleep(delay)

"""Retry decisions: what counts as overflow, what is retried, how long to wait, when to stop."""

from __future__ import annotations

import email.utils
import logging
import random

import pytest
from multidict import CIMultiDict

from tests.threads.llm.conftest import FakeTime
from threads.llm.errors import (
    ContextOverflowError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    RateLimitError,
)
from threads.llm.retry import (
    Retrier,
    RetryPolicy,
    error_for_status,
    is_context_overflow,
    parse_retry_after,
)


def headers(**values: str) -> CIMultiDict[str]:
    return CIMultiDict({k.replace("_", "-"): v for k, v in values.items()})


def test_retry_after_in_seconds_is_read() -> None:
    assert parse_retry_after(headers(retry_after="3")) == 3.0
    assert parse_retry_after(headers(retry_after="0.5")) == 0.5


def test_retry_after_ms_wins_over_retry_after() -> None:
    assert parse_retry_after(headers(retry_after="3", retry_after_ms="250")) == 0.25


def test_retry_after_as_an_http_date_is_the_time_until_that_date() -> None:
    when = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after(headers(retry_after=when), now=lambda: 1_000_000.0) == 30.0


def test_retry_after_in_the_past_or_nonsense_means_no_hint_or_no_wait() -> None:
    past = email.utils.formatdate(999_000.0, usegmt=True)
    assert parse_retry_after(headers(retry_after=past), now=lambda: 1_000_000.0) == 0.0
    assert parse_retry_after(headers(retry_after="soon")) is None
    assert parse_retry_after(headers(retry_after="-4")) is None
    assert parse_retry_after(headers()) is None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, '{"error": {"code": "context_length_exceeded", "message": "too long"}}'),
        (400, "This model's maximum context length is 8192 tokens. However, you requested 9000"),
        (
            400,
            '{"type":"error","error":{"type":"invalid_request_error",'
            '"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
        ),
        (400, "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000"),
        (413, "Request Entity Too Large"),
    ],
)
def test_context_overflow_is_recognised(status: int, body: str) -> None:
    assert is_context_overflow(status, body)
    assert isinstance(error_for_status("p", "m", status, headers(), body), ContextOverflowError)


@pytest.mark.parametrize(
    ("status", "body"),
    [(400, '{"error": {"message": "invalid tool schema"}}'), (429, "maximum context length")],
)
def test_other_errors_are_not_overflow(status: int, body: str) -> None:
    assert not is_context_overflow(status, body)


def test_a_429_becomes_a_rate_limit_error_carrying_the_providers_wait() -> None:
    error = error_for_status(
        "p", "m", 429, headers(retry_after="7"), '{"error":{"message":"slow"}}'
    )
    assert isinstance(error, RateLimitError)
    assert error.retry_after == 7.0
    assert str(error) == "p answered HTTP 429 for model m: slow"


def test_backoff_grows_exponentially_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    rng = random.Random(1)
    for retry, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (8, 4.0)]:
        delays = {policy.backoff(retry, rng) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1


class Attempts:
    """An attempt that fails with the given errors in turn, then succeeds."""

    def __init__(self, *errors: ModelError) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def retrier(fake_time: FakeTime, **policy: float) -> Retrier:
    return Retrier(
        RetryPolicy(**policy),  # type: ignore[arg-type]
        provider="p",
        sleep=fake_time.sleep,
        clock=fake_time.clock,
        rng=random.Random(0),
    )


async def test_a_retryable_error_is_retried_and_the_retry_is_logged(
    fake_time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    attempts = Attempts(ModelHTTPError("p", 503, "busy", model="m"))
    with caplog.at_level(logging.WARNING, logger="threads.llm"):
        assert await retrier(fake_time).call(attempts, model="m") == "ok"
    assert attempts.calls == 2
    assert len(fake_time.sleeps) == 1
    assert "p: model m failed (HTTP 503); retry 1 of 4 in" in caplog.text


async def test_a_client_error_is_not_retried(fake_time: FakeTime) -> None:
    attempts = Attempts(ModelHTTPError("p", 400, "bad tool", model="m"))
    with pytest.raises(ModelHTTPError):
        await retrier(fake_time).call(attempts, model="m")
    assert attempts.calls == 1
    assert fake_time.sleeps == []


async def test_a_stream_broken_after_text_was_streamed_is_not_retried(fake_time: FakeTime) -> None:
    attempts = Attempts(ModelConnectionError("broke", partial=True))
    with pytest.raises(ModelConnectionError):
        await retrier(fake_time).call(attempts, model="m")
    assert attempts.calls == 1


async def test_retries_stop_after_max_retries(fake_time: FakeTime) -> None:
    attempts = Attempts(*(ModelConnectionError("refused") for _ in range(10)))
    with pytest.raises(ModelConnectionError) as info:
        await retrier(fake_time, max_retries=3).call(attempts, model="m")
    assert attempts.calls == 4
    assert len(fake_time.sleeps) == 3
    assert "gave up after 3 retries" in (info.value.__notes__ or [""])[0]


async def test_retries_stop_when_the_next_wait_would_pass_the_budget(fake_time: FakeTime) -> None:
    attempts = Attempts(*(ModelHTTPError("p", 500, "x") for _ in range(10)))
    with pytest.raises(ModelHTTPError):
        await retrier(fake_time, max_retries=20, budget_seconds=3.0, base_delay=1.0).call(
            attempts, model="m"
        )
    assert sum(fake_time.sleeps) <= 3.0
    assert 2 <= len(fake_time.sleeps) < 20


async def test_a_provider_wait_past_the_budget_gives_up_without_waiting(
    fake_time: FakeTime,
) -> None:
    attempts = Attempts(RateLimitError("p", 429, "slow", retry_after=120.0))
    with pytest.raises(RateLimitError):
        await retrier(fake_time, budget_seconds=60.0).call(attempts, model="m")
    assert fake_time.sleeps == []

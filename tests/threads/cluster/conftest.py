"""Scale-out fixtures: a real Redis under a key prefix of the test's own, and a lease clock.

Leases lapse on :class:`LeaseClock`, which moves only when a test moves it, so
no test here waits for a lease to run out. Only the test's own prefix is
deleted afterwards; no database is flushed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from tests.conftest import require_service
from tests.threads.store.conftest import (
    REDIS_DB,
    REDIS_HOST,
    REDIS_PORT,
    REDIS_URL,
    delete_prefix,
    redis_prefix,
)

START_MS = 1_000_000


@dataclass
class LeaseClock:
    """Milliseconds that stand still until :meth:`advance`."""

    now: int = START_MS

    def __call__(self) -> int | None:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


@pytest.fixture
def lease_clock() -> LeaseClock:
    return LeaseClock()


@pytest.fixture
async def space() -> AsyncIterator[str]:
    """A key prefix of this test's own on the test database; deleted at the end."""
    require_service("redis", REDIS_HOST, REDIS_PORT)
    prefix = redis_prefix()
    try:
        yield prefix
    finally:
        await delete_prefix(prefix)


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    require_service("redis", REDIS_HOST, REDIS_PORT)
    client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        yield client
    finally:
        await client.aclose()


__all__ = ["REDIS_URL", "LeaseClock"]

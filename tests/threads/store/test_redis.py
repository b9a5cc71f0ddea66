"""What only the redis backend promises: its writer lock is a key with an expiry.

Each test keeps its keys under a prefix of its own and deletes only those.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

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
from tests.threads.store.helpers import header, msg, texts
from threads.errors import LockedError, StaleError
from threads.store import open_store
from threads.store.redis import RedisStore


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    require_service("redis", REDIS_HOST, REDIS_PORT)
    found = redis_prefix()
    try:
        yield found
    finally:
        await delete_prefix(found)


@pytest.fixture
async def client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    found = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        yield found
    finally:
        await found.aclose()


async def test_the_writer_lock_is_a_key_with_an_expiry(client: aioredis.Redis, prefix: str) -> None:
    store = RedisStore(REDIS_URL, prefix=prefix, lock_ttl=30)
    h = header()
    await store.create(h)
    ttl = await client.pttl(f"{prefix}lock:{h.id}")
    assert 0 < ttl <= 30_000
    await store.release(h.id)
    assert await client.exists(f"{prefix}lock:{h.id}") == 0
    await store.close()


async def test_a_held_lock_is_renewed_before_it_lapses(client: aioredis.Redis, prefix: str) -> None:
    # Renewed every second, lapsing after three: only a two-second stall could lose it.
    store = RedisStore(REDIS_URL, prefix=prefix, lock_ttl=3.0)
    h = header()
    await store.create(h)
    lock = f"{prefix}lock:{h.id}"
    deadline = time.monotonic() + 10
    lowest = await client.pttl(lock)
    renewed = False
    while time.monotonic() < deadline and not renewed:
        await asyncio.sleep(0.02)  # polling the server with a deadline
        ttl = await client.pttl(lock)
        assert ttl > 0, "the held lock lapsed"
        renewed = ttl > lowest + 100  # it went down, then back up: renewed
        lowest = min(lowest, ttl)
    assert renewed
    assert await client.get(lock) is not None
    await store.close()


async def test_a_dead_writers_lock_lapses_and_the_session_can_be_taken(
    client: aioredis.Redis, prefix: str
) -> None:
    dead = RedisStore(REDIS_URL, prefix=prefix)
    h = header()
    await dead.create(h)
    await dead.append(h.id, [msg("before the crash")])
    # The writer dies: its renewals stop and it never releases.
    assert dead._renewer is not None
    dead._renewer.cancel()
    await dead._redis.aclose()
    survivor = RedisStore(REDIS_URL, prefix=prefix)
    with pytest.raises(LockedError, match=h.id):
        await survivor.append(h.id, [msg("too early")])
    # Its expiry comes (the lock's TTL, moved to now rather than waited out for 30 s).
    await client.pexpire(f"{prefix}lock:{h.id}", 1)
    deadline = time.monotonic() + 5
    while True:
        try:
            await survivor.append(h.id, [msg("after the lapse")])
            break
        except LockedError:
            assert time.monotonic() < deadline, "the dead writer's lock never lapsed"
            await asyncio.sleep(0.05)
    assert texts((await survivor.load(h.id)).entries) == ["before the crash", "after the lapse"]
    await survivor.close()


async def test_a_writer_whose_lock_lapsed_is_refused_once_the_session_moved_on(
    client: aioredis.Redis, prefix: str
) -> None:
    stalled = RedisStore(REDIS_URL, prefix=prefix)
    other = RedisStore(REDIS_URL, prefix=prefix)
    h = header()
    await stalled.create(h)
    await stalled.append(h.id, [msg("one")])
    # The stalled writer's lock lapses (its process stood still past the expiry) ...
    await client.delete(f"{prefix}lock:{h.id}")
    # ... and another writer takes the session, moves it on and lets go.
    await other.append(h.id, [msg("two")])
    await other.release(h.id)
    with pytest.raises(StaleError, match=h.id):
        await stalled.append(h.id, [msg("from a stale view")])
    assert await client.exists(f"{prefix}lock:{h.id}") == 0  # the refusal took nothing
    assert texts((await stalled.load(h.id)).entries) == ["one", "two"]
    # Acquiring again is how the writer catches up: it learns the count, then writes.
    assert (await stalled.acquire(h.id, object()))[0] == 2
    await stalled.append(h.id, [msg("three")])
    assert texts((await other.load(h.id)).entries) == ["one", "two", "three"]
    await stalled.close()
    await other.close()


async def test_a_lapsed_lock_is_taken_again_when_nobody_wrote_meanwhile(
    client: aioredis.Redis, prefix: str
) -> None:
    store = RedisStore(REDIS_URL, prefix=prefix)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await client.delete(f"{prefix}lock:{h.id}")
    await store.append(h.id, [msg("two")])
    assert await client.get(f"{prefix}lock:{h.id}") is not None
    assert texts((await store.load(h.id)).entries) == ["one", "two"]
    await store.close()


async def test_the_cron_prefix_of_a_store_url_keeps_its_sessions_apart(
    client: aioredis.Redis, prefix: str
) -> None:
    # Gateways that share a Redis database by their cron prefixes share nothing else.
    store = open_store(f"{REDIS_URL}?cron_prefix={prefix}cron:")
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.point("web:abc", h.id)
    keys = {key async for key in client.scan_iter(match=f"{prefix}*")}
    assert keys >= {f"{prefix}weft:{kind}".encode() for kind in (f"s:{h.id}", f"c:{h.id}", "keys")}
    assert await client.exists(f"weft:s:{h.id}") == 0
    await store.close()

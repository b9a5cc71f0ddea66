"""Fencing: a session write is refused, by the store's own script, once its lease is not current."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from tests.threads.cluster.conftest import REDIS_URL, LeaseClock
from threads.cluster.leases import LeaseTable
from threads.errors import FencedError, LockedError
from threads.ids import new_entry_id, new_session_id
from threads.store.base import Fence
from threads.store.entries import Header, InfoEntry
from threads.store.redis import RedisStore


@pytest.fixture
async def stores(space: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    """Two processes' stores over one Redis prefix."""
    a = RedisStore(REDIS_URL, prefix=space)
    b = RedisStore(REDIS_URL, prefix=space)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def info(title: str) -> InfoEntry:
    return InfoEntry(id=new_entry_id(), title=title)


async def start_session(store: RedisStore) -> str:
    session = new_session_id()
    await store.create(Header(id=session, created=datetime.now(UTC), meta={"key": "k"}))
    return session


def fence_of(table: LeaseTable, name: str, token: int) -> Fence:
    return Fence(lease=table.key(name), token=token, clock=table.clock)


async def test_a_writer_whose_lease_was_taken_over_can_never_write_again(
    stores: tuple[RedisStore, RedisStore],
    redis: aioredis.Redis,
    space: str,
    lease_clock: LeaseClock,
) -> None:
    store_a, store_b = stores
    leases_a = LeaseTable(redis, f"{space}cluster:", node="a", ttl=15, clock=lease_clock)
    leases_b = LeaseTable(redis, f"{space}cluster:", node="b", ttl=15, clock=lease_clock)
    session = await start_session(store_a)
    held = await leases_a.claim("key:k")
    store_a.fence(session, fence_of(leases_a, "key:k", held.lease.fence))
    await store_a.append(session, [info("by a")])

    lease_clock.advance(15)
    taken = await leases_b.claim("key:k")
    store_b.fence(session, fence_of(leases_b, "key:k", taken.lease.fence))
    await store_b.acquire(session, object())  # takes the writer lock a's store still holds
    await store_b.append(session, [info("by b")])

    with pytest.raises(FencedError, match="fencing token"):
        await store_a.append(session, [info("a, late")])
    with pytest.raises(FencedError):
        await store_a.append(session, [info("a, later still")])
    titles = [e.title for e in (await store_b.load(session)).entries if isinstance(e, InfoEntry)]
    assert titles == ["by a", "by b"]


async def test_a_writer_whose_lease_lapsed_stops_writing_though_nobody_took_it(
    stores: tuple[RedisStore, RedisStore],
    redis: aioredis.Redis,
    space: str,
    lease_clock: LeaseClock,
) -> None:
    store_a, _ = stores
    leases = LeaseTable(redis, f"{space}cluster:", node="a", ttl=15, clock=lease_clock)
    session = await start_session(store_a)
    held = await leases.claim("key:k")
    store_a.fence(session, fence_of(leases, "key:k", held.lease.fence))
    lease_clock.advance(14.9)
    await store_a.append(session, [info("in time")])
    lease_clock.advance(0.1)
    with pytest.raises(FencedError):
        await store_a.append(session, [info("too late")])
    assert len((await store_a.load(session)).entries) == 1


async def test_an_unfenced_session_keeps_the_plain_writer_lock(
    stores: tuple[RedisStore, RedisStore],
) -> None:
    store_a, store_b = stores
    session = await start_session(store_a)
    store_a.fence(session, None)
    await store_a.append(session, [info("one")])
    with pytest.raises(LockedError):
        await store_b.append(session, [info("two")])

"""Leases: compare-and-set claims, renewals that only extend a lease still held, fencing tokens."""

from __future__ import annotations

import redis.asyncio as aioredis

from tests.threads.cluster.conftest import LeaseClock
from threads.cluster.leases import LeaseTable


def table(redis: aioredis.Redis, space: str, node: str, clock: LeaseClock) -> LeaseTable:
    return LeaseTable(redis, f"{space}cluster:", node=node, ttl=15.0, clock=clock)


async def test_a_free_lease_is_taken_and_a_held_one_names_its_holder(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a, b = table(redis, space, "a", lease_clock), table(redis, space, "b", lease_clock)
    first = await a.claim("key:telegram:1")
    second = await b.claim("key:telegram:1")
    assert first.won
    assert first.lease.node == "a"
    assert not second.won
    assert second.lease.node == "a"
    assert second.lease.fence == first.lease.fence


async def test_claiming_a_lease_one_holds_extends_it_under_the_same_token(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a = table(redis, space, "a", lease_clock)
    first = await a.claim("leader:cron")
    lease_clock.advance(10)
    again = await a.claim("leader:cron")
    assert again.won
    assert again.lease.fence == first.lease.fence
    assert again.lease.expires_ms == first.lease.expires_ms + 10_000


async def test_a_lapsed_lease_goes_to_the_next_claimer_with_a_greater_token(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a, b = table(redis, space, "a", lease_clock), table(redis, space, "b", lease_clock)
    first = await a.claim("key:k")
    lease_clock.advance(15)
    taken = await b.claim("key:k")
    assert taken.won
    assert taken.lease.node == "b"
    assert taken.lease.fence > first.lease.fence


async def test_a_renewal_keeps_a_lease_alive_past_its_first_expiry(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a, b = table(redis, space, "a", lease_clock), table(redis, space, "b", lease_clock)
    held = await a.claim("key:k")
    lease_clock.advance(10)
    assert await a.renew({"key:k": held.lease.fence}) == []
    lease_clock.advance(10)
    assert not (await b.claim("key:k")).won


async def test_a_lapsed_lease_is_not_renewed_even_when_nobody_took_it(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a = table(redis, space, "a", lease_clock)
    held = await a.claim("key:k")
    lease_clock.advance(15)
    assert await a.renew({"key:k": held.lease.fence}) == ["key:k"]
    again = await a.claim("key:k")
    assert again.won
    assert again.lease.fence > held.lease.fence


async def test_a_renewal_reports_a_lease_another_node_took(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a, b = table(redis, space, "a", lease_clock), table(redis, space, "b", lease_clock)
    kept = await a.claim("key:kept")
    lost = await a.claim("key:lost")
    lease_clock.advance(15)
    await b.claim("key:lost")
    lease_clock.advance(-5)  # a renews the one nobody took before it lapsed
    renewal = await a.renew({"key:kept": kept.lease.fence, "key:lost": lost.lease.fence})
    assert renewal == ["key:lost"]


async def test_a_release_lets_go_only_of_the_releasers_own_lease(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a, b = table(redis, space, "a", lease_clock), table(redis, space, "b", lease_clock)
    old = await a.claim("key:k")
    lease_clock.advance(15)
    new = await b.claim("key:k")
    assert not await a.release("key:k", old.lease.fence)
    assert (await a.get("key:k")) == new.lease
    assert await b.release("key:k", new.lease.fence)
    assert await a.get("key:k") is None
    assert (await a.claim("key:k")).won


async def test_lapsed_lists_the_leases_nobody_renewed(
    redis: aioredis.Redis, space: str, lease_clock: LeaseClock
) -> None:
    a = table(redis, space, "a", lease_clock)
    await a.claim("key:old")
    lease_clock.advance(10)
    await a.claim("key:new")
    lease_clock.advance(6)
    assert await a.lapsed("key:") == ["key:old"]
    assert [lease.name for lease in await a.all("key:")] == ["key:new", "key:old"]

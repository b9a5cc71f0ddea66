"""Delegation slots: bounded, and handed to waiters first come first served."""

from __future__ import annotations

import asyncio

import pytest

from threads.pool.slots import Slots


async def test_a_freed_slot_goes_to_the_oldest_waiter_not_to_a_newcomer() -> None:
    slots = Slots(1)
    assert slots.try_take()
    order: list[str] = []

    async def wait(name: str) -> None:
        await slots.take()
        order.append(name)

    first = asyncio.create_task(wait("first"))
    second = asyncio.create_task(wait("second"))
    while slots.waiting < 2:
        await asyncio.sleep(0)
    slots.give()
    assert not slots.try_take()  # the slot changed hands: a newcomer does not jump the queue
    await first
    assert order == ["first"]
    slots.give()
    await second
    assert order == ["first", "second"]
    slots.give()
    assert slots.unused


async def test_a_waiter_cancelled_as_the_slot_reaches_it_passes_the_slot_on() -> None:
    slots = Slots(1)
    assert slots.try_take()
    first = asyncio.create_task(slots.take())
    second = asyncio.create_task(slots.take())
    while slots.waiting < 2:
        await asyncio.sleep(0)
    slots.give()  # handed to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # the slot went on to the next waiter
    assert slots.held == 1
    slots.give()
    assert slots.unused


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    slots = Slots(2)
    assert slots.try_take()
    assert slots.try_take()
    waiter = asyncio.create_task(slots.take())
    while slots.waiting < 1:
        await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting == 0
    slots.give()
    assert slots.try_take()


def test_a_pool_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        Slots(0)

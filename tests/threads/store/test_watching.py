"""The change wait under every store's live tail: a cancel always ends it."""

from __future__ import annotations

import asyncio

import pytest

from threads.store.watching import wait_for_change


async def test_a_wait_cancelled_as_its_change_comes_is_cancelled() -> None:
    # On Python 3.11, asyncio.wait_for returns the inner result when the change and the
    # cancel land in the same loop pass: the tail went on polling after its stream ended.
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_for_change(event, 10.0))
    await asyncio.sleep(0)  # one pass: the waiter now waits on the event
    event.set()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_a_wait_ends_when_the_change_comes_or_the_time_is_up() -> None:
    event = asyncio.Event()
    event.set()
    await wait_for_change(event, 10.0)
    await wait_for_change(asyncio.Event(), 0.0)  # no change: the deadline ends it

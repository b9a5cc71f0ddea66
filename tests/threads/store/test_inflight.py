"""Writes of the event-loop backends: a write that never waits runs at once when nothing is ahead."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tests.threads.store.helpers import header, msg
from threads.store.entries import Entry
from threads.store.inflight import InFlight
from threads.store.memory import MemoryStore


def finished_at_once(coroutine: Any) -> Any:
    """The value of a coroutine that ends on its first step (AssertionError if it waits)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the write waited for the event loop")


async def test_a_memory_append_with_no_write_ahead_of_it_lands_without_a_task() -> None:
    store = MemoryStore()
    h = header()
    await store.create(h)
    entry = msg("hi")
    lines = finished_at_once(store.append(h.id, [entry]))
    assert len(lines) == 1
    assert [e.id for e in (await store.load(h.id)).entries] == [entry.id]


async def test_a_write_that_never_waits_queues_behind_a_started_one() -> None:
    writes = InFlight("test")
    release = asyncio.Event()
    order: list[str] = []

    async def slow() -> None:
        await release.wait()
        order.append("slow")

    def quick() -> None:
        order.append("quick")

    first = asyncio.create_task(writes.run("s", "append:started", slow))
    await asyncio.sleep(0)  # the slow write has started and holds the session
    second = asyncio.create_task(writes.run_now("s", "append:started", quick))
    other = await writes.run_now("t", "append:started", lambda: "another session goes at once")
    assert other == "another session goes at once"
    assert order == []
    release.set()
    await asyncio.gather(first, second)
    assert order == ["slow", "quick"]


async def test_a_pause_seam_sees_every_write_that_never_waits() -> None:
    points: list[str] = []
    writes = InFlight("test", points.append)
    assert await writes.run_now("s", "append:started", lambda: 1) == 1
    assert points == ["append:started"]


async def test_a_memory_store_appends_at_once_only_with_nothing_ahead_of_it() -> None:
    seen: list[str] = []
    store = MemoryStore(pause=seen.append)
    h = header()
    await store.create(h)
    # A test pause sees every write: none lands at once.
    assert store.append_at_once(h.id, [msg("held")]) is None
    assert seen == ["create:started"]
    plain = MemoryStore()
    await plain.create(h)
    first, second = msg("one"), msg("two")
    assert plain.append_at_once(h.id, [first, second]) is not None
    assert [e.id for e in (await plain.load(h.id)).entries] == [first.id, second.id]


async def test_a_memory_store_whose_append_is_wrapped_is_always_asked_through_it() -> None:
    class Counting(MemoryStore):
        async def append(
            self, session: str, entries: Sequence[Entry], *, durable: bool = True
        ) -> list[bytes]:
            return await super().append(session, entries, durable=durable)

    store = Counting()
    h = header()
    await store.create(h)
    assert store.append_at_once(h.id, [msg("through append")]) is None

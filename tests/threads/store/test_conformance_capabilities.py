"""The Storage conformance suite, part three: flush, release, lease, watch, key index.

The optional capabilities (``Flusher``, ``Releaser``, ``Leaser``,
``Watcher``) and the ``KeyIndex``, against every backend (the ``backend``
fixture of conftest.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.threads.store.conftest import Backend
from tests.threads.store.helpers import header, msg, next_entry, texts
from threads.errors import LockedError, NoEntryError, NotFoundError
from threads.store.base import KeyIndex, StoreOptions
from threads.store.entries import MessageEntry

# -- flush, release, lease


async def test_flush_makes_on_flush_appends_durable_and_checks_the_session(
    backend: Backend,
) -> None:
    store = backend.open(StoreOptions(fsync="on_flush"))
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("buffered")])
    await store.flush(h.id)
    assert texts((await store.load(h.id)).entries) == ["buffered"]


async def test_a_second_holder_is_locked_out_naming_the_session(store: Any) -> None:
    h = header()
    await store.create(h)
    first, second = object(), object()
    assert await store.acquire(h.id, first) == (0, h.created)
    assert await store.acquire(h.id, first) == (0, h.created)  # idempotent for the holder
    with pytest.raises(LockedError, match=h.id) as caught:
        await store.acquire(h.id, second)
    assert "/" not in str(caught.value)
    # Yielding by a holder that does not have the lease releases nothing.
    await store.yield_lease(h.id, second)
    with pytest.raises(LockedError):
        await store.acquire(h.id, second)


async def test_yield_hands_the_lease_over(store: Any) -> None:
    h = header()
    await store.create(h)
    first, second = object(), object()
    await store.acquire(h.id, first)
    await store.append(h.id, [msg("by first")])
    await store.yield_lease(h.id, first)
    assert await store.acquire(h.id, second) == (1, h.created)


async def test_readers_are_never_refused_by_a_lease(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.acquire(h.id, object())
    await store.append(h.id, [msg("held")])
    assert texts((await store.load(h.id)).entries) == ["held"]
    assert (await store.list()).total == 1
    stream = store.watch(h.id)
    assert texts([await next_entry(stream)]) == ["held"]
    await stream.aclose()


async def test_delete_ends_the_lease(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.acquire(h.id, object())
    await store.delete(h.id)
    await store.create(header(h.id))
    assert (await store.acquire(h.id, object()))[0] == 0


async def test_the_count_and_created_are_the_stale_signal(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("a"), msg("b")])
    await store.inject(h.id, b'{"type":"torn')
    holder = object()
    assert await store.acquire(h.id, holder) == (2, h.created)  # the torn tail never counts
    await store.append(h.id, [msg("c")])
    await store.yield_lease(h.id, holder)
    assert (await store.acquire(h.id, object()))[0] == 3
    # Deleted and created again with as many entries: created tells them apart.
    await store.delete(h.id)
    again = header(h.id, created=h.created + timedelta(seconds=1))
    await store.create(again)
    await store.append(h.id, [msg("x"), msg("y"), msg("z")])
    assert await store.acquire(h.id, object()) == (3, again.created)


async def test_release_lets_another_store_write(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("one memory store has no second Storage value to hand over to")
    first, second = backend.open(), backend.open()
    h = header()
    await first.create(h)
    await first.append(h.id, [msg("first")])
    with pytest.raises(LockedError, match=h.id) as caught:
        await second.append(h.id, [msg("second")])
    assert "/" not in str(caught.value)
    with pytest.raises(LockedError):
        await second.delete(h.id)
    await first.release(h.id)
    await second.append(h.id, [msg("second")])
    # The first store's next write re-takes the lock, and now finds it taken.
    with pytest.raises(LockedError):
        await first.append(h.id, [msg("late")])
    assert texts((await first.load(h.id)).entries) == ["first", "second"]


async def test_a_second_store_over_the_same_location_is_locked_out(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory stores share nothing")
    first, second = backend.open(), backend.open()
    h = header()
    await first.create(h)
    await first.acquire(h.id, object())
    with pytest.raises(LockedError, match=h.id):
        await second.acquire(h.id, object())
    with pytest.raises(LockedError, match=h.id):
        await second.append(h.id, [msg("intruder")])
    assert (await second.load(h.id)).entries == []  # reading takes nothing


async def test_a_closed_store_lets_go_of_its_sessions(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory stores share nothing")
    first = backend.open()
    h = header()
    await first.create(h)
    await first.append(h.id, [msg("one")])
    await first.close()
    second = backend.open()
    await second.append(h.id, [msg("two")])
    assert texts((await second.load(h.id)).entries) == ["one", "two"]


# -- watch


async def test_watch_yields_the_backlog_then_each_new_entry_once(store: Any) -> None:
    h = header()
    await store.create(h)
    first, second = msg("1"), msg("2")
    await store.append(h.id, [first, second])
    stream = store.watch(h.id)
    assert [await next_entry(stream), await next_entry(stream)] == [first, second]
    later = [msg("3"), msg("4")]
    await store.append(h.id, later)
    assert [await next_entry(stream), await next_entry(stream)] == later
    await stream.aclose()
    resumed = store.watch(h.id, after=first.id)
    assert await next_entry(resumed) == second
    await resumed.aclose()
    with pytest.raises(NoEntryError):
        await next_entry(store.watch(h.id, after="e_nowhere"))


async def test_a_watcher_follows_a_session_another_store_writes(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory stores share nothing")
    writer, reader = backend.open(), backend.open()
    h = header()
    await writer.create(h)
    await writer.append(h.id, [msg("1")])
    stream = reader.watch(h.id)
    assert texts([await next_entry(stream)]) == ["1"]
    pending = asyncio.ensure_future(next_entry(stream))
    await writer.append(h.id, [msg("2"), msg("3")])
    assert texts([await pending, await next_entry(stream)]) == ["2", "3"]
    await stream.aclose()


async def test_watch_waits_out_a_torn_tail(store: Any) -> None:
    h = header()
    await store.create(h)
    stream = store.watch(h.id)
    pending = asyncio.ensure_future(next_entry(stream))
    await store.inject(h.id, b'{"type":"message","id":"e_1","created":"2025-01-01T00:00:00Z",')
    await asyncio.sleep(0.1)
    assert not pending.done()
    await store.inject(h.id, b'"message":{"role":"user","content":[{"type":"text","text":"x"}]}}\n')
    entry = await pending
    assert isinstance(entry, MessageEntry)
    assert entry.id == "e_1"
    await stream.aclose()


async def test_watch_ends_with_not_found_when_the_session_is_deleted(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("1")])
    stream = store.watch(h.id)
    await next_entry(stream)
    pending = asyncio.ensure_future(next_entry(stream))
    await asyncio.sleep(0)
    await store.delete(h.id)
    with pytest.raises(NotFoundError, match=h.id):
        await pending


async def test_watch_ends_with_not_found_when_the_session_is_created_again(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("1")])
    stream = store.watch(h.id)
    await next_entry(stream)
    pending = asyncio.ensure_future(next_entry(stream))
    await asyncio.sleep(0)
    await store.delete(h.id)
    await store.create(h)
    await store.append(h.id, [msg("1"), msg("2")])
    with pytest.raises(NotFoundError, match=h.id):
        await pending


async def test_a_watcher_on_another_store_ends_when_its_session_is_created_again(
    backend: Backend,
) -> None:
    if not backend.shared:
        pytest.skip("memory stores share nothing")
    writer = backend.open()
    reader = backend.open(poll_interval=3600)  # it looks again only when woken
    h = header()
    await writer.create(h)
    await writer.append(h.id, [msg("1"), msg("2")])
    stream = reader.watch(h.id)
    assert texts([await next_entry(stream), await next_entry(stream)]) == ["1", "2"]
    pending = asyncio.ensure_future(next_entry(stream))
    # The reader sleeps through a delete and a create of the same id, header and all
    # (on ext4 the new file even gets the old inode), and a longer history.
    await writer.delete(h.id)
    await writer.create(h)
    await writer.append(h.id, [msg("3"), msg("4"), msg("5")])
    assert not pending.done()
    await reader.create(header())  # a write of its own wakes the reader's watchers
    with pytest.raises(NotFoundError, match=h.id):
        await pending


# -- key index


async def test_keys_resolve_to_the_session_they_point_at(store: Any) -> None:
    assert isinstance(store, KeyIndex)
    assert await store.resolve("telegram:1") is None
    a, b = header(), header()
    await store.create(a)
    await store.create(b)
    await store.point("telegram:1", a.id)
    await store.point("cli", b.id)
    assert await store.resolve("telegram:1") == a.id
    await store.point("telegram:1", b.id)  # /new
    assert await store.resolve("telegram:1") == b.id
    assert await store.keys() == {"telegram:1": b.id, "cli": b.id}


async def test_the_key_index_survives_a_restart(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory keeps nothing across stores")
    first = backend.open()
    a, b = header(), header()
    await first.create(a)
    await first.create(b)
    await first.point("web:1", a.id)
    await first.point("web:1", b.id)
    await first.point("cron:daily", a.id)
    await first.close()
    second = backend.open()
    assert await second.resolve("web:1") == b.id
    assert await second.keys() == {"web:1": b.id, "cron:daily": a.id}


async def test_unpoint_forgets_a_key_and_keeps_its_session(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.point("agent:a:subagent:1", h.id)
    await store.unpoint("agent:a:subagent:1")
    await store.unpoint("never:pointed")
    assert await store.resolve("agent:a:subagent:1") is None
    assert "agent:a:subagent:1" not in await store.keys()
    assert (await store.load(h.id)).header.id == h.id


async def test_a_forgotten_key_stays_forgotten_after_a_restart(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory keeps nothing across stores")
    first = backend.open()
    h = header()
    await first.create(h)
    await first.point("web:gone", h.id)
    await first.point("web:kept", h.id)
    await first.unpoint("web:gone")
    await first.close()
    second = backend.open()
    assert await second.keys() == {"web:kept": h.id}

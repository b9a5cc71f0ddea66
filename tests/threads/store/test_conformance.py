"""The Storage conformance suite: every test runs against every backend.

The claims are seed 003's ``Storage`` contract and issue 3's list; the
``backend`` fixture (conftest.py) parametrizes memory, jsonl, sqlite and
redis. Raw bytes reach a backend only through its ``inject`` / ``plant``
test hooks, the way a crash or a damaged disk would leave them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest

from tests.threads.store.conftest import Backend
from tests.threads.store.helpers import at, header, info, msg, texts
from threads.errors import (
    CorruptError,
    ExistsError,
    InvalidIdError,
    LockedError,
    NewerFormatError,
    NoEntryError,
    NotFoundError,
)
from threads.messages import ToolCallPart
from threads.store.base import (
    Flusher,
    KeyIndex,
    Leaser,
    Page,
    Query,
    Releaser,
    StoreOptions,
    Watcher,
)
from threads.store.codec import encode_header
from threads.store.entries import CustomEntry, Entry, MessageEntry

BULK = StoreOptions(fsync="on_flush")  # many creates; durability is not what these test
INVALID_IDS = ["", "../x", "a/b", "x.jsonl", ".", "a" * 129]


async def all_pages(store: Any, limit: int, **filters: Any) -> list[str]:
    seen: list[str] = []
    query = Query(limit=limit, **filters)
    while True:
        page: Page = await store.list(query)
        if not page.sessions:
            return seen
        seen.extend(h.id for h in page.sessions)
        last = page.sessions[-1]
        query = Query(limit=limit, before=last.created, before_id=last.id, **filters)


async def next_entry(stream: Any) -> Entry:
    return await asyncio.wait_for(anext(stream), 5)


# -- round trip, batches, order


async def test_created_session_loads_back_equal_and_unaliased(store: Any) -> None:
    meta = {"key": "telegram:1", "public_id": "p1"}
    h = header(**meta)
    await store.create(h)
    call = ToolCallPart(id="c1", name="search", args={"q": ["a", "b"]})
    first = msg("hello", wake={"source": "telegram"})
    second = CustomEntry(id="e_custom", parent=first.id, kind="state", data={"n": [1, 2]})
    await store.append(h.id, [first, second])
    loaded = await store.load(h.id)
    assert loaded.header == h
    assert loaded.entries == [first, second]
    assert loaded.report is None
    # Mutating what a load returned (or what was passed in) never reaches the store.
    loaded.entries.clear()
    loaded.header.meta["key"] = "changed"  # type: ignore[index]
    second.data["n"].append(3)
    first.wake["source"] = "changed"  # type: ignore[index]
    again = await store.load(h.id)
    assert again.header.meta["key"] == "telegram:1"
    assert again.entries[1].data == {"n": [1, 2]}
    assert again.entries[0].wake == {"source": "telegram"}
    assert call == ToolCallPart(id="c1", name="search", args={"q": ["a", "b"]})


@pytest.mark.parametrize("bad_at", [0, 1, 2])
async def test_an_unencodable_entry_anywhere_in_a_batch_writes_nothing(
    store: Any, bad_at: int
) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("kept")])
    batch: list[Entry] = [msg("a"), msg("b"), msg("c")]
    batch[bad_at] = CustomEntry(id="e_bad", kind="x", data={"not json": object()})
    with pytest.raises(TypeError):
        await store.append(h.id, batch)
    assert texts((await store.load(h.id)).entries) == ["kept"]


async def test_entries_load_in_arrival_order_across_and_within_batches(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("1"), msg("2")])
    await store.append(h.id, [msg("3")])
    await store.append(h.id, [])
    await store.append(h.id, [msg("4"), msg("5"), msg("6")])
    assert texts((await store.load(h.id)).entries) == ["1", "2", "3", "4", "5", "6"]


async def test_a_second_create_of_one_id_is_refused_and_changes_nothing(store: Any) -> None:
    h = header(key="a")
    await store.create(h)
    await store.append(h.id, [msg("one")])
    with pytest.raises(ExistsError, match=h.id):
        await store.create(header(h.id, key="b"))
    loaded = await store.load(h.id)
    assert loaded.header.meta == {"key": "a"}
    assert texts(loaded.entries) == ["one"]


async def test_a_header_with_a_foreign_envelope_is_refused(store: Any) -> None:
    from threads.store.entries import Header

    with pytest.raises(ValueError, match="weft"):
        await store.create(Header(id="s_x", weft=7))


# -- missing sessions and invalid ids


async def test_every_method_says_not_found_for_a_missing_session(store: Any) -> None:
    missing = "s_missing"
    with pytest.raises(NotFoundError, match=missing):
        await store.append(missing, [msg("x")])
    with pytest.raises(NotFoundError, match=missing):
        await store.load(missing)
    with pytest.raises(NotFoundError, match=missing):
        await store.delete(missing)
    assert isinstance(store, Flusher | Releaser | Leaser | Watcher)
    with pytest.raises(NotFoundError, match=missing):
        await store.flush(missing)
    with pytest.raises(NotFoundError, match=missing):
        await store.release(missing)
    with pytest.raises(NotFoundError, match=missing):
        await store.acquire(missing, object())
    with pytest.raises(NotFoundError, match=missing):
        await store.yield_lease(missing, object())
    with pytest.raises(NotFoundError, match=missing):
        await next_entry(store.watch(missing))
    assert (await store.list()).total == 0


@pytest.mark.parametrize("bad", INVALID_IDS)
async def test_invalid_ids_are_refused_by_every_method_and_harm_no_neighbour(
    store: Any, bad: str
) -> None:
    neighbour = header("x")
    await store.create(neighbour)
    await store.append("x", [msg("safe")])
    calls: list[Callable[[], Any]] = [
        lambda: store.create(header(bad)),
        lambda: store.append(bad, [msg("evil")]),
        lambda: store.load(bad),
        lambda: store.delete(bad),
        lambda: store.flush(bad),
        lambda: store.release(bad),
        lambda: store.acquire(bad, object()),
        lambda: store.yield_lease(bad, object()),
        lambda: next_entry(store.watch(bad)),
        lambda: store.point("key", bad),
    ]
    for call in calls:
        with pytest.raises(InvalidIdError):
            await call()
    loaded = await store.load("x")
    assert texts(loaded.entries) == ["safe"]
    page = await store.list()
    assert [h.id for h in page.sessions] == ["x"]


# -- list: order, cursor, limit, filters


async def test_list_pages_120_sessions_newest_first(backend: Backend) -> None:
    store = backend.open(BULK)
    made = [header(created=at(i)) for i in range(120)]
    await asyncio.gather(*(store.create(h) for h in made))
    first = await store.list(Query(limit=50))
    assert first.total == 120
    assert [h.id for h in first.sessions] == [h.id for h in reversed(made)][:50]
    walked = await all_pages(store, 50)
    assert walked == [h.id for h in reversed(made)]


async def test_the_cursor_walks_a_tie_of_sixty_exactly_once(backend: Backend) -> None:
    store = backend.open(BULK)
    tied = [header(created=at(100)) for _ in range(60)]
    older = [header(created=at(i)) for i in range(5)]
    await asyncio.gather(*(store.create(h) for h in tied + older))
    walked = await all_pages(store, 7)
    assert len(walked) == 65
    assert sorted(walked) == sorted(h.id for h in tied + older)
    assert walked[:60] == sorted((h.id for h in tied), reverse=True)
    # Before alone (no before_id) returns only the strictly older: it skips the tie.
    page = await store.list(Query(before=at(100)))
    assert [h.id for h in page.sessions] == [h.id for h in reversed(older)]
    assert page.total == 65


async def test_list_limit_zero_means_fifty_and_caps_at_five_hundred(backend: Backend) -> None:
    store = backend.open(BULK)
    await asyncio.gather(*(store.create(header(created=at(i))) for i in range(510)))
    assert len((await store.list(Query(limit=0))).sessions) == 50
    assert len((await store.list(Query(limit=-3))).sessions) == 50
    assert len((await store.list(Query(limit=7))).sessions) == 7
    page = await store.list(Query(limit=501))
    assert len(page.sessions) == 500
    assert page.total == 510


async def test_list_filters_by_meta_exactly_and_by_the_current_title(store: Any) -> None:
    a = header(created=at(1), team="red", public_id="pa", **{"weft.public_id": "w.1"})
    b = header(created=at(2), team="red")
    c = header(created=at(3), team="blue")
    for h in (a, b, c):
        await store.create(h)
    await store.append(a.id, [info("Quarterly Report"), msg("x")])
    await store.append(b.id, [info("report draft"), info("Holiday plans")])
    await store.append(c.id, [info("Weekly REPORT"), info("")])
    red = await store.list(Query(meta={"team": "red"}))
    assert [h.id for h in red.sessions] == [b.id, a.id]
    assert red.total == 2
    both = await store.list(Query(meta={"team": "red", "public_id": "pa"}))
    assert [h.id for h in both.sessions] == [a.id]
    assert (await store.list(Query(meta={"team": "re"}))).total == 0
    dotted = await store.list(Query(meta={"weft.public_id": "w.1"}))
    assert [h.id for h in dotted.sessions] == [a.id]
    found = await store.list(Query(title_search="rePort"))
    # b's title moved on to "Holiday plans"; c's empty info title does not clear it.
    assert [h.id for h in found.sessions] == [c.id, a.id]
    assert found.total == 2
    red_report = await store.list(Query(meta={"team": "red"}, title_search="report"))
    assert [h.id for h in red_report.sessions] == [a.id]


async def test_paging_under_concurrent_creates_sees_every_older_session_once(
    backend: Backend,
) -> None:
    store = backend.open(BULK)
    existing = [header(created=at(i)) for i in range(40)]
    await asyncio.gather(*(store.create(h) for h in existing))
    seen: list[str] = []
    query = Query(limit=6)
    newer = 0
    while True:
        page = await store.list(query)
        if not page.sessions:
            break
        seen.extend(h.id for h in page.sessions)
        # Sessions created between pages are newer than the cursor: never in the walk.
        newer += 1
        await store.create(header(created=at(1000 + newer)))
        last = page.sessions[-1]
        query = Query(limit=6, before=last.created, before_id=last.id)
    first_page_ids = set(seen[:6])
    rest = [s for s in seen if s not in first_page_ids]
    assert sorted(seen) == sorted(h.id for h in existing)
    assert len(seen) == len(set(seen)) == 40
    assert rest == [h.id for h in reversed(existing)][6:]


# -- delete


async def test_delete_removes_the_session_and_its_id_can_be_created_again(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("old")])
    await store.delete(h.id)
    with pytest.raises(NotFoundError):
        await store.load(h.id)
    assert (await store.list()).total == 0
    with pytest.raises(NotFoundError):
        await store.delete(h.id)
    await store.create(header(h.id))
    await store.append(h.id, [msg("new")])
    assert texts((await store.load(h.id)).entries) == ["new"]


# -- concurrency


async def test_eight_writers_on_eight_sessions_each_keep_their_entries(store: Any) -> None:
    sessions = [header() for _ in range(8)]
    await asyncio.gather(*(store.create(h) for h in sessions))

    async def write(session: str) -> None:
        for i in range(20):
            await store.append(session, [msg(f"{session}:{i}")])

    await asyncio.gather(*(write(h.id) for h in sessions))
    for h in sessions:
        assert texts((await store.load(h.id)).entries) == [f"{h.id}:{i}" for i in range(20)]


async def test_eight_appenders_on_one_session_keep_batches_whole_and_in_order(
    store: Any,
) -> None:
    h = header()
    await store.create(h)

    async def write(writer: int) -> None:
        for i in range(10):
            await store.append(h.id, [msg(f"{writer}:{i}:{part}") for part in range(3)])

    await asyncio.gather(*(write(w) for w in range(8)))
    got = texts((await store.load(h.id)).entries)
    assert len(got) == 8 * 10 * 3
    batches = [got[i : i + 3] for i in range(0, len(got), 3)]
    for batch in batches:
        writer, i = batch[0].split(":")[:2]
        assert batch == [f"{writer}:{i}:{part}" for part in range(3)]
    for writer in range(8):
        order = [int(b[0].split(":")[1]) for b in batches if b[0].startswith(f"{writer}:")]
        assert order == list(range(10))


async def test_a_load_racing_a_delete_sees_everything_or_not_found(store: Any) -> None:
    for _ in range(5):
        h = header()
        await store.create(h)
        await store.append(h.id, [msg(str(i)) for i in range(200)])
        loads = [asyncio.create_task(store.load(h.id)) for _ in range(4)]
        await asyncio.sleep(0)
        await store.delete(h.id)
        for result in await asyncio.gather(*loads, return_exceptions=True):
            if isinstance(result, BaseException):
                assert isinstance(result, NotFoundError)
            else:
                assert len(result.entries) == 200


async def test_a_cancelled_call_writes_nothing(store: Any) -> None:
    h = header()
    await store.create(h)
    append = asyncio.create_task(store.append(h.id, [msg("never")]))
    create = asyncio.create_task(store.create(header("s_never")))
    append.cancel()
    create.cancel()
    for task in (append, create):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert (await store.load(h.id)).entries == []
    with pytest.raises(NotFoundError):
        await store.load("s_never")


# -- corruption is loud


def entry_line(**fields: Any) -> bytes:
    base = {"id": "e_raw", "created": "2025-01-01T00:00:00Z"}
    return orjson.dumps({**base, **fields}) + b"\n"


async def test_an_unknown_kind_fails_with_newer_format_even_under_salvage(
    backend: Backend,
) -> None:
    for options in (None, StoreOptions(salvage=True)):
        store = backend.open(options)
        h = header()
        await store.create(h)
        await store.inject(h.id, entry_line(type="hologram", v=9))
        with pytest.raises(NewerFormatError, match="hologram"):
            await store.load(h.id)


async def test_a_higher_version_fails_with_newer_format_even_under_salvage(
    backend: Backend,
) -> None:
    for options in (None, StoreOptions(salvage=True)):
        store = backend.open(options)
        h = header()
        await store.create(h)
        await store.append(h.id, [msg("fine")])
        await store.inject(h.id, entry_line(type="receipt", v=4, status="queued"))
        with pytest.raises(NewerFormatError, match="v=4"):
            await store.load(h.id)


async def test_a_malformed_middle_line_is_corrupt_naming_line_three(backend: Backend) -> None:
    store = backend.open()
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.inject(h.id, b'{"type":"message", broken\n')
    await store.append(h.id, [msg("three")])
    with pytest.raises(CorruptError) as caught:
        await store.load(h.id)
    assert caught.value.line == 3
    assert caught.value.session == h.id
    assert "line 3" in str(caught.value)
    # The corrupt session is still listed: list reads headers only.
    assert [s.id for s in (await store.list()).sessions] == [h.id]


async def test_salvage_skips_a_malformed_line_and_reports_it(backend: Backend) -> None:
    store = backend.open(StoreOptions(salvage=True))
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.inject(h.id, b'{"type":"message", broken\n')
    await store.append(h.id, [msg("three")])
    await store.inject(h.id, b'{"type":"mess')
    salvaged = await store.load(h.id)
    assert texts(salvaged.entries) == ["one", "three"]
    assert salvaged.report is not None
    assert salvaged.report.skipped == (3,)
    assert salvaged.report.torn == 5


async def test_a_torn_tail_is_dropped_and_reported_as_its_line(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.inject(h.id, b'{"type":"message","id":"e_to')
    loaded = await store.load(h.id)
    assert texts(loaded.entries) == ["one"]
    assert loaded.report is not None
    assert loaded.report.torn == 3
    assert loaded.report.skipped == ()


async def test_torn_tail_is_repaired_before_the_next_append(backend: Backend) -> None:
    writer = backend.open()
    h = header()
    await writer.create(h)
    await writer.append(h.id, [msg("one")])
    await writer.release(h.id)
    await writer.inject(h.id, b'{"type":"message","id":"e_half')
    # A writer that takes the session now (a new store, as after a restart) repairs it.
    nxt = backend.open() if backend.shared else writer
    await nxt.append(h.id, [msg("two")])
    loaded = await nxt.load(h.id)
    assert texts(loaded.entries) == ["one", "two"]
    assert loaded.report is None
    # ... and so does a writer that already holds the session.
    await nxt.inject(h.id, b'{"type":"mess')
    await nxt.append(h.id, [msg("three")])
    again = await nxt.load(h.id)
    assert texts(again.entries) == ["one", "two", "three"]
    assert again.report is None


async def test_an_incomplete_batch_is_torn_whole_and_repaired_before_the_next_append(
    backend: Backend,
) -> None:
    from threads.store.lines import encode_batch

    store = backend.open()
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    framed = encode_batch([msg("a"), msg("b"), msg("c")])
    assert framed.count(b'"more":') == 2
    # A crash inside the batch's write left its first two lines, whole, and no third.
    await store.inject(h.id, framed[: framed.index(b"\n", framed.index(b"\n") + 1) + 1])
    loaded = await store.load(h.id)
    assert texts(loaded.entries) == ["one"]
    assert loaded.report is not None
    assert loaded.report.torn == 3
    assert (await store.acquire(h.id, object()))[0] == 1
    await store.append(h.id, [msg("two"), msg("three")])
    again = await store.load(h.id)
    assert texts(again.entries) == ["one", "two", "three"]
    assert again.report is None


async def test_a_corrupt_header_is_corrupt_at_line_one_and_not_listed(store: Any) -> None:
    await store.plant("s_badhead", b'{"type":"session","weft":1,"id":\n' + entry_line(type="leaf"))
    with pytest.raises(CorruptError) as caught:
        await store.load("s_badhead")
    assert caught.value.line == 1
    assert (await store.list()).total == 0


async def test_a_newer_header_fails_with_newer_format(store: Any) -> None:
    newer = orjson.dumps(
        {"type": "session", "weft": 2, "id": "s_newer", "created": "2025-01-01T00:00:00Z"}
    )
    await store.plant("s_newer", newer + b"\n")
    with pytest.raises(NewerFormatError, match="weft=2"):
        await store.load("s_newer")
    count, created = await store.acquire("s_newer", object())
    assert count == 0
    assert created.year == 1  # the zero time: the header cannot be read


async def test_unknown_keys_are_ignored(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.inject(
        h.id,
        entry_line(
            type="message",
            future_field={"x": 1},
            message={"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ),
    )
    assert texts((await store.load(h.id)).entries) == ["hi"]


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


async def test_sessions_survive_a_restart(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("memory keeps nothing across stores")
    first = backend.open()
    h = header(key="cli")
    await first.create(h)
    await first.append(h.id, [msg("kept")])
    await first.close()
    second = backend.open()
    loaded = await second.load(h.id)
    assert loaded.header == h
    assert texts(loaded.entries) == ["kept"]


def test_encode_header_is_one_line() -> None:
    line = encode_header(header("s_one"))
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1

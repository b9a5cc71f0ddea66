"""The Storage conformance suite: every test runs against every backend.

The claims are seed 003's ``Storage`` contract and issue 3's list; the
``backend`` fixture (conftest.py) parametrizes memory, jsonl, sqlite and
redis. This module holds the core: round trips, batches, ids, list, delete,
concurrency and cancellation; ``test_conformance_corruption.py`` holds what
a backend does with bytes it cannot read, ``test_conformance_capabilities.py``
the flush, release, lease, watch and key-index rules.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tests.threads.store.conftest import Backend
from tests.threads.store.helpers import Gate, at, header, info, msg, next_entry, texts
from threads.errors import ExistsError, InvalidIdError, NotFoundError
from threads.messages import Message, ToolCallPart
from threads.store.base import Flusher, Leaser, Page, Query, Releaser, StoreOptions, Watcher
from threads.store.codec import decode_entry, encode_header
from threads.store.entries import CustomEntry, Entry, LabelEntry, MessageEntry

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


def _unreadable(case: str) -> Entry:
    """An entry the format could not read back, as an append might be handed it."""
    if case == "empty id":
        return MessageEntry(id="", message=Message.user("x"))
    if case == "path as id":
        return MessageEntry(id="e/../x", message=Message.user("x"))
    if case == "parent not an id":
        return MessageEntry(id="e_child", parent="e/../y", message=Message.user("x"))
    if case == "required field None":
        return MessageEntry(id="e_nothing", message=None)  # type: ignore[arg-type]
    return LabelEntry(id="e_label", entry="e_1", name=5)  # type: ignore[arg-type]


UNREADABLE = {
    # case: (the field the error names, the entry it names)
    "empty id": ("'id'", "entry 2 of a batch of 3"),
    "path as id": ("'id'", "'e/../x'"),
    "parent not an id": ("'parent'", "e_child"),
    "required field None": ("'message'", "e_nothing"),
    "field of the wrong type": ("'name'", "e_label"),
}


@pytest.mark.parametrize("case", UNREADABLE)
async def test_a_batch_with_an_entry_the_format_cannot_read_back_writes_nothing(
    store: Any, case: str
) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("kept")])
    batch: list[Entry] = [msg("a"), _unreadable(case), msg("c")]
    with pytest.raises(ValueError, match="nothing of the batch was written") as caught:
        await store.append(h.id, batch)
    field, entry = UNREADABLE[case]
    assert field in str(caught.value)
    assert entry in str(caught.value)
    with pytest.raises(ValueError, match=field):
        await store.append(h.id, [_unreadable(case)])
    loaded = await store.load(h.id)
    assert texts(loaded.entries) == ["kept"]
    assert loaded.report is None


async def test_entries_load_in_arrival_order_across_and_within_batches(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("1"), msg("2")])
    await store.append(h.id, [msg("3")])
    await store.append(h.id, [])
    await store.append(h.id, [msg("4"), msg("5"), msg("6")])
    assert texts((await store.load(h.id)).entries) == ["1", "2", "3", "4", "5", "6"]


async def test_an_append_hands_back_the_lines_a_load_reads_back(store: Any) -> None:
    h = header()
    await store.create(h)
    batch = [msg("1"), msg("2"), msg("3")]
    written = [*await store.append(h.id, batch), *await store.append(h.id, [msg("4")])]
    loaded = await store.load(h.id)
    assert written == [line + b"\n" for line in loaded.lines]
    assert [decode_entry(line) for line in written] == loaded.entries == [*batch, loaded.entries[3]]


async def test_an_append_that_need_not_be_durable_keeps_its_place_and_outlives_its_store(
    backend: Backend,
) -> None:
    store = backend.open()
    h = header()
    await store.create(h)
    await asyncio.gather(*(store.append(h.id, [msg(str(i))], durable=i % 2 == 0) for i in range(8)))
    assert texts((await store.load(h.id)).entries) == [str(i) for i in range(8)]
    if backend.shared:
        other = backend.open()  # the first is never closed, as a killed process is not
        assert texts((await other.load(h.id)).entries) == [str(i) for i in range(8)]


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


async def test_list_shows_the_header_of_a_session_created_again_under_its_id(
    store: Any,
) -> None:
    old = header(created=at(1), key="old")
    await store.create(old)
    await store.append(old.id, [msg("old")])
    assert (await store.list()).sessions == [old]
    await store.delete(old.id)
    again = header(old.id, created=at(2), key="again")
    await store.create(again)
    assert (await store.list()).sessions == [again]
    assert (await store.list(Query(meta={"key": "old"}))).total == 0


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


async def test_a_call_cancelled_before_the_backend_starts_it_writes_nothing(
    backend: Backend,
) -> None:
    gate = Gate(hold_first=True)
    store = backend.open(pause=gate)
    h = header()
    await store.create(h)
    first = asyncio.create_task(store.append(h.id, [msg("first")]))
    await gate.reached()  # the backend has started the first append, and holds it there
    call = store.append(h.id, [msg("never a"), msg("never b")])
    waiting = asyncio.create_task(call)
    for _ in range(10):  # a few loop turns: the call runs until it waits for the backend
        if inspect.getcoroutinestate(call) != inspect.CORO_CREATED:
            break
        await asyncio.sleep(0)
    assert inspect.getcoroutinestate(call) == inspect.CORO_SUSPENDED  # inside, not yet started
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    gate.release()
    await first
    await store.append(h.id, [msg("after")])  # behind whatever the backend still had queued
    assert texts((await store.load(h.id)).entries) == ["first", "after"]
    assert gate.started == 2  # the cancelled call never started


async def test_a_call_cancelled_once_the_backend_started_it_writes_its_batch_whole(
    backend: Backend,
) -> None:
    gate = Gate()
    store = backend.open(pause=gate)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("before")])
    call = asyncio.create_task(store.append(h.id, [msg("a"), msg("b"), msg("c")]))
    gate.cancel = call  # cancelled the moment the backend starts it
    with pytest.raises(asyncio.CancelledError):
        await call
    assert gate.started == 2
    gate.cancel = None
    await store.append(h.id, [msg("after")])  # runs after the started call, on every backend
    loaded = await store.load(h.id)
    assert texts(loaded.entries) == ["before", "a", "b", "c", "after"]
    assert loaded.report is None


# -- restart


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

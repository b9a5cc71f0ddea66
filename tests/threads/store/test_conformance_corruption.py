"""The Storage conformance suite, part two: bytes a backend cannot read are loud.

Raw bytes reach a backend only through its ``inject`` / ``plant`` test
hooks, the way a crash or a damaged disk would leave them. Every test runs
against every backend (the ``backend`` fixture of conftest.py).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from tests.threads.store.conftest import Backend
from tests.threads.store.helpers import entry_line, header, msg, next_entry, texts
from threads.errors import CorruptError, NewerFormatError
from threads.store.base import StoreOptions


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
        await store.inject(h.id, entry_line(type="receipt", v=5, status="queued"))
        with pytest.raises(NewerFormatError, match="v=5"):
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


async def test_a_line_with_a_bad_field_is_corrupt_naming_its_entry(store: Any) -> None:
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.inject(
        h.id, entry_line(type="message", id="e_badfield", message={"role": "robot", "content": []})
    )
    with pytest.raises(CorruptError) as caught:
        await store.load(h.id)
    assert (caught.value.line, caught.value.entry) == (3, "e_badfield")
    assert "line 3, entry e_badfield" in str(caught.value)
    assert "role" in str(caught.value)
    stream = store.watch(h.id)
    assert texts([await next_entry(stream)]) == ["one"]
    with pytest.raises(CorruptError) as watched:
        await next_entry(stream)
    assert (watched.value.line, watched.value.entry) == (3, "e_badfield")


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


async def test_salvage_logs_each_line_it_skips(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.open(StoreOptions(salvage=True))
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    await store.inject(h.id, b'{"type":"message", broken\n')
    await store.inject(h.id, b'{"type":"message","id":"e_badfield","parent":"","created":5}\n')
    await store.append(h.id, [msg("four")])
    with caplog.at_level(logging.WARNING, logger="threads.store.lines"):
        await store.load(h.id)
    skipped = [r.getMessage() for r in caplog.records if "salvage skipped" in r.getMessage()]
    assert len(skipped) == 2
    assert skipped[0].startswith(f"session {h.id}: salvage skipped line 3: ")
    assert skipped[1].startswith(f"session {h.id}: salvage skipped line 4 (entry e_badfield): ")


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

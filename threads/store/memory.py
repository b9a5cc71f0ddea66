"""The in-process backend: sessions as bytes in a dict, gone with the process.

It keeps each session's encoded lines, exactly as a file would hold them, so
the corruption rules of the conformance suite apply to it as to disk (tests
put raw bytes in with :meth:`MemoryStore.inject` and :meth:`MemoryStore.plant`,
test hooks every backend has). It has no second writer to refuse: the one
writer it tells apart is a lease holder. Its writes to a session run in call
order and, once started, to their end (:mod:`threads.store.inflight`), as
on every backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from functools import partial

from threads.errors import ExistsError, NotFoundError
from threads.store.base import Loaded, Page, Pause, Query, StoreOptions
from threads.store.codec import encode_header
from threads.store.entries import Entry, Header, InfoEntry
from threads.store.inflight import InFlight
from threads.store.leases import Leases
from threads.store.lines import count_lines, decode_session, encode_lines, header_of, split_torn
from threads.store.rules import ZERO_TIME, check_header, check_id, select_page
from threads.store.watching import Pulse, tail


class MemoryStore:
    """A Storage, KeyIndex, Watcher, Flusher, Releaser, Leaser and AtOnce held in memory."""

    def __init__(self, options: StoreOptions | None = None, *, pause: Pause | None = None) -> None:
        """An empty store. ``pause`` is the test seam of :data:`~threads.store.base.Pause`."""
        self._options = options or StoreOptions()
        self._writes = InFlight("memory store", pause)
        self._data: dict[str, bytearray] = {}
        self._titles: dict[str, str] = {}
        self._generations: dict[str, int] = {}
        self._created = 0
        self._leases = Leases()
        self._keys: dict[str, str] = {}
        self._pulse = Pulse()
        # Sessions whose bytes a test hook put in: the only ones that may end torn.
        self._maybe_torn: set[str] = set()
        self._own_append = type(self).append is MemoryStore.append

    async def create(self, header: Header, *, durable: bool = True) -> None:
        check_header(header)
        line = encode_header(header)
        await self._writes.run(header.id, "create:started", partial(self._create, header, line))

    async def append(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes]:
        # Nothing here outlives the process: ``durable`` changes nothing.
        check_id(session)
        lines = encode_lines(entries)
        await self._writes.run_now(
            session, "append:started", partial(self._append, session, lines, entries)
        )
        return lines

    def append_at_once(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes] | None:
        """:meth:`append`, here and now, when no write of the session is ahead of it.

        A subclass with an ``append`` of its own (a test's wrapper) is always
        asked through it.
        """
        if not self._own_append or not self._writes.free(session):
            return None
        check_id(session)
        lines = encode_lines(entries)
        self._append(session, lines, entries)
        return lines

    async def load(self, session: str) -> Loaded:
        await asyncio.sleep(0)
        data = bytes(self._get(session))
        return decode_session(session, data, salvage=self._options.salvage)

    async def list(self, query: Query | None = None) -> Page:
        query = query or Query()
        candidates = []
        for session, data in self._data.items():
            header = header_of(bytes(data))
            if header is not None:
                candidates.append((header, self._titles.get(session, "")))
        return select_page(candidates, query)

    async def delete(self, session: str) -> None:
        check_id(session)
        await self._writes.run(session, "delete:started", partial(self._delete, session))

    async def close(self) -> None:
        await self._writes.drain()
        self._leases.clear()

    # -- writes, once started

    async def _create(self, header: Header, line: bytes) -> None:
        if header.id in self._data:
            raise ExistsError(header.id)
        self._store(header.id, bytearray(line))

    def _append(self, session: str, lines: Sequence[bytes], entries: Sequence[Entry]) -> None:
        data = self._get(session)
        if not lines:
            return
        self._repair(session, data)
        data += b"".join(lines)
        title = next(
            (e.title for e in reversed(entries) if isinstance(e, InfoEntry) and e.title), ""
        )
        if title:
            self._titles[session] = title
        self._pulse.fire()

    async def _delete(self, session: str) -> None:
        self._get(session)
        del self._data[session]
        self._maybe_torn.discard(session)
        self._titles.pop(session, None)
        self._generations.pop(session, None)
        self._leases.drop(session)
        self._pulse.fire()

    # -- KeyIndex

    async def resolve(self, key: str) -> str | None:
        return self._keys.get(key)

    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        check_id(session_id)
        self._keys[key] = session_id

    async def unpoint(self, key: str) -> None:
        self._keys.pop(key, None)

    async def keys(self) -> dict[str, str]:
        return dict(self._keys)

    # -- capabilities

    async def flush(self, session: str) -> None:
        self._get(session)

    async def release(self, session: str) -> None:
        self._get(session)
        self._leases.drop(session)

    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]:
        data = self._get(session)
        self._leases.check(session, holder)
        self._repair(session, data)
        self._leases.take(session, holder)
        header = header_of(bytes(data))
        created = header.created if header is not None else ZERO_TIME
        return count_lines(bytes(data)), created

    async def yield_lease(self, session: str, holder: object) -> None:
        self._get(session)
        if self._leases.may_yield(session, holder):
            self._leases.drop(session)

    async def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]:
        check_id(session)
        stream = tail(
            session,
            after,
            partial(self._read_from, session),
            self._pulse,
            salvage=self._options.salvage,
            poll_interval=None,
        )
        async for entry in stream:
            yield entry

    async def _read_from(self, session: str, position: int) -> tuple[int, bytes, int]:
        data = self._get(session)
        complete, _ = split_torn(bytes(data[position:]))
        return self._generations[session], complete, position + len(complete)

    # -- test hooks

    async def inject(self, session: str, data: bytes) -> None:
        """Append raw bytes to a session, as a damaged disk or a crash would leave them."""
        self._get(session).extend(data)
        self._maybe_torn.add(session)
        self._pulse.fire()

    async def plant(self, session: str, data: bytes) -> None:
        """Store raw bytes as a whole session, header line included."""
        check_id(session)
        if session in self._data:
            raise ExistsError(session)
        self._store(session, bytearray(data))
        self._maybe_torn.add(session)

    def _get(self, session: str) -> bytearray:
        check_id(session)
        data = self._data.get(session)
        if data is None:
            raise NotFoundError(session)
        return data

    def _store(self, session: str, data: bytearray) -> None:
        self._data[session] = data
        self._titles[session] = ""
        self._created += 1
        self._generations[session] = self._created
        self._pulse.fire()

    def _repair(self, session: str, data: bytearray) -> None:
        """Drop a torn tail before a write, as a file backend does; only a test hook leaves one.

        Appends write whole batches, so a session no hook touched has no torn
        tail, and its bytes are not scanned (a copy of the whole session per
        append, before).
        """
        if session not in self._maybe_torn:
            return
        self._maybe_torn.discard(session)
        complete, torn = split_torn(bytes(data))
        if torn:
            del data[len(complete) :]

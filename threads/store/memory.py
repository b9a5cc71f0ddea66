"""The in-process backend: sessions as bytes in a dict, gone with the process.

It keeps each session's encoded lines, exactly as a file would hold them, so
the corruption rules of the conformance suite apply to it as to disk (tests
inject raw bytes with :meth:`MemoryStore.inject`). It has no second writer to
refuse: the one writer it tells apart is a lease holder.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from threads.errors import ExistsError, LockedError, NotFoundError
from threads.store.base import Loaded, Page, Query, StoreOptions
from threads.store.entries import Entry, Header, InfoEntry, encode_header
from threads.store.lines import count_lines, decode_session, encode_batch, header_of, split_torn
from threads.store.rules import check_id, select_page


class MemoryStore:
    """A Storage, KeyIndex, Watcher, Flusher, Releaser and Leaser held in memory."""

    def __init__(self, options: StoreOptions | None = None) -> None:
        self._options = options or StoreOptions()
        self._data: dict[str, bytearray] = {}
        self._titles: dict[str, str] = {}
        self._leases: dict[str, object] = {}
        self._keys: dict[str, str] = {}
        self._changed = asyncio.Condition()

    async def create(self, header: Header) -> None:
        check_id(header.id)
        line = encode_header(header)
        if header.id in self._data:
            raise ExistsError(header.id)
        self._data[header.id] = bytearray(line)
        self._titles[header.id] = ""
        await self._notify()

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        data = self._get(session)
        batch = encode_batch(entries)
        if not batch:
            return
        complete, torn = split_torn(bytes(data))
        if torn:
            del data[len(complete) :]
        data += batch
        for entry in entries:
            if isinstance(entry, InfoEntry) and entry.title:
                self._titles[session] = entry.title
        await self._notify()

    async def load(self, session: str) -> Loaded:
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
        self._get(session)
        del self._data[session]
        self._titles.pop(session, None)
        self._leases.pop(session, None)
        await self._notify()

    async def close(self) -> None:
        self._leases.clear()

    # -- KeyIndex

    async def resolve(self, key: str) -> str | None:
        return self._keys.get(key)

    async def point(self, key: str, session_id: str) -> None:
        check_id(session_id)
        self._keys[key] = session_id

    async def keys(self) -> dict[str, str]:
        return dict(self._keys)

    # -- capabilities

    async def flush(self, session: str) -> None:
        self._get(session)

    async def release(self, session: str) -> None:
        self._get(session)
        self._leases.pop(session, None)

    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]:
        data = self._get(session)
        current = self._leases.get(session)
        if current is not None and current is not holder:
            raise LockedError(session, "another session writer in this process")
        self._leases[session] = holder
        header = header_of(bytes(data))
        created = header.created if header is not None else datetime.min
        return count_lines(bytes(data)), created

    async def yield_lease(self, session: str, holder: object) -> None:
        self._get(session)
        current = self._leases.get(session)
        if current is None or current is holder:
            self._leases.pop(session, None)

    async def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]:
        seen = 0
        created = (await self.load(session)).header.created
        started = after == ""
        while True:
            if session not in self._data:
                raise NotFoundError(session, "deleted while being watched")
            loaded = await self.load(session)
            if loaded.header.created != created:
                raise NotFoundError(session, "recreated while being watched")
            fresh = loaded.entries[seen:]
            seen = len(loaded.entries)
            for entry in fresh:
                if started:
                    yield entry
                elif entry.id == after:
                    started = True
            if not started:
                raise NotFoundError(session, f"watch after {after!r}: no such entry")
            async with self._changed:
                await self._changed.wait()

    # -- test hooks

    async def inject(self, session: str, data: bytes) -> None:
        """Append raw bytes to a session, as a damaged disk or a crash would leave them."""
        self._get(session).extend(data)
        await self._notify()

    def _get(self, session: str) -> bytearray:
        check_id(session)
        data = self._data.get(session)
        if data is None:
            raise NotFoundError(session)
        return data

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

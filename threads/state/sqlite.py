"""The state store in SQLite (``sqlite:///PATH``): the embedded default, ``data_dir/gateway.db``.

The file is shared with cron's job store (its tables are ``cron_*``); this
store keeps one table of its own, ``state_values``, one row per value with
its expiry in microseconds since the epoch. The database runs in WAL mode
with a busy timeout, so the CLI and a running gateway (or two gateways'
worth of processes) write to it at once and serialize on SQLite's lock.
Every call is one statement, so one atomic step.

The file is created 0600 in a 0700 directory and never through a symbolic
link, and a looser existing file is tightened
(:func:`threads.store.private.create_private_database`, which never opens an
existing file: closing it would drop SQLite's locks in this process).
``synchronous = NORMAL`` as for cron: a crashed process loses nothing, a power
loss may lose the last commits.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import aiosqlite

from threads.errors import UnsafePathError
from threads.state.base import (
    Clock,
    Json,
    check_expiry,
    check_key,
    check_namespace,
    decode,
    encode,
    micros,
    utc_now,
)
from threads.state.errors import StateStoreError
from threads.store.private import create_private_database, make_private_dir
from threads.store.sqlite_wal import use_wal

BUSY_TIMEOUT_MS = 10_000
SCHEMA = """
CREATE TABLE IF NOT EXISTS state_values (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_us INTEGER,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS state_values_expiry
    ON state_values (expires_us) WHERE expires_us IS NOT NULL;
"""
_LIVE = "(expires_us IS NULL OR expires_us > ?)"


class SqliteStateStore:
    """A :class:`~threads.state.base.StateStore` in one SQLite table."""

    def __init__(self, db: aiosqlite.Connection, url: str, *, clock: Clock) -> None:
        self.url = url
        self._db = db
        self._clock = clock
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path | str, *, clock: Clock = utc_now) -> SqliteStateStore:
        """Open (creating when missing) the database file at ``path``."""
        path = Path(path)
        url = f"sqlite:///{path}"
        try:
            make_private_dir(path.parent)
            create_private_database(path)
        except UnsafePathError as exc:
            raise StateStoreError(url, str(exc)) from None
        except OSError as exc:
            raise StateStoreError(url, f"cannot create {path}: {exc.strerror or exc}") from None
        try:
            db = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, aiosqlite.Error) as exc:
            raise StateStoreError(url, f"cannot open: {exc}") from None
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await use_wal(db, f"state store {url}")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.executescript(SCHEMA)
        except aiosqlite.Error as exc:
            await db.close()
            raise StateStoreError(url, f"cannot prepare the state table: {exc}") from None
        except BaseException:
            await db.close()
            raise
        return cls(db, url, clock=clock)

    def _now(self) -> int:
        return micros(self._clock())

    async def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        async with self._lock:
            try:
                cursor = await self._db.execute(sql, params)
                rows = await cursor.fetchall()
                await cursor.close()
            except aiosqlite.Error as exc:
                raise StateStoreError(self.url, f"SQLite refused a call: {exc}") from exc
        return [tuple(row) for row in rows]

    async def get(self, namespace: str, key: str) -> Json:
        check_key(namespace, key)
        rows = await self._run(
            f"SELECT value FROM state_values WHERE namespace = ? AND key = ? AND {_LIVE}",
            (namespace, key, self._now()),
        )
        return decode(_bytes(rows[0][0])) if rows else None

    async def put(
        self, namespace: str, key: str, value: Json, *, expires: datetime | None = None
    ) -> None:
        check_key(namespace, key)
        data = encode(namespace, key, value)
        until = check_expiry(expires)
        await self._run(
            "INSERT INTO state_values (namespace, key, value, expires_us) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
            "expires_us = excluded.expires_us",
            (namespace, key, data, micros(until) if until is not None else None),
        )

    async def delete(self, namespace: str, key: str) -> bool:
        check_key(namespace, key)
        rows = await self._run(
            "DELETE FROM state_values WHERE namespace = ? AND key = ? RETURNING expires_us",
            (namespace, key),
        )
        if not rows:
            return False
        expires = rows[0][0]
        return expires is None or (isinstance(expires, int) and expires > self._now())

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, Json]]:
        check_namespace(namespace)
        rows = await self._run(
            f"SELECT key, value FROM state_values WHERE namespace = ? AND {_LIVE} "
            "AND substr(key, 1, ?) = ? ORDER BY key",
            (namespace, self._now(), len(prefix), prefix),
        )
        return [(str(key), decode(_bytes(value))) for key, value in rows]

    async def sweep(self) -> int:
        rows = await self._run(
            "DELETE FROM state_values WHERE expires_us IS NOT NULL AND expires_us <= ? RETURNING 1",
            (self._now(),),
        )
        return len(rows)

    async def close(self) -> None:
        async with self._lock:
            await self._db.close()


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()

"""The single-file backend: every session in one SQLite database (``sqlite:///PATH``).

The database runs in WAL mode. ``sessions`` holds each header line, its
parsed creation time and metadata (the list order and filters are SQL over
an index), the current title, the count of complete entry lines and a
generation number; ``chunks`` holds the appended bytes, one row per batch,
so a load rebuilds exactly the bytes a jsonl file would hold and decodes
them by the same line rules.

Writes run on one writer thread per store with the stdlib driver (the
:class:`~threads.store.committer.Committer`): a round of queued writes is
one ``BEGIN IMMEDIATE`` … ``COMMIT`` — each write inside its own savepoint,
so one failing write takes back only itself — and so one WAL fsync however
many appends it carried (group commit). aiosqlite has no public way to run
such a unit on its own thread, so reads alone go through it, each load one
SELECT: one snapshot, never part of a session.

The writer lock is a row in ``locks`` naming the store and its process,
taken with the first write and deleted on release; a row whose process is
gone is taken over. With a node identity (``StoreOptions.node``) the row's
owner begins ``<node id>/<boot>/``, and a row an earlier boot of this node
left is taken over whatever its pid says: in a container a restarted gateway
often gets its predecessor's pid back (:mod:`threads.node`). A write the
database cannot take now (disk full, an I/O error, locked past the busy
timeout) raises :class:`UnavailableError`. ``fsync="on_flush"`` runs the database with
``synchronous=NORMAL`` and ``flush`` checkpoints the WAL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import aiosqlite
import orjson

from threads.errors import (
    ExistsError,
    LockedError,
    NewerFormatError,
    NotFoundError,
    UnavailableError,
)
from threads.messages import WireError
from threads.node import parse_owner
from threads.store.base import Loaded, Page, Pause, Query, StoreOptions
from threads.store.codec import decode_header, encode_header
from threads.store.committer import Committer, Op, Round
from threads.store.entries import Entry, Header, InfoEntry
from threads.store.leases import Leases
from threads.store.lines import complete_end, decode_session, encode_lines
from threads.store.private import create_private_database, make_private_dir
from threads.store.rules import ZERO_TIME, check_header, check_id, created_us
from threads.store.sqlite_wal import use_wal_blocking
from threads.store.watching import Pulse, advance, tail

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_us INTEGER NOT NULL,
    header TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    listable INTEGER NOT NULL DEFAULT 1,
    title TEXT NOT NULL DEFAULT '',
    lines INTEGER NOT NULL DEFAULT 0,
    torn INTEGER NOT NULL DEFAULT 0,
    next_seq INTEGER NOT NULL DEFAULT 1,
    gen INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_us DESC, id DESC);
CREATE TABLE IF NOT EXISTS chunks (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS locks (
    session TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pid INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keys (
    key TEXT PRIMARY KEY,
    session TEXT NOT NULL
) WITHOUT ROWID;
"""

_LOAD = (
    "SELECT 0, header FROM sessions WHERE id = ?1 "
    "UNION ALL SELECT seq, data FROM chunks WHERE session = ?1 ORDER BY 1"
)
_TAIL = (
    "SELECT -1, gen, header FROM sessions WHERE id = ?1 "
    "UNION ALL SELECT seq, NULL, data FROM chunks WHERE session = ?1 AND seq >= ?2 ORDER BY 1"
)


class _Transaction:
    """The write transaction of one round: begun by its first write, committed at its end."""

    def __init__(self, conn: sqlite3.Connection, on_rollback: Callable[[], None]) -> None:
        self.conn = conn
        self.active = False
        self._on_rollback = on_rollback

    def join(self, rnd: Round, op: Op[Any]) -> None:
        if not self.active:
            self.conn.execute("BEGIN IMMEDIATE")
            self.active = True
        rnd.sync(self, op)

    def sync(self) -> None:
        if not self.active:
            return
        self.active = False
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error:
            self.conn.execute("ROLLBACK")
            self._on_rollback()
            raise


class _Checkpoint:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def sync(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


class SqliteStore:
    """A Storage, KeyIndex, Watcher, Flusher, Releaser and Leaser in one SQLite file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        options: StoreOptions | None = None,
        *,
        poll_interval: float = 0.05,
        pause: Pause | None = None,
    ) -> None:
        """A store over the database file ``path`` (created on first use).

        ``pause`` is the test seam of :data:`~threads.store.base.Pause`, called
        on the writer thread at ``"append:started"`` (inside the round's
        transaction: the append will commit whole).
        """
        self._path = os.fspath(path)
        self._pause = pause
        self._options = options or StoreOptions()
        self._poll = poll_interval
        node = self._options.node
        self._node = node
        # The owner names its node and boot, so a later boot of this node can tell its rows.
        self._owner = f"{node.owner}/{secrets.token_hex(6)}" if node else secrets.token_hex(8)
        self._committer = Committer(f"sqlite-writer:{os.path.basename(self._path)}")
        self._conn: sqlite3.Connection | None = None  # writer thread only
        self._txn: _Transaction | None = None
        self._held: set[str] = set()  # sessions whose lock row is ours (writer thread only)
        self._taking: set[str] = set()  # lock rows the running write took
        self._reader: aiosqlite.Connection | None = None
        self._reader_opening: asyncio.Lock | None = None
        self._leases = Leases()
        self._pulse = Pulse()
        self._closed = False

    # -- Storage

    async def create(self, header: Header, *, durable: bool = True) -> None:
        check_header(header)
        line = encode_header(header)
        await self._write(partial(self._w_create, header, line))
        self._pulse.fire()

    async def append(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes]:
        # A commit is as durable as the fsync policy makes it; ``durable=False`` keeps that.
        check_id(session)
        lines = encode_lines(entries)
        data = b"".join(lines)
        title = next(
            (e.title for e in reversed(entries) if isinstance(e, InfoEntry) and e.title), ""
        )
        await self._write(partial(self._w_append, session, data, title))
        self._pulse.fire()
        return lines

    async def load(self, session: str) -> Loaded:
        check_id(session)
        rows = list(await (await self._read()).execute_fetchall(_LOAD, (session,)))
        if not rows or rows[0][0] != 0:
            raise NotFoundError(session)
        data = b"".join([rows[0][1].encode(), b"\n", *(row[1] for row in rows[1:])])
        return decode_session(session, data, salvage=self._options.salvage)

    async def list(self, query: Query | None = None) -> Page:
        query = query or Query()
        where = ["listable = 1"]
        params: list[Any] = []
        for key, value in query.meta.items():
            where.append("json_extract(meta, ?) = ?")
            params += ["$." + orjson.dumps(key).decode(), value]
        if query.title_search:
            where.append("weft_contains(title, ?)")
            params.append(query.title_search.casefold())
        filters = " AND ".join(where)
        db = await self._read()
        total = list(
            await db.execute_fetchall(f"SELECT count(*) FROM sessions WHERE {filters}", params)
        )
        cursor, cursor_params = "", []
        if query.before is not None:
            before = created_us(query.before)
            cursor = " AND (created_us < ? OR (created_us = ? AND id < ?))"
            cursor_params = [before, before, query.before_id or ""]
        rows = await db.execute_fetchall(
            f"SELECT header FROM sessions WHERE {filters}{cursor} "
            "ORDER BY created_us DESC, id DESC LIMIT ?",
            [*params, *cursor_params, query.page_size],
        )
        return Page(sessions=[decode_header(row[0]) for row in rows], total=total[0][0])

    async def delete(self, session: str) -> None:
        check_id(session)
        await self._write(partial(self._w_delete, session))
        self._leases.drop(session)
        self._pulse.fire()

    async def close(self) -> None:
        """Release every hold of this store and close both connections."""
        if self._closed:
            return
        self._closed = True
        self._leases.clear()
        try:
            await self._committer.run(self._w_close, cancellable=False)
        finally:
            await self._committer.stop()
            if self._reader is not None:
                await self._reader.close()
                self._reader = None

    # -- KeyIndex

    async def resolve(self, key: str) -> str | None:
        db = await self._read()
        rows = list(await db.execute_fetchall("SELECT session FROM keys WHERE key = ?", (key,)))
        return str(rows[0][0]) if rows else None

    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        check_id(session_id)
        await self._write(partial(self._w_point, key, session_id))

    async def unpoint(self, key: str) -> None:
        await self._write(partial(self._w_unpoint, key))

    async def keys(self) -> dict[str, str]:
        db = await self._read()
        return {
            str(k): str(s) for k, s in await db.execute_fetchall("SELECT key, session FROM keys")
        }

    # -- capabilities

    async def flush(self, session: str) -> None:
        check_id(session)
        await self._committer.run(partial(self._w_flush, session))

    async def release(self, session: str) -> None:
        check_id(session)
        await self._write(partial(self._w_release, session))
        self._leases.drop(session)

    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]:
        check_id(session)
        self._leases.check(session, holder)
        count, created = await self._write(partial(self._w_acquire, session))
        self._leases.check(session, holder)
        self._leases.take(session, holder)
        return count, created

    async def yield_lease(self, session: str, holder: object) -> None:
        check_id(session)
        if self._leases.may_yield(session, holder):
            await self.release(session)
            return
        db = await self._read()
        if not list(await db.execute_fetchall("SELECT 1 FROM sessions WHERE id = ?", (session,))):
            raise NotFoundError(session)

    async def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]:
        check_id(session)
        stream = tail(
            session,
            after,
            partial(self._read_from, session),
            self._pulse,
            salvage=self._options.salvage,
            poll_interval=self._poll,
        )
        async for entry in stream:
            yield entry

    # -- test hooks

    async def inject(self, session: str, data: bytes) -> None:
        """Append raw bytes to a session, as a damaged disk or a crash leaves them."""
        check_id(session)
        await self._write(partial(self._w_inject, session, data))
        self._pulse.fire()

    async def plant(self, session: str, data: bytes) -> None:
        """Store raw bytes as a whole session, header line included."""
        check_id(session)
        await self._write(partial(self._w_plant, session, data))

    # -- writes (writer thread)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run(rnd: Round, op: Op[T]) -> T:
            conn = self._connect()
            assert self._txn is not None
            self._txn.join(rnd, op)
            conn.execute("SAVEPOINT write")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK TO write")
                conn.execute("RELEASE write")
                self._taking.clear()
                raise
            conn.execute("RELEASE write")
            self._held |= self._taking  # lock rows this write took, now part of the round
            self._taking.clear()
            return result

        try:
            return await self._committer.run(run)
        except sqlite3.OperationalError as exc:
            raise UnavailableError(self._path, str(exc)) from exc

    def where(self, session: str) -> str:
        """Where the session is kept: the database file and the session's row."""
        return f"{self._path} (session {session})"

    def _w_create(self, header: Header, line: bytes, conn: sqlite3.Connection) -> None:
        try:
            conn.execute(
                "INSERT INTO sessions (id, created_us, header, meta, gen) VALUES (?, ?, ?, ?, ?)",
                (
                    header.id,
                    created_us(header.created),
                    line[:-1].decode(),
                    orjson.dumps(dict(header.meta)).decode(),
                    secrets.randbits(62),
                ),
            )
        except sqlite3.IntegrityError:
            raise ExistsError(header.id) from None
        conn.execute(
            "INSERT OR REPLACE INTO locks (session, owner, pid) VALUES (?, ?, ?)",
            (header.id, self._owner, os.getpid()),
        )
        self._taking.add(header.id)

    def _w_append(self, session: str, data: bytes, title: str, conn: sqlite3.Connection) -> None:
        if self._pause is not None and self._pause("append:started") is not None:
            raise TypeError(
                "the sqlite store's pause seam returned a value: it runs on the writer "
                "thread, so it blocks there and returns None"
            )
        next_seq = self._hold(conn, session)
        if not data:
            return
        conn.execute(
            "INSERT INTO chunks (session, seq, data) VALUES (?, ?, ?)", (session, next_seq, data)
        )
        conn.execute(
            "UPDATE sessions SET next_seq = next_seq + 1, lines = lines + ?, "
            "title = CASE WHEN ?2 != '' THEN ?2 ELSE title END WHERE id = ?3",
            (data.count(b"\n"), title, session),
        )

    def _w_acquire(self, session: str, conn: sqlite3.Connection) -> tuple[int, datetime]:
        self._hold(conn, session)
        lines, header = conn.execute(
            "SELECT lines, header FROM sessions WHERE id = ?", (session,)
        ).fetchone()
        try:
            created = decode_header(header).created
        except (WireError, ValueError, NewerFormatError):
            created = ZERO_TIME
        return int(lines), created

    def _w_release(self, session: str, conn: sqlite3.Connection) -> None:
        self._must_exist(conn, session)
        conn.execute("DELETE FROM locks WHERE session = ? AND owner = ?", (session, self._owner))
        self._held.discard(session)

    def _w_delete(self, session: str, conn: sqlite3.Connection) -> None:
        self._must_exist(conn, session)
        self._check_lock(conn, session)
        conn.execute("DELETE FROM chunks WHERE session = ?", (session,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
        conn.execute("DELETE FROM locks WHERE session = ?", (session,))
        self._held.discard(session)

    def _w_point(self, key: str, session: str, conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR REPLACE INTO keys (key, session) VALUES (?, ?)", (key, session))

    def _w_unpoint(self, key: str, conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM keys WHERE key = ?", (key,))

    def _w_flush(self, session: str, rnd: Round, op: Op[None]) -> None:
        conn = self._connect()
        self._must_exist(conn, session)
        rnd.sync(_Checkpoint(conn), op)

    def _w_inject(self, session: str, data: bytes, conn: sqlite3.Connection) -> None:
        seq = self._next_seq(conn, session)
        conn.execute(
            "INSERT INTO chunks (session, seq, data) VALUES (?, ?, ?)", (session, seq, data)
        )
        conn.execute(
            "UPDATE sessions SET next_seq = next_seq + 1, lines = lines + ?, torn = ? WHERE id = ?",
            (data[: complete_end(data)].count(b"\n"), int(complete_end(data) < len(data)), session),
        )

    def _w_plant(self, session: str, data: bytes, conn: sqlite3.Connection) -> None:
        first, _, rest = data.partition(b"\n")
        try:
            header: Header | None = decode_header(first)
        except (WireError, ValueError, NewerFormatError):
            header = None
        conn.execute(
            "INSERT INTO sessions (id, created_us, header, meta, listable, lines, torn, next_seq, gen) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 2, ?)",
            (
                session,
                created_us(header.created) if header else 0,
                first.decode("utf-8", "replace"),
                orjson.dumps(dict(header.meta) if header else {}).decode(),
                int(header is not None),
                rest[: complete_end(rest)].count(b"\n"),
                int(complete_end(rest) < len(rest)),
                secrets.randbits(62),
            ),
        )
        conn.execute("INSERT INTO chunks (session, seq, data) VALUES (?, 1, ?)", (session, rest))

    def _w_close(self, rnd: Round, op: Op[None]) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            if self._txn is not None and self._txn.active:
                self._txn.sync()  # the round's earlier writes commit before the close
            conn.execute("DELETE FROM locks WHERE owner = ?", (self._owner,))
            if not self._every:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()
            self._conn = None

    @property
    def _every(self) -> bool:
        return self._options.fsync == "every_append"

    def _hold(self, conn: sqlite3.Connection, session: str) -> int:
        """Take (or confirm) this store's lock row; repair a torn tail; the next chunk seq."""
        row = conn.execute(
            "SELECT next_seq, torn FROM sessions WHERE id = ?", (session,)
        ).fetchone()
        if row is None:
            self._held.discard(session)
            raise NotFoundError(session)
        if session not in self._held:
            self._check_lock(conn, session)
            conn.execute(
                "INSERT OR REPLACE INTO locks (session, owner, pid) VALUES (?, ?, ?)",
                (session, self._owner, os.getpid()),
            )
            self._taking.add(session)
        if row[1]:
            self._repair(conn, session)
        return int(row[0])

    def _check_lock(self, conn: sqlite3.Connection, session: str) -> None:
        row = conn.execute("SELECT owner, pid FROM locks WHERE session = ?", (session,)).fetchone()
        if row is None or row[0] == self._owner:
            return
        owner, pid = str(row[0]), int(row[1])
        holder = parse_owner(owner)
        if self._node is not None and self._node.left_by_earlier_boot(owner):
            log.warning(
                "session %s: took over the lock boot %d of this node left (that run is gone)",
                session,
                holder[1] if holder else 0,
            )
            return
        if holder is not None and self._node is not None and holder[0] == self._node.node_id:
            raise LockedError(session, f"another store of this process (boot {holder[1]})")
        if _alive(pid):
            named = f"node {holder[0]} (boot {holder[1]}, pid {pid})" if holder else f"pid {pid}"
            raise LockedError(session, f"another store, {named}")
        log.warning("session %s: taking over the lock of a writer that is gone", session)

    def _repair(self, conn: sqlite3.Connection, session: str) -> None:
        seq, data = conn.execute(
            "SELECT seq, data FROM chunks WHERE session = ? ORDER BY seq DESC LIMIT 1", (session,)
        ).fetchone()
        cut = bytes(data)[: complete_end(bytes(data))]
        conn.execute(
            "UPDATE chunks SET data = ? WHERE session = ? AND seq = ?", (cut, session, seq)
        )
        conn.execute("UPDATE sessions SET torn = 0 WHERE id = ?", (session,))
        log.warning(
            "session %s: removed a torn final line (%d bytes) a crashed writer left",
            session,
            len(data) - len(cut),
        )

    def _next_seq(self, conn: sqlite3.Connection, session: str) -> int:
        row = conn.execute("SELECT next_seq FROM sessions WHERE id = ?", (session,)).fetchone()
        if row is None:
            self._held.discard(session)
            raise NotFoundError(session)
        return int(row[0])

    def _must_exist(self, conn: sqlite3.Connection, session: str) -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session,)).fetchone() is None:
            raise NotFoundError(session)

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            make_private_dir(os.path.dirname(os.path.abspath(self._path)))
            create_private_database(self._path)
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 5000")
            use_wal_blocking(conn, f"session store {self._path}")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._every else 'NORMAL'}")
            conn.executescript(SCHEMA)
            self._conn = conn
            self._txn = _Transaction(conn, self._held.clear)
        return self._conn

    # -- reads

    async def _read(self) -> aiosqlite.Connection:
        if self._reader is not None:
            return self._reader
        if self._reader_opening is None:
            self._reader_opening = asyncio.Lock()
        async with self._reader_opening:
            if self._reader is None:
                # The writer makes the schema; a reader of a new file waits for it.
                await self._committer.run(lambda rnd, op: self._connect())
                reader = await aiosqlite.connect(self._path, isolation_level=None)
                await reader.execute("PRAGMA busy_timeout = 5000")
                await reader.create_function("weft_contains", 2, _contains, deterministic=True)
                self._reader = reader
        return self._reader

    async def _read_from(self, session: str, position: int) -> tuple[int, bytes, int]:
        db = await self._read()
        rows = list(await db.execute_fetchall(_TAIL, (session, position >> 32)))
        if not rows or rows[0][0] != -1:
            raise NotFoundError(session)
        pieces = [(0, rows[0][2].encode() + b"\n")]
        pieces += [(int(seq), bytes(data)) for seq, _, data in rows[1:]]
        data, position = advance(pieces, position)
        return int(rows[0][1]), data, position


def _contains(title: str | None, needle: str) -> bool:
    return bool(title) and needle in str(title).casefold()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""What only the sqlite backend promises: one database file, run in WAL mode."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import aiosqlite

from tests.threads.store.helpers import header, msg, texts
from threads.store.sqlite import SqliteStore
from threads.store.sqlite_wal import use_wal, use_wal_blocking


async def test_the_database_runs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    store = SqliteStore(path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("logged ahead")])
    # Readers of WAL never block the writer: a second connection reads while it holds.
    with closing(sqlite3.connect(path)) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    assert (tmp_path / "gateway.db-wal").exists()
    assert texts((await store.load(h.id)).entries) == ["logged ahead"]
    await store.close()


class _Retries(logging.Handler):
    """Lets the file go the first time the WAL switch reports it found it locked."""

    def __init__(self, holder: sqlite3.Connection) -> None:
        super().__init__()
        self.holder = holder
        self.seen = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.seen += 1
        if self.holder.in_transaction:
            self.holder.execute("COMMIT")


@contextmanager
def _held(path: Path) -> Iterator[_Retries]:
    """A fresh file another connection holds a shared lock on until the first retry."""
    with closing(sqlite3.connect(path, isolation_level=None, check_same_thread=False)) as holder:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN")
        holder.execute("SELECT * FROM t").fetchall()
        retries = _Retries(holder)
        logger = logging.getLogger("threads.store.sqlite_wal")
        level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(retries)
        try:
            yield retries
        finally:
            logger.setLevel(level)
            logger.removeHandler(retries)


async def test_the_wal_switch_waits_for_a_file_another_process_holds(tmp_path: Path) -> None:
    """Two processes opening a fresh file: SQLite may refuse the switch at once."""
    with _held(tmp_path / "a.db") as retries:
        async with aiosqlite.connect(tmp_path / "a.db", isolation_level=None) as db:
            await db.execute("PRAGMA busy_timeout = 0")  # refused at once, as in the race
            await use_wal(db, "a.db")
            assert retries.seen == 1
    with (
        _held(tmp_path / "b.db") as retries,
        closing(sqlite3.connect(tmp_path / "b.db", check_same_thread=False)) as conn,
    ):
        conn.execute("PRAGMA busy_timeout = 0")
        await asyncio.to_thread(use_wal_blocking, conn, "b.db")
        assert retries.seen == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

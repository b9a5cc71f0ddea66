"""Put a SQLite file in WAL mode when several processes may open it at once.

Switching the journal mode takes an exclusive lock, and SQLite answers
"database is locked" at once, without waiting out the busy timeout, when
another process holds the file in that moment (two processes opening a fresh
file: the gateway and a CLI, or two gateways). The switch is skipped when the
file is already in WAL mode and retried, a bounded number of times, when it
finds the file locked.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time

import aiosqlite

log = logging.getLogger(__name__)

WAL_ATTEMPTS = 50
WAL_RETRY_SECONDS = 0.1


def _locked(exc: sqlite3.OperationalError, attempt: int) -> bool:
    return "locked" in str(exc) and attempt < WAL_ATTEMPTS - 1


async def use_wal(db: aiosqlite.Connection, what: str) -> None:
    """Put ``db`` in WAL mode; ``what`` names the file in the log line of a retry."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            mode = await db.execute_fetchall("PRAGMA journal_mode")
            if str(next(iter(mode))[0]).lower() != "wal":
                await db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc, attempt):
                raise
            log.info("%s: switching to WAL found it locked; trying again", what)
            await asyncio.sleep(WAL_RETRY_SECONDS)


def use_wal_blocking(conn: sqlite3.Connection, what: str) -> None:
    """:func:`use_wal` for a plain connection, on a worker thread (it sleeps between tries)."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc, attempt):
                raise
            log.info("%s: switching to WAL found it locked; trying again", what)
            time.sleep(WAL_RETRY_SECONDS)

"""What only the sqlite backend promises: one database file, run in WAL mode."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from tests.threads.store.helpers import header, msg, texts
from threads.store.sqlite import SqliteStore


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

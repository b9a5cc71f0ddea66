"""The cron job store on SQLite (the embedded default): one file, many processes.

Tables are prefixed ``cron_`` because the file is the gateway's shared state
store. The database runs in WAL mode with a busy timeout, and every write is
one ``BEGIN IMMEDIATE`` transaction touching one job, so two processes
editing different jobs at once (the CLI and the running gateway, or two CLIs)
serialize on SQLite's lock and never lose each other's edit.

One connection per store value; an :class:`asyncio.Lock` keeps one
transaction at a time on it. The file holds task texts: it (and its ``-wal``
and ``-shm``) is mode 0600 from its first byte, in a directory of mode 0700,
and a link in its place is refused (:mod:`threads.store.private`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
from pydantic import ValidationError

from config.redaction import redact_url
from cron.base import Advance, Beat, Changes, Recording, RunRequest
from cron.errors import NewerSchemaError, StoreError
from cron.models import Job, JobState, RunRecord
from threads.errors import UnsafePathError
from threads.store.private import create_private_database, make_private_dir
from threads.store.sqlite_wal import use_wal

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cron_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO cron_meta (name, value) VALUES ('version', 0);
INSERT OR IGNORE INTO cron_meta (name, value) VALUES ('schema', 1);
CREATE TABLE IF NOT EXISTS cron_jobs (
    id TEXT PRIMARY KEY, revision INTEGER NOT NULL, sig TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cron_jobs_revision ON cron_jobs (revision);
CREATE TABLE IF NOT EXISTS cron_removed (id TEXT PRIMARY KEY, revision INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cron_state (
    job_id TEXT PRIMARY KEY, schedule_rev INTEGER NOT NULL, next_fire TEXT,
    last_status TEXT, last_scheduled TEXT, last_fired TEXT);
CREATE TABLE IF NOT EXISTS cron_runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cron_runs_job ON cron_runs (job_id, seq);
CREATE TABLE IF NOT EXISTS cron_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, requested TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cron_beat (owner TEXT PRIMARY KEY, at TEXT NOT NULL);
"""


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///path`` URL (``sqlite:////abs/path`` for absolute paths)."""
    if not url.startswith("sqlite:///"):
        raise StoreError(url, "is not a sqlite:///PATH URL")
    return Path(url.removeprefix("sqlite:///"))


def _create(path: Path) -> None:
    make_private_dir(path.parent)
    create_private_database(path)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


class SqliteJobStore:
    """Jobs, schedule state, run ledger, run requests and heartbeat in SQLite."""

    def __init__(self, db: aiosqlite.Connection, url: str, *, keep_runs: int) -> None:
        self.url = redact_url(url)  # for messages and logs; never used to connect
        self._db = db
        self._lock = asyncio.Lock()
        self._keep_runs = keep_runs

    @classmethod
    async def open(cls, url: str, *, keep_runs: int = 1000) -> SqliteJobStore:
        """Open (creating when missing) the database at ``url``."""
        path = sqlite_path(url)
        try:
            await asyncio.to_thread(_create, path)
            db = await aiosqlite.connect(path, isolation_level=None)
        except (OSError, UnsafePathError, aiosqlite.Error) as exc:
            raise StoreError(url, f"cannot open: {exc}") from exc
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await use_wal(db, f"cron store {redact_url(url)}")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.executescript(_SCHEMA)
            rows = await db.execute_fetchall("SELECT value FROM cron_meta WHERE name = 'schema'")
            found = int(next(iter(rows))[0])
            if found > SCHEMA_VERSION:
                raise NewerSchemaError(url, found, SCHEMA_VERSION)
        except BaseException:
            await db.close()
            raise
        return cls(db, url, keep_runs=keep_runs)

    async def close(self) -> None:
        async with self._lock:
            await self._db.close()

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except aiosqlite.Error as exc:
                raise StoreError(self.url, f"cannot start a write: {exc}") from exc
            try:
                yield self._db
            except BaseException:
                await self._db.execute("ROLLBACK")
                raise
            await self._db.execute("COMMIT")

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self._lock:
            return list(await self._db.execute_fetchall(sql, params))

    async def _bump(self, db: aiosqlite.Connection) -> int:
        await db.execute("UPDATE cron_meta SET value = value + 1 WHERE name = 'version'")
        rows = await db.execute_fetchall("SELECT value FROM cron_meta WHERE name = 'version'")
        return int(next(iter(rows))[0])

    async def version(self) -> int:
        rows = await self._read("SELECT value FROM cron_meta WHERE name = 'version'")
        return int(rows[0][0])

    async def upsert(self, job: Job, *, next_fire: datetime | None) -> Job:
        async with self._write() as db:
            old = await db.execute_fetchall(
                "SELECT sig, data FROM cron_jobs WHERE id = ?", (job.id,)
            )
            previous = next(iter(old), None)
            created = job.created
            if previous is not None:
                created = _when(orjson.loads(previous[1])["created"]) or job.created
            revision = await self._bump(db)
            stored = job.model_copy(update={"created": created, "revision": revision})
            sig = stored.schedule_signature
            await db.execute(
                "INSERT INTO cron_jobs (id, revision, sig, data) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, "
                "sig = excluded.sig, data = excluded.data",
                (job.id, revision, sig, _job_data(stored)),
            )
            await db.execute("DELETE FROM cron_removed WHERE id = ?", (job.id,))
            if previous is None or previous[0] != sig:
                await db.execute(
                    "INSERT INTO cron_state (job_id, schedule_rev, next_fire) VALUES (?, ?, ?) "
                    "ON CONFLICT (job_id) DO UPDATE SET schedule_rev = excluded.schedule_rev, "
                    "next_fire = excluded.next_fire",
                    (job.id, revision, _iso(next_fire)),
                )
            else:
                await db.execute(
                    "INSERT OR IGNORE INTO cron_state (job_id, schedule_rev, next_fire) "
                    "VALUES (?, ?, ?)",
                    (job.id, revision, _iso(next_fire)),
                )
        return stored

    async def set_enabled(self, job_id: str, enabled: bool, at: datetime) -> Job | None:
        async with self._write() as db:
            rows = await db.execute_fetchall(
                "SELECT data, revision FROM cron_jobs WHERE id = ?", (job_id,)
            )
            row = next(iter(rows), None)
            if row is None:
                return None
            job = self._job(row[0], row[1])
            if job.enabled == enabled:
                return job
            revision = await self._bump(db)
            stored = job.model_copy(
                update={"enabled": enabled, "revision": revision, "updated": at}
            )
            await db.execute(
                "UPDATE cron_jobs SET revision = ?, data = ? WHERE id = ?",
                (revision, _job_data(stored), job_id),
            )
        return stored

    async def disable_if_unchanged(self, job_id: str, revision: int) -> Job | None:
        async with self._write() as db:
            rows = await db.execute_fetchall(
                "SELECT data FROM cron_jobs WHERE id = ? AND revision = ?", (job_id, revision)
            )
            row = next(iter(rows), None)
            if row is None:
                return None
            job = self._job(row[0], revision)
            new_revision = await self._bump(db)
            stored = job.model_copy(update={"enabled": False, "revision": new_revision})
            await db.execute(
                "UPDATE cron_jobs SET revision = ?, data = ? WHERE id = ?",
                (new_revision, _job_data(stored), job_id),
            )
        return stored

    async def remove(self, job_id: str) -> bool:
        async with self._write() as db:
            cursor = await db.execute("DELETE FROM cron_jobs WHERE id = ?", (job_id,))
            if cursor.rowcount == 0:
                return False
            revision = await self._bump(db)
            await db.execute(
                "INSERT INTO cron_removed (id, revision) VALUES (?, ?) "
                "ON CONFLICT (id) DO UPDATE SET revision = excluded.revision",
                (job_id, revision),
            )
            await db.execute("DELETE FROM cron_state WHERE job_id = ?", (job_id,))
            await db.execute("DELETE FROM cron_requests WHERE job_id = ?", (job_id,))
        return True

    async def get(self, job_id: str) -> Job | None:
        rows = await self._read("SELECT data, revision FROM cron_jobs WHERE id = ?", (job_id,))
        return self._job(rows[0][0], rows[0][1]) if rows else None

    async def jobs(self) -> list[Job]:
        rows = await self._read("SELECT data, revision FROM cron_jobs ORDER BY id")
        return [self._job(data, revision) for data, revision in rows]

    async def state(self, job_id: str) -> JobState | None:
        rows = await self._read(f"{_STATE_SELECT} WHERE job_id = ?", (job_id,))
        return _state(rows[0]) if rows else None

    async def states(self) -> dict[str, JobState]:
        rows = await self._read(_STATE_SELECT)
        return {row[0]: _state(row) for row in rows}

    async def changes(self, since: int) -> Changes:
        async with self._write() as db:
            version_rows = await db.execute_fetchall(
                "SELECT value FROM cron_meta WHERE name = 'version'"
            )
            version = int(next(iter(version_rows))[0])
            if version <= since:
                return Changes(version=version)
            job_rows = await db.execute_fetchall(
                "SELECT data, revision FROM cron_jobs WHERE revision > ? ORDER BY revision",
                (since,),
            )
            removed_rows = await db.execute_fetchall(
                "SELECT id FROM cron_removed WHERE revision > ?", (since,)
            )
            request_rows = await db.execute_fetchall(
                "DELETE FROM cron_requests RETURNING job_id, requested"
            )
        return Changes(
            version=version,
            jobs=tuple(self._job(data, revision) for data, revision in job_rows),
            removed=tuple(row[0] for row in removed_rows),
            requests=tuple(
                RunRequest(job_id=row[0], requested=datetime.fromisoformat(row[1]))
                for row in request_rows
            ),
        )

    async def record(
        self, job_id: str, runs: Sequence[RunRecord], *, advance: Advance | None
    ) -> list[RunRecord]:
        [numbered] = await self.record_many(
            [Recording(job_id=job_id, runs=tuple(runs), advance=advance)]
        )
        return numbered

    async def record_many(self, batch: Sequence[Recording]) -> list[list[RunRecord]]:
        """One transaction, a fixed handful of statements however large the batch."""
        async with self._write() as db:
            rows = await db.execute_fetchall(_LAST_SEQ)
            seq = int(next(iter(rows))[0])
            numbered: list[list[RunRecord]] = []
            inserts: list[tuple[int, str, str]] = []
            for item in batch:
                mine = []
                for run in item.runs:
                    seq += 1
                    inserts.append((seq, item.job_id, run.model_dump_json(exclude={"seq"})))
                    mine.append(run.model_copy(update={"seq": seq}))
                numbered.append(mine)
            await db.executemany(
                "INSERT INTO cron_runs (seq, job_id, data) VALUES (?, ?, ?)", inserts
            )
            await db.executemany(
                "UPDATE cron_state SET last_status = ?, last_scheduled = ?, "
                "last_fired = COALESCE(?, last_fired) WHERE job_id = ?",
                [
                    (
                        runs[-1].status,
                        _iso(runs[-1].scheduled),
                        _iso(_last_fired(runs)),
                        item.job_id,
                    )
                    for item, runs in zip(batch, numbered, strict=True)
                    if runs
                ],
            )
            await db.executemany(
                "UPDATE cron_state SET next_fire = ? WHERE job_id = ? AND schedule_rev = ?",
                [
                    (_iso(item.advance.next_fire), item.job_id, item.advance.schedule_rev)
                    for item in batch
                    if item.advance is not None
                ],
            )
            await db.executemany(
                "DELETE FROM cron_runs WHERE job_id = ? AND seq < (SELECT seq FROM cron_runs "
                "WHERE job_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                [(job_id, job_id, self._keep_runs - 1) for job_id in {i.job_id for i in batch}],
            )
        return numbered

    async def runs(self, job_id: str, limit: int = 20) -> list[RunRecord]:
        rows = await self._read(
            "SELECT seq, data FROM cron_runs WHERE job_id = ? ORDER BY seq DESC LIMIT ?",
            (job_id, limit),
        )
        return [_run(seq, data) for seq, data in reversed(rows)]

    async def set_delivery(self, job_id: str, seq: int, delivery: str) -> bool:
        async with self._write() as db:
            cursor = await db.execute(
                "UPDATE cron_runs SET data = json_set(data, '$.delivery', ?) "
                "WHERE seq = ? AND job_id = ?",
                (delivery, seq, job_id),
            )
            return cursor.rowcount > 0

    async def request_run(self, job_id: str, requested: datetime) -> None:
        async with self._write() as db:
            await db.execute(
                "INSERT INTO cron_requests (job_id, requested) VALUES (?, ?)",
                (job_id, requested.isoformat()),
            )
            await self._bump(db)

    async def beat(self, owner: str, at: datetime) -> None:
        async with self._write() as db:
            await db.execute(
                "INSERT INTO cron_beat (owner, at) VALUES (?, ?) "
                "ON CONFLICT (owner) DO UPDATE SET at = excluded.at",
                (owner, at.isoformat()),
            )

    async def last_beat(self) -> Beat | None:
        rows = await self._read("SELECT owner, at FROM cron_beat ORDER BY at DESC LIMIT 1")
        return Beat(owner=rows[0][0], at=datetime.fromisoformat(rows[0][1])) if rows else None

    async def clear_beat(self, owner: str) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM cron_beat WHERE owner = ?", (owner,))

    def _job(self, data: str, revision: int) -> Job:
        try:
            fields = orjson.loads(data)
            fields["revision"] = revision
            return Job.model_validate(fields)
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise StoreError(self.url, f"stored cron job cannot be read: {exc}") from exc


# The ledger's last number: AUTOINCREMENT's counter (it survives trimming), else the rows'.
_LAST_SEQ = (
    "SELECT COALESCE(MAX(s), 0) FROM (SELECT seq AS s FROM sqlite_sequence "
    "WHERE name = 'cron_runs' UNION ALL SELECT MAX(seq) FROM cron_runs)"
)
_STATE_SELECT = "SELECT job_id, next_fire, schedule_rev, last_status, last_scheduled, last_fired FROM cron_state"


def _state(row: Sequence[Any]) -> JobState:
    return JobState(
        job_id=row[0],
        next_fire=_when(row[1]),
        schedule_rev=row[2],
        last_status=row[3],
        last_scheduled=_when(row[4]),
        last_fired=_when(row[5]),
    )


def _run(seq: int, data: str) -> RunRecord:
    fields = orjson.loads(data)
    fields["seq"] = seq
    return RunRecord.model_validate(fields)


def _job_data(job: Job) -> str:
    return job.model_dump_json(exclude={"revision"})


def _last_fired(runs: Iterable[RunRecord]) -> datetime | None:
    fired = [run.fired for run in runs if run.fired is not None]
    return fired[-1] if fired else None

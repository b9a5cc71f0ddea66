"""The ledger writer: run records from concurrent fires, written in batches.

When 200 jobs fall due in one second, each fire hands its wake over first and
then asks for its records to be written. :class:`LedgerWriter` collects the
requests that arrive while a write is in flight and writes them together with
one :meth:`~cron.base.JobStore.record_many` (group commit), so the fires are
not serialized behind one transaction each. ``write`` returns once the
records are durable, numbered.
"""

from __future__ import annotations

import asyncio
import logging

from cron.base import JobStore, Recording
from cron.errors import ServiceStateError
from cron.models import RunRecord

log = logging.getLogger(__name__)

MAX_BATCH = 500


class LedgerWriter:
    """Batches ledger writes to one store; one writer task, started and closed by its owner."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._pending: list[tuple[Recording, asyncio.Future[list[RunRecord]]]] = []
        self._arrived = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cron-ledger")

    async def write(self, recording: Recording) -> list[RunRecord]:
        """Queue ``recording`` for the next batch; return its records once stored."""
        if self._task is None or self._closing:
            raise ServiceStateError("the cron ledger writer is not running")
        done: asyncio.Future[list[RunRecord]] = asyncio.get_running_loop().create_future()
        self._pending.append((recording, done))
        self._arrived.set()
        return await done

    async def close(self) -> None:
        """Write what is queued, then stop."""
        self._closing = True
        self._arrived.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._flush(batch)
            if self._closing:
                return

    async def _flush(self, batch: list[tuple[Recording, asyncio.Future[list[RunRecord]]]]) -> None:
        try:
            results = await self._store.record_many([recording for recording, _ in batch])
        except Exception as exc:
            log.error("cron: writing %d ledger record set(s) failed: %s", len(batch), exc)
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), result in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(result)

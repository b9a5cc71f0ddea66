"""Firing a job: its planned fires handed over as wakes, and every outcome recorded.

This is the half of a fire APScheduler never sees. The cron service plans a
job's due times under the :class:`~cron.misfire.MisfirePolicy`; a
:class:`Firer` hands each planned fire's wake to the :class:`~cron.base.Waker`
and writes the run records to the ledger (batched by a
:class:`~cron.ledger.LedgerWriter` while the service runs, straight to the
store otherwise), then calls every run listener with each stored record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from cron.base import Advance, Clock, JobStore, Recording, SessionSinkFactory, Waker
from cron.errors import ServiceStateError
from cron.ledger import LedgerWriter
from cron.misfire import MisfirePolicy, Planned
from cron.models import Job, RunRecord, RunVia
from cron.wakes import Outcome, send_wake
from threads.wake import Accepted

log = logging.getLogger(__name__)

RunListener = Callable[[RunRecord], None]


class Firer:
    """Hands a job's fires over and records their runs; owned by one cron service.

    ``waker`` is needed to fire (a run-now or a scheduled fire); ``session_sink``
    builds the sink through which an independent job's reply reaches its
    ``wake_session``.
    """

    def __init__(
        self,
        store: JobStore,
        waker: Waker | None,
        *,
        policy: MisfirePolicy,
        clock: Clock,
        session_sink: SessionSinkFactory | None = None,
    ) -> None:
        self._store = store
        self._waker = waker
        self._policy = policy
        self._clock = clock
        self._session_sink = session_sink
        self._listeners: list[RunListener] = []
        self._ledger: LedgerWriter | None = None

    def add_listener(self, listener: RunListener) -> None:
        """Call ``listener`` with every run record once it is in the ledger."""
        self._listeners.append(listener)

    # --- the ledger writer, while the service runs -------------------------------------

    def open_ledger(self) -> None:
        """Batch ledger writes from now on (the service started)."""
        self._ledger = LedgerWriter(self._store)
        self._ledger.start()

    async def close_ledger(self) -> None:
        """Write what waits and go back to one write per record (the service stopped)."""
        if self._ledger is not None:
            await self._ledger.close()
            self._ledger = None

    # --- firing --------------------------------------------------------------------------

    async def run_now(self, job: Job, requested: datetime, now: datetime) -> RunRecord:
        """Fire ``job`` for a run-now request made at ``requested``; its stored record."""
        plan = self._policy.plan([requested], now, enabled=True)
        outcomes = [await self.hand_over(job, p, "run-now") for p in plan]
        stored = await self.record(job.id, [o.record(job) for o in outcomes], None)
        return stored[-1]

    async def record(
        self, job_id: str, runs: Sequence[RunRecord], advance: Advance | None
    ) -> list[RunRecord]:
        """Write ``runs`` (and the job's next pending fire) to the ledger; tell the listeners."""
        if self._ledger is not None:
            recording = Recording(job_id=job_id, runs=tuple(runs), advance=advance)
            stored = await self._ledger.write(recording)
        else:
            stored = await self._store.record(job_id, runs, advance=advance)
        for run in stored:
            for listener in self._listeners:
                listener(run)
        return stored

    async def hand_over(self, job: Job, planned: Planned, via: RunVia) -> Outcome:
        """Hand a planned fire's wake to its session (a missed or skipped one: nothing)."""
        if planned.action != "fire":
            return Outcome(planned=planned, via=via)
        fired = self._clock()
        try:
            accepted = await self._wake(job, planned.scheduled, via, fired)
        except Exception as exc:
            log.warning("cron: job %s failed to wake %s: %s", job.id, job.session_key, exc)
            return Outcome(
                planned=planned, via=via, fired=fired, error=f"{type(exc).__name__}: {exc}"
            )
        return Outcome(planned=planned, via=via, fired=fired, accepted=accepted)

    async def _wake(self, job: Job, scheduled: datetime, via: RunVia, fired: datetime) -> Accepted:
        if self._waker is None:
            raise ServiceStateError("the cron service has no waker")
        return await send_wake(
            self._waker,
            job,
            scheduled=scheduled,
            via=via,
            fired=fired,
            session_sink=self._session_sink,
        )

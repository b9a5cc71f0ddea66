"""Firing a job: its planned fires handed over as wakes, and every outcome recorded.

This is the half of a fire APScheduler never sees. The cron service plans a
job's due times under the :class:`~cron.misfire.MisfirePolicy`; a
:class:`Firer` hands each planned fire's wake to the :class:`~cron.base.Waker`
and writes the run records to the ledger (batched by a
:class:`~cron.ledger.LedgerWriter` while the service runs, straight to the
store otherwise), then calls every run listener with each stored record.
The wakes of fires due together reach the waker as one batch
(:class:`~cron.batching.BatchingWaker`), each still with its own outcome.

A fire is stamped twice: ``handed_over`` when its wake goes to the waker, and
``fired`` when the waker returns it — the wake is then durable in its session;
for a batch, when the batch returns (:class:`~cron.batching.Answer`) — so
lateness includes the hand-over. Once a fired run is in the ledger, the
firer follows the turn its wake runs as and, when that turn ends, records
what became of its output (the run's ``delivery``, see :mod:`cron.delivery`). After a restart, :meth:`Firer.recover`
finds the due times whose wakes the session already holds (a crash came
between acceptance and the ledger write) and records them as fired instead of
waking the session again (decision cron-11).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cron.base import (
    Advance,
    Beat,
    ChatSinkFactory,
    Clock,
    HeldWake,
    JobStore,
    Recording,
    SessionSinkFactory,
    Waker,
)
from cron.batching import BatchingWaker
from cron.delivery import STOPPED, delivery_of
from cron.errors import ServiceStateError
from cron.ledger import LedgerWriter
from cron.misfire import MisfirePolicy, Planned
from cron.models import Job, RunRecord, RunVia
from cron.wakes import Outcome, Sent, send_wake
from threads.wake_batch import Ahead

RECOVERED = (
    "the session already held this wake when the gateway restarted (accepted before a crash, "
    "recorded after it); it was not delivered again"
)
LOST = (
    "settled before a crash whose ledger write was lost; the session holds no wake for it, "
    "and a later due time's wake was already delivered"
)

log = logging.getLogger(__name__)

RunListener = Callable[[RunRecord], None]
DeliveryListener = Callable[[str, int, str], None]
"""Called with ``(job id, run seq, delivery)`` once a fired run's delivery is recorded."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUp:
    """The due times a restarted service checks against their sessions before firing.

    ``[horizon, started)``: everything due before the start that the start may
    fire (within grace), and, when a dead service left its heartbeat, whatever
    it may have fired before it died — it beat at most one beat interval
    before, and fires nothing later than grace after its time.
    """

    horizon: datetime
    started: datetime

    @classmethod
    def after(
        cls, beat: Beat | None, started: datetime, grace: timedelta, beat_seconds: float
    ) -> CatchUp:
        last_alive = min(beat.at, started) if beat is not None else started
        return cls(horizon=last_alive - grace - timedelta(seconds=beat_seconds), started=started)

    def covers(self, scheduled: datetime) -> bool:
        return self.horizon <= scheduled < self.started


class Firer:
    """Hands a job's fires over and records their runs; owned by one cron service.

    ``waker`` is needed to fire (a run-now or a scheduled fire); ``chat_sink``
    builds the sink that reaches a job's ``deliver_to`` chat, ``session_sink``
    the one through which an older report-to-session job's reply reaches its
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
        chat_sink: ChatSinkFactory | None = None,
    ) -> None:
        self._store = store
        self._waker = BatchingWaker(waker, clock) if waker is not None else None
        self._policy = policy
        self._clock = clock
        self._session_sink = session_sink
        self._chat_sink = chat_sink
        self._listeners: list[RunListener] = []
        self._delivery_listeners: list[DeliveryListener] = []
        self._ledger: LedgerWriter | None = None
        # Fired runs whose turn has not ended yet, and every task following one.
        self._waiting: dict[asyncio.Task[None], tuple[str, int]] = {}
        self._followers: set[asyncio.Task[None]] = set()

    def add_listener(self, listener: RunListener) -> None:
        """Call ``listener`` with every run record once it is in the ledger."""
        self._listeners.append(listener)

    def add_delivery_listener(self, listener: DeliveryListener) -> None:
        """Call ``listener`` with each fired run's delivery once it is recorded."""
        self._delivery_listeners.append(listener)

    # --- the ledger writer, while the service runs -------------------------------------

    def open_ledger(self) -> None:
        """Batch ledger writes from now on (the service started)."""
        self._ledger = LedgerWriter(self._store)
        self._ledger.start()

    async def close_ledger(self) -> None:
        """Write what waits and go back to one write per record (the service stopped).

        A batch of wakes still being handed over is waited for first.
        """
        if self._waker is not None:
            await self._waker.close()
        if self._ledger is not None:
            await self._ledger.close()
            self._ledger = None

    # --- firing --------------------------------------------------------------------------

    async def run_now(self, job: Job, requested: datetime, now: datetime) -> RunRecord:
        """Fire ``job`` for a run-now request made at ``requested``; its stored record."""
        plan = self._policy.plan([requested], now, enabled=True)
        outcomes = [await self.hand_over(job, p, "run-now") for p in plan]
        stored = await self.settle(job, outcomes, None)
        return stored[-1]

    async def settle(
        self, job: Job, outcomes: Sequence[Outcome], advance: Advance | None
    ) -> list[RunRecord]:
        """Record ``outcomes``, then follow each fired one's turn to record its delivery."""
        stored = await self.record(job.id, [o.record(job) for o in outcomes], advance)
        for outcome, run in zip(outcomes, stored, strict=True):
            sent = outcome.sent
            if sent is not None and sent.turn is not None:
                self._follow(job.id, run.seq, sent)
        return stored

    def _follow(self, job_id: str, seq: int, sent: Sent) -> None:
        task = asyncio.get_running_loop().create_task(
            self._await_delivery(job_id, seq, sent), name=f"cron {job_id} delivery"
        )
        self._followers.add(task)
        self._waiting[task] = (job_id, seq)
        task.add_done_callback(self._followed)

    def _followed(self, task: asyncio.Task[None]) -> None:
        self._followers.discard(task)
        self._waiting.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("cron: recording a delivery failed", exc_info=task.exception())

    async def _await_delivery(self, job_id: str, seq: int, sent: Sent) -> None:
        assert sent.turn is not None
        delivery = await delivery_of(sent.turn, sent.watch)
        # From here on the write runs to its end: a stop waits for it, never cancels it.
        task = asyncio.current_task()
        if task is not None:
            self._waiting.pop(task, None)
        await self._set_delivery(job_id, seq, delivery)

    async def _set_delivery(self, job_id: str, seq: int, delivery: str) -> None:
        try:
            await self._store.set_delivery(job_id, seq, delivery)
        except Exception as exc:
            log.warning("cron: job %s run %d: recording its delivery failed: %s", job_id, seq, exc)
            return
        for listener in self._delivery_listeners:
            listener(job_id, seq, delivery)

    async def stop_following(self) -> None:
        """Stop waiting for turns (the service stops); their runs' delivery says so.

        A delivery already being written is let finish.
        """
        waiting = dict(self._waiting)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*self._followers, return_exceptions=True)
        for job_id, seq in waiting.values():
            await self._set_delivery(job_id, seq, STOPPED)

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
        handed_over = self._clock.now()
        try:
            sent = await self._wake(job, planned.scheduled, via, handed_over)
        except Exception as exc:
            log.warning("cron: job %s failed to wake %s: %s", job.id, job.session_key, exc)
            return Outcome(
                planned=planned,
                via=via,
                handed_over=handed_over,
                error=f"{type(exc).__name__}: {exc}",
            )
        return Outcome(
            planned=planned,
            via=via,
            handed_over=handed_over,
            fired=sent.at,
            accepted=sent.accepted,
            sent=sent,
        )

    async def open_ahead(self, jobs: Sequence[Job]) -> None:
        """Open the sessions ``jobs`` wake, a moment before they are due (see ThreadOpener).

        A direct wake's session is opened only when it exists; an independent
        job's ``cron:<id>`` session is created when it has none, with the job's
        agent, as its first fire would.
        """
        keys = [
            Ahead(key=str(job.session_key))
            if job.direct_wake
            else Ahead(key=str(job.session_key), create=True, agent=job.agent)
            for job in jobs
        ]
        try:
            await self._require_waker().open_ahead(keys)
        except Exception as exc:
            # Their fires open the sessions themselves, later; nothing is lost.
            log.warning(
                "cron: opening %d session(s) ahead of their fires failed: %s", len(keys), exc
            )

    async def _wake(
        self, job: Job, scheduled: datetime, via: RunVia, handed_over: datetime
    ) -> Sent:
        return await send_wake(
            self._require_waker(),
            job,
            scheduled=scheduled,
            via=via,
            handed_over=handed_over,
            session_sink=self._session_sink,
            chat_sink=self._chat_sink,
        )

    def _require_waker(self) -> BatchingWaker:
        if self._waker is None:
            raise ServiceStateError("the cron service has no waker")
        return self._waker

    # --- after a restart: wakes the session already holds -------------------------------

    async def recover(
        self, job: Job, due: list[datetime], now: datetime, catch_up: CatchUp | None
    ) -> tuple[list[Outcome], list[datetime]]:
        """At catch-up, settle the due times whose wakes the session already holds.

        Returns their outcomes and the due times left for the misfire policy.
        """
        candidates = [t for t in due if catch_up is not None and catch_up.covers(t)]
        if not candidates:
            return [], due
        try:
            held = await self.held_fires(job, candidates)
        except Exception as exc:
            # A wake delivered twice is better than one never delivered.
            log.warning(
                "cron: job %s: could not ask session %s which of its wakes it already holds "
                "(%s); firing its due times as if it held none",
                job.id,
                job.session_key,
                exc,
            )
            return [], due
        return self.recovered(due, held, now)

    async def held_fires(self, job: Job, due: Sequence[datetime]) -> dict[datetime, HeldWake]:
        """The due times in ``due`` whose wake ``job``'s session already holds, by job id and time."""
        wanted = set(due)
        held = await self._require_waker().held_wakes(job.session_key, {"cron_job": job.id})
        out: dict[datetime, HeldWake] = {}
        for wake in held:
            try:
                scheduled = datetime.fromisoformat(wake.meta.get("scheduled", "")).astimezone(UTC)
            except ValueError:
                continue  # not one of ours: a cron wake always names its time
            if scheduled in wanted:
                out[scheduled] = wake
        return out

    def recovered(
        self, due: Sequence[datetime], held: dict[datetime, HeldWake], now: datetime
    ) -> tuple[list[Outcome], list[datetime]]:
        """Outcomes for the due times up to the last held one; the due times still to plan.

        A held due time is recorded fired, as the session accepted it. A due time
        before it that the session does not hold was settled by the same lost
        ledger write: with coalescing it was folded into the next held fire
        (counted in ``coalesced``); without, it is recorded missed.
        """
        if not held:
            return [], list(due)
        last = max(held)
        outcomes: list[Outcome] = []
        lost: list[datetime] = []
        for scheduled in (t for t in due if t <= last):
            wake = held.get(scheduled)
            if wake is None:
                lost.append(scheduled)
                continue
            if not self._policy.coalesce:
                outcomes += [self._lost(t, now) for t in lost]
            planned = Planned(
                action="fire",
                scheduled=scheduled,
                lateness=max(wake.accepted_at - scheduled, timedelta(0)),
                coalesced=len(lost) if self._policy.coalesce else 0,
            )
            outcomes.append(
                Outcome(
                    planned=planned,
                    via="schedule",
                    handed_over=wake.handed_over,
                    fired=wake.accepted_at,
                    accepted=wake.accepted,
                    note=RECOVERED,
                )
            )
            lost = []
        return outcomes, [t for t in due if t > last]

    @staticmethod
    def _lost(scheduled: datetime, now: datetime) -> Outcome:
        planned = Planned(
            action="missed",
            scheduled=scheduled,
            lateness=max(now - scheduled, timedelta(0)),
            note=LOST,
        )
        return Outcome(planned=planned, via="schedule")

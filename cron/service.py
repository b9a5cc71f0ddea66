"""The cron service: APScheduler 3's ``AsyncIOScheduler`` behind a small interface.

This module, ``cron.scheduler`` and ``cron.triggers`` are the only ones that
import APScheduler, so moving to 4.x touches nothing else. Our :class:`~cron.base.JobStore` is the
source of truth; the scheduler only computes fire times and wakes us when
they come, on the service's :class:`~cron.base.Clock`.

How a fire flows: APScheduler finds a job due and hands every due time to
:class:`~cron.scheduler.CronExecutor` (APScheduler's own coalescing and grace are off, so no
due time is dropped unseen). The service's :class:`~cron.misfire.MisfirePolicy`
sorts them into fired, missed and skipped; a fire builds a cron :class:`Wake`
and hands it to the :class:`~cron.base.Waker`; the outcome goes to the run
ledger together with the job's next pending fire, which is what lets a
restarted service see what came due while it was down — and a due time whose
wake its session already holds (a crash came before the record) is recorded,
not delivered twice (decision cron-11).

One :class:`CronService` serves every editor. Not started (the CLI), it
validates, writes the store and reads it back (the API it inherits from
:class:`~cron.editing.JobEditor`); started (the gateway), it also schedules,
polls the store's change counter every ``poll_seconds`` to apply edits made by
other processes, and beats a heartbeat so ``run-now`` from the CLI knows a
gateway will pick its request up. A fire's hand-over and its ledger records
are its :class:`~cron.firing.Firer`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES
from apscheduler.jobstores.base import JobLookupError

from config.models import GatewayConfig
from cron.base import (
    Advance,
    ChatSinkFactory,
    Clock,
    JobStore,
    SessionSinkFactory,
    Timer,
    Waker,
    WallClock,
)
from cron.editing import JobEditor
from cron.errors import InvalidJobError, ServiceStateError
from cron.firing import CatchUp, DeliveryListener, Firer, RunListener
from cron.misfire import MisfirePolicy
from cron.models import Job, JobState, RunRecord
from cron.scheduler import CronExecutor, CronScheduler, never_called
from cron.triggers import (
    CronTriggers,
    WallClockCron,
    build_trigger,
    cron_trigger,
    explain,
    fire_times,
    first_fire,
    first_fire_or_none,
)
from cron.wakes import milliseconds

__all__ = [
    "CronService",
    "build_trigger",
    "cron_trigger",
    "explain",
    "fire_times",
    "first_fire",
    "first_fire_or_none",
]

log = logging.getLogger(__name__)

EXECUTOR = "cron"
BEAT_SECONDS = 2.0
STOP_DEADLINE_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Scheduled:
    """What the service knows of a scheduled job: its trigger and the state revision."""

    trigger: Any
    schedule_rev: int


# --- the service -------------------------------------------------------------------------


class CronService(JobEditor):
    """Cron jobs: edit them (started or not), and fire them (once started).

    ``waker`` is needed to start; ``chat_sink`` builds the sink that reaches a
    job's ``deliver_to`` chat (without it, such a fire fails saying so);
    ``session_sink`` the one through which an older report-to-session job's
    reply reaches its ``wake_session`` (without it, that reply is dropped and
    ``report_to`` in the wake's meta names the session).
    ``open_ahead_seconds`` before jobs come due, a waker that can
    (:class:`~cron.base.ThreadOpener`) is asked to open their sessions, so a
    burst's wakes find them loaded or created (decision perf-11); 0 turns it off.
    """

    def __init__(
        self,
        store: JobStore,
        waker: Waker | None = None,
        *,
        timezone: str = "UTC",
        misfire_grace_seconds: float = 60.0,
        coalesce: bool = True,
        poll_seconds: float = 0.5,
        open_ahead_seconds: float = 1.0,
        clock: Clock | None = None,
        session_sink: SessionSinkFactory | None = None,
        chat_sink: ChatSinkFactory | None = None,
        owner: str | None = None,
        known_agents: Collection[str] | None = None,
    ) -> None:
        clock = clock or WallClock()
        super().__init__(store, timezone=timezone, clock=clock, known_agents=known_agents)
        self.policy = MisfirePolicy.of(misfire_grace_seconds, coalesce)
        self.poll_seconds = poll_seconds
        self.open_ahead_seconds = open_ahead_seconds
        self.owner = owner or f"cron-{secrets.token_hex(4)}"
        self._waker = waker
        self._firer = Firer(
            store,
            waker,
            policy=self.policy,
            clock=clock,
            session_sink=session_sink,
            chat_sink=chat_sink,
        )
        self._scheduler: Any = None
        self._jobs: dict[str, Job] = {}
        self._scheduled: dict[str, _Scheduled] = {}
        self._seen = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._poll_due = asyncio.Event()
        self._poll_timer: Timer | None = None
        self._stopping = asyncio.Event()
        self._last_beat: datetime | None = None
        self._cron_triggers: CronTriggers = {}
        self._catch_up: CatchUp | None = None

    @classmethod
    def from_config(
        cls, config: GatewayConfig, store: JobStore, waker: Waker | None = None, **options: Any
    ) -> CronService:
        """A service with the configuration's zone and misfire policy (``[cron]``)."""
        cron = config.cron
        return cls(
            store,
            waker,
            timezone=cron.timezone or config.timezone,
            misfire_grace_seconds=cron.misfire_grace_seconds,
            coalesce=cron.coalesce,
            poll_seconds=cron.poll_seconds,
            known_agents=config.agents.keys(),
            **options,
        )

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def add_listener(self, listener: RunListener) -> None:
        """Call ``listener`` with every run record once it is in the ledger."""
        self._firer.add_listener(listener)

    def add_delivery_listener(self, listener: DeliveryListener) -> None:
        """Call ``listener(job id, seq, delivery)`` once a fired run's delivery is recorded."""
        self._firer.add_delivery_listener(listener)

    # --- lifetime ------------------------------------------------------------------------

    async def __aenter__(self) -> CronService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Load every job, schedule it (catching up on what came due while down), and run."""
        if self._scheduler is not None:
            raise ServiceStateError("the cron service is already started")
        if self._waker is None:
            raise ServiceStateError("the cron service needs a waker to start (it fires wakes)")
        self._stopping.clear()
        self._seen = await self.store.version()
        jobs = await self.store.jobs()
        states = await self.store.states()
        # Read before this service beats: a beat left behind is a previous service that died.
        beat = await self.store.last_beat()
        self._catch_up = CatchUp.after(beat, self._clock.now(), self.policy.grace, BEAT_SECONDS)
        scheduler = CronScheduler(
            self._clock, soon=self._open_ahead, ahead_seconds=self.open_ahead_seconds
        )
        scheduler.add_executor(CronExecutor(self._due), alias=EXECUTOR)
        scheduler.add_listener(self._on_max_instances, EVENT_JOB_MAX_INSTANCES)
        self._scheduler = scheduler
        self._firer.open_ledger()
        try:
            for job in jobs:
                self._schedule(job, states.get(job.id))
            await self._beat(force=True)
            scheduler.start()
        except BaseException:
            self._scheduler = None
            await self._firer.close_ledger()
            self._jobs.clear()
            self._scheduled.clear()
            raise
        self._poll_due.clear()
        self._poll_timer = self._clock.call_later(self.poll_seconds, self._tick)
        self._poller = asyncio.create_task(self._poll(), name="cron-poll")
        self._spawn(self._prime_all())
        log.info("cron: started with %d job(s) from %s", len(jobs), self.store.url)

    async def stop(self) -> None:
        """Stop polling and scheduling, let fires in flight finish, clear the heartbeat."""
        if self._scheduler is None:
            return
        self._stopping.set()
        self._poll_due.set()
        if self._poll_timer is not None:
            self._poll_timer.cancel()
        failures: list[Exception] = []
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        self._scheduler.shutdown(wait=False)
        await _next_turn()  # AsyncIOScheduler shuts down in a loop callback
        self._scheduler = None
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=STOP_DEADLINE_SECONDS)
            for task in pending:
                log.warning("cron: a fire was still running at stop; cancelling it")
                task.cancel()
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            failures += [r for r in results if isinstance(r, Exception)]
        await self._firer.stop_following()
        await self._firer.close_ledger()
        try:
            await self.store.clear_beat(self.owner)
        except Exception as exc:
            failures.append(exc)
        self._jobs.clear()
        self._scheduled.clear()
        if failures:
            raise ExceptionGroup("the cron service stopped with errors", failures)

    # --- reading fire times; what the editing API asks of the scheduler -----------------

    async def next_fires(self, job_id: str, n: int = 5) -> list[datetime]:
        """The job's next ``n`` fire times in UTC, from its pending fire on."""
        view = await self.get(job_id)
        if view.next_fire is None:
            return []
        trigger = build_trigger(view.job, anchor=view.next_fire)
        return [view.next_fire, *fire_times(trigger, view.next_fire, n - 1)] if n > 0 else []

    def explain(
        self, expr: str, timezone: str | None = None, n: int = 5, *, after: datetime | None = None
    ) -> list[datetime]:
        """The next ``n`` fire times of ``expr`` (in ``timezone``, default the gateway's)."""
        return explain(expr, timezone or self.timezone, n, after=after or self._clock.now())

    def scheduled_fire(self, job_id: str) -> datetime | None:
        """The job's next fire as the running scheduler has it; None when not scheduled."""
        if self._scheduler is None:
            return None
        scheduled = self._scheduler.get_job(job_id)
        if scheduled is None or scheduled.next_run_time is None:
            return None
        return scheduled.next_run_time.astimezone(UTC)  # type: ignore[no-any-return]

    def _first_fire(self, job: Job, now: datetime) -> datetime | None:
        return first_fire(job, now)

    async def _fire_now(self, job: Job, now: datetime) -> RunRecord:
        return await self._firer.run_now(self._jobs.get(job.id, job), now, now)

    # --- internals: scheduling -----------------------------------------------------------

    def _schedule(self, job: Job, state: JobState | None) -> None:
        """Hand ``job`` to APScheduler from its pending fire (past ones are caught up on)."""
        self._jobs[job.id] = job
        if state is not None:
            next_fire, rev = state.next_fire, state.schedule_rev
        else:
            next_fire, rev = first_fire_or_none(job, self._clock.now()), job.revision
        try:
            trigger = build_trigger(job, anchor=next_fire, shared=self._cron_triggers)
        except InvalidJobError as exc:
            log.error("cron: stored job %s cannot be scheduled and is left out: %s", job.id, exc)
            self._drop_from_scheduler(job.id)
            return
        self._scheduled[job.id] = _Scheduled(trigger=trigger, schedule_rev=rev)
        if isinstance(trigger, WallClockCron) and self._scheduler.running:
            trigger.prime(next_fire)  # at start-up, the first fires are primed after start
        if next_fire is None:
            self._drop_from_scheduler(job.id)
            return
        self._scheduler.add_job(
            never_called,
            trigger=trigger,
            id=job.id,
            name=job.id,
            executor=EXECUTOR,
            next_run_time=next_fire,
            coalesce=False,
            misfire_grace_time=None,
            max_instances=1,
            replace_existing=True,
        )

    def _unschedule(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._scheduled.pop(job_id, None)
        self._drop_from_scheduler(job_id)

    def _drop_from_scheduler(self, job_id: str) -> None:
        if not self._scheduler.running:
            # Starting: each stored job is scheduled once, so none is there to drop (and
            # APScheduler would look through every job added so far for it).
            return
        # Never scheduled, or an `at` job APScheduler already let go of after its fire.
        with contextlib.suppress(JobLookupError):
            self._scheduler.remove_job(job_id)

    async def _apply(self, job: Job) -> None:
        """Bring the scheduler in line with ``job`` (an edit from here or from the store)."""
        known = self._jobs.get(job.id)
        if known is not None and known.revision >= job.revision:
            return
        if known is not None and known.schedule_signature == job.schedule_signature:
            self._jobs[job.id] = job  # enabled, task, target: read when the job fires
            return
        self._schedule(job, await self.store.state(job.id))

    async def refresh(self) -> None:
        """Apply what other processes changed in the store since the last look."""
        changes = await self.store.changes(self._seen)
        for job_id in changes.removed:
            self._unschedule(job_id)
        for job in changes.jobs:
            await self._apply(job)
        for request in changes.requests:
            wanted = self._jobs.get(request.job_id)
            if wanted is None:
                log.warning("cron: run-now of job %s dropped: no such job", request.job_id)
                continue
            self._spawn(self._firer.run_now(wanted, request.requested, self._clock.now()))
        self._seen = max(self._seen, changes.version)

    def _tick(self) -> None:
        """The poll timer: due every ``poll_seconds`` on the clock, however long a poll takes."""
        self._poll_due.set()
        self._poll_timer = self._clock.call_later(self.poll_seconds, self._tick)

    async def _poll(self) -> None:
        while True:
            await self._poll_due.wait()
            if self._stopping.is_set():
                return
            self._poll_due.clear()
            try:
                await self.refresh()
                await self._beat()
            except Exception:
                log.exception(
                    "cron: reading %s failed; retrying in %g s", self.store.url, self.poll_seconds
                )

    async def _beat(self, *, force: bool = False) -> None:
        now = self._clock.now()
        if (
            force
            or self._last_beat is None
            or (now - self._last_beat).total_seconds() >= BEAT_SECONDS
        ):
            await self.store.beat(self.owner, now)
            self._last_beat = now

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _prime_all(self, chunk: int = 200) -> None:
        """Prime the cron triggers loaded at start, a chunk per loop turn."""
        for count, (job_id, scheduled) in enumerate(list(self._scheduled.items()), 1):
            if isinstance(scheduled.trigger, WallClockCron):
                scheduled.trigger.prime(self.scheduled_fire(job_id))
            if count % chunk == 0:
                await asyncio.sleep(0)  # let fires and edits through between chunks

    def _on_max_instances(self, event: Any) -> None:
        job = self._jobs.get(event.job_id)
        if job is None:
            return
        note = "the previous fire of this job was still being handed over"
        runs = [
            RunRecord(
                job_id=job.id,
                status="skipped",
                scheduled=t.astimezone(UTC),
                lateness_ms=milliseconds(self._clock.now() - t),
                session_key=str(job.session_key),
                note=note,
            )
            for t in event.scheduled_run_times
        ]
        self._spawn(self._firer.record(job.id, runs, None))

    # --- internals: firing ---------------------------------------------------------------

    def _open_ahead(self, job_ids: list[str]) -> None:
        """Called inside APScheduler's pass with jobs due within ``open_ahead_seconds``."""
        jobs = [job for job in map(self._jobs.get, job_ids) if job is not None and job.enabled]
        if jobs:
            self._spawn(self._firer.open_ahead(jobs))

    def _due(self, job_id: str, run_times: list[datetime]) -> asyncio.Task[None]:
        """Called by the executor, inside APScheduler's loop pass: snapshot and hand off."""
        job = self._jobs.get(job_id)
        scheduled = self._scheduled.get(job_id)
        return self._spawn(self._handle_due(job, scheduled, run_times))

    async def _handle_due(
        self, job: Job | None, scheduled: _Scheduled | None, run_times: list[datetime]
    ) -> None:
        if job is None or scheduled is None:
            return
        now = self._clock.now()
        due = [t.astimezone(UTC) for t in run_times]
        outcomes, due = await self._firer.recover(job, due, now, self._catch_up)
        plan = self.policy.plan(due, now, enabled=job.enabled)
        outcomes += [await self._firer.hand_over(job, p, "schedule") for p in plan]
        # Wakes first, bookkeeping after: let the other fires due in this instant
        # hand their wakes over before this one builds records and writes them.
        await asyncio.sleep(0)
        following = scheduled.trigger.get_next_fire_time(run_times[-1], now)
        advance = Advance(
            next_fire=following.astimezone(UTC) if following else None,
            schedule_rev=scheduled.schedule_rev,
        )
        await self._firer.settle(job, outcomes, advance)
        if isinstance(scheduled.trigger, WallClockCron):
            scheduled.trigger.prime(following)
        if job.kind == "at":
            spent = await self.store.disable_if_unchanged(job.id, job.revision)
            if spent is not None and self._jobs.get(job.id) is job:
                self._jobs[job.id] = spent


async def _next_turn() -> None:
    """Return after the callbacks already queued on the loop have run."""
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(done.set_result, None)
    await done

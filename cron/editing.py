"""The cron job-editing API: validate, store and read back jobs, started or not.

:class:`JobEditor` is what every editor of the job store gets from the cron
service: the CLI through a :class:`~cron.service.CronService` it never starts,
the gateway and the agent's check-in tools through the one it runs. The job
store is the source of truth; an edit is stored first and, when the service
runs, then applied to its scheduler.

What needs the scheduler it asks of the service, the one module importing
APScheduler: whether it runs, when a job would first fire, the job's next fire
as the running scheduler has it, and bringing the scheduler in line with an
edit or firing a job now.
"""

from __future__ import annotations

import asyncio
import secrets
from abc import ABC, abstractmethod
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from cron.base import Clock, JobStore
from cron.errors import (
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    NoGatewayError,
    NotYourJobError,
)
from cron.models import (
    DELIVERY_PENDING,
    Job,
    JobState,
    JobView,
    RunRecord,
    build_job,
    check_zone,
)
from threads.keys import SessionKey

ALIVE_SECONDS = 10.0
"""A heartbeat older than this means no gateway runs against the store."""


class JobEditor(ABC):
    """Cron jobs as every editor sees them: drafted, validated, stored, read back."""

    def __init__(
        self,
        store: JobStore,
        *,
        timezone: str,
        clock: Clock,
        known_agents: Collection[str] | None,
    ) -> None:
        self.store = store
        self.timezone = check_zone(timezone)
        self._clock = clock
        self._known_agents = frozenset(known_agents) if known_agents is not None else None

    # --- what the scheduling side answers -------------------------------------------------

    @property
    @abstractmethod
    def running(self) -> bool:
        """Whether this service is started: it schedules and fires."""

    @abstractmethod
    def scheduled_fire(self, job_id: str) -> datetime | None:
        """The job's next fire as the running scheduler has it; None when not scheduled."""

    @abstractmethod
    def _first_fire(self, job: Job, now: datetime) -> datetime | None:
        """The first fire of ``job`` set at ``now``; :class:`InvalidJobError` if it never fires."""

    @abstractmethod
    async def _apply(self, job: Job) -> None:
        """Bring the running scheduler in line with the stored ``job``."""

    @abstractmethod
    def _unschedule(self, job_id: str) -> None:
        """Take a removed job off the running scheduler."""

    @abstractmethod
    async def _fire_now(self, job: Job, now: datetime) -> RunRecord:
        """Fire ``job`` at once on the running service; its ledger record."""

    # --- editing (started or not) --------------------------------------------------------

    def draft(self, **fields: Any) -> Job:
        """A new job from ``fields``; ``created``/``updated`` are now, the zone the default."""
        now = self._clock.now()
        fields.setdefault("timezone", self.timezone)
        fields.setdefault("created", now)
        fields.setdefault("updated", now)
        return build_job(**fields)

    async def upsert(
        self, job: Job, *, min_interval: timedelta | None = None, force: str = "--force"
    ) -> JobView:
        """Store ``job`` by id (replacing its definition) and, when running, schedule it.

        Refuses (nothing stored) an expression that never fires or an ``at``
        time that is not in the future, naming the field; with ``min_interval``
        (the CLI and the admin API pass :data:`~cron.models.MIN_INTERVAL` unless forced),
        an ``every`` job more frequent than that too, the refusal naming ``force``,
        how the caller overrides it.
        """
        interval = job.interval
        if min_interval is not None and interval is not None and interval < min_interval:
            raise InvalidJobError.one(
                "every",
                f"{job.every} is shorter than {min_interval.total_seconds():g} s: a job this "
                f"frequent floods its session and the run ledger (pass {force} to set it anyway)",
                job.id,
            )
        if job.agent and self._known_agents is not None and job.agent not in self._known_agents:
            raise InvalidJobError.one(
                "agent",
                f"{job.agent!r} is not defined under [agents] (have: {sorted(self._known_agents)})",
                job.id,
            )
        now = self._clock.now()
        next_fire = self._first_fire(job, now)
        stored = await self.store.upsert(
            job.model_copy(update={"updated": now}), next_fire=next_fire
        )
        if self.running:
            await self._apply(stored)
        return await self.get(stored.id)

    async def remove(self, job_id: str) -> None:
        if not await self.store.remove(job_id):
            raise JobNotFoundError(job_id, self.store.url)
        if self.running:
            self._unschedule(job_id)

    async def pause(self, job_id: str) -> JobView:
        """Keep the job but fire nothing: its fires are recorded ``skipped``."""
        return await self._set_enabled(job_id, False)

    async def resume(self, job_id: str) -> JobView:
        job = await self._require(job_id)
        state = await self.store.state(job_id)
        if job.kind == "at" and (state is None or state.next_fire is None):
            raise JobConflictError(
                job_id,
                f"this `at` job already came due ({job.schedule_text}); give it a new time "
                f"with `gateway cron set-at --id {job_id} --at <RFC 3339>`",
            )
        return await self._set_enabled(job_id, True)

    async def _set_enabled(self, job_id: str, enabled: bool) -> JobView:
        stored = await self.store.set_enabled(job_id, enabled, self._clock.now())
        if stored is None:
            raise JobNotFoundError(job_id, self.store.url)
        if self.running:
            await self._apply(stored)
        return await self.get(job_id)

    async def run_now(
        self, job_id: str, *, wait_seconds: float = 0.0, until_delivered: bool = False
    ) -> RunRecord | None:
        """Fire a job now, paused or not; the ledger records it ``via: run-now``.

        Started, this fires at once and returns the record. Not started, it
        leaves a request for the running gateway and, with ``wait_seconds``,
        polls the ledger that long for the record (with ``until_delivered``,
        until its delivery is known too, within the same time);
        :class:`NoGatewayError` when no gateway is running against the store
        (nothing is requested).
        """
        job = await self._require(job_id)
        now = self._clock.now()
        if self.running:
            return await self._fire_now(job, now)
        beat = await self.store.last_beat()
        if beat is None or (now - beat.at).total_seconds() > ALIVE_SECONDS:
            raise NoGatewayError(job_id, self.store.url, beat.at.isoformat() if beat else "")
        await self.store.request_run(job_id, now)
        deadline = asyncio.get_running_loop().time() + wait_seconds
        found: RunRecord | None = None
        while asyncio.get_running_loop().time() < deadline:
            for run in reversed(await self.store.runs(job_id, limit=10)):
                if run.via == "run-now" and run.scheduled == now:
                    found = run
                    break
            if found is not None and (not until_delivered or found.delivery != DELIVERY_PENDING):
                return found
            await asyncio.sleep(0.05)  # polling the ledger with a deadline
        return found

    # --- reading -------------------------------------------------------------------------

    async def get(self, job_id: str) -> JobView:
        job = await self._require(job_id)
        return self._view(job, await self.store.state(job_id))

    async def list_jobs(self) -> list[JobView]:
        jobs = await self.store.jobs()
        states = await self.store.states()
        return [self._view(job, states.get(job.id)) for job in jobs]

    async def runs(self, job_id: str, limit: int = 20) -> list[RunRecord]:
        """The job's newest ``limit`` ledger records, oldest first (kept after removal)."""
        return await self.store.runs(job_id, limit)

    async def gateway_running(self) -> bool:
        """Whether some service is beating its heartbeat against this store."""
        if self.running:
            return True
        beat = await self.store.last_beat()
        return beat is not None and (self._clock.now() - beat.at).total_seconds() <= ALIVE_SECONDS

    async def _require(self, job_id: str) -> Job:
        job = await self.store.get(job_id)
        if job is None:
            raise JobNotFoundError(job_id, self.store.url)
        return job

    def _view(self, job: Job, state: JobState | None) -> JobView:
        next_fire = self.scheduled_fire(job.id) or (state.next_fire if state else None)
        return JobView(
            job=job,
            next_fire=next_fire,
            last_status=state.last_status if state else None,
            last_fired=state.last_fired if state else None,
        )

    # --- the agent's tools: a one-time self check-in, list, remove -----------------------

    async def set_check_in(
        self, session: str, at: str | datetime, task: str, *, job_id: str | None = None
    ) -> JobView:
        """Wake ``session`` once at ``at`` (RFC 3339 with offset) with ``task``.

        A direct-wake ``at`` job (what ``gateway cron set-at --direct-wake`` sets):
        the session keeps its agent, and the wake's caller is cron (a drop sink).
        """
        key = str(SessionKey(session))
        job_id = job_id or f"self-checkin-{secrets.token_hex(5)}"
        existing = await self.store.get(job_id)
        if existing is not None and existing.wake_session != key:
            raise NotYourJobError(job_id, existing.wake_session, key)
        job = self.draft(id=job_id, kind="at", at=at, task=task, wake_session=key, direct_wake=True)
        return await self.upsert(job)

    async def list_check_ins(self, session: str) -> list[JobView]:
        """The jobs that wake ``session`` directly (its check-ins, pending and spent)."""
        key = str(SessionKey(session))
        return [
            v for v in await self.list_jobs() if v.job.direct_wake and v.job.wake_session == key
        ]

    async def remove_check_in(self, session: str, job_id: str) -> None:
        """Remove one of ``session``'s direct-wake jobs; another session's job is refused."""
        key = str(SessionKey(session))
        job = await self._require(job_id)
        if not job.direct_wake or job.wake_session != key:
            raise NotYourJobError(job_id, job.wake_session if job.direct_wake else None, key)
        await self.remove(job_id)

"""What a fire sends: the wake of a cron job, and the record of what became of it.

A direct-wake job wakes its existing ``wake_session`` with that session's own
agent; an independent job wakes ``cron:<id>`` with the job's agent and, when
``wake_session`` is set, a sink that carries the reply there. Either way the
caller is cron (seed 000's drop-sink callers): source ``cron``,
``SystemCaller("cron")``, and, unless a reply has somewhere to go, a drop sink.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cron.base import SessionSinkFactory, Waker
from cron.errors import SessionMissingError
from cron.misfire import Planned
from cron.models import Job, RunRecord, RunStatus, RunVia
from threads.keys import SessionKey
from threads.sinks import DropSink, Sink
from threads.wake import Accepted, SystemCaller, Wake, WakeSource

CRON_CALLER = SystemCaller(name="cron")


async def send_wake(
    waker: Waker,
    job: Job,
    *,
    scheduled: datetime,
    via: RunVia,
    handed_over: datetime,
    session_sink: SessionSinkFactory | None = None,
) -> Accepted:
    """Hand ``job``'s wake to its session; :class:`SessionMissingError` for a gone direct target.

    The wake's meta names the job and its scheduled time (``cron_job``,
    ``scheduled``): the pair a restarted service looks for in the session
    before firing a due time again (see :meth:`cron.base.Waker.held_wakes`).
    """
    key = job.session_key
    meta = cron_meta(job.id, scheduled) | {"via": via}
    sink: Sink = DropSink(reason="cron")
    agent = None
    if job.direct_wake:
        if not await waker.session_exists(key):
            raise SessionMissingError(job.id, str(key))
    else:
        agent = job.agent
        if job.wake_session:
            meta["report_to"] = job.wake_session
            if session_sink is not None:
                sink = session_sink(SessionKey(job.wake_session), key)
    wake = Wake(
        source=WakeSource.CRON,
        body=job.task,
        caller=CRON_CALLER,
        sink=sink,
        agent=agent,
        meta=meta,
        created=handed_over,
    )
    return await waker.wake(key, wake)


def cron_meta(job_id: str, scheduled: datetime) -> dict[str, str]:
    """The wake meta that names one fire: the job, and the due time it fires for (UTC)."""
    return {"cron_job": job_id, "scheduled": scheduled.astimezone(UTC).isoformat()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What became of one planned fire, before it is a ledger record.

    ``handed_over`` is when the wake went to the thread manager, ``fired`` when
    the session accepted it (``accepted`` says as what); a failed hand-over has
    ``error`` and no ``fired``. ``note`` goes before the plan's own note (a
    wake found in its session at a restart says so).
    """

    planned: Planned
    via: RunVia
    handed_over: datetime | None = None
    fired: datetime | None = None
    accepted: Accepted | None = None
    error: str = ""
    note: str = ""

    def record(self, job: Job) -> RunRecord:
        planned = self.planned
        status: RunStatus
        if self.accepted is not None:
            status = "fired"
        elif self.error:
            status = "failed"
        elif planned.action == "fire":
            raise AssertionError(f"cron job {job.id}: a fire with neither acceptance nor error")
        else:
            status = planned.action
        stamp = self.fired or self.handed_over
        return RunRecord(
            job_id=job.id,
            status=status,
            via=self.via,
            scheduled=planned.scheduled,
            handed_over=self.handed_over,
            fired=self.fired,
            lateness_ms=milliseconds(stamp - planned.scheduled if stamp else planned.lateness),
            coalesced=planned.coalesced,
            session_key=str(job.session_key),
            session_id=self.accepted.session_id if self.accepted else None,
            run_id=self.accepted.run_id if self.accepted else None,
            error=self.error,
            note="; ".join(n for n in (self.note, planned.note) if n),
        )


def milliseconds(delta: timedelta) -> float:
    """A lateness in milliseconds (never negative), to the microsecond."""
    return round(max(delta.total_seconds(), 0.0) * 1000.0, 3)

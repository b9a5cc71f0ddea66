"""What a fire sends: the wake of a cron job, and the record of what became of it.

A direct-wake job wakes its existing ``wake_session`` with that session's own
agent; an independent job wakes ``cron:<id>`` with the job's agent. Either way
the caller is cron: source ``cron``, ``SystemCaller("cron")``. Where the
output goes is the job's (see :mod:`cron.delivery`): its ``deliver_to`` chat,
the woken session's own user (a direct wake, whose header says how), a
session (the older ``wake_session`` form), or nobody.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cron.base import ChatSinkFactory, SessionSinkFactory
from cron.batching import BatchingWaker
from cron.delivery import SILENT_WORDS, HeaderDropSink, WatchedSink, deliver_words, direct_words
from cron.errors import DeliveryTargetError, SessionMissingError
from cron.misfire import Planned
from cron.models import DELIVERY_PENDING, Job, RunRecord, RunStatus, RunVia
from threads.keys import SessionKey
from threads.sinks import Sink
from threads.wake import Accepted, SystemCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.turns import Turn

CRON_CALLER = SystemCaller(name="cron")


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """A wake its session accepted: as what, when, the turn it runs as, the chat sink watched."""

    accepted: Accepted
    at: datetime
    turn: Turn | None = None
    watch: WatchedSink | None = None


async def send_wake(
    waker: BatchingWaker,
    job: Job,
    *,
    scheduled: datetime,
    via: RunVia,
    handed_over: datetime,
    session_sink: SessionSinkFactory | None = None,
    chat_sink: ChatSinkFactory | None = None,
) -> Sent:
    """Hand ``job``'s wake to its session.

    :class:`SessionMissingError` for a gone direct target,
    :class:`DeliveryTargetError` for a ``deliver_to`` chat no running channel
    reaches. The wake's meta names the job and its scheduled time
    (``cron_job``, ``scheduled``): the pair a restarted service looks for in
    the session before firing a due time again (see
    :meth:`cron.base.Waker.held_wakes`).
    """
    key = job.session_key
    meta = cron_meta(job.id, scheduled) | {"via": via}
    sink: Sink = HeaderDropSink(words=SILENT_WORDS)
    watch: WatchedSink | None = None
    agent = None
    if job.direct_wake:
        if not await waker.session_exists(key):
            raise SessionMissingError(job.id, str(key))
        sink = HeaderDropSink(words=direct_words(key))
    else:
        agent = job.agent
        if job.deliver_to:
            chat = SessionKey(job.deliver_to)
            inner = chat_sink(chat) if chat_sink is not None else None
            if inner is None:
                raise DeliveryTargetError(job.id, job.deliver_to)
            meta["deliver_to"] = job.deliver_to
            sink = watch = WatchedSink(inner=inner, words=deliver_words(chat))
        elif job.wake_session:
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
    answer = await waker.accept(key, wake)
    return Sent(accepted=answer.accepted, at=answer.at, turn=answer.turn, watch=watch)


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
    sent: Sent | None = None
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
            delivery=DELIVERY_PENDING if self.sent is not None and self.sent.turn else "",
        )


def milliseconds(delta: timedelta) -> float:
    """A lateness in milliseconds (never negative), to the microsecond."""
    return round(max(delta.total_seconds(), 0.0) * 1000.0, 3)

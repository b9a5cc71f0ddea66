"""Fire times: the APScheduler trigger of a job, and the times it fires at.

With ``cron.service`` and ``cron.scheduler``, one of the three modules that
import APScheduler. A cron expression becomes a ``CronTrigger`` (two, joined by
an ``OrTrigger``, when both day fields are restricted: classic cron's "either
matches") wrapped in :class:`WallClockCron` for daylight saving; an ``at`` job
a ``DateTrigger``; an ``every`` job an ``IntervalTrigger``. :func:`explain`
answers ``gateway cron explain``; :func:`first_fire` refuses a job that can
never fire.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from cron import crontab
from cron.errors import InvalidJobError
from cron.models import Job, check_zone


class WallClockCron(BaseTrigger):  # type: ignore[misc]
    r"""A ``CronTrigger`` that fires a wall-clock time once on a fall-back night.

    When clocks go back, 02:30 happens twice; APScheduler would fire a daily
    02:30 job at both. For an expression that fixes its hours, the second
    occurrence is skipped (as classic cron does); an expression with ``*``
    hours still fires every real hour.

    It also remembers one answer: once ``now`` is past ``previous``,
    ``CronTrigger``'s next time depends on ``previous`` alone. The service
    :meth:`prime`\ s it with the pending fire when it schedules a job and after
    each fire, so the question APScheduler asks (twice) in the instant a fire
    is due is already answered — a burst of due jobs is not slowed by cron
    arithmetic.
    """

    __slots__ = ("_answer", "_asked", "fixed_hour", "inner")

    def __init__(self, inner: Any, fixed_hour: bool) -> None:
        self.inner = inner
        self.fixed_hour = fixed_hour
        self._asked: datetime | None = None
        self._answer: datetime | None = None

    def get_next_fire_time(self, previous: datetime | None, now: datetime) -> datetime | None:
        # Compared in UTC: within one zone, Python's == ignores `fold`, so 02:00 CEST and
        # 02:00 CET (the hour repeated at fall-back) would look like the same time.
        asked = previous.astimezone(UTC) if previous is not None else None
        settled = asked is not None and now.astimezone(UTC) > asked
        if settled and asked == self._asked:
            return self._answer
        moment: datetime | None = self.inner.get_next_fire_time(previous, now)
        while moment is not None and self.fixed_hour and _second_occurrence(moment):
            moment = self.inner.get_next_fire_time(moment, moment)
        if settled:
            self._asked, self._answer = asked, moment
        return moment

    def prime(self, previous: datetime | None) -> None:
        """Answer now what will be asked when ``previous`` fires."""
        if previous is not None and previous.astimezone(UTC) != self._asked:
            # In UTC: wall-clock arithmetic on a fold=1 time would land an hour early.
            self.get_next_fire_time(previous, previous.astimezone(UTC) + timedelta(microseconds=1))

    def __str__(self) -> str:
        return str(self.inner)


def _second_occurrence(moment: datetime) -> bool:
    local = moment.astimezone(UTC).astimezone(moment.tzinfo)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


CronTriggers = dict[tuple[str, str], tuple[Any, bool]]
r"""Parsed ``CronTrigger``\ s by (expression, zone), shared by the jobs that use them."""


def build_trigger(
    job: Job, *, anchor: datetime | None = None, shared: CronTriggers | None = None
) -> Any:
    """The APScheduler trigger of a job. ``anchor`` starts an ``every`` job's chain.

    With ``shared``, jobs with the same expression and zone share one parsed
    ``CronTrigger`` (it is read-only once built); each still gets its own wrapper.
    """
    if job.kind == "cron":
        expr = job.expr or ""
        if shared is None:
            return cron_trigger(expr, job.timezone, job_id=job.id)
        key = (expr, job.timezone)
        if key not in shared:
            trigger = cron_trigger(expr, job.timezone, job_id=job.id)
            shared[key] = (trigger.inner, trigger.fixed_hour)
        inner, fixed_hour = shared[key]
        return WallClockCron(inner, fixed_hour)
    if job.kind == "at":
        return DateTrigger(run_date=job.at, timezone=UTC)
    interval = job.interval or timedelta(seconds=1)
    start = anchor or (datetime.now(UTC) + interval)
    return IntervalTrigger(seconds=int(interval.total_seconds()), start_date=start, timezone=UTC)


def cron_trigger(expr: str, timezone: str, *, job_id: str = "") -> Any:
    """A trigger for a five-field expression in an IANA zone; refusals name the field."""
    try:
        tab = crontab.parse(expr)
    except ValueError as exc:
        raise InvalidJobError.one("expr", str(exc), job_id) from None
    try:
        zone = ZoneInfo(check_zone(timezone))
    except ValueError as exc:
        raise InvalidJobError.one("timezone", str(exc), job_id) from None
    try:
        triggers = [CronTrigger.from_crontab(e, timezone=zone) for e in tab.alternatives()]
    except ValueError as exc:
        raise InvalidJobError.one("expr", f"{expr!r}: {exc}", job_id) from None
    # Both day fields restricted: classic cron's "either matches" is the earlier of the two.
    inner = triggers[0] if len(triggers) == 1 else OrTrigger(triggers)
    return WallClockCron(inner, tab.hour_is_fixed)


def fire_times(trigger: Any, after: datetime, n: int) -> list[datetime]:
    """The next ``n`` fire times of ``trigger`` strictly after ``after``, in UTC."""
    out: list[datetime] = []
    previous: datetime | None = None
    after = after.astimezone(UTC)
    now = after + timedelta(microseconds=1)
    while len(out) < n:
        moment = trigger.get_next_fire_time(previous, now)
        if moment is None:
            break
        if moment > after:  # a DateTrigger repeats its one time when asked from scratch
            out.append(moment.astimezone(UTC))
        previous = now = moment
    return out


def explain(
    expr: str, timezone: str, n: int = 5, *, after: datetime | None = None
) -> list[datetime]:
    """The next ``n`` fire times of ``expr`` in ``timezone`` after ``after`` (default now), in UTC.

    Raises :class:`InvalidJobError` naming ``expr`` or ``timezone``.
    """
    trigger = cron_trigger(expr, timezone)
    times = fire_times(trigger, after or datetime.now(UTC), n)
    if not times:
        raise InvalidJobError.one("expr", f"{expr!r} never fires (no such date, e.g. 30 February)")
    return times


def first_fire(job: Job, now: datetime) -> datetime | None:
    """The first fire of a job being set at ``now``; refuses one that can never fire."""
    if job.kind == "at":
        if job.at is None or job.at <= now:
            at = job.at.isoformat() if job.at else "none"
            raise InvalidJobError.one(
                "at",
                f"{at} is not in the future (now {now.isoformat()}); give a later time",
                job.id,
            )
        return job.at
    interval = job.interval
    anchor = now + interval if interval is not None else None
    times = fire_times(build_trigger(job, anchor=anchor), now, 1)
    if not times:
        raise InvalidJobError.one("expr", f"{job.expr!r} never fires (no such date)", job.id)
    return times[0]


def first_fire_or_none(job: Job, now: datetime) -> datetime | None:
    """Like :func:`first_fire`, but a job that can no longer fire gets None."""
    try:
        return first_fire(job, now)
    except InvalidJobError:
        return job.at if job.kind == "at" else None

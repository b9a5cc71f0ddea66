"""The APScheduler side of the cron service: its scheduler on our clock, and our executor.

:class:`CronScheduler` is APScheduler 3's ``AsyncIOScheduler`` with its time
taken from a :class:`~cron.base.Clock`: APScheduler reads ``datetime.now()``
inside its scheduling pass and sleeps with ``loop.call_later``; here the pass
reads the clock and the wake-up waits on the clock's timer, whose callback
runs the pass at once. With the wall clock nothing changes; with a test's
clock, the test decides when a job is due (decision cron-12).
:class:`CronExecutor` receives every due time of a job and hands them to the
service instead of calling a function (decision cron-01).

Only this module, ``cron.service`` and ``cron.triggers`` import APScheduler.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import (
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_SUBMITTED,
    JobSubmissionEvent,
)
from apscheduler.executors.base import BaseExecutor, MaxInstancesReachedError
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import STATE_PAUSED

from cron.base import Clock

log = logging.getLogger(__name__)

Due = Callable[[str, list[datetime]], "asyncio.Task[None]"]
"""The service's side of a fire: ``(job id, due times)`` → the task handling them."""

Soon = Callable[[list[str]], None]
"""The service's side of what comes next: the ids of jobs due within the look-ahead."""

_NEVER = datetime.min.replace(tzinfo=UTC)


class CronScheduler(AsyncIOScheduler):  # type: ignore[misc]
    """``AsyncIOScheduler`` reading "now" from ``clock`` and waking up on its timers.

    With ``soon`` and ``ahead_seconds`` > 0 it also wakes up ``ahead_seconds``
    before each due time and tells ``soon`` which jobs come due by then, once
    per job and due time (the service opens their sessions ahead).
    """

    def __init__(
        self, clock: Clock, *, soon: Soon | None = None, ahead_seconds: float = 0.0
    ) -> None:
        super().__init__(timezone=UTC)
        self._clock = clock
        self._soon = soon
        self._ahead = timedelta(seconds=ahead_seconds if soon is not None else 0.0)
        self._told_until = _NEVER  # jobs due up to here were told to ``soon``

    def _start_timer(self, wait_seconds: float | None) -> None:
        self._stop_timer()
        if wait_seconds is not None:
            self._timeout = self._clock.call_later(wait_seconds, self._timer_fired)

    def _timer_fired(self) -> None:
        """The pass, run at once: a timer fires on the loop already.

        ``wakeup`` may be called from any thread, so it goes through
        ``call_soon_threadsafe`` and the pass runs a loop pass later; a
        burst's fires would wait for whatever else that pass runs first.
        """
        self._stop_timer()
        self._start_timer(self._process_jobs())

    def _process_jobs(self) -> float | None:
        """``BaseScheduler._process_jobs`` (APScheduler 3.11), with "now" from the clock.

        Returns how long to wait until the next due job (None: no job). The
        service's jobs never coalesce on APScheduler's side, and their job
        store is the in-memory one, which cannot fail a read.
        """
        if self.state == STATE_PAUSED:
            return None
        now = self._clock.now()
        next_wakeup: datetime | None = None
        events = []
        with self._jobstores_lock:
            for alias, jobstore in self._jobstores.items():
                for job in jobstore.get_due_jobs(now):
                    run_times = job._get_run_times(now)
                    if not run_times:
                        continue
                    try:
                        self._lookup_executor(job.executor).submit_job(job, run_times)
                    except MaxInstancesReachedError:
                        kind = EVENT_JOB_MAX_INSTANCES
                    except Exception:
                        log.exception("cron: handing job %s its due times failed", job.id)
                        kind = None
                    else:
                        kind = EVENT_JOB_SUBMITTED
                    if kind is not None:
                        events.append(JobSubmissionEvent(kind, job.id, alias, run_times))
                    following = job.trigger.get_next_fire_time(run_times[-1], now)
                    if following:
                        job._modify(next_run_time=following)
                        jobstore.update_job(job)
                    else:
                        self.remove_job(job.id, alias)
                upcoming = jobstore.get_next_run_time()
                if upcoming and (next_wakeup is None or upcoming < next_wakeup):
                    next_wakeup = upcoming
        for event in events:
            self._dispatch_event(event)
        if next_wakeup is None:
            return None
        now = self._clock.now()
        if self._ahead and next_wakeup > self._told_until:
            if next_wakeup - self._ahead > now:
                return (next_wakeup - self._ahead - now).total_seconds()  # wake up to tell
            self._tell_soon(now + self._ahead)
            now = self._clock.now()  # telling takes time: wait from when it is done
        return max((next_wakeup - now).total_seconds(), 0.0)

    def _tell_soon(self, horizon: datetime) -> None:
        """Tell ``soon`` the jobs due by ``horizon`` it has not heard of yet."""
        assert self._soon is not None
        told = self._told_until
        with self._jobstores_lock:
            soon = [
                job.id
                for jobstore in self._jobstores.values()
                for job in jobstore.get_due_jobs(horizon)
                if job.next_run_time is not None and job.next_run_time > told
            ]
        self._told_until = horizon
        if soon:
            self._soon(soon)


class CronExecutor(BaseExecutor):  # type: ignore[misc]
    """Hands APScheduler's due times to the service instead of calling a function."""

    def __init__(self, due: Due) -> None:
        super().__init__()
        self._due = due

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        task = self._due(job.id, list(run_times))
        task.add_done_callback(lambda done: self._finished(job.id, done))

    def _finished(self, job_id: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            self._run_job_success(job_id, [])
        else:
            error = task.exception()
            self._run_job_error(job_id, error, error.__traceback__ if error else None)


def never_called() -> None:
    raise AssertionError("cron jobs are carried out by the cron executor, not called")


# APScheduler checks a job's function against its arguments on every add_job, through
# inspect.signature; a ready signature spares that work for 10 000 jobs at start-up.
never_called.__signature__ = inspect.Signature()  # type: ignore[attr-defined]

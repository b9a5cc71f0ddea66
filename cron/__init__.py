"""Cron: jobs that fire wakes at times, on APScheduler 3, with a run ledger.

The gateway wires it::

    store = await connect_store(config.state_store_url())
    service = CronService.from_config(config, store, waker=ManagerWaker(thread_manager),
                                      session_sink=...)   # optional
    async with service: ...                                # start / stop

``Waker`` is cron's port to the thread manager, which ``cron.manager_waker``
adapts to it (fires due together reach it as one batch wake, ``cron.batching``);
``JobStore`` the state store's cron share (SQLite or Redis).
``cron.service``, its ``cron.scheduler`` and ``cron.triggers`` are the only modules that import
APScheduler. Time comes from a ``cron.base.Clock`` (the wall clock by default).
"""

from cron.base import JobStore, SessionSinkFactory, Waker
from cron.errors import (
    CronError,
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    NoGatewayError,
    NotYourJobError,
    SessionMissingError,
    StoreError,
)
from cron.models import Job, JobView, RunRecord
from cron.service import CronService, explain
from cron.store import connect_store, open_store

__all__ = [
    "CronError",
    "CronService",
    "InvalidJobError",
    "Job",
    "JobConflictError",
    "JobNotFoundError",
    "JobStore",
    "JobView",
    "NoGatewayError",
    "NotYourJobError",
    "RunRecord",
    "SessionMissingError",
    "SessionSinkFactory",
    "StoreError",
    "Waker",
    "connect_store",
    "explain",
    "open_store",
]

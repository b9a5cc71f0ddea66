"""The ports of the cron package: what it needs from the gateway, and its job store.

* :class:`Waker` — the gateway's thread manager, seen from cron: hand a wake
  to a session (durable before it returns; with the turn it will run as, so
  the ledger can record what became of its output), ask whether a session
  exists, and which cron wakes a session already holds (``cron.manager_waker``
  adapts the thread manager to it); a :class:`BatchWaker` also takes many
  wakes at once, as a burst of fires hands them over (``cron.batching``), and
  a :class:`ThreadOpener` opens the sessions of fires about to come.
* :class:`JobStore` — jobs, their schedule state, the run ledger, run-now
  requests and the running service's heartbeat, kept in the gateway's state
  store (``cron.sqlite_store`` by default, ``cron.redis_store`` on Redis).
* :class:`Clock` — where "now" comes from and how cron waits for a later
  time (:class:`WallClock` in production), so a test decides when things fire.

Nothing here imports APScheduler; ``cron.service``, ``cron.scheduler`` and
``cron.triggers`` are the modules that do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from cron.models import Job, JobState, RunRecord
from threads.keys import SessionKey
from threads.sinks import Sink
from threads.wake import Accepted, Wake
from threads.wake_batch import Ahead, WakeResult

if TYPE_CHECKING:
    from threads.turns import Turn


class Timer(Protocol):
    """A callback waiting for its time on a :class:`Clock`."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Where cron's time comes from: the current time, and timers for later ones.

    A running cron service reads every "now" from its clock — to validate an
    ``at`` time, to judge lateness, to stamp the ledger — and waits on its
    timers for the next fire and the next poll of the store. A test that
    brings a clock of its own therefore decides when anything is due, and
    nothing it checks depends on how fast the machine runs.
    """

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` on the running event loop ``delay`` seconds from now."""
        ...


class WallClock:
    """The real time; timers on the running event loop."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


SessionSinkFactory = Callable[[SessionKey, SessionKey], Sink]
"""Builds the sink that turns a reply into a wake of another session: ``(target, origin)``.

``origin`` is the job's own session (``cron:<id>``), the caller the target sees.
"""

ChatSinkFactory = Callable[[SessionKey], Sink | None]
"""Builds the sink that reaches the user of a chat key (a job's ``deliver_to``).

None when that chat's channel is not running in this gateway: the fire then
fails, saying so, rather than run a turn whose output can reach no one.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldWake:
    """A wake a session already holds: as what it was accepted, when, and its meta.

    ``handed_over`` is the wake's own ``created`` time (when cron handed it
    over); ``accepted_at`` when the session wrote it.
    """

    accepted: Accepted
    meta: Mapping[str, str]
    handed_over: datetime
    accepted_at: datetime


class Waker(Protocol):
    """The gateway's thread manager, as cron uses it.

    ``wake`` returns once the wake is durable in the session; a wake with
    ``source=cron`` arriving during a turn queues behind it (busy policy
    ``queue``) and never interrupts it.
    """

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted: ...

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, Turn | None]:
        """As :meth:`wake`, with the turn the wake runs as (None: it cannot be followed).

        Cron waits for that turn to end, after recording the fire, to record
        what became of its output (the run's ``delivery``).
        """
        ...

    async def session_exists(self, key: SessionKey) -> bool: ...

    async def held_wakes(self, key: SessionKey, meta: Mapping[str, str]) -> list[HeldWake]:
        """The wakes the key's session holds whose meta has every item of ``meta``.

        Accepted wakes only, in the order the session accepted them; an empty
        list when the key names no session. A restarted cron service asks this
        before firing a due time again (a crash may have come between a wake's
        acceptance and its ledger record).
        """
        ...


@runtime_checkable
class BatchWaker(Protocol):
    """A :class:`Waker` that also takes many wakes at once (the thread manager does).

    Each wake is accepted as :meth:`Waker.wake_turn` would accept it alone, with
    its own result; the batch shares the store's durable rounds, and its turns
    start once all of it is durable (:mod:`threads.wake_batch`).
    """

    async def wake_many(self, wakes: Sequence[tuple[SessionKey, Wake]]) -> list[WakeResult]: ...


@runtime_checkable
class ThreadOpener(Protocol):
    """A :class:`Waker` that opens sessions ahead of their wakes (the thread manager does).

    The service calls it a moment before jobs are due (``open_ahead_seconds``)
    with their keys: evicted sessions are loaded, new ones created, so the
    burst's wakes find live threads. Nothing is accepted ahead; a key that
    cannot be opened is left for its wake to report.
    """

    async def open_ahead(self, keys: Sequence[Ahead]) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """An operator's ``run-now``, waiting for the running service to pick it up."""

    job_id: str
    requested: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Changes:
    """What changed in the store since a version: jobs set, ids removed, run requests claimed."""

    version: int
    jobs: tuple[Job, ...] = ()
    removed: tuple[str, ...] = ()
    requests: tuple[RunRequest, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Advance:
    """Move a job's pending fire on, unless the job was set again since ``schedule_rev``."""

    next_fire: datetime | None
    schedule_rev: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Recording:
    """One job's share of a ledger write: its new records and, maybe, its next pending fire."""

    job_id: str
    runs: tuple[RunRecord, ...]
    advance: Advance | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Beat:
    """The running service's heartbeat: who, and when it last said it was alive."""

    owner: str
    at: datetime


class JobStore(Protocol):
    """Cron's share of the gateway's state store.

    Every edit is one atomic write of one job (never a rewrite of all jobs), and
    bumps a store-wide ``version`` so a running service notices edits made by
    other processes by polling :meth:`version`. Ledger writes and heartbeats do
    not bump it.
    """

    url: str
    """The store's URL with any password redacted: for messages and log lines."""

    async def close(self) -> None: ...

    async def version(self) -> int:
        """The change counter: bumped by every edit and run request."""
        ...

    async def upsert(self, job: Job, *, next_fire: datetime | None) -> Job:
        """Store ``job`` by id (keeping ``created`` of an existing one); reset its state.

        Returns the stored job with its new ``revision``.
        """
        ...

    async def set_enabled(self, job_id: str, enabled: bool, at: datetime) -> Job | None:
        """Pause or resume (``updated`` becomes ``at``); the schedule state is kept.

        None when there is no such job."""
        ...

    async def disable_if_unchanged(self, job_id: str, revision: int) -> Job | None:
        """Disable a job (a spent ``at`` job) unless it was edited after ``revision``.

        Returns the disabled job, or None when it was edited or removed meanwhile."""
        ...

    async def remove(self, job_id: str) -> bool:
        """Delete a job and its state (its ledger stays). False when there was none."""
        ...

    async def get(self, job_id: str) -> Job | None: ...

    async def jobs(self) -> list[Job]: ...

    async def state(self, job_id: str) -> JobState | None: ...

    async def states(self) -> dict[str, JobState]: ...

    async def changes(self, since: int) -> Changes:
        """Jobs set and removed after ``since``, and every pending run request (claimed)."""
        ...

    async def record(
        self, job_id: str, runs: Sequence[RunRecord], *, advance: Advance | None
    ) -> list[RunRecord]:
        """Append ``runs`` to the ledger (numbered), update the job's last status and,
        when ``advance`` is given, its pending fire. Returns the numbered records."""
        ...

    async def record_many(self, batch: Sequence[Recording]) -> list[list[RunRecord]]:
        """:meth:`record` for several jobs in one write; results in the batch's order."""
        ...

    async def runs(self, job_id: str, limit: int = 20) -> list[RunRecord]:
        """The newest ``limit`` ledger records of a job, oldest first."""
        ...

    async def set_delivery(self, job_id: str, seq: int, delivery: str) -> bool:
        """Record what became of run ``seq``'s output (its turn ended after the record).

        False when the record is gone (trimmed, or never written).
        """
        ...

    async def request_run(self, job_id: str, requested: datetime) -> None: ...

    async def beat(self, owner: str, at: datetime) -> None: ...

    async def last_beat(self) -> Beat | None: ...

    async def clear_beat(self, owner: str) -> None: ...

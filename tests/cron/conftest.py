"""Cron test fixtures: the stores (SQLite file, real Redis db 5), a fake waker, run collectors.

Every service a test builds with ``make_service`` runs on the test's
:class:`~tests.clock.ManualClock` (the ``clock`` fixture) unless given
another: jobs are set relative to ``clock.now()`` and fire when the test
advances it.

Each test's Redis keys live under a prefix of its own, carried by the store
URL (``?cron_prefix=…``) so that separate processes given the URL use it too;
only those keys are deleted afterwards. The database is never flushed: two
suites on one machine share it.

The fake :class:`FakeWaker` stands at the gateway's port (``cron.base.Waker``):
it records wakes, knows which sessions exist, can fail, and can hold a session
busy with a running turn, applying the configured busy policy the way the
thread manager does.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from config.models import GatewayConfig
from cron.base import HeldWake, JobStore
from cron.models import RunRecord
from cron.redis_store import PREFIX_PARAM
from cron.service import CronService
from cron.store import connect_store
from tests.clock import ManualClock
from tests.conftest import require_service
from threads.keys import SessionKey
from threads.turns import Policy
from threads.turns import Turn as TurnHandle
from threads.wake import Accepted, Wake

REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 5
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"
DEADLINE = 5.0


@asynccontextmanager
async def redis_space() -> AsyncIterator[str]:
    """A Redis store URL whose keys are this test's alone; they are deleted at the end."""
    require_service("redis", REDIS_HOST, REDIS_PORT)
    prefix = f"test:cron:{secrets.token_hex(8)}:"
    try:
        yield f"{REDIS_URL}?{PREFIX_PARAM}={prefix}"
    finally:
        await delete_keys(prefix)


async def delete_keys(prefix: str) -> None:
    """Delete the keys under ``prefix`` (and nothing else) from the test database."""
    client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'gateway.db'}"


@pytest.fixture(params=["sqlite", "redis"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty cron store, once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'gateway.db'}"
        return
    async with redis_space() as url:
        yield url


@dataclass
class Stores:
    """Opens store values over one URL (several act like several processes' connections)."""

    url: str
    opened: list[JobStore] = field(default_factory=list)

    async def open(self) -> JobStore:
        store = await connect_store(self.url)
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in reversed(self.opened):
            await store.close()


@pytest.fixture
async def stores(store_url: str) -> AsyncIterator[Stores]:
    found = Stores(store_url)
    try:
        yield found
    finally:
        await found.close_all()


@pytest.fixture
async def store(stores: Stores) -> JobStore:
    return await stores.open()


@pytest.fixture
async def sqlite_store(sqlite_url: str) -> AsyncIterator[JobStore]:
    store = await connect_store(sqlite_url)
    try:
        yield store
    finally:
        await store.close()


@dataclass
class Turn:
    """A turn running in a fake session; ``interrupted`` says whether a wake cut it short."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    interrupted: bool = False


class FakeWaker:
    """The gateway's thread manager at cron's port, faked; it stamps acceptance on ``clock``."""

    def __init__(
        self, clock: ManualClock | None = None, sessions: tuple[str, ...] = ("telegram:1",)
    ) -> None:
        self.clock = clock or ManualClock()
        self.sessions = set(sessions)
        self.wakes: list[tuple[SessionKey, Wake]] = []
        self.queued: dict[str, list[Wake]] = {}
        self.running: dict[str, Turn] = {}
        self.failure: Exception | None = None
        self.accepting: asyncio.Event | None = None
        self.handing = asyncio.Event()
        self.accepted_at: list[datetime] = []
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.busy_policy = GatewayConfig().threads.busy_policy
        self.follow = False
        self.turns: list[TurnHandle] = []
        self._arrived = asyncio.Event()

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, TurnHandle | None]:
        """As :meth:`wake`; with ``follow`` set, the turn too (the test ends it)."""
        accepted = await self.wake(key, wake)
        if not self.follow:
            return accepted, None
        turn = TurnHandle(accepted.run_id, accepted.run_id, Policy.QUEUE)
        self.turns.append(turn)
        return accepted, turn

    def start_turn(self, key: str) -> Turn:
        """Hold ``key`` busy with a running turn until the test ends it."""
        self.sessions.add(key)
        turn = self.running[key] = Turn()
        return turn

    async def session_exists(self, key: SessionKey) -> bool:
        return str(key) in self.sessions

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        if self.accepting is not None:
            # The session's durable write, taking as long as the test wants.
            self.handing.set()
            await self.accepting.wait()
        if self.failure is not None:
            raise self.failure
        created = str(key) not in self.sessions
        self.sessions.add(str(key))
        turn = self.running.get(str(key))
        if turn is not None and not turn.done.is_set():
            policy = self.busy_policy[wake.source.value]
            if policy == "queue":
                self.queued.setdefault(str(key), []).append(wake)
            elif policy in ("interrupt", "steer", "rollback"):
                turn.interrupted = True
        self.wakes.append((key, wake))
        self._arrived.set()
        accepted = self._accepted(key, len(self.wakes), created=created)
        self.accepted_at.append(self.clock.now())
        return accepted

    async def held_wakes(self, key: SessionKey, meta: Mapping[str, str]) -> list[HeldWake]:
        self.asked.append((str(key), dict(meta)))
        return [
            HeldWake(
                accepted=self._accepted(key, number),
                meta=dict(wake.meta),
                handed_over=wake.created,
                accepted_at=self.accepted_at[number - 1],
            )
            for number, (to, wake) in enumerate(self.wakes, 1)
            if to == key and all(wake.meta.get(k) == v for k, v in meta.items())
        ]

    @staticmethod
    def _accepted(key: SessionKey, number: int, *, created: bool = False) -> Accepted:
        return Accepted(
            key=key, session_id=f"s_{key}", run_id=f"s_{key}-t{number}", created=created
        )

    async def woken(
        self, count: int = 1, timeout: float = DEADLINE
    ) -> list[tuple[SessionKey, Wake]]:
        """Wait (with a deadline) until ``count`` wakes arrived; return them."""
        return await wait_until(self._arrived, lambda: list(self.wakes), count, timeout)


class Runs:
    """Collects the service's run records as they reach the ledger."""

    def __init__(self, service: CronService) -> None:
        self.records: list[RunRecord] = []
        self._arrived = asyncio.Event()
        service.add_listener(self._add)

    def _add(self, record: RunRecord) -> None:
        self.records.append(record)
        self._arrived.set()

    async def wait(
        self,
        count: int = 1,
        timeout: float = DEADLINE,
        *,
        where: Callable[[RunRecord], bool] | None = None,
    ) -> list[RunRecord]:
        """Wait (with a deadline) until ``count`` matching records arrived; return them."""
        return await wait_until(
            self._arrived,
            lambda: [r for r in self.records if where is None or where(r)],
            count,
            timeout,
        )


async def wait_until(
    event: asyncio.Event, found: Callable[[], list[Any]], count: int, timeout: float
) -> list[Any]:
    """Wait on ``event`` until ``found()`` has ``count`` items, or fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(items := found()) < count:
        event.clear()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"waited {timeout} s for {count}, have {len(items)}: {items}")
        try:
            await asyncio.wait_for(event.wait(), remaining)
        except TimeoutError:
            continue
    return items


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def waker(clock: ManualClock) -> FakeWaker:
    return FakeWaker(clock)


@pytest.fixture
async def make_service(clock: ManualClock) -> AsyncIterator[Callable[..., CronService]]:
    """Builds services (on the test's clock, unless given ``clock=``) and stops them at the end."""
    made: list[CronService] = []

    def make(store: JobStore, waker: Any = None, **options: Any) -> CronService:
        options.setdefault("clock", clock)
        service = CronService(store, waker, **options)
        made.append(service)
        return service

    yield make
    for service in reversed(made):
        await service.stop()


async def spent(service: CronService, job_id: str) -> None:
    """Wait (with a deadline) until the ``at`` job is disabled: the step after its record."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while (await service.get(job_id)).job.enabled:
        assert loop.time() < deadline, f"{job_id} still enabled after its fire"
        await asyncio.sleep(0.02)  # polling the store with a deadline


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


async def eventually(check: Callable[[], bool], within: float, *, step: float = 0.02) -> float:
    """Poll ``check`` until it holds, failing after ``within`` seconds; return the time taken."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not check():
        if loop.time() - start > within:
            raise TimeoutError(f"still not true after {within} s")
        await asyncio.sleep(step)  # polling with a deadline
    return loop.time() - start

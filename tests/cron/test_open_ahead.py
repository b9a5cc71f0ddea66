"""A second before jobs come due, the service has their sessions opened: the burst finds them live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from apscheduler.triggers.date import DateTrigger

from cron.base import JobStore
from cron.manager_waker import ManagerWaker
from cron.scheduler import CronExecutor, CronScheduler, never_called
from cron.service import CronService
from tests.clock import ManualClock
from tests.cron.conftest import DEADLINE, FakeWaker, Runs
from tests.threads.conftest import Runtime, make_runtime, prompts, stored, system_wake
from tests.threads.counting import CountingStore
from threads.store import open_store
from threads.testing.scripted import ScriptedModel
from threads.wake_batch import Ahead

COUNT = 6

Make = Callable[..., CronService]


class OpeningWaker(FakeWaker):
    """The fake thread manager, also recording what it is asked to open ahead."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.opened: list[list[Ahead]] = []
        self.asked = asyncio.Event()

    async def open_ahead(self, keys: Sequence[Ahead]) -> int:
        self.opened.append(list(keys))
        self.asked.set()
        return len(keys)


async def settled() -> None:
    """Let the loop run what the clock's timers scheduled (a pass of APScheduler, its tasks)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_sessions_of_jobs_due_within_a_second_are_opened_ahead_once(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    waker = OpeningWaker(clock)
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=10)
    await service.upsert(
        service.draft(
            id="nudge",
            kind="at",
            at=due,
            task="check in",
            wake_session="telegram:1",
            direct_wake=True,
        )
    )
    await service.upsert(service.draft(id="report", kind="at", at=due, task="report", agent="ops"))
    await service.upsert(service.draft(id="paused", kind="at", at=due, task="not now"))
    await service.pause("paused")
    await service.upsert(
        service.draft(id="later", kind="at", at=due + timedelta(seconds=5), task="x")
    )

    clock.advance_to(due - timedelta(seconds=1.5))
    await settled()
    assert waker.opened == []

    clock.advance_to(due - timedelta(seconds=1))
    async with asyncio.timeout(DEADLINE):
        await waker.asked.wait()
    assert waker.opened == [
        [Ahead(key="telegram:1"), Ahead(key="cron:report", create=True, agent="ops")]
    ]

    clock.advance_to(due)
    await runs.wait(3)  # the two fires, and the paused job's skip
    assert len(waker.opened) == 1  # told once for its due time


async def test_no_session_is_opened_ahead_when_open_ahead_seconds_is_zero(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    waker = OpeningWaker(clock)
    service = make_service(sqlite_store, waker, open_ahead_seconds=0)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=10)
    await service.upsert(service.draft(id="report", kind="at", at=due, task="report"))

    clock.advance_to(due - timedelta(seconds=1))
    await settled()
    clock.advance_to(due)
    await runs.wait(1)

    assert waker.opened == []


def scheduled(
    clock: ManualClock, due: datetime, soon: Callable[[list[str]], None]
) -> tuple[CronScheduler, list[datetime]]:
    """A started scheduler opening ahead a second early, with one job due at ``due``.

    The list it returns gets the clock's time at each hand-over of a fire.
    """
    fired: list[datetime] = []

    def on_due(job_id: str, run_times: list[datetime]) -> asyncio.Task[None]:
        fired.append(clock.now())
        return asyncio.get_running_loop().create_task(asyncio.sleep(0))

    scheduler = CronScheduler(clock, soon=soon, ahead_seconds=1.0)
    scheduler.add_executor(CronExecutor(on_due), alias="cron")
    scheduler.add_job(never_called, trigger=DateTrigger(due), id="report", executor="cron")
    scheduler.start()
    return scheduler, fired


async def test_the_time_spent_opening_sessions_ahead_does_not_make_their_fires_late(
    clock: ManualClock,
) -> None:
    due = clock.now() + timedelta(seconds=10)

    def soon(job_ids: list[str]) -> None:
        clock.advance(0.25)  # telling them (with 10 000 jobs loaded) takes a while

    scheduler, fired = scheduled(clock, due, soon)
    try:
        await settled()
        clock.advance_to(due - timedelta(seconds=1))
        await settled()
        clock.advance_to(due)
        await settled()
        assert fired == [due]
    finally:
        scheduler.shutdown(wait=False)
        await settled()


async def test_a_due_job_is_handed_over_in_the_timers_own_callback(clock: ManualClock) -> None:
    due = clock.now() + timedelta(seconds=10)
    scheduler, fired = scheduled(clock, due, lambda job_ids: None)
    try:
        await settled()
        clock.advance_to(due - timedelta(seconds=1))
        await settled()
        clock.advance_to(due)
        assert fired == [due]  # no loop pass ran between the timer and the hand-over
    finally:
        scheduler.shutdown(wait=False)
        await settled()  # the shutdown's callback, and the fire's task


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runtime, CountingStore]]:
    counted = CountingStore(open_store(f"jsonl://{tmp_path / 'sessions'}"))
    rt = await make_runtime(counted, ScriptedModel())
    yield rt, counted
    await rt.manager.close()
    await counted.close()


async def until_open(rt: Runtime, keys: list[str]) -> None:
    """Poll (with a deadline) until every key has a thread: opening ahead has no event."""
    async with asyncio.timeout(DEADLINE):
        while not all(rt.manager.thread(key) is not None for key in keys):
            await asyncio.sleep(0.001)


async def test_a_bursts_evicted_and_new_sessions_are_opened_before_it_and_its_fires_find_them_live(
    runtime: tuple[Runtime, CountingStore],
    sqlite_store: JobStore,
    make_service: Make,
    clock: ManualClock,
) -> None:
    rt, counted = runtime
    cold = [f"telegram:{i}" for i in range(COUNT)]
    for key in cold:
        await rt.manager.wake(key, system_wake("hello"))
    async with asyncio.timeout(DEADLINE):
        for thread in rt.manager.threads():
            await thread.session.wait_idle()
    await rt.manager.evict_idle(0)
    service = make_service(sqlite_store, ManagerWaker(rt.manager))
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=10)
    for i, key in enumerate(cold):
        nudge = service.draft(
            id=f"nudge-{i}", kind="at", at=due, task="check in", wake_session=key, direct_wake=True
        )
        await service.upsert(nudge)
        await service.upsert(service.draft(id=f"report-{i}", kind="at", at=due, task="report"))
    counted.reset()

    clock.advance_to(due - timedelta(seconds=1))
    await until_open(rt, cold + [f"cron:report-{i}" for i in range(COUNT)])

    assert counted.calls["load"] == COUNT
    assert counted.calls["create"] == COUNT
    assert counted.calls["append"] == 0  # nothing accepted ahead of its time
    assert runs.records == []
    counted.reset()

    clock.advance_to(due)
    records = await runs.wait(2 * COUNT)

    assert {r.status for r in records} == {"fired"}
    assert counted.calls["load"] == counted.calls["create"] == counted.calls["point"] == 0
    assert counted.most["prompt"] == 2 * COUNT  # one round for the burst, as before
    for record in records:
        assert record.session_id is not None
        entries = await stored(counted, record.session_id)
        assert [p.run_id for p in prompts(entries) if p.wake.get("meta")] == [record.run_id]

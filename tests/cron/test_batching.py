"""A burst of fires due together reaches the thread manager as one batch wake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from cron.base import JobStore
from cron.manager_waker import ManagerWaker
from cron.service import CronService
from tests.clock import ManualClock
from tests.cron.conftest import DEADLINE, FakeWaker, Runs
from tests.threads.conftest import Runtime, make_runtime, prompts, stored, system_wake
from tests.threads.counting import CountingStore
from threads.ids import new_session_id
from threads.keys import SessionKey
from threads.messages import JSON
from threads.store import open_store
from threads.testing.scripted import ScriptedModel
from threads.turns import Policy, Turn
from threads.wake import Wake
from threads.wake_batch import WakeResult

COUNT = 8

Make = Callable[..., CronService]


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runtime, CountingStore]]:
    counted = CountingStore(open_store(f"jsonl://{tmp_path / 'sessions'}"))
    rt = await make_runtime(counted, ScriptedModel())
    yield rt, counted
    await rt.manager.close()
    await counted.close()


async def idle(rt: Runtime) -> None:
    async with asyncio.timeout(DEADLINE):
        for thread in rt.manager.threads():
            await thread.session.wait_idle()


def fired_by(wake: Mapping[str, JSON], job_id: str) -> bool:
    """Whether a stored wake is a fire of job ``job_id``."""
    meta = wake.get("meta")
    return isinstance(meta, Mapping) and meta.get("cron_job") == job_id


async def test_jobs_due_together_are_accepted_in_one_batch_each_fire_recorded_once(
    runtime: tuple[Runtime, CountingStore],
    sqlite_store: JobStore,
    make_service: Make,
    clock: ManualClock,
) -> None:
    rt, counted = runtime
    checked = [f"telegram:{i}" for i in range(COUNT)]
    for key in checked:
        await rt.manager.wake(key, system_wake("hello"))
    await idle(rt)
    # The burst's sessions are opened as its wakes come, not ahead of them (counted below).
    service = make_service(sqlite_store, ManagerWaker(rt.manager), open_ahead_seconds=0)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=1)
    for i, key in enumerate(checked):
        nudge = service.draft(
            id=f"nudge-{i}", kind="at", at=due, task="check in", wake_session=key, direct_wake=True
        )
        await service.upsert(nudge)
        await service.upsert(service.draft(id=f"report-{i}", kind="at", at=due, task="report"))
    counted.reset()

    clock.advance_to(due)
    records = await runs.wait(2 * COUNT)

    assert {r.status for r in records} == {"fired"}
    assert len({r.run_id for r in records}) == 2 * COUNT
    # Every fire's prompt was on its way to the store at once: one round for the burst,
    # and the independent jobs' sessions were created together.
    assert counted.most["prompt"] == 2 * COUNT
    assert counted.most["create"] == COUNT
    await idle(rt)
    for record in records:
        assert record.session_id is not None
        entries = await stored(counted, record.session_id)
        fired = [p.run_id for p in prompts(entries) if fired_by(p.wake, record.job_id)]
        assert fired == [record.run_id]


async def test_a_fire_refused_in_a_batch_is_recorded_failed_and_the_rest_fire(
    runtime: tuple[Runtime, CountingStore],
    sqlite_store: JobStore,
    make_service: Make,
    clock: ManualClock,
) -> None:
    rt, counted = runtime
    await rt.manager.wake("telegram:fine", system_wake("hello"))
    await idle(rt)
    broken = new_session_id()
    await counted.inner.plant(broken, b"not a session\n")
    await counted.inner.point("telegram:broken", broken)
    service = make_service(sqlite_store, ManagerWaker(rt.manager))
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=1)
    for key in ("telegram:fine", "telegram:broken"):
        job_id = key.removeprefix("telegram:")
        draft = service.draft(
            id=job_id, kind="at", at=due, task="check in", wake_session=key, direct_wake=True
        )
        await service.upsert(draft)

    clock.advance_to(due)
    records = {r.job_id: r for r in await runs.wait(2)}

    assert records["fine"].status == "fired"
    assert records["broken"].status == "failed"
    assert "QuarantinedError" in records["broken"].error
    await idle(rt)


class BusyAfterBatch(FakeWaker):
    """A batch waker after whose answer the loop is busy for a while (the batch's turns start)."""

    async def wake_many(self, wakes: Sequence[tuple[SessionKey, Wake]]) -> list[WakeResult]:
        results = []
        for key, wake in wakes:
            accepted = await self.wake(key, wake)
            turn = Turn(accepted.run_id, accepted.run_id, Policy.QUEUE)
            results.append(WakeResult(key=str(key), accepted=accepted, turn=turn))
        # Runs before any fire's task hears its answer, as the turns the batch starts do.
        asyncio.get_running_loop().call_soon(self.clock.advance, 0.25)
        return results


async def test_a_bursts_fires_are_stamped_fired_when_the_batch_was_accepted_not_when_heard(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    waker = BusyAfterBatch(clock, sessions=())
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=1)
    for i in range(COUNT):
        await service.upsert(service.draft(id=f"report-{i}", kind="at", at=due, task="report"))

    clock.advance_to(due)
    records = await runs.wait(COUNT)

    assert {r.status for r in records} == {"fired"}
    assert [r.fired for r in records] == [due] * COUNT
    assert [r.lateness_ms for r in records] == [0.0] * COUNT
    assert clock.now() > due  # the loop was busy before the fires heard their answers

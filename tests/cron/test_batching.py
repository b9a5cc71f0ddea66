"""A burst of fires due together reaches the thread manager as one batch wake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from pathlib import Path

import pytest

from cron.base import JobStore
from cron.manager_waker import ManagerWaker
from cron.service import CronService
from tests.clock import ManualClock
from tests.cron.conftest import DEADLINE, Runs
from tests.threads.conftest import Runtime, make_runtime, prompts, stored, system_wake
from tests.threads.counting import CountingStore
from threads.ids import new_session_id
from threads.messages import JSON
from threads.store import open_store
from threads.testing.scripted import ScriptedModel

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

"""The thread manager as cron's waker: which cron wakes a real session already holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from cron.manager_waker import ManagerWaker
from cron.wakes import CRON_CALLER, cron_meta
from tests.threads.conftest import Runtime, make_runtime
from threads.agent.tools import ToolContext, tool
from threads.keys import SessionKey
from threads.sinks import DropSink
from threads.store import open_store
from threads.store.base import SessionStore
from threads.testing.scripted import ScriptedModel, call, say
from threads.wake import UserCaller, Wake, WakeSource

KEY = SessionKey("telegram:1")
DUE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Nothing(BaseModel):
    pass


class Gate:
    """Holds a turn inside its tool call until released."""

    def __init__(self) -> None:
        self.inside = asyncio.Event()
        self.release = asyncio.Event()


@pytest.fixture(params=["memory", "jsonl"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    url = "memory://" if request.param == "memory" else f"jsonl://{tmp_path / 'sessions'}"
    opened = open_store(url)
    yield opened
    await opened.close()


@pytest.fixture
async def runtime(store: SessionStore) -> AsyncIterator[tuple[Runtime, Gate]]:
    gate = Gate()

    @tool("hold", "Holds the turn.", Nothing)
    async def hold(args: Nothing, ctx: ToolContext) -> str:
        gate.inside.set()
        await gate.release.wait()
        return "held"

    model = ScriptedModel(call("hold"), say("done"), default=lambda _: say("ok"))
    rt = await make_runtime(store, model, tools=[hold])
    yield rt, gate
    gate.release.set()
    await rt.manager.close()


def cron_wake(job_id: str, scheduled: datetime) -> Wake:
    return Wake(
        source=WakeSource.CRON,
        body="check in",
        caller=CRON_CALLER,
        sink=DropSink(reason="cron"),
        meta=cron_meta(job_id, scheduled) | {"via": "schedule"},
    )


async def idle(rt: Runtime) -> None:
    for thread in rt.manager.threads():
        await asyncio.wait_for(thread.session.wait_idle(), 10)


async def test_a_wake_queued_behind_a_turn_is_held_once_though_receipt_and_prompt_carry_it(
    runtime: tuple[Runtime, Gate],
) -> None:
    rt, gate = runtime
    waker = ManagerWaker(rt.manager)
    await rt.manager.wake(
        KEY,
        Wake(source=WakeSource.TELEGRAM, body="hi", caller=UserCaller(channel="t", user_id="1")),
    )
    await asyncio.wait_for(gate.inside.wait(), 10)
    accepted = await waker.wake(KEY, cron_wake("checkin", DUE))

    [queued] = await waker.held_wakes(KEY, {"cron_job": "checkin"})
    assert queued.accepted.run_id == accepted.run_id
    assert queued.meta["scheduled"] == DUE.isoformat()

    gate.release.set()
    await idle(rt)
    [ran] = await waker.held_wakes(KEY, {"cron_job": "checkin"})
    assert ran.accepted == queued.accepted


async def test_held_wakes_are_read_from_the_store_once_the_thread_is_evicted(
    runtime: tuple[Runtime, Gate],
) -> None:
    rt, gate = runtime
    gate.release.set()
    waker = ManagerWaker(rt.manager)
    handed_over = datetime.now(UTC)
    wake = cron_wake("checkin", DUE)
    accepted = await waker.wake(KEY, wake)
    await idle(rt)
    await rt.manager.evict_idle(0)
    assert rt.manager.thread(KEY) is None

    [held] = await waker.held_wakes(KEY, cron_meta("checkin", DUE))
    assert held.accepted.run_id == accepted.run_id
    assert held.accepted.session_id == accepted.session_id
    assert held.handed_over == wake.created
    assert handed_over - timedelta(seconds=1) <= held.accepted_at <= datetime.now(UTC)


async def test_only_wakes_whose_meta_matches_are_held(runtime: tuple[Runtime, Gate]) -> None:
    rt, gate = runtime
    gate.release.set()
    waker = ManagerWaker(rt.manager)
    await waker.wake(KEY, cron_wake("checkin", DUE))
    await waker.wake(KEY, cron_wake("checkin", DUE + timedelta(hours=1)))
    await waker.wake(KEY, cron_wake("digest", DUE))
    await idle(rt)
    assert len(await waker.held_wakes(KEY, {"cron_job": "checkin"})) == 2
    assert len(await waker.held_wakes(KEY, cron_meta("checkin", DUE))) == 1
    assert len(await waker.held_wakes(KEY, {"cron_job": "gone"})) == 0


async def test_a_key_without_a_session_holds_nothing(runtime: tuple[Runtime, Gate]) -> None:
    rt, _ = runtime
    waker = ManagerWaker(rt.manager)
    assert await waker.held_wakes(SessionKey("telegram:404"), {"cron_job": "checkin"}) == []
    assert not await waker.session_exists(SessionKey("telegram:404"))

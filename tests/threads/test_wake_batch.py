"""The batch wake: many wakes accepted as single wakes are, in shared store rounds, turns after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.threads.conftest import (
    DEADLINE,
    Blocker,
    Runtime,
    gateway_config,
    make_runtime,
    prompts,
    receipts,
    stored,
    system_wake,
    turn_entries,
)
from tests.threads.counting import CountingStore
from tests.threads.dying import DyingStore
from tests.threads.store.conftest import Backend
from threads.errors import BusyError, QuarantinedError
from threads.ids import new_session_id
from threads.store import open_store
from threads.testing.scripted import ScriptedModel, call
from threads.wake_batch import Ahead

COUNT = 6


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[CountingStore]:
    store = CountingStore(open_store(f"jsonl://{tmp_path / 'sessions'}"))
    yield store
    await store.close()


async def idle(runtime: Runtime) -> None:
    async with asyncio.timeout(DEADLINE):
        for thread in runtime.manager.threads():
            await thread.session.wait_idle()


async def until(predicate: object, what: str) -> None:
    """Poll ``predicate()`` until it holds, with a deadline (state that has no event)."""
    assert callable(predicate)
    try:
        async with asyncio.timeout(DEADLINE):
            while not predicate():
                await asyncio.sleep(0.001)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


async def with_sessions(runtime: Runtime, keys: list[str]) -> None:
    """Each key's session, made by one first wake; every thread idle after."""
    for key in keys:
        await runtime.manager.wake(key, system_wake("hello"))
    await idle(runtime)


async def test_a_batch_accepts_each_wake_once_for_live_evicted_and_new_sessions(
    counted: CountingStore,
) -> None:
    runtime = await make_runtime(counted, ScriptedModel())
    live = [f"telegram:live-{i}" for i in range(COUNT)]
    cold = [f"telegram:cold-{i}" for i in range(COUNT)]
    new = [f"cron:new-{i}" for i in range(COUNT)]
    await with_sessions(runtime, cold)
    await runtime.manager.evict_idle(0)
    await with_sessions(runtime, live)
    assert all(runtime.manager.thread(key) is None for key in cold)
    counted.reset()

    keys = live + cold + new
    results = await runtime.manager.wake_many([(key, system_wake(f"tick {key}")) for key in keys])

    assert [r.key for r in results] == keys
    assert all(r.error is None for r in results), [r.error for r in results]
    for key, result in zip(keys, results, strict=True):
        accepted, turn = result.unwrap()
        assert accepted.key == key
        assert accepted.created == (key in new)
        assert accepted.run_id == turn.run_id
    await idle(runtime)
    for key, result in zip(keys, results, strict=True):
        entries = await stored(counted, result.unwrap()[0].session_id)
        ticks = [p for p in prompts(entries) if p.message.text().endswith(f"tick {key}")]
        assert len(ticks) == 1, key
        ended = {t.run_id for t in turn_entries(entries)}
        assert ticks[0].run_id in ended
    # One store round per phase: every new session created together, every key pointed
    # together, every wake's prompt appended together.
    assert counted.most["create"] == COUNT
    assert counted.most["point"] == COUNT
    assert counted.most["prompt"] == len(keys)
    await runtime.manager.close()


async def test_a_batch_starts_nothing_for_live_leased_threads(counted: CountingStore) -> None:
    # A burst opened ahead finds its threads live and leased: no start task per key, only
    # each key's acceptance runs as a task of its own.
    runtime = await make_runtime(counted, ScriptedModel())
    keys = [f"telegram:live-{i}" for i in range(COUNT)]
    await with_sessions(runtime, keys)
    assert all(runtime.manager.thread(key).session.held for key in keys)  # type: ignore[union-attr]
    loop = asyncio.get_running_loop()
    started: list[str] = []
    loop.set_task_factory(
        lambda loop, coro, **kw: (
            started.append(coro.__qualname__) or asyncio.Task(coro, loop=loop, **kw)
        )
    )
    try:
        results = await runtime.manager.wake_many([(key, system_wake("tick")) for key in keys])
    finally:
        loop.set_task_factory(None)
    assert all(r.error is None for r in results), [r.error for r in results]
    assert not [name for name in started if name.endswith("start")], started
    assert len([name for name in started if name.endswith("accept")]) == COUNT
    await idle(runtime)
    await runtime.manager.close()


async def test_a_refused_wake_fails_alone_and_the_rest_of_the_batch_is_accepted(
    counted: CountingStore,
) -> None:
    config = gateway_config(busy_policy={"cron": "reject"})
    blocker = Blocker()
    model = ScriptedModel(call("block", label="busy"))
    runtime = await make_runtime(counted, model, config=config, tools=[blocker.tool()])
    await runtime.manager.wake("telegram:busy", runtime.user_wake("hold on"))
    await blocker.reached()
    broken = new_session_id()
    await counted.inner.plant(broken, b"not a session\n")
    await counted.inner.point("telegram:broken", broken)

    keys = ["telegram:fine", "telegram:busy", "telegram:broken", "cron:fresh"]
    results = await runtime.manager.wake_many([(key, system_wake("tick")) for key in keys])

    assert isinstance(results[1].error, BusyError)
    assert isinstance(results[2].error, QuarantinedError)
    for result in (results[0], results[3]):
        accepted, _turn = result.unwrap()
        entries = await stored(counted, accepted.session_id)
        assert [p.run_id for p in prompts(entries)] == [accepted.run_id]
    busy = runtime.manager.thread("telegram:busy")
    assert busy is not None
    assert receipts(busy.session.entries()) == []  # a refused wake leaves nothing behind
    blocker.release.set()
    await idle(runtime)
    await runtime.manager.close()


async def test_a_keys_wakes_are_accepted_in_the_batchs_order(counted: CountingStore) -> None:
    runtime = await make_runtime(counted, ScriptedModel())
    results = await runtime.manager.wake_many(
        [("cron:one", system_wake(f"tick {i}")) for i in range(3)]
    )
    accepted = [result.unwrap()[0] for result in results]
    assert accepted[0].created
    assert not accepted[1].created
    assert len({a.session_id for a in accepted}) == 1
    await idle(runtime)
    entries = await stored(counted, accepted[0].session_id)
    ticks = [p.message.text()[-6:] for p in prompts(entries)]
    assert ticks == ["tick 0", "tick 1", "tick 2"]
    await runtime.manager.close()


async def test_no_turn_of_a_batch_starts_before_every_wake_of_it_is_durable(
    counted: CountingStore,
) -> None:
    model = ScriptedModel()
    runtime = await make_runtime(counted, model)
    await with_sessions(runtime, ["telegram:fast", "telegram:slow"])
    fast, slow = runtime.manager.thread("telegram:fast"), runtime.manager.thread("telegram:slow")
    assert fast is not None
    assert slow is not None
    asked = len(model.requests)
    counted.reset()
    counted.hold(slow.session.id)

    batch = asyncio.create_task(
        runtime.manager.wake_many(
            [("telegram:fast", system_wake("now")), ("telegram:slow", system_wake("now"))]
        )
    )
    # The fast session's wake is durable and accepted, and its turn is queued behind the
    # batch: given loop passes (not time) it stays pending, where a turn taken up runs
    # within one.
    await until(lambda: fast.session.id in counted.prompted, "the fast wake is durable")
    await until(lambda: fast.state != "idle", "the fast wake is accepted")
    for _ in range(50):
        await asyncio.sleep(0)
        assert fast.state == "pending"
    assert len(model.requests) == asked
    assert not batch.done()

    counted.free()
    results = await batch
    assert all(r.error is None for r in results)
    await idle(runtime)
    assert len(model.requests) == asked + 2
    await runtime.manager.close()


async def test_a_crash_mid_batch_loses_no_wake_it_accepted_and_runs_each_once(
    crash_backend: Backend,
) -> None:
    model = ScriptedModel()
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model)
    live = [f"telegram:live-{i}" for i in range(3)]
    await with_sessions(dead, live)
    sessions = {thread.key: thread.session.id for thread in dead.manager.threads()}
    first = sessions[live[0]]
    # The process dies as soon as the first of the batch's prompts has landed.
    dying.die_after(lambda session, entries: session == first and bool(prompts(entries)))
    keys = [*live, "cron:new-0", "cron:new-1"]
    batch = asyncio.create_task(
        dead.manager.wake_many([(key, system_wake("tick")) for key in keys])
    )
    await dying.wait_dead()
    assert not batch.done()  # nothing was answered: the batch died mid-way
    crash_backend.stores.remove(dying.inner)
    await dying.inner.close()

    alive = await make_runtime(crash_backend.open(), model)
    dying.reap()
    await batch  # the dead runtime's frozen calls fail now
    await dead.manager.close()
    await idle(alive)
    for key in live:
        entries = await stored(alive.store, sessions[key])
        ticks = [p for p in prompts(entries) if p.message.text().endswith("tick")]
        assert len(ticks) <= 1, key
        ended = [t.run_id for t in turn_entries(entries)]
        for tick in ticks:  # accepted before the crash: run once after it
            assert ended.count(tick.run_id) == 1
    first_entries = await stored(alive.store, first)
    assert [p for p in prompts(first_entries) if p.message.text().endswith("tick")]
    # The new keys take wakes after the restart, whatever of their creation had landed.
    for key in ("cron:new-0", "cron:new-1"):
        accepted = await alive.manager.wake(key, system_wake("again"))
        assert accepted.session_id
    await idle(alive)
    await alive.manager.close()


async def test_opening_ahead_loads_evicted_and_creates_new_sessions_and_accepts_nothing(
    counted: CountingStore,
) -> None:
    runtime = await make_runtime(counted, ScriptedModel())
    cold = [f"telegram:cold-{i}" for i in range(COUNT)]
    new = [f"cron:new-{i}" for i in range(COUNT)]
    await with_sessions(runtime, cold)
    await runtime.manager.evict_idle(0)
    counted.reset()

    ahead = [Ahead(key=key) for key in [*cold, "telegram:nobody"]]
    ahead += [Ahead(key=key, create=True, agent="default") for key in new]
    opened = await runtime.manager.open_ahead(ahead)

    assert opened == 2 * COUNT
    assert runtime.manager.thread("telegram:nobody") is None  # no session, none made
    assert counted.calls["load"] == COUNT
    assert counted.calls["create"] == COUNT
    assert counted.calls["point"] == COUNT
    assert counted.calls["append"] == 0  # nothing accepted ahead of its wake
    for key in cold + new:
        thread = runtime.manager.thread(key)
        assert thread is not None
        assert thread.state == "idle"

    counted.reset()
    keys = cold + new
    results = await runtime.manager.wake_many([(key, system_wake(f"tick {key}")) for key in keys])

    assert counted.calls["load"] == counted.calls["create"] == counted.calls["point"] == 0
    for key, result in zip(keys, results, strict=True):
        accepted, _turn = result.unwrap()
        assert accepted.created == (key in new)  # the first wake of a session made ahead
    await idle(runtime)
    for key, result in zip(keys, results, strict=True):
        entries = await stored(counted, result.unwrap()[0].session_id)
        ticks = [p for p in prompts(entries) if p.message.text().endswith(f"tick {key}")]
        assert len(ticks) == 1, key
    await runtime.manager.close()


async def test_a_key_that_cannot_be_opened_ahead_is_left_for_its_wake_to_refuse(
    counted: CountingStore,
) -> None:
    runtime = await make_runtime(counted, ScriptedModel())
    broken = new_session_id()
    await counted.inner.plant(broken, b"not a session\n")
    await counted.inner.point("telegram:broken", broken)

    opened = await runtime.manager.open_ahead(
        [Ahead(key="telegram:broken"), Ahead(key="cron:fine", create=True)]
    )

    assert opened == 1
    assert runtime.manager.thread("telegram:broken") is None
    (refused,) = await runtime.manager.wake_many([("telegram:broken", system_wake("tick"))])
    assert isinstance(refused.error, QuarantinedError)
    await runtime.manager.close()
    assert await runtime.manager.open_ahead([Ahead(key="cron:late", create=True)]) == 0
    assert await counted.resolve("cron:late") is None  # a closed manager opens nothing

"""A store outage: new input is refused, accepted input waits and runs exactly once when it is back.

Redis is a server of the test's own (:mod:`tests.private_redis`), killed and
started again on its port; a full disk is the jsonl store's file write
failing with ``ENOSPC`` half-way through a batch, through the store's seam
at that write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.private_redis import LostReply, PrivateRedis, private_redis  # noqa: F401 - fixture
from tests.threads.conftest import (
    DEADLINE,
    Blocker,
    FullDisk,
    HandAgent,
    Runtime,
    accepted_and_never_run,
    answer,
    make_runtime,
    prompts,
    stored,
    texts,
    turn_entries,
)
from threads.errors import UnavailableError
from threads.manager import HELD
from threads.messages import Message
from threads.session import Session
from threads.store.base import SessionStore
from threads.store.entries import Entry
from threads.store.jsonl import JsonlStore
from threads.store.redis import RedisStore
from threads.testing.scripted import ScriptedModel, call, dispatch
from threads.turns import Run, RunResult
from threads.wake import Wake, WakeSource

KEY = "telegram:42"


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(DEADLINE):
        while not check():
            await asyncio.sleep(0.01)  # polling with a deadline
    assert check(), what


def _bodies(entries: list[Entry]) -> list[str]:
    return [p.message.text().rsplit("\n", 1)[-1] for p in prompts(entries)]


async def _settled(rt: Runtime, session_id: str) -> list[Entry]:
    thread = rt.manager.thread(KEY)
    assert thread is not None
    async with asyncio.timeout(DEADLINE):
        await thread.session.wait_idle()
    return await stored(rt.store, session_id)


async def _outage_mid_turn(
    store: SessionStore, stop: Callable[[], object], restart: Callable[[], object]
) -> None:
    """A turn mid-tool and a queued wake when the store goes; a new wake comes during it."""
    blocker = Blocker()
    model = ScriptedModel(call("block"), dispatch(("caller:user", "first")))
    rt = await make_runtime(store, model, tools=[blocker.tool()])
    await rt.manager.wake(KEY, _api(rt, "first"))
    await blocker.reached()
    await rt.manager.wake(KEY, _api(rt, "second"))

    await _maybe(stop())
    with pytest.raises(UnavailableError):
        await rt.manager.wake(KEY, _api(rt, "third"))
    blocker.release.set()
    # The finished tool's step waits for the store, and the health says so.
    await _until(lambda: rt.manager.outage.waiting > 0, "a write waits for the store")
    sessions = (await rt.manager.health())["sessions"]
    assert sessions["writable"] is False

    await _maybe(restart())
    replies = await rt.inbox("chat").wait(2)
    session_id = await store.resolve(KEY)
    assert session_id is not None
    entries = await _settled(rt, session_id)
    assert [r.rsplit("\n", 1)[-1] for r in replies] == ["first", "second"]
    assert _bodies(entries) == ["first", "second"]  # each ran once; "third" was never taken
    ends = turn_entries(entries)
    assert [(e.stop_reason, e.err) for e in ends] == [("dispatch", ""), ("dispatch", "")]
    assert (await rt.manager.health())["sessions"]["writable"] is True
    await rt.manager.close()
    assert rt.inbox("chat").messages == replies  # nothing more, nothing twice


def _api(rt: Runtime, body: str) -> Wake:
    """A user's message on the API, whose busy policy queues it behind the running turn."""
    return rt.user_wake(body, source=WakeSource.API, to="chat")


async def _maybe(value: object) -> None:
    if asyncio.iscoroutine(value):
        await value


async def test_a_redis_outage_refuses_new_input_and_runs_each_accepted_wake_once_it_is_back(
    private_redis: PrivateRedis,  # noqa: F811
) -> None:
    store = RedisStore(private_redis.url)
    try:
        await _outage_mid_turn(store, private_redis.kill, private_redis.start)
    finally:
        await store.close()


async def test_a_full_disk_refuses_new_input_and_runs_each_accepted_wake_once_it_has_room(
    tmp_path: Path,
) -> None:
    disk = FullDisk()
    store = JsonlStore(tmp_path / "sessions", pause=disk)
    try:
        await _outage_mid_turn(store, disk.fill, disk.free)
    finally:
        await store.close()
    assert disk.refused > 1  # the refused wake, and the step's first tries


async def test_input_held_back_by_the_store_is_kept_by_a_clean_close_and_runs_at_the_next_start(
    tmp_path: Path,
) -> None:
    disk = FullDisk()
    disk.fill()
    recovery = tmp_path / "recovery.json"
    store = JsonlStore(tmp_path / "sessions", pause=disk)
    session_id = await accepted_and_never_run(store, KEY, "kept", chat="chat")
    rt = await make_runtime(store, ScriptedModel(), recovery_path=recovery)
    # Its turn cannot start: the person is told, and the key is marked at once.
    (notice,) = await rt.inbox("chat").wait()
    assert notice == HELD
    assert orjson.loads(recovery.read_bytes())["unsettled"] == [KEY]
    await rt.manager.close()
    assert orjson.loads(recovery.read_bytes()) == {"clean": True, "pending": [KEY]}
    await store.close()

    store = JsonlStore(tmp_path / "sessions")
    again = await make_runtime(store, ScriptedModel(), recovery_path=recovery)
    (reply,) = await again.inbox("chat").wait()
    assert reply.endswith("kept")
    entries = await _settled(again, session_id)
    assert _bodies(entries) == ["kept"]
    assert len(turn_entries(entries)) == 1
    await again.manager.close()
    await store.close()


async def test_a_write_whose_reply_was_lost_is_kept_not_written_twice(
    private_redis: PrivateRedis,  # noqa: F811
) -> None:
    hop = LostReply(private_redis.port)
    await hop.start()
    store = RedisStore(hop.url)
    try:
        session = await Session.create(store, HandAgent())
        hop.lose_next_reply()
        with pytest.raises(UnavailableError):
            await session.custom("note", 1)  # it landed; the session was told it failed
        await session.custom("note", 2)
        stored_notes = [e.data for e in await stored(store, session.id)]
        assert stored_notes == [1, 2]
        assert [e.data for e in session.entries()] == stored_notes  # the view holds it too
        await session.close()
    finally:
        await store.close()
        await hop.close()


async def test_a_step_whose_reply_was_lost_is_not_written_again_by_its_retry(
    private_redis: PrivateRedis,  # noqa: F811
) -> None:
    hop = LostReply(private_redis.port)
    await hop.start()
    store = RedisStore(hop.url)

    async def step_then_answer(run: Run) -> RunResult:
        run.stage(Message.assistant("a step whose reply is lost"))
        hop.lose_next_reply()
        await run.flush()  # retried after the lost reply: kept, not written twice
        return await answer("done")(run)

    try:
        session = await Session.create(store, HandAgent(step_then_answer))
        turn = await session.send(Message.user("go"))
        async with asyncio.timeout(DEADLINE):
            await turn.wait()
        assert turn.outcome == "answered"
        reopened = await Session.open(store, session.id, HandAgent())  # ids are unique
        assert texts(reopened.entries()).count("a step whose reply is lost") == 1
        await session.close()
    finally:
        await store.close()
        await hop.close()

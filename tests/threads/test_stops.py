"""Stops that stop: a chat user's turn ends at once, and the chains it set going end with it."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from tests.threads.agent.conftest import Runtime, agent_config, make_runtime
from tests.threads.conftest import make_runtime as make_store_runtime
from tests.threads.conftest import prompts, receipts, stored, turn_entries
from tests.threads.test_dispatch import settle
from threads.errors import ChainStoppedError, NoTurnRunningError
from threads.keys import SessionKey
from threads.store import open_store
from threads.store.entries import Entry
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel, dispatch
from threads.turns import Outcome
from threads.wake import SessionCaller, SystemCaller, Wake, WakeSource

USER = "telegram:1"
OTHER = "cron:other"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def held() -> AsyncIterator[tuple[Runtime, ScriptedModel]]:
    """A runtime whose model holds every call until the test opens its gate."""
    model = ScriptedModel(default=dispatch(("caller:user", "done")))
    model.gate = asyncio.Event()
    rt = await make_runtime(model, agent_config(owners=[USER]))
    yield rt, model
    model.gate.set()
    await rt.manager.close()


async def in_model_call(model: ScriptedModel, count: int) -> None:
    async with asyncio.timeout(10):
        while len(model.requests) < count:
            model.called.clear()
            await model.called.wait()


def chain_of(rt: Runtime, key: str) -> str:
    thread = rt.manager.thread(key)
    assert thread is not None
    payload = thread.session.active_payload
    assert isinstance(payload, Wake)
    return payload.chain


def system_reply(body: str, chain: str, depth: int) -> Wake:
    return Wake(
        source=WakeSource.SESSION,
        body=body,
        caller=SessionCaller(session_key=SessionKey("cron:peer")),
        chain=chain,
        depth=depth,
    )


async def test_a_stop_ends_a_chat_users_turn_at_once_and_tells_them(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    turn = await rt.say(USER, "think hard")
    await in_model_call(model, 1)
    report = await rt.manager.stop(USER)
    # Ended while the model call was still in flight: the call was cancelled, not awaited.
    assert report.ended == (USER,)
    assert turn.done()
    assert turn.outcome is Outcome.CANCELED
    assert not model.gate.is_set()
    assert rt.inbox(USER).messages == ["(Your turn was stopped.)"]
    assert "ended the running turn of telegram:1" in report.describe()


async def test_the_users_own_stop_is_answered_by_the_command_not_told_twice(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    turn = await rt.say(USER, "think hard")
    await in_model_call(model, 1)
    await rt.manager.stop(USER, by_user=True)
    assert turn.outcome is Outcome.CANCELED
    assert rt.inbox(USER).messages == []


async def test_a_stop_drops_its_chains_queued_system_wakes_everywhere_and_keeps_user_messages(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    await rt.say(USER, "start")
    await rt.manager.wake(
        OTHER, Wake(source=WakeSource.CRON, body="own work", caller=SystemCaller(name="cron"))
    )
    await in_model_call(model, 2)
    chain = chain_of(rt, USER)
    # A reply of the user's chain waits behind OTHER's own turn; the user sends more.
    await rt.manager.wake(OTHER, system_reply("reply in the user's chain", chain, 1))
    steer = await rt.say(USER, "and also this")
    report = await rt.manager.stop(USER)
    assert report.ended == (USER,)
    assert report.dropped == 1
    other = rt.manager.thread(OTHER)
    assert other is not None
    assert other.session.running is not None  # OTHER's own chain runs on
    assert receipts(other.session.entries(), "dropped")
    with pytest.raises(ChainStoppedError):
        await rt.manager.wake(OTHER, system_reply("later", chain, 3))
    # The user's message stays: it runs as the next turn.
    model.gate.set()
    await settle(rt)
    assert steer.next is not None
    assert steer.next.outcome is Outcome.ANSWERED


async def test_drain_drops_the_users_queued_messages_too(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    await rt.say(USER, "start")
    await in_model_call(model, 1)
    steer = await rt.say(USER, "and also this")
    report = await rt.manager.stop(USER, drain=True)
    assert report.dropped == 1
    assert steer.outcome is Outcome.DROPPED
    model.gate.set()
    await settle(rt)
    assert len(model.requests) == 1


async def test_stop_all_ends_every_turn_and_every_queued_system_wake(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    await rt.say(USER, "start")
    await rt.manager.wake(
        OTHER, Wake(source=WakeSource.CRON, body="tick", caller=SystemCaller(name="cron"))
    )
    await in_model_call(model, 2)
    await rt.manager.wake(
        OTHER, Wake(source=WakeSource.CRON, body="tock", caller=SystemCaller(name="cron"))
    )
    steer = await rt.say(USER, "more")
    report = await rt.manager.stop_all()
    assert report.ended == (OTHER, USER)
    assert report.dropped == 1
    assert rt.inbox(USER).messages == ["(Your turn was stopped.)"]
    model.gate.set()
    await settle(rt)
    assert steer.next is not None
    assert steer.next.outcome is Outcome.ANSWERED  # user messages stay
    assert len(model.requests) == 3


async def test_stopping_a_thread_with_nothing_to_stop_says_so(
    held: tuple[Runtime, ScriptedModel],
) -> None:
    rt, model = held
    model.gate.set()
    await rt.result(await rt.say(USER, "hi"))
    with pytest.raises(NoTurnRunningError, match="nothing to stop"):
        await rt.manager.stop(USER)


async def test_a_stopped_chain_does_not_resume_after_a_crash(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.threads.stop_child", str(tmp_path),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            line = await proc.stdout.readline()
        assert line.strip() == b"STOPPED"
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    model = ScriptedModel()
    rt = await make_store_runtime(store, model, recovery_path=tmp_path / "recovery.json")
    try:
        session_id = await store.resolve("cron:a")
        assert session_id is not None
        entries = await stored(store, session_id)
        # The turn the crash cut short is recorded canceled and not resumed; the queued
        # reply of the stopped chain is dropped; the model is never called.
        assert len(prompts(entries)) == 1
        (ended,) = turn_entries(entries)
        assert ended.canceled
        assert len(receipts(entries, "dropped")) == 1
        assert model.requests == []
    finally:
        await rt.manager.close()
        await store.close()


class FlakyStore(MemoryStore):
    """A memory store whose appends fail while ``failing`` is set (a disk that filled up)."""

    failing = False

    async def append(self, session: str, entries: Sequence[Entry], *, durable: bool = True) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        await super().append(session, entries, durable=durable)


async def test_a_queued_message_whose_turn_cannot_start_is_told_so() -> None:
    store = FlakyStore()
    model = ScriptedModel(default=dispatch(("caller:user", "done")))
    model.gate = asyncio.Event()
    rt = await make_store_runtime(store, model)
    try:
        user = rt.user_wake("first", source=WakeSource.API, to="first")
        await rt.manager.wake("api:1", user)
        await in_model_call(model, 1)
        _, second = await rt.manager.wake_turn(
            "api:1", rt.user_wake("second", source=WakeSource.API, to="second")
        )
        store.failing = True
        model.gate.set()
        (notice,) = await rt.inbox("second").wait()
        assert notice.startswith("(Sorry — your message was received but its turn could not start")
        assert second.outcome is Outcome.FAILED
    finally:
        store.failing = False
        await rt.manager.close()

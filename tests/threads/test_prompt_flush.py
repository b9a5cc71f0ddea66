"""What a send writes is made durable with the next write that comes soon.

An idle session's prompt shares its turn's end (perf-16); a busy session's
receipt shares the running turn's next write, and a queued input's prompt
rides with its own turn's end (perf-22).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.threads.conftest import DEADLINE, Runtime, gateway_config, make_runtime, system_wake
from tests.threads.store.helpers import fsync_refused
from tests.threads.store.test_jsonl import Spy
from tests.threads.test_wake_batch import until
from threads.errors import UnavailableError
from threads.store.jsonl import JsonlStore
from threads.testing.scripted import ScriptedModel, say
from threads.turns import Outcome, Turn
from threads.wake import WakeSource

KEY = "telegram:42"


@dataclass
class Rig:
    """A manager on a jsonl store (every append durable) with a scripted model."""

    runtime: Runtime
    store: JsonlStore
    model: ScriptedModel

    async def answered(self, key: str, text: str) -> None:
        _accepted, turn = await self.runtime.manager.wake_turn(key, self.runtime.user_wake(text))
        await turn.wait(DEADLINE)

    async def held_in_its_model_call(self, source: WakeSource) -> Turn:
        """A turn on ``KEY`` that waits in its model call until ``model.gate`` is set."""
        self.model.gate = asyncio.Event()
        self.model.called.clear()
        wake = self.runtime.user_wake("think hard", source=source)
        _accepted, turn = await self.runtime.manager.wake_turn(KEY, wake)
        await asyncio.wait_for(self.model.called.wait(), DEADLINE)
        return turn

    def waiting(self) -> int:
        thread = self.runtime.manager.thread(KEY)
        assert thread is not None
        return thread.session.pending_count()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = JsonlStore(tmp_path / "sessions")
    model = ScriptedModel(default=say("ok"))
    runtime = await make_runtime(store, model)
    yield Rig(runtime, store, model)
    await runtime.manager.close()
    await store.close()


def window(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """How long a prompt may wait for its turn's end to share its flush."""
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", seconds)


async def test_a_quick_turns_prompt_and_end_share_one_flush(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, DEADLINE)  # the end comes first
    await rig.answered(KEY, "a")
    syncs = Spy(monkeypatch, "fsync")
    await rig.answered(KEY, "b")
    assert len(syncs.calls) == 1  # the prompt, the turn's end and its reply's record


async def test_a_first_contacts_session_prompt_and_answer_share_one_flush(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, DEADLINE)
    await rig.answered("telegram:1", "a")  # the store's log is open
    syncs = Spy(monkeypatch, "fsync")
    accepted, turn = await rig.runtime.manager.wake_turn("telegram:2", rig.runtime.user_wake("b"))
    await turn.wait(DEADLINE)
    assert accepted.created
    assert len(syncs.calls) == 1  # the header, the key, the prompt, the answer


async def test_a_send_returns_with_its_prompt_durable_while_the_model_still_works(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)
    await rig.answered(KEY, "hello")
    rig.model.gate = asyncio.Event()  # the model answers once the test says so
    syncs = Spy(monkeypatch, "fsync")
    _accepted, turn = await asyncio.wait_for(
        rig.runtime.manager.wake_turn(KEY, rig.runtime.user_wake("still thinking?")), DEADLINE
    )
    assert not turn.done()
    assert len(syncs.calls) == 1  # the prompt's own flush: the turn's end is not near
    session_id = await rig.store.resolve(KEY)
    assert b"still thinking?" in (tmp_path / "sessions" / f"{session_id}.jsonl").read_bytes()
    rig.model.gate.set()
    await turn.wait(DEADLINE)
    assert len(syncs.calls) == 2


async def test_a_prompt_whose_flush_is_refused_is_not_accepted_and_its_turn_is_canceled(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)
    await rig.answered(KEY, "hello")
    rig.model.gate = asyncio.Event()
    rig.model.add(say("never taken"))
    with fsync_refused(), pytest.raises(UnavailableError):
        await rig.runtime.manager.wake_turn(KEY, rig.runtime.user_wake("lost?"))
    rig.model.gate.set()
    thread = rig.runtime.manager.thread(KEY)
    assert thread is not None
    await asyncio.wait_for(thread.session.wait_idle(), DEADLINE)
    assert rig.model.remaining == 1  # the canceled turn never took its answer


async def test_a_batch_of_wakes_whose_turns_are_held_does_not_wait_for_a_turns_end(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Were a held turn's prompt to wait for its turn's end, the batch would wait this long.
    window(monkeypatch, DEADLINE * 10)
    keys = [f"telegram:{n}" for n in range(4)]
    for key in keys:
        await rig.answered(key, "hello")
    results = await asyncio.wait_for(
        rig.runtime.manager.wake_many([(key, system_wake("tick")) for key in keys]), DEADLINE
    )
    assert all(result.error is None for result in results)


async def test_a_queued_sends_receipt_and_prompt_ride_with_the_turns_ends(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)  # the first turn's prompt is flushed alone
    await rig.answered(KEY, "hello")
    first = await rig.held_in_its_model_call(WakeSource.API)  # the api queues what comes
    window(monkeypatch, DEADLINE)  # the receipt waits for the running turn's end
    syncs = Spy(monkeypatch, "fsync")
    wake = rig.runtime.user_wake("and then?", source=WakeSource.API)
    queued = asyncio.create_task(rig.runtime.manager.wake_turn(KEY, wake))
    await until(lambda: rig.waiting() == 1, "the send is queued")
    assert not queued.done()  # its receipt is written, not yet durable
    assert syncs.calls == []
    rig.model.gate.set()
    _accepted, second = await asyncio.wait_for(queued, DEADLINE)
    await first.wait(DEADLINE)
    await second.wait(DEADLINE)
    # The first turn's end took the receipt; the second's end took its prompt.
    assert len(syncs.calls) == 2


async def test_a_steers_receipt_rides_with_the_running_turns_next_write(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)
    await rig.answered(KEY, "hello")
    first = await rig.held_in_its_model_call(WakeSource.TELEGRAM)  # telegram steers
    window(monkeypatch, DEADLINE)
    syncs = Spy(monkeypatch, "fsync")
    wake = rig.runtime.user_wake("also this", source=WakeSource.TELEGRAM)
    steer = asyncio.create_task(rig.runtime.manager.wake_turn(KEY, wake))
    await until(lambda: rig.waiting() == 1, "the steer waits")
    assert not steer.done()
    assert syncs.calls == []
    rig.model.gate.set()
    _accepted, turn = await asyncio.wait_for(steer, DEADLINE)
    assert turn.run_id == first.run_id  # delivered into the running turn
    await first.wait(DEADLINE)
    assert rig.model.requests[-1].messages[-1].text().endswith("also this")


async def test_a_receipt_whose_flush_is_refused_is_withdrawn_and_never_runs(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)
    await rig.answered(KEY, "hello")
    first = await rig.held_in_its_model_call(WakeSource.API)
    rig.model.add(say("the first answer"), say("never taken"))
    with fsync_refused():
        with pytest.raises(UnavailableError):
            await rig.runtime.manager.wake_turn(
                KEY, rig.runtime.user_wake("lost?", source=WakeSource.API)
            )
        assert rig.waiting() == 0  # not accepted, so not queued
    rig.model.gate.set()
    await first.wait(DEADLINE)
    thread = rig.runtime.manager.thread(KEY)
    assert thread is not None
    await asyncio.wait_for(thread.session.wait_idle(), DEADLINE)
    assert rig.model.remaining == 1  # no turn ran for the refused send
    # Nor after a restart: its receipt is in the file, and so is its fate.
    await rig.runtime.manager.close()
    await rig.store.close()
    store = JsonlStore(tmp_path / "sessions")
    model = ScriptedModel(default=say("ran after all"))
    runtime = await make_runtime(store, model)
    try:
        again = await runtime.manager.open_thread(KEY)
        await asyncio.wait_for(again.session.wait_idle(), DEADLINE)
        assert again.session.pending_count() == 0
        assert model.requests == []
    finally:
        await runtime.manager.close()
        await store.close()


async def test_an_interrupting_send_is_durable_before_it_cancels_the_turn_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path / "sessions")
    model = ScriptedModel(default=say("ok"))
    config = gateway_config(busy_policy={"telegram": "interrupt"})
    runtime = await make_runtime(store, model, config=config)
    rig = Rig(runtime, store, model)
    try:
        window(monkeypatch, 0.001)
        await rig.answered(KEY, "hello")
        first = await rig.held_in_its_model_call(WakeSource.TELEGRAM)
        model.add(say("the first answer"))
        window(monkeypatch, DEADLINE)
        with fsync_refused():
            wake = runtime.user_wake("stop that", source=WakeSource.TELEGRAM)
            with pytest.raises(UnavailableError):
                await runtime.manager.wake_turn(KEY, wake)
        model.gate.set()
        await first.wait(DEADLINE)
        # The send was refused before it could cancel anything: the turn answered.
        assert first.outcome is Outcome.ANSWERED
    finally:
        await runtime.manager.close()
        await store.close()


async def test_while_other_turns_run_a_turns_end_waits_to_share_a_flush(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    window(monkeypatch, 0.001)  # the prompt is flushed alone, before the end comes
    await rig.answered(KEY, "hello")
    # As if many turns ran beside this one: its end waits for company (perf-23).
    monkeypatch.setattr("threads.driver.END_SIBLINGS", 0)
    monkeypatch.setattr("threads.driver.END_FLUSH_WITHIN", DEADLINE * 10)
    turn = await rig.held_in_its_model_call(WakeSource.TELEGRAM)
    thread = rig.runtime.manager.thread(KEY)
    assert thread is not None
    syncs = Spy(monkeypatch, "fsync")
    rig.model.gate.set()
    await until(lambda: thread.session.running is None, "the turn's end is written")
    assert not turn.done()  # its reply waits for a flush to share
    assert syncs.calls == []
    # Another session's end, durable at once, carries this one's with it.
    monkeypatch.setattr("threads.driver.END_SIBLINGS", 10**9)
    await rig.answered("telegram:2", "and you?")
    await turn.wait(DEADLINE)  # ours took no flush of its own

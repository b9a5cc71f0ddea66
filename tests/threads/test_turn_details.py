"""Turn details: an end the store refused, late steps, unanswered steers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from tests.threads.conftest import (
    HandAgent,
    make_runtime,
    receipts,
    stored,
    texts,
    turn_entries,
)
from threads.errors import NotPersistedError, StoreError, UnavailableError
from threads.manager import NOT_SAVED
from threads.messages import Message
from threads.session import Session
from threads.store.entries import Entry, MessageEntry, TurnEntry
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel, dispatch
from threads.turns import Outcome, Policy, Run, RunResult


class Refusing(MemoryStore):
    """A store that refuses the next batches of a given shape.

    A turn end fails (a store that broke); a step waits (an outage: the
    driver tries it again until the store takes it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.refuse_turn_ends = 0
        self.refuse_steps = 0

    async def append(self, session: str, entries: Sequence[Entry], *, durable: bool = True) -> None:
        ends = any(isinstance(e, TurnEntry) for e in entries)
        if ends and self.refuse_turn_ends:
            self.refuse_turn_ends -= 1
            raise StoreError("no space left on device")
        if not ends and self.refuse_steps and all(isinstance(e, MessageEntry) for e in entries):
            self.refuse_steps -= 1
            raise UnavailableError("the test store", "no space left on device")
        await super().append(session, entries, durable=durable)


async def test_a_turn_whose_end_the_store_refused_is_not_persisted_and_keeps_its_answer() -> None:
    store = Refusing()

    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("the answer"))
        return RunResult(stop_reason="end_turn", text="the answer", steps=1)

    session = await Session.create(store, HandAgent(turn, turn))
    store.refuse_turn_ends = 1
    handle = await session.send(Message.user("go"))
    with pytest.raises(NotPersistedError, match="ran, but its end was not written") as caught:
        await handle.wait(10)
    assert handle.outcome is Outcome.NOT_PERSISTED
    assert caught.value.result.text == "the answer"
    assert handle.result is not None
    assert handle.result.text == "the answer"  # the model answered; the store did not keep it
    assert turn_entries(await stored(store, session.id)) == []
    # The store is back: the session goes on.
    again = await session.send(Message.user("again"))
    assert (await again.wait(10)) is not None
    assert again.outcome is Outcome.ANSWERED
    await session.close()


async def test_a_step_the_store_refused_is_held_written_late_and_counted() -> None:
    store = Refusing()

    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("step one"))
        store.refuse_steps = 1
        await run.flush()  # refused once: held, and written when the store takes it
        run.stage(Message.assistant("step two"))
        await run.flush()
        return RunResult(stop_reason="end_turn", text="step two", steps=2)

    session = await Session.create(store, HandAgent(turn))
    await (await session.send(Message.user("go"))).wait(10)
    entries = await stored(store, session.id)
    assert texts(entries) == ["go", "step one", "step two"]
    (entry,) = turn_entries(entries)
    assert entry.late_steps == 1
    await session.close()


async def test_every_step_landing_as_it_joined_leaves_late_steps_off_the_turn_entry() -> None:
    store = Refusing()

    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("step one"))
        await run.flush()
        return RunResult(stop_reason="end_turn", text="step one", steps=1)

    session = await Session.create(store, HandAgent(turn))
    await (await session.send(Message.user("go"))).wait(10)
    (entry,) = turn_entries(await stored(store, session.id))
    assert entry.late_steps == 0
    await session.close()


@pytest.mark.parametrize(
    ("answered_after", "marked"),
    [(False, True), (True, False)],
    ids=["failed-before-another-step", "answered-then-failed"],
)
async def test_a_steer_a_failed_run_never_answered_is_marked_unanswered(
    answered_after: bool, marked: bool
) -> None:
    store = MemoryStore()
    steered = asyncio.Event()
    running = asyncio.Event()

    async def turn(run: Run) -> RunResult:
        running.set()
        await steered.wait()
        run.steps = 1
        await run.drain()
        if answered_after:
            run.steps = 2  # a model step completed after the steer
        raise RuntimeError("the model went away")

    session = await Session.create(store, HandAgent(turn))
    first = await session.send(Message.user("go"))
    await running.wait()
    steer = await session.send(Message.user("also this"), policy=Policy.STEER)
    steered.set()
    await first.wait(10)
    assert steer.outcome is Outcome.DELIVERED
    entries = await stored(store, session.id)
    delivered = receipts(entries, "delivered")
    assert delivered[0].receipt == steer.id
    assert [r.unanswered for r in delivered] == ([False, True] if marked else [False])
    await session.close()


async def test_a_chat_user_whose_turn_end_was_not_saved_is_told_in_one_line() -> None:
    store = Refusing()
    model = ScriptedModel(dispatch(("caller:user", "here you go")))
    runtime = await make_runtime(store, model)
    try:
        store.refuse_turn_ends = 1
        _accepted, turn = await runtime.manager.wake_turn("telegram:1", runtime.user_wake("hi"))
        with pytest.raises(NotPersistedError):
            await turn.wait(10)
        said = await runtime.inbox("user").wait(2)
        assert said == ["here you go", NOT_SAVED]
    finally:
        await runtime.manager.close()

"""Turns: a durable prompt, step messages appended once, a turn entry whatever the outcome, the handle."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from tests.threads.conftest import (
    HandAgent,
    Hold,
    answer,
    plant,
    prompts,
    receipts,
    stored,
    texts,
    turn_entries,
)
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, Usage
from threads.session import Session, SessionOptions
from threads.store.base import SessionStore
from threads.store.entries import Entry, Header, MessageEntry, ReceiptEntry, TurnEntry
from threads.store.memory import MemoryStore
from threads.turns import (
    Outcome,
    Policy,
    Run,
    RunFinish,
    RunResult,
    RunStart,
    StepFinish,
    TextDelta,
)


async def test_the_prompt_is_durable_before_the_run_starts(session_store: SessionStore) -> None:
    seen: list[list[str]] = []

    async def turn(run: Run) -> RunResult:
        entries = await stored(session_store, run.session.id)
        seen.append([f"{e.message.text()}@{e.run_id}" for e in prompts(entries)])
        return await answer("hi")(run)

    session = await Session.create(session_store, HandAgent(turn))
    handle = await session.send(Message.user("hello"))
    assert handle.run_id == f"{session.id}-t1"
    assert [e.run_id for e in prompts(await stored(session_store, session.id))] == [handle.run_id]
    await handle.wait(10)
    assert seen == [[f"hello@{session.id}-t1"]]
    await session.close()


async def test_each_step_message_is_appended_once_as_it_joins_the_run(
    session_store: SessionStore,
) -> None:
    after_flush: list[list[str]] = []

    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("step one"))
        await run.flush()
        after_flush.append(texts(await stored(session_store, run.session.id)))
        await run.flush()  # nothing staged: nothing written twice
        run.stage(Message.assistant("step two"))
        return RunResult(stop_reason="end_turn", text="step two", steps=2)

    session = await Session.create(session_store, HandAgent(turn))
    await (await session.send(Message.user("go"))).wait(10)
    assert after_flush == [["go", "step one"]]
    entries = await stored(session_store, session.id)
    assert texts(entries) == ["go", "step one", "step two"]
    assert isinstance(entries[-1], TurnEntry)
    await session.close()


async def test_an_answered_turn_closes_with_a_turn_entry_of_its_ledger(
    session_store: SessionStore,
) -> None:
    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("done"))
        return RunResult(
            stop_reason="end_turn",
            text="done",
            steps=2,
            usage=Usage(input_tokens=10, output_tokens=3),
            last_input=10,
        )

    session = await Session.create(session_store, HandAgent(turn))
    handle = await session.send(Message.user("go"), policy=Policy.STEER)
    result = await handle.wait(10)
    assert result is not None
    assert result.text == "done"
    assert handle.outcome is Outcome.ANSWERED
    (entry,) = turn_entries(await stored(session_store, session.id))
    assert entry.run_id == handle.run_id
    assert (entry.stop_reason, entry.steps, entry.err, entry.canceled) == ("end_turn", 2, "", False)
    assert entry.usage == Usage(input_tokens=10, output_tokens=3)
    assert entry.policy == "steer"
    assert entry.last_input == 10
    await session.close()


async def test_a_failed_run_closes_with_a_turn_entry_naming_the_error(
    session_store: SessionStore,
) -> None:
    async def turn(run: Run) -> RunResult:
        run.stage(Message.assistant("partial"))
        raise RuntimeError("the model went away")

    session = await Session.create(session_store, HandAgent(turn))
    handle = await session.send(Message.user("go"))
    result = await handle.wait(10)
    assert handle.outcome is Outcome.FAILED
    assert result is not None
    assert result.error == "RuntimeError: the model went away"
    entries = await stored(session_store, session.id)
    (entry,) = turn_entries(entries)
    assert (entry.stop_reason, entry.err, entry.canceled) == (
        "error",
        "RuntimeError: the model went away",
        False,
    )
    assert texts(entries) == ["go", "partial"]
    # The session keeps working after a failed turn.
    await (await session.send(Message.user("again"))).wait(10)
    await session.close()


async def test_a_canceled_run_closes_with_a_turn_entry_marked_canceled(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    session = await Session.create(session_store, HandAgent(hold.turn()))
    handle = await session.send(Message.user("go"))
    await hold.reached()
    assert session.interrupt("stopped by the test")
    result = await handle.wait(10)
    assert handle.outcome is Outcome.CANCELED
    assert result is not None
    assert result.stop_reason == "canceled"
    (entry,) = turn_entries(await stored(session_store, session.id))
    assert entry.canceled
    assert entry.err == "stopped by the test"
    assert not session.interrupt()
    await session.close()


async def test_the_turn_handle_waits_with_a_timeout_reports_done_and_streams_events(
    session_store: SessionStore,
) -> None:
    hold = Hold()

    async def turn(run: Run) -> RunResult:
        run.emit(TextDelta(text="thinking"))
        hold.entered.set()
        await hold.release.wait()
        run.emit(StepFinish(step=1, usage=Usage()))
        return await answer("ok")(run)

    session = await Session.create(session_store, HandAgent(turn))
    handle = await session.send(Message.user("go"))
    await hold.reached()
    assert not handle.done()
    assert handle.outcome is Outcome.RUNNING
    with pytest.raises(TimeoutError):
        await handle.wait(timeout=0.01)
    assert not handle.done()  # giving up the wait changes nothing for the turn

    async def collect() -> list[object]:
        return [event async for event in handle.events()]

    live = asyncio.create_task(collect())
    hold.release.set()
    result = await handle.wait(10)
    assert handle.done()
    events = await live
    assert events[0] == RunStart(run_id=handle.run_id)  # the run began before it streamed
    assert events[1:3] == [TextDelta(text="thinking"), StepFinish(step=1, usage=Usage())]
    assert events[-1] == RunFinish(result=result)  # type: ignore[arg-type]
    assert await collect() == events  # a finished turn replays its events
    await session.close()


async def test_done_callbacks_run_once_when_the_turn_is_decided(
    session_store: SessionStore,
) -> None:
    session = await Session.create(session_store, HandAgent())
    handle = await session.send(Message.user("go"))
    decided: list[Outcome] = []
    handle.add_done_callback(lambda t: decided.append(t.outcome))
    await handle.wait(10)
    handle.add_done_callback(lambda t: decided.append(t.outcome))
    assert decided == [Outcome.ANSWERED, Outcome.ANSWERED]
    await session.close()


async def test_the_run_id_counter_continues_from_the_highest_recorded_id_not_the_entry_count(
    session_store: SessionStore,
) -> None:
    header = Header(id=new_session_id(), created=datetime.now(UTC))
    prompt = MessageEntry(id=new_entry_id(), message=Message.user("old"), run_id=f"{header.id}-t7")
    ended = TurnEntry(id=new_entry_id(), parent=prompt.id, run_id=f"{header.id}-t7")
    # An accepted send that never ran still used its run id.
    accepted = ReceiptEntry(
        id=new_entry_id(),
        parent=ended.id,
        status="accepted",
        msg=Message.user("never ran"),
        run_id=f"{header.id}-t9",
        turn=new_entry_id(),
    )
    dropped = ReceiptEntry(
        id=new_entry_id(), parent=accepted.id, status="dropped", receipt=accepted.id
    )
    await plant(session_store, header, [prompt, ended, accepted, dropped])
    session = await Session.open(session_store, header.id, HandAgent())
    assert session.queue() == []
    handle = await session.send(Message.user("new"))
    assert handle.run_id == f"{header.id}-t10"
    await handle.wait(10)
    await session.close()
    assert receipts(await stored(session_store, header.id), "dropped") == [dropped]


class CountingStore(MemoryStore):
    """A memory store that keeps the kinds of every appended batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append(self, session: str, entries: Sequence[Entry], *, durable: bool = True) -> None:
        self.batches.append([e.TYPE for e in entries])
        await super().append(session, entries, durable=durable)


async def test_a_queued_turns_prompt_lands_in_the_same_append_as_the_previous_turns_end() -> None:
    store = CountingStore()
    hold = Hold()
    session = await Session.create(store, HandAgent(hold.turn()))
    first = await session.send(Message.user("first"))
    await hold.reached()
    second = await session.send(Message.user("second"))
    hold.release.set()
    await first.wait(10)
    await second.wait(10)
    assert store.batches == [
        ["message"],  # first's prompt
        ["receipt"],  # second accepted
        ["message", "turn", "message"],  # first's answer and end, second's prompt
        ["message", "turn"],
    ]
    await session.close()


async def test_interrupting_a_turn_whose_prompt_is_written_but_run_not_begun_cancels_it_unrun(
    session_store: SessionStore,
) -> None:
    agent = HandAgent()
    held = asyncio.Event()  # the turn waits, prompt written, as a batch of wakes holds it
    options = SessionOptions(turn_hold=lambda: None if held.is_set() else held)
    session = await Session.create(session_store, agent, options=options)
    doomed = await session.send(Message.user("about to start"))
    assert session.interrupt("changed my mind")
    held.set()
    result = await doomed.wait(10)
    assert doomed.outcome is Outcome.CANCELED
    assert result is not None
    assert result.error == "changed my mind"
    assert agent.runs == []
    (entry,) = turn_entries(await stored(session_store, session.id))
    assert (entry.run_id, entry.canceled) == (doomed.run_id, True)
    await session.close()

"""Busy policies: what a send does while a turn runs, clear_queue, and the queue a reopen restores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.clock import ManualClock
from tests.threads.conftest import (
    Blocker,
    HandAgent,
    Hold,
    Runtime,
    answer,
    gateway_config,
    make_runtime,
    plant,
    prompts,
    receipts,
    stored,
    texts,
    turn_entries,
)
from threads.context import INTERRUPTED
from threads.errors import BusyError, DroppedError
from threads.ids import new_entry_id, new_session_id
from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse
from threads.messages import Message, ToolCallPart, ToolResultPart
from threads.session import Session, SessionOptions
from threads.store import open_store
from threads.store.base import SessionStore
from threads.store.entries import (
    Header,
    LeafEntry,
    MessageEntry,
    ReceiptEntry,
    TurnEntry,
    injected_id,
)
from threads.testing.scripted import ScriptedModel, call, dispatch, say
from threads.turns import Outcome, Policy, Run, RunResult, Turn


async def _held(store: SessionStore) -> tuple[Session, Hold, HandAgent]:
    hold = Hold()
    agent = HandAgent(hold.turn("first done"))
    session = await Session.create(store, agent)
    await session.send(Message.user("first"))
    await hold.reached()
    return session, hold, agent


# -- queue


async def test_a_queued_send_is_durable_as_an_accepted_receipt_before_send_returns(
    session_store: SessionStore,
) -> None:
    session, hold, _ = await _held(session_store)
    queued = await session.send(Message.user("second"), policy=Policy.QUEUE)
    (receipt,) = receipts(await stored(session_store, session.id), "accepted")
    assert receipt.msg == Message.user("second")
    assert (receipt.turn, receipt.run_id, receipt.policy) == (queued.id, queued.run_id, "queue")
    assert queued.outcome is Outcome.RUNNING
    assert [m.text() for _, m, _ in session.queue()] == ["second"]
    hold.release.set()
    await queued.wait(10)
    # The prompt entry takes the id the receipt promised.
    (prompt,) = [p for p in prompts(await stored(session_store, session.id)) if p.id == queued.id]
    assert prompt.run_id == queued.run_id
    await session.close()


async def test_queued_sends_run_next_in_acceptance_order(session_store: SessionStore) -> None:
    session, hold, agent = await _held(session_store)
    turns = [await session.send(Message.user(t)) for t in ("b", "c", "d")]
    hold.release.set()
    for turn in turns:
        await turn.wait(10)
    assert [r.messages[-1].text() for r in agent.runs] == ["first", "b", "c", "d"]
    assert [p.message.text() for p in prompts(await stored(session_store, session.id))] == [
        "first",
        "b",
        "c",
        "d",
    ]
    await session.close()


# -- reject


async def test_reject_while_a_turn_runs_raises_busy_and_writes_nothing(
    session_store: SessionStore,
) -> None:
    session, hold, _ = await _held(session_store)
    before = await stored(session_store, session.id)
    with pytest.raises(BusyError, match=f"session {session.id} is busy with another turn"):
        await session.send(Message.user("no"), policy=Policy.REJECT)
    assert await stored(session_store, session.id) == before
    assert session.queue() == []
    hold.release.set()
    await session.wait_idle()
    ran = await session.send(Message.user("now idle"), policy=Policy.REJECT)
    assert (await ran.wait(10)) is not None
    await session.close()


# -- steer, through the real agent loop


class WatchedModel(ScriptedModel):
    """A scripted model that says when a request has reached it (before its gate)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        self.asked.set()
        return await super().complete(request, on_delta)


async def _asked(rt: Runtime) -> None:
    assert isinstance(rt.model, WatchedModel)
    async with asyncio.timeout(10):
        await rt.model.asked.wait()


@pytest.fixture
async def steer_rt(session_store: SessionStore) -> AsyncIterator[tuple[Runtime, Blocker]]:
    blocker = Blocker()
    rt = await make_runtime(session_store, WatchedModel(), tools=[blocker.tool()])
    yield rt, blocker
    await rt.manager.close()


async def test_a_steer_is_a_durable_queued_receipt_delivered_after_the_tool_batch(
    steer_rt: tuple[Runtime, Blocker],
) -> None:
    rt, blocker = steer_rt
    rt.model.add(call("block", label="slow"), dispatch(("caller:user", "saw both")))
    _, first = await rt.manager.wake_turn("telegram:1", rt.user_wake("start"))
    await blocker.reached()
    _, steer = await rt.manager.wake_turn("telegram:1", rt.user_wake("also this"))
    session = rt.manager.thread("telegram:1").session  # type: ignore[union-attr]
    (queued,) = receipts(await stored(rt.store, session.id), "queued")
    assert queued.run_id == first.run_id
    assert queued.msg is not None
    assert "also this" in queued.msg.text()
    blocker.release.set()
    assert await steer.wait(10) is None
    assert steer.outcome is Outcome.DELIVERED
    await first.wait(10)
    second_request = rt.model.requests[1]
    tool_at = next(i for i, m in enumerate(second_request.messages) if m.role == "tool")
    steered = second_request.messages[tool_at + 1]
    assert "injected: true" in steered.text()
    assert steered.text().endswith("also this")
    entries = await stored(rt.store, session.id)
    (delivered,) = receipts(entries, "delivered")
    assert (delivered.receipt, delivered.run_id) == (queued.id, first.run_id)
    assert len(turn_entries(entries)) == 1


async def test_a_steers_text_is_stored_once_and_read_back_as_the_model_saw_it(
    steer_rt: tuple[Runtime, Blocker],
) -> None:
    rt, blocker = steer_rt
    rt.model.add(call("block", label="slow"), dispatch(("caller:user", "saw both")))
    _, first = await rt.manager.wake_turn("telegram:1", rt.user_wake("start"))
    await blocker.reached()
    _, steer = await rt.manager.wake_turn("telegram:1", rt.user_wake("also this, once"))
    blocker.release.set()
    await first.wait(10)
    session = rt.manager.thread("telegram:1").session  # type: ignore[union-attr]
    loaded = await rt.store.load(session.id)
    assert sum(line.count(b"also this, once") for line in loaded.lines) == 1
    (queued,) = receipts(loaded.entries, "queued")
    (steered,) = [e for e in loaded.entries if e.id == injected_id(queued.id)]
    assert isinstance(steered, MessageEntry)
    seen = rt.model.requests[1].messages
    assert steered.message == seen[next(i for i, m in enumerate(seen) if m.role == "tool") + 1]
    assert steer.outcome is Outcome.DELIVERED


async def test_a_steer_at_the_final_step_redirects_it_into_one_more_step(
    steer_rt: tuple[Runtime, Blocker],
) -> None:
    rt, _ = steer_rt
    rt.model.gate = asyncio.Event()
    rt.model.add(say("final answer"), say("answer to the steer"))
    _, first = await rt.manager.wake_turn("telegram:1", rt.user_wake("question"))
    await _asked(rt)
    _, steer = await rt.manager.wake_turn("telegram:1", rt.user_wake("wait, one more"))
    rt.model.gate.set()
    result = await first.wait(10)
    assert steer.outcome is Outcome.DELIVERED
    assert result is not None
    assert result.steps == 2
    assert result.text == "answer to the steer"
    assert rt.model.requests[1].messages[-1].text().endswith("wait, one more")


async def test_a_steer_the_run_cannot_drain_becomes_a_deferred_follow_up_turn(
    steer_rt: tuple[Runtime, Blocker],
) -> None:
    rt, _ = steer_rt
    rt.model.gate = asyncio.Event()
    rt.model.add(dispatch(("caller:user", "first reply")), dispatch(("caller:user", "second")))
    _, first = await rt.manager.wake_turn("telegram:1", rt.user_wake("question"))
    await _asked(rt)
    _, steer = await rt.manager.wake_turn("telegram:1", rt.user_wake("too late for it"))
    rt.model.gate.set()
    await first.wait(10)
    assert await steer.wait(10) is None
    assert steer.outcome is Outcome.DEFERRED
    assert steer.next is not None
    await steer.next.wait(10)
    assert steer.next.outcome is Outcome.ANSWERED
    session = rt.manager.thread("telegram:1").session  # type: ignore[union-attr]
    entries = await stored(rt.store, session.id)
    (queued,) = receipts(entries, "queued")
    (deferred,) = receipts(entries, "deferred")
    assert deferred.receipt == queued.id
    assert deferred.turn == steer.next.id
    (follow,) = [p for p in prompts(entries) if p.id == steer.next.id]
    assert follow.message.text().endswith("too late for it")
    assert [t.policy for t in turn_entries(entries)] == ["steer", "steer"]
    assert await rt.inbox("user").wait(2) == ["first reply", "second"]


# -- interrupt and rollback


async def test_interrupt_cancels_the_running_turn_closes_its_calls_and_runs_the_message_next(
    session_store: SessionStore,
) -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def calling(run: Run) -> RunResult:
        call_message = Message(
            role="assistant", content=(ToolCallPart(id="c1", name="search", args={}),)
        )
        run.stage(call_message)
        await run.flush()
        entered.set()
        await release.wait()
        return await answer("never")(run)

    agent = HandAgent(calling)
    session = await Session.create(session_store, agent)
    first = await session.send(Message.user("first"))
    async with asyncio.timeout(10):
        await entered.wait()
    older = await session.send(Message.user("older"))
    urgent = await session.send(Message.user("urgent"), policy=Policy.INTERRUPT)
    await first.wait(10)
    assert first.outcome is Outcome.CANCELED
    await older.wait(10)
    await urgent.wait(10)
    assert [r.messages[-1].text() for r in agent.runs] == ["first", "urgent", "older"]
    entries = await stored(session_store, session.id)
    closing = [
        p
        for e in entries
        if isinstance(e, MessageEntry)
        for p in e.message.content
        if isinstance(p, ToolResultPart)
    ]
    assert closing == [
        ToolResultPart(call_id="c1", name="search", content=INTERRUPTED, is_error=True)
    ]
    canceled = turn_entries(entries)[0]
    assert canceled.run_id == first.run_id
    assert canceled.canceled
    assert canceled.err == "interrupted by a newer message"
    await session.close()


async def test_rollback_moves_the_leaf_back_before_the_interrupted_turn_which_keeps_its_branch(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    agent = HandAgent(answer("a answered"), hold.turn())
    session = await Session.create(session_store, agent)
    await (await session.send(Message.user("a"))).wait(10)
    before = session.leaf
    doomed = await session.send(Message.user("b"))
    await hold.reached()
    redo = await session.send(Message.user("c"), policy=Policy.ROLLBACK)
    await redo.wait(10)
    assert doomed.outcome is Outcome.CANCELED
    assert [m.text() for m in session.context()] == ["a", "a answered", "c", "ok"]
    entries = await stored(session_store, session.id)
    assert "b" in texts(entries)
    (leaf,) = [e for e in entries if isinstance(e, LeafEntry)]
    assert leaf.entry == before
    old_turn = next(t for t in turn_entries(entries) if t.run_id == doomed.run_id)
    assert old_turn.canceled
    old_branch = session.path(old_turn.id)
    assert [e.message.text() for e in old_branch if isinstance(e, MessageEntry)] == [
        "a",
        "a answered",
        "b",
    ]
    await session.close()


# -- collect


async def test_the_collect_window_defaults_to_one_and_a_half_seconds() -> None:
    assert SessionOptions().collect_window == 1.5
    assert gateway_config().threads.collect_window_seconds == 1.5
    configured = gateway_config(collect_window_seconds=0.25)
    rt = await make_runtime(open_store("memory://"), ScriptedModel(), config=configured)
    assert rt.manager.session_options().collect_window == 0.25
    await rt.manager.close()


async def test_messages_arriving_within_the_collect_window_join_one_turn(
    session_store: SessionStore,
) -> None:
    agent = HandAgent()
    clock = ManualClock()
    options = SessionOptions(collect_window=0.3, clock=clock)
    session = await Session.create(session_store, agent, options=options)
    turns = [await session.send(Message.user(t), policy=Policy.COLLECT) for t in ("a", "b", "c")]
    assert agent.runs == []
    clock.advance(0.3)
    results = [await t.wait(10) for t in turns]
    assert len(agent.runs) == 1
    assert [m.text() for m in agent.runs[0].messages] == ["a", "b", "c"]
    assert results[0] is results[1] is results[2]
    assert {t.run_id for t in turns} == {f"{session.id}-t1"}
    entries = await stored(session_store, session.id)
    assert texts(entries) == ["a", "b", "c", "ok"]
    assert len(turn_entries(entries)) == 1
    assert turn_entries(entries)[0].policy == "collect"
    await session.close()


async def test_each_collected_message_restarts_the_window(session_store: SessionStore) -> None:
    window = 0.4
    agent = HandAgent()
    clock = ManualClock()
    session = await Session.create(
        session_store, agent, options=SessionOptions(collect_window=window, clock=clock)
    )
    sent: list[Turn] = []
    # Each message comes inside the window of the one before; together they span more than one.
    while clock.monotonic() < 2 * window:
        sent.append(await session.send(Message.user(f"m{len(sent)}"), policy=Policy.COLLECT))
        clock.advance(window * 3 / 4)
        assert agent.runs == []
    clock.advance(window / 4)
    for turn in sent:
        await turn.wait(10)
    assert len(agent.runs) == 1
    assert len(agent.runs[0].messages) == len(sent)
    await session.close()


async def test_a_message_collected_after_the_turn_started_runs_as_a_turn_of_its_own(
    session_store: SessionStore,
) -> None:
    hold = Hold()
    agent = HandAgent(hold.turn())
    session = await Session.create(
        session_store, agent, options=SessionOptions(collect_window=0.05)
    )
    first = await session.send(Message.user("a"), policy=Policy.COLLECT)
    await hold.reached()
    late = await session.send(Message.user("b"), policy=Policy.COLLECT)
    hold.release.set()
    await first.wait(10)
    await late.wait(10)
    assert len(agent.runs) == 2
    assert first.run_id != late.run_id
    await session.close()


# -- clear_queue and restore


async def test_clear_queue_drops_waiting_steers_and_sends_with_dropped_receipts(
    session_store: SessionStore,
) -> None:
    session, hold, agent = await _held(session_store)
    steer = await session.send(Message.user("steer"), policy=Policy.STEER)
    queued = await session.send(Message.user("queued"))
    assert await session.clear_queue() == 2
    for turn in (steer, queued):
        with pytest.raises(DroppedError, match=turn.id):
            await turn.wait(10)
        assert turn.outcome is Outcome.DROPPED
    entries = await stored(session_store, session.id)
    assert {r.receipt for r in receipts(entries, "dropped")} == {
        r.id for r in receipts(entries) if r.status in ("queued", "accepted")
    }
    hold.release.set()
    await session.wait_idle()
    assert len(agent.runs) == 1
    await session.close()
    reopened = await Session.open(session_store, session.id, HandAgent())
    assert reopened.queue() == []


async def _crashed_session(store: SessionStore) -> Header:
    """A session whose writer stopped with a steer and a send accepted, never settled."""
    header = Header(id=new_session_id(), created=datetime.now(UTC))
    prompt = MessageEntry(id=new_entry_id(), message=Message.user("p"), run_id=f"{header.id}-t1")
    ended = TurnEntry(id=new_entry_id(), parent=prompt.id, run_id=f"{header.id}-t1")
    steer = ReceiptEntry(
        id=new_entry_id(),
        parent=ended.id,
        status="queued",
        msg=Message.user("restored steer"),
        run_id=f"{header.id}-t1",
        policy="steer",
    )
    send = ReceiptEntry(
        id=new_entry_id(),
        parent=steer.id,
        status="accepted",
        msg=Message.user("restored send"),
        run_id=f"{header.id}-t2",
        turn=new_entry_id(),
        policy="queue",
    )
    await plant(store, header, [prompt, ended, steer, send])
    return header


async def test_reopening_restores_unsettled_receipts_to_the_queue_and_runs_nothing(
    session_store: SessionStore,
) -> None:
    header = await _crashed_session(session_store)
    agent = HandAgent()
    session = await Session.open(session_store, header.id, agent)
    assert [(m.text(), p) for _, m, p in session.queue()] == [
        ("restored steer", Policy.STEER),
        ("restored send", Policy.QUEUE),
    ]
    assert session.state == "pending"
    assert not session.busy
    assert agent.runs == []
    assert len(await stored(session_store, header.id)) == 4


async def test_continue_runs_restored_input_steers_first_as_follow_ups(
    session_store: SessionStore,
) -> None:
    header = await _crashed_session(session_store)
    agent = HandAgent()
    session = await Session.open(session_store, header.id, agent)
    first = await session.continue_()
    assert first is not None
    await session.wait_idle()
    assert [r.messages[-1].text() for r in agent.runs] == ["restored steer", "restored send"]
    entries = await stored(session_store, header.id)
    (deferred,) = receipts(entries, "deferred")
    assert deferred.turn == first.id
    assert await session.continue_() is None
    await session.close()
    assert (await Session.open(session_store, header.id, HandAgent())).queue() == []


async def test_the_next_send_runs_behind_restored_sends_and_takes_restored_steers(
    session_store: SessionStore,
) -> None:
    header = await _crashed_session(session_store)
    drained: list[list[str]] = []

    async def draining(run: Run) -> RunResult:
        drained.append([m.text() for m in await run.drain()])
        return await answer("ok")(run)

    agent = HandAgent(draining, draining)
    session = await Session.open(session_store, header.id, agent)
    new = await session.send(Message.user("new"))
    await new.wait(10)
    assert [r.messages[-1].text() for r in agent.runs] == ["restored send", "new"]
    assert drained == [["restored steer"], []]
    await session.close()

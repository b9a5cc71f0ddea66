"""The pool: slots with a first-come queue, sync and async delegation, lineage, usage, cancel."""

from __future__ import annotations

from typing import Any

import pytest

from tests.threads.pool.conftest import header_of, pool_rig, receipts, slots
from tests.threads.sessions.conftest import (
    SUBAGENT,
    USER,
    Rig,
    SessionScript,
    eventually,
    session_config,
)
from threads.errors import NoDelegationError
from threads.messages import Usage
from threads.store.entries import Lineage, TurnEntry
from threads.testing.scripted import call, dispatch, say

TENTH = Usage(input_tokens=100, output_tokens=10)


def spawn(task: str, **args: Any) -> Any:
    return call("sessions_spawn", task=task, **args)


def statuses(rig: Rig) -> list[tuple[str, str]]:
    """Each receipt as (status, the child it names, shortened to what tells children apart)."""
    accepted = {r.id: r.prompt for r in receipts(rig) if r.status == "accepted"}
    return [
        (r.status, r.prompt if r.status == "accepted" else accepted.get(r.receipt, "?"))
        for r in receipts(rig)
    ]


async def test_delegate_task_returns_the_childs_answer_as_the_calls_result(
    rig: Rig, script: SessionScript
) -> None:
    script.add(
        USER,
        call("delegate_task", call_id="call_d", task="What is 6 x 7?", context="Use integers."),
        dispatch(("caller:user", "it is 42")),
    )
    script.add(SUBAGENT, say("42", usage=TENTH))
    await rig.result(await rig.say(USER, "ask a helper"))
    await rig.settle()
    (answer,) = rig.tool_results(USER, "delegate_task")
    assert (answer["status"], answer["result"], answer["tokens"]) == ("done", "42", 110)
    child = answer["childSessionKey"]
    task_prompt = rig.prompts(child)[0]
    assert "[delegated task]" in task_prompt
    assert "Use integers." in task_prompt
    assert "What is 6 x 7?" in task_prompt
    accepted, running, done = receipts(rig)
    assert (accepted.status, accepted.call, accepted.child) == ("accepted", "call_d", child)
    assert (running.status, running.receipt, running.call) == ("running", accepted.id, "call_d")
    assert (done.status, done.stop, done.usage) == ("done", "42", TENTH)
    assert rig.inbox(USER).messages == ["it is 42"]


async def test_the_child_header_names_its_parent_session_receipt_run_and_call(
    rig: Rig, script: SessionScript
) -> None:
    script.add(USER, call("delegate_task", call_id="call_l", task="t"), dispatch())
    script.add(SUBAGENT, say("ok"))
    turn = await rig.say(USER, "go")
    await rig.result(turn)
    await rig.settle()
    (answer,) = rig.tool_results(USER, "delegate_task")
    parent = rig.manager.thread(USER)
    assert parent is not None
    header = await header_of(rig, answer["childSessionKey"])
    assert header.lineage == Lineage(
        parent_session=parent.session.id,
        parent_call_id="call_l",
        parent_entry=receipts(rig)[0].id,
        parent_run=turn.run_id,
    )


async def test_a_spawned_childs_header_carries_its_lineage_too(
    rig: Rig, script: SessionScript
) -> None:
    script.add(USER, spawn("dig"), dispatch())
    script.add(SUBAGENT, say("dug"), say("ANNOUNCE_SKIP"))
    turn = await rig.say(USER, "go")
    await rig.result(turn)
    await rig.settle()
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    header = await header_of(rig, answer["childSessionKey"])
    assert header.lineage is not None
    assert header.lineage.parent_entry == receipts(rig)[0].id
    assert (header.lineage.parent_call_id, header.lineage.parent_run) == ("", turn.run_id)


async def test_children_past_the_slots_wait_first_come_first_served(
    script: SessionScript,
) -> None:
    rig = await pool_rig(script, slots(1))
    try:
        gate = rig.model.hold(SUBAGENT)
        script.add(USER, spawn("first"), spawn("second"), spawn("third"), dispatch())
        script.add(SUBAGENT, say("one"), say("ANNOUNCE_SKIP"))
        script.add(SUBAGENT, say("two"), say("ANNOUNCE_SKIP"))
        script.add(SUBAGENT, say("three"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "three jobs"))
        first, second, third = rig.tool_results(USER, "sessions_spawn")
        assert "queued" not in first
        assert "1 of your sub-agents wait for a slot" in second["queued"]
        assert "2 of your sub-agents wait" in third["queued"]
        await rig.model.reached(SUBAGENT)
        # Only the first runs; the others are accepted and wait.
        assert statuses(rig) == [
            ("accepted", "first"),
            ("running", "first"),
            ("accepted", "second"),
            ("accepted", "third"),
        ]
        gate.set()
        await rig.settle()
        order = [(s, child) for s, child in statuses(rig) if s in ("running", "done")]
        assert order == [
            ("running", "first"),
            ("done", "first"),
            ("running", "second"),
            ("done", "second"),
            ("running", "third"),
            ("done", "third"),
        ]
    finally:
        await rig.manager.close()


async def test_a_sync_child_runs_on_its_parents_turn_slot_when_one_turn_runs_at_a_time(
    script: SessionScript,
) -> None:
    config = session_config(threads={"max_concurrent_turns": 1, "close_deadline_seconds": 0})
    rig = await pool_rig(script, config)
    try:
        script.add(USER, call("delegate_task", task="t", timeoutSeconds=30), dispatch())
        script.add(SUBAGENT, say("answered"))
        await rig.result(await rig.say(USER, "go"))
        (answer,) = rig.tool_results(USER, "delegate_task")
        assert (answer["status"], answer["result"]) == ("done", "answered")
    finally:
        await rig.manager.close()


async def test_delegated_cost_lands_in_the_parents_delegated_bucket(
    rig: Rig, script: SessionScript
) -> None:
    script.add(
        USER,
        say_usage(call("delegate_task", task="t"), Usage(input_tokens=5, output_tokens=1)),
        say("done", usage=Usage(input_tokens=7, output_tokens=1)),
    )
    script.add(SUBAGENT, say("answer", usage=TENTH))
    await rig.result(await rig.say(USER, "go"))
    await rig.settle()
    parent = rig.manager.thread(USER)
    assert parent is not None
    usage = parent.session.usage()
    assert usage.turns == Usage(input_tokens=12, output_tokens=2)
    assert usage.delegated == TENTH
    assert usage.total == Usage(input_tokens=112, output_tokens=12)


async def test_a_spawned_childs_whole_cost_includes_its_announce_step(
    rig: Rig, script: SessionScript
) -> None:
    script.add(USER, spawn("dig"), dispatch())
    script.add(SUBAGENT, say("dug", usage=TENTH), say("ANNOUNCE_SKIP", usage=TENTH))
    await rig.result(await rig.say(USER, "go"))
    await rig.settle()
    parent = rig.manager.thread(USER)
    assert parent is not None
    assert parent.session.usage().delegated == TENTH + TENTH


async def test_cancel_stops_a_running_child_and_records_a_canceled_receipt(
    rig: Rig, script: SessionScript
) -> None:
    rig.model.hold(SUBAGENT)
    script.add(USER, spawn("dig"), dispatch())
    script.add(SUBAGENT, say("never"), say("Result: stopped early"))
    await rig.result(await rig.say(USER, "go"))
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    child = answer["childSessionKey"]
    await rig.model.reached(SUBAGENT)
    await rig.manager.pool.cancel(child, "the user changed their mind")
    rig.model._gates.clear()  # let the announce step through
    for gate in list(rig.model.waiting.values()):
        gate.set()
    await rig.settle()
    *_, settled = receipts(rig)
    assert (settled.status, settled.stop) == (
        "canceled",
        "canceled (the user changed their mind)",
    )
    thread = rig.manager.thread(child)
    assert thread is not None
    assert any(isinstance(e, TurnEntry) and e.canceled for e in thread.session.entries())
    assert "Status: canceled (the user changed their mind)" in rig.inbox(USER).messages[-1]


async def test_cancel_of_a_queued_delegation_settles_it_without_starting_it(
    script: SessionScript,
) -> None:
    rig = await pool_rig(script, slots(1))
    try:
        gate = rig.model.hold(SUBAGENT)
        script.add(USER, spawn("first"), spawn("second"), dispatch())
        script.add(SUBAGENT, say("one"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "two jobs"))
        _first, second = rig.tool_results(USER, "sessions_spawn")
        await rig.manager.pool.cancel(second["childSessionKey"])
        assert statuses(rig)[-1] == ("canceled", "second")
        gate.set()
        await rig.settle()
        assert ("running", "second") not in statuses(rig)
        with pytest.raises(NoDelegationError, match="no delegation to"):
            await rig.manager.pool.cancel(second["childSessionKey"])
    finally:
        await rig.manager.close()


async def test_interrupting_the_delegating_turn_cancels_its_sync_child(
    rig: Rig, script: SessionScript
) -> None:
    rig.model.hold(SUBAGENT)
    script.add(USER, call("delegate_task", task="slow"), dispatch())
    script.add(SUBAGENT, say("too late"))
    turn = await rig.say(USER, "go")
    await rig.model.reached(SUBAGENT)
    parent = rig.manager.thread(USER)
    assert parent is not None
    parent.session.interrupt("the user sent /stop")
    await turn.wait(10)

    async def settled() -> bool:
        return receipts(rig)[-1].status == "canceled"

    await eventually(settled, "the sync child's delegation settled canceled")
    assert receipts(rig)[-1].stop.startswith("canceled (its delegating call was canceled")
    for gate in list(rig.model._gates.values()):
        gate.set()
    await rig.settle()


async def test_a_dispatch_subagent_is_a_delegation_with_receipts_and_lineage(
    rig: Rig, script: SessionScript
) -> None:
    child = f"{USER}:threads:news"
    script.add(
        USER,
        dispatch({"to": "subagent", "body": "find the news", "params": {"task_id": "news"}}),
    )
    script.add(child, say("three headlines", usage=TENTH))
    script.add(USER, dispatch())  # the child_completed wake
    turn = await rig.say(USER, "get news")
    await rig.result(turn)
    await rig.settle()
    accepted, running, done = receipts(rig)
    assert (accepted.child, accepted.prompt) == (child, "find the news")
    assert [running.status, done.status] == ["running", "done"]
    assert (done.stop, done.usage) == ("three headlines", TENTH)
    header = await header_of(rig, child)
    assert header.lineage is not None
    assert (header.lineage.parent_entry, header.lineage.parent_run) == (accepted.id, turn.run_id)


async def test_a_subagent_cannot_delegate(rig: Rig, script: SessionScript) -> None:
    script.add(USER, spawn("nest"), dispatch())
    script.add(SUBAGENT, call("delegate_task", task="deeper"), say("no tool"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "go"))
    await rig.settle()
    (answer,) = rig.tool_results(USER, "sessions_spawn")
    (refused,) = rig.tool_results(answer["childSessionKey"], "delegate_task")
    assert "unknown tool 'delegate_task'" in refused


def say_usage(response: Any, usage: Usage) -> Any:
    """A scripted step with its usage set."""
    import dataclasses

    return dataclasses.replace(response, usage=usage)

"""A child parked at an approval: ``parked`` on the parent, its slot freed, settled after the decision.

``deploy`` waits for a person; the child's model calls it and the child's run
parks. The delegation must not settle then: the parent records ``parked``, a
delegation waiting for the slot starts, a synchronous ``delegate_task``
returns at once saying the child waits, and once a person decides, the
resumed run is ``running`` again and settles the delegation — the parent is
told like an asynchronous delegation's end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

import pytest

from tests.threads.pool.conftest import approvals_rig, decide, receipts, slots
from tests.threads.sessions.conftest import (
    SUBAGENT,
    USER,
    Rig,
    SessionScript,
    eventually,
    reply,
)
from threads.messages import Usage
from threads.store.entries import Entry, PoolReceiptEntry
from threads.store.memory import MemoryStore
from threads.testing.scripted import call, dispatch, say

TENTH = Usage(input_tokens=100, output_tokens=10)


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
async def rig(script: SessionScript, ran: list[str]) -> AsyncIterator[Rig]:
    runtime = await approvals_rig(script, ran)
    yield runtime
    await runtime.manager.close()


def journey(rig: Rig) -> list[str]:
    return [r.status for r in receipts(rig)]


def child_of(rig: Rig) -> str:
    (accepted,) = [r for r in receipts(rig) if r.status == "accepted"]
    return accepted.child


async def parked_sync(rig: Rig, script: SessionScript) -> str:
    """The parent delegates with ``delegate_task``; its child parks on deploy. The child's key."""
    script.add(USER, call("delegate_task", call_id="call_d", task="deploy v42"), say("waiting"))
    script.add(SUBAGENT, call("deploy", env="prod"))
    turn = await rig.say(USER, "ship it through a helper")
    await rig.result(turn)
    await rig.settle()
    return child_of(rig)


def last(rig: Rig) -> PoolReceiptEntry:
    return receipts(rig)[-1]


async def test_a_sync_child_that_parks_records_parked_and_its_call_returns_at_once(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = await parked_sync(rig, script)
    assert journey(rig) == ["accepted", "running", "parked"]
    parked = last(rig)
    assert parked.call == "call_d"
    assert parked.stop == "waits for a person's approval of deploy"
    (answer,) = rig.tool_results(USER, "delegate_task")
    assert isinstance(answer, str)
    assert "waits for a person's approval of deploy" in answer
    assert "will come to this session as a message" in answer
    assert child in answer
    delegation = rig.manager.pool.find(child)
    assert delegation is not None  # unsettled, followed
    assert delegation.state == "parked"
    assert ran == []


async def test_a_parked_child_frees_its_slot_for_the_delegation_waiting_behind_it(
    script: SessionScript, ran: list[str]
) -> None:
    rig = await approvals_rig(script, ran, slots(1))
    try:
        script.add(
            USER,
            call("sessions_spawn", task="deploy", label="first"),
            call("sessions_spawn", task="count", label="second"),
            dispatch(),
        )
        script.add(
            SUBAGENT,
            call("deploy", env="prod"),  # the first child parks
            say("3"),  # the second answers
            say("Result: 3\nNotes: none"),  # its announce step
        )
        gate = rig.model.hold(SUBAGENT)  # the first child starts; the second waits behind it
        await rig.result(await rig.say(USER, "two helpers"))
        await rig.model.reached(SUBAGENT)
        gate.set()
        await rig.settle()
        accepted = {r.id: r.prompt for r in receipts(rig) if r.status == "accepted"}
        steps = [(r.status, accepted.get(r.receipt, r.prompt)) for r in receipts(rig)]
        assert steps == [
            ("accepted", "deploy"),
            ("running", "deploy"),
            ("accepted", "count"),
            ("parked", "deploy"),
            ("running", "count"),
            ("done", "count"),
        ]
    finally:
        await rig.manager.close()


async def approve_until_settled(rig: Rig, child: str) -> None:
    """Approve what ``child`` waits for, then wait for its delegation to settle."""
    await decide(rig, child, "approve")
    await eventually(lambda: _settled(rig), "the delegation settles")
    await rig.settle()


async def test_an_approved_childs_answer_settles_done_and_reaches_the_parent(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = await parked_sync(rig, script)
    script.add(SUBAGENT, say("v42 is live"))
    script.add(USER, reply("the helper says v42 is live"))
    await approve_until_settled(rig, child)
    assert ran == ["prod"]
    assert journey(rig) == ["accepted", "running", "parked", "running", "done"]
    assert last(rig).stop == "v42 is live"
    told = rig.prompts(USER)[-1]
    assert f"child: {child}" in told
    assert "status: completed" in told
    assert "v42 is live" in told
    assert rig.manager.pool.find(child) is None


async def test_a_denied_childs_resumed_run_sees_the_denial_and_settles_the_delegation(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = await parked_sync(rig, script)
    script.add(SUBAGENT, say("I could not deploy: it was refused"))
    script.add(USER, reply("the deploy was refused"))
    await decide(rig, child, "deny", "not on a Sunday")
    await eventually(lambda: _settled(rig), "the delegation settles")
    await rig.settle()
    assert ran == []
    denied = rig.tool_results(child, "deploy")
    assert any("DENIED: not on a Sunday" in str(r) for r in denied)
    assert journey(rig) == ["accepted", "running", "parked", "running", "done"]
    assert last(rig).stop == "I could not deploy: it was refused"
    assert "I could not deploy: it was refused" in rig.prompts(USER)[-1]


async def test_a_child_that_parks_again_after_its_resume_is_parked_again(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = await parked_sync(rig, script)
    script.add(SUBAGENT, call("deploy", env="eu"), say("both live"))
    script.add(USER, reply("done"))
    await decide(rig, child, "approve")
    await eventually(lambda: _status(rig, 5, "parked"), "the resumed child parks again")
    assert journey(rig) == ["accepted", "running", "parked", "running", "parked"]
    await approve_until_settled(rig, child)
    assert ran == ["prod", "eu"]
    assert journey(rig)[-2:] == ["running", "done"]
    assert last(rig).stop == "both live"


async def test_an_approved_spawned_child_is_announced_after_its_resume(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    script.add(USER, call("sessions_spawn", task="deploy v42", label="shipper"), dispatch())
    script.add(SUBAGENT, call("deploy", env="prod"))
    await rig.result(await rig.say(USER, "ship it in the background"))
    await rig.settle()
    assert journey(rig) == ["accepted", "running", "parked"]
    child = child_of(rig)
    script.add(SUBAGENT, say("v42 is live"), say("Result: v42 is live\nNotes: none"))
    await approve_until_settled(rig, child)
    assert journey(rig) == ["accepted", "running", "parked", "running", "done"]
    (announce,) = rig.inbox(USER).messages
    assert "Sub-agent shipper finished." in announce
    assert "Result: v42 is live" in announce


async def test_a_dispatched_subagent_that_parks_settles_with_every_runs_cost_after_approval(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = f"{USER}:threads:ship"
    script.add(
        USER,
        dispatch({"to": "subagent", "body": "deploy v42", "params": {"task_id": "ship"}}),
    )
    script.add(child, dataclasses.replace(call("deploy", env="prod"), usage=TENTH))
    await rig.result(await rig.say(USER, "ship it"))
    await rig.settle()
    assert journey(rig) == ["accepted", "running", "parked"]
    script.add(child, say("v42 is live", usage=TENTH))
    script.add(USER, dispatch())  # the child_completed wake, once
    await approve_until_settled(rig, child)
    assert journey(rig) == ["accepted", "running", "parked", "running", "done"]
    assert (last(rig).stop, last(rig).usage) == ("v42 is live", TENTH + TENTH)
    told = [p for p in rig.prompts(USER) if f"child: {child}" in p]
    assert len(told) == 1
    assert "v42 is live" in told[0]


async def test_canceling_a_parked_child_denies_its_waiting_call_and_settles_canceled(
    rig: Rig, script: SessionScript, ran: list[str]
) -> None:
    child = await parked_sync(rig, script)
    script.add(USER, reply("the helper was canceled"))
    await rig.manager.pool.cancel(child, "no longer needed")
    await eventually(lambda: _settled(rig), "the delegation settles")
    await rig.settle()
    assert journey(rig) == ["accepted", "running", "parked", "canceled"]
    assert last(rig).stop == "canceled (no longer needed)"
    told = rig.prompts(USER)[-1]
    assert "status: canceled" in told
    assert "the sub-agent canceled (no longer needed)" in told
    thread = await rig.manager.open_thread(child)
    assert thread is not None
    assert not thread.session.approvals.awaiting
    assert ran == []


async def test_a_child_parked_across_a_restart_stays_parked_and_settles_after_the_decision(
    script: SessionScript, ran: list[str]
) -> None:
    store = MemoryStore()
    first = await approvals_rig(script, ran, store=store)
    child = await parked_sync(first, script)
    await first.manager.close()

    rig = await approvals_rig(script, ran, store=store, recover=True)
    try:
        assert rig.recovered is not None
        assert rig.recovered.waiting == 1
        parent = await rig.manager.open_thread(USER)
        assert parent is not None
        assert journey(rig) == ["accepted", "running", "parked"]  # not settled canceled
        script.add(SUBAGENT, say("v42 is live"))
        script.add(USER, reply("the helper says v42 is live"))
        await approve_until_settled(rig, child)
        assert ran == ["prod"]
        assert journey(rig) == ["accepted", "running", "parked", "running", "done"]
        assert "v42 is live" in rig.prompts(USER)[-1]
    finally:
        await rig.manager.close()


async def test_a_child_that_parked_just_before_a_stop_gets_its_parked_receipt_at_recovery(
    script: SessionScript, ran: list[str]
) -> None:
    store = MemoryStore()
    first = await approvals_rig(script, ran, store=store)
    child = await parked_sync(first, script)
    await first.manager.close()
    # What a gateway stopped between the child's park and the parent's receipt leaves.
    lagging = await _without(
        store, lambda e: isinstance(e, PoolReceiptEntry) and e.status == "parked"
    )

    rig = await approvals_rig(script, ran, store=lagging, recover=True)
    try:
        assert rig.recovered is not None
        assert rig.recovered.waiting == 1
        parent = await rig.manager.open_thread(USER)
        assert parent is not None
        assert journey(rig) == ["accepted", "running", "parked"]
        assert last(rig).stop == "waits for a person's approval of deploy"
        script.add(SUBAGENT, say("v42 is live"))
        script.add(USER, reply("the helper says v42 is live"))
        await approve_until_settled(rig, child)
        assert journey(rig)[-2:] == ["running", "done"]
    finally:
        await rig.manager.close()


async def _without(store: MemoryStore, drop: Callable[[Entry], bool]) -> MemoryStore:
    """A copy of every session in ``store`` without the entries ``drop`` picks (relinked)."""
    copy = MemoryStore()
    for key, session_id in (await store.keys()).items():
        loaded = await store.load(session_id)
        await copy.create(loaded.header)
        await copy.point(key, session_id)
        kept: list[Entry] = []
        moved: dict[str, str] = {}
        for entry in loaded.entries:
            parent = moved.get(entry.parent, entry.parent)
            if drop(entry):
                moved[entry.id] = parent
                continue
            kept.append(dataclasses.replace(entry, parent=parent))
        await copy.append(session_id, kept)
    return copy


async def _settled(rig: Rig) -> bool:
    return bool(receipts(rig)) and last(rig).status in ("done", "failed", "canceled", "capped")


async def _status(rig: Rig, count: int, status: str) -> bool:
    found = receipts(rig)
    return len(found) >= count and found[count - 1].status == status

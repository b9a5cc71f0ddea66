"""Recover: a synchronous delegation whose turn died is answered, settled, never re-run.

Each test builds what a gateway killed mid-delegation leaves in its store —
the parent's turn cut after its ``delegate_task`` call, the receipts
``accepted`` and ``running``, the child's run cut or finished — and starts a
gateway's runtime over it, recovering delegations first as the gateway does.
"""

from __future__ import annotations

import pytest

from tests.threads.pool.conftest import pool_rig
from tests.threads.sessions.conftest import SUBAGENT, USER, SessionScript
from threads.errors import NotDelegatingError
from threads.ids import new_entry_id, new_session_id
from threads.keys import SessionKey
from threads.messages import Message, ToolCallPart
from threads.pool.recovery import Recovered
from threads.session import Session
from threads.sinks import DropSink
from threads.store.entries import (
    ApprovalDecisionEntry,
    Entry,
    Header,
    Lineage,
    MessageEntry,
    PoolReceiptEntry,
    TurnEntry,
)
from threads.store.memory import MemoryStore
from threads.testing.scripted import dispatch
from threads.wake import SessionCaller, UserCaller, Wake, WakeSource, wake_to_wire

CHILD = "agent:default:subagent:1c9e6a52-0d7b-4f3e-8a21-5b4c3d2e1f00"
CALL = "call_sync"


def chained(*entries: Entry) -> list[Entry]:
    import dataclasses

    out: list[Entry] = []
    parent = ""
    for entry in entries:
        out.append(dataclasses.replace(entry, parent=parent))
        parent = entry.id
    return out


async def cut_sync_delegation(store: MemoryStore, *, child_answered: bool) -> str:
    """A parent cut mid ``delegate_task``; the child's run cut too, or already answered."""
    parent = Header(id=new_session_id(), meta={"key": USER, "agent": "default"})
    await store.create(parent)
    await store.point(USER, parent.id)
    user_wake = Wake(
        source=WakeSource.TELEGRAM,
        body="ask a helper",
        caller=UserCaller(channel="telegram", user_id="7"),
        sink=DropSink(reason="test"),
    )
    prompt = MessageEntry(
        id=new_entry_id(),
        message=Message.user("ask a helper"),
        run_id=f"{parent.id}-t1",
        wake=wake_to_wire(user_wake),
    )
    asked = MessageEntry(
        id=new_entry_id(),
        message=Message(
            role="assistant",
            content=(ToolCallPart(id=CALL, name="delegate_task", args={"task": "6 x 7?"}),),
        ),
    )
    accepted = PoolReceiptEntry(
        id=new_entry_id(), status="accepted", child=CHILD, prompt="6 x 7?", call=CALL
    )
    running = PoolReceiptEntry(
        id=new_entry_id(), status="running", receipt=accepted.id, child=CHILD, call=CALL
    )
    await store.append(parent.id, chained(prompt, asked, accepted, running))
    child = Header(
        id=new_session_id(),
        lineage=Lineage(
            parent_session=parent.id,
            parent_call_id=CALL,
            parent_entry=accepted.id,
            parent_run=prompt.run_id,
        ),
        meta={"key": CHILD, "agent": "default", "spawned_by": USER},
    )
    await store.create(child)
    await store.point(CHILD, child.id)
    task_wake = Wake(
        source=WakeSource.SESSION,
        body="6 x 7?",
        caller=SessionCaller(session_key=SessionKey(USER)),
        sink=DropSink(reason="test"),
        meta={"delegation": accepted.id},
    )
    child_prompt = MessageEntry(
        id=new_entry_id(),
        message=Message.user("6 x 7?"),
        run_id=f"{child.id}-t1",
        wake=wake_to_wire(task_wake),
    )
    entries: list[Entry] = [child_prompt]
    if child_answered:
        entries += [
            MessageEntry(id=new_entry_id(), message=Message.assistant("42")),
            TurnEntry(id=new_entry_id(), run_id=child_prompt.run_id, stop_reason="end_turn"),
        ]
    await store.append(child.id, chained(*entries))
    return parent.id


def results_for(entries: list[Entry], call_id: str) -> list[tuple[str, bool]]:
    return [
        (part.content, part.is_error)
        for e in entries
        if isinstance(e, MessageEntry)
        for part in e.message.tool_results()
        if part.call_id == call_id
    ]


async def test_a_sync_delegation_cut_with_its_turn_is_canceled_and_its_call_answered(
    script: SessionScript,
) -> None:
    store = MemoryStore()
    parent_id = await cut_sync_delegation(store, child_answered=False)
    script.add(USER, dispatch())
    rig = await pool_rig(script, store=store, recover=True)
    try:
        assert rig.recovered == Recovered(settled=1)
        await rig.settle()
        parent = (await store.load(parent_id)).entries
        ((content, is_error),) = results_for(parent, CALL)
        assert is_error
        assert "the sub-agent canceled (the gateway restarted while it ran" in content
        (decision,) = [e for e in parent if isinstance(e, ApprovalDecisionEntry)]
        assert (decision.call_id, decision.who, decision.via) == (CALL, "thread/pool", "child")
        statuses = [e.status for e in parent if isinstance(e, PoolReceiptEntry)]
        assert statuses == ["accepted", "running", "canceled"]
        # The child's cut run is recorded canceled and never resumed: no model call for it.
        child_id = await store.resolve(CHILD)
        assert child_id is not None
        child = (await store.load(child_id)).entries
        assert [t.canceled for t in child if isinstance(t, TurnEntry)] == [True]
        assert not [k for k in script.requests if k.startswith(SUBAGENT)]
        # The parent's turn resumed and its model saw the call answered.
        (request,) = script.requests[USER]
        assert any(p.call_id == CALL for m in request.messages for p in m.tool_results())
    finally:
        await rig.manager.close()


async def test_a_sync_delegation_whose_child_answered_before_the_crash_keeps_the_answer(
    script: SessionScript,
) -> None:
    store = MemoryStore()
    parent_id = await cut_sync_delegation(store, child_answered=True)
    script.add(USER, dispatch())
    rig = await pool_rig(script, store=store, recover=True)
    try:
        assert rig.recovered == Recovered(settled=1)
        await rig.settle()
        parent = (await store.load(parent_id)).entries
        assert results_for(parent, CALL) == [("42", False)]
        settled = [e for e in parent if isinstance(e, PoolReceiptEntry)][-1]
        assert (settled.status, settled.stop) == ("done", "42")
        (request,) = script.requests[USER]
        assert "42" in [p.content for m in request.messages for p in m.tool_results()]
    finally:
        await rig.manager.close()


async def test_resolve_delegation_refuses_a_call_that_delegates_to_no_such_child() -> None:
    store = MemoryStore()
    parent_id = await cut_sync_delegation(store, child_answered=True)
    session = await Session.open(store, parent_id, agent=_NoAgent())
    try:
        for call_id, child in (("call_other", CHILD), (CALL, "agent:default:subagent:other")):
            with pytest.raises(NotDelegatingError, match="delegates to no child"):
                await session.resolve_delegation(call_id, child, "x")
        await session.resolve_delegation(CALL, CHILD, "42")
        with pytest.raises(NotDelegatingError, match="has its result"):
            await session.resolve_delegation(CALL, CHILD, "again")
    finally:
        await session.close()


class _NoAgent:
    async def run(self, run: object) -> object:
        raise AssertionError("no turn runs here")

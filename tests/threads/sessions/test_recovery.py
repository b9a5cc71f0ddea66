"""A restart never loses an announce: unsettled delegations are settled at start-up."""

from __future__ import annotations

import pytest

from tests.threads.sessions.conftest import SUBAGENT, USER, SessionScript, make_rig, session_config
from threads.ids import new_entry_id, new_session_id
from threads.keys import SessionKey
from threads.messages import Message
from threads.sessions.delegation import settle_unsettled
from threads.sinks import DropSink
from threads.store.entries import Header, MessageEntry, PoolReceiptEntry
from threads.store.memory import MemoryStore
from threads.testing.scripted import call, dispatch, say
from threads.wake import SessionCaller, Wake, WakeSource, wake_to_wire

CHILD = "agent:default:subagent:0b6f1c2e-5d4a-4c3b-9a8e-7f6d5c4b3a21"


def pool(store_entries: list[object]) -> list[str]:
    return [e.status for e in store_entries if isinstance(e, PoolReceiptEntry)]


async def test_a_delegation_a_stopped_gateway_left_running_is_settled_and_announced(
    script: SessionScript,
) -> None:
    store = MemoryStore()
    first = await make_rig(script, store=store)
    first.model.hold(SUBAGENT)
    script.add(USER, call("sessions_spawn", task="dig", label="digger"), dispatch())
    await first.result(await first.say(USER, "delegate"))
    await first.model.reached(SUBAGENT)
    for task in list(first.manager._tasks):
        if task.get_name().startswith("delegation"):
            task.cancel()  # the process stops: its watcher goes with it
    await first.manager.close()  # the child's run is canceled (close deadline 0)

    second = await make_rig(script, store=store)
    try:
        assert await settle_unsettled(second.manager) == 1
        (announce,) = second.inbox(USER).messages
        assert announce.startswith("Sub-agent digger finished.\nStatus: canceled")
        requester = await store.load(str(await store.resolve(USER)))
        assert pool(requester.entries) == ["accepted", "running", "canceled"]
        assert await settle_unsettled(second.manager) == 0  # settled once, announced once
    finally:
        await second.manager.close()


async def crashed_delegation(store: MemoryStore) -> None:
    """What a gateway killed mid-run leaves: receipts accepted+running, a child prompt, no end."""
    requester = Header(id=new_session_id(), meta={"key": USER, "agent": "default"})
    await store.create(requester)
    await store.point(USER, requester.id)
    accepted = PoolReceiptEntry(id=new_entry_id(), status="accepted", child=CHILD, prompt="dig")
    running = PoolReceiptEntry(
        id=new_entry_id(), parent=accepted.id, status="running", receipt=accepted.id, child=CHILD
    )
    await store.append(requester.id, [accepted, running])
    child = Header(
        id=new_session_id(),
        meta={
            "key": CHILD,
            "agent": "default",
            "spawned_by": USER,
            "spawn_session": requester.id,
            "spawn_receipt": accepted.id,
            "cleanup": "keep",
        },
    )
    await store.create(child)
    await store.point(CHILD, child.id)
    wake = Wake(
        source=WakeSource.SESSION,
        body="dig",
        caller=SessionCaller(session_key=SessionKey(USER)),
        sink=DropSink(reason="test"),
    )
    prompt = MessageEntry(
        id=new_entry_id(),
        message=Message.user("dig"),
        run_id=f"{child.id}-t1",
        wake=wake_to_wire(wake),
    )
    await store.append(child.id, [prompt])


@pytest.mark.parametrize(
    ("resume", "status"),
    [
        (True, "Status: canceled (interrupted: the gateway stopped during this turn)"),
        (False, "Status: canceled (the gateway restarted while the sub-agent ran; its run was"),
    ],
)
async def test_a_delegation_whose_child_died_mid_run_is_settled_canceled_at_start_up(
    script: SessionScript, resume: bool, status: str
) -> None:
    store = MemoryStore()
    await crashed_delegation(store)
    script.add(SUBAGENT, say("resumed answer (not the delegation's)"))
    config = session_config(threads={"close_deadline_seconds": 0, "continue_on_start": resume})
    rig = await make_rig(script, config, store=store)
    try:
        assert await settle_unsettled(rig.manager) == 1
        await rig.settle()
        (announce,) = rig.inbox(USER).messages
        assert status in announce
        requester = await store.load(str(await store.resolve(USER)))
        assert pool(requester.entries)[-1] == "canceled"
        assert await settle_unsettled(rig.manager) == 0
    finally:
        await rig.manager.close()

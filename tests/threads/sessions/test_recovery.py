"""A restart never loses an announce: unsettled spawned delegations are settled or resumed."""

from __future__ import annotations

from tests.threads.sessions.conftest import SUBAGENT, USER, SessionScript, make_rig, session_config
from threads.ids import new_entry_id, new_session_id
from threads.keys import SessionKey
from threads.messages import Message
from threads.pool.recovery import Recovered, recover_delegations
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

    second = await make_rig(script, store=store, recover=True)
    try:
        assert second.recovered == Recovered(settled=1)
        (announce,) = second.inbox(USER).messages
        assert announce.startswith("Sub-agent digger finished.\nStatus: canceled")
        requester = await store.load(str(await store.resolve(USER)))
        assert pool(requester.entries) == ["accepted", "running", "canceled"]
        # Settled once, announced once.
        assert await recover_delegations(second.manager) == Recovered()
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


async def test_a_spawned_child_cut_mid_run_by_a_crash_is_resumed_and_settles_when_it_answers(
    script: SessionScript,
) -> None:
    store = MemoryStore()
    await crashed_delegation(store)
    script.add(SUBAGENT, say("resumed answer"), say("Result: found it after the restart"))
    rig = await make_rig(script, store=store, recover=True)
    try:
        assert rig.recovered == Recovered(resumed=1)
        await rig.settle()
        (announce,) = rig.inbox(USER).messages
        assert "Status: completed successfully" in announce
        assert "Result: found it after the restart" in announce
        requester = await store.load(str(await store.resolve(USER)))
        settled = [e for e in requester.entries if isinstance(e, PoolReceiptEntry)][-1]
        assert (settled.status, settled.stop) == ("done", "resumed answer")
        assert await recover_delegations(rig.manager) == Recovered()
    finally:
        await rig.manager.close()


async def test_without_continue_on_start_a_cut_child_is_settled_canceled(
    script: SessionScript,
) -> None:
    store = MemoryStore()
    await crashed_delegation(store)
    config = session_config(threads={"close_deadline_seconds": 0, "continue_on_start": False})
    rig = await make_rig(script, config, store=store, recover=True)
    try:
        assert rig.recovered == Recovered(settled=1)
        await rig.settle()
        (announce,) = rig.inbox(USER).messages
        assert "Status: canceled (the gateway restarted while the sub-agent ran" in announce
        requester = await store.load(str(await store.resolve(USER)))
        assert pool(requester.entries)[-1] == "canceled"
        assert await recover_delegations(rig.manager) == Recovered()
    finally:
        await rig.manager.close()

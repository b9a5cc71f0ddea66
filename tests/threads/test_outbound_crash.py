"""Crash windows of the outbound ledger and the hand-offs, on jsonl, sqlite and redis.

Each test runs a real runtime over a :class:`~tests.threads.dying.DyingStore`,
stops it at one point (as a SIGKILL would), closes the store, and starts a
new runtime over the same data. The channel endpoints outlive the restart,
so what a user received is counted across both lives: no accepted input goes
unanswered, no delivered send is repeated, no hand-off is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from config import validate
from tests.threads.agent.conftest import KeyedScript
from tests.threads.conftest import (
    DEADLINE,
    Blocker,
    Runtime,
    gateway_config,
    make_runtime,
    prompts,
    stored,
    turn_entries,
)
from tests.threads.dying import DyingStore
from tests.threads.sessions.conftest import USER, SessionScript, make_rig
from tests.threads.store.conftest import Backend
from threads.agent.tools import Tool, ToolContext, tool
from threads.context import INTERRUPTED
from threads.ledger import ALREADY_SENT
from threads.manager import RESUME_BODY
from threads.messages import ToolResultPart
from threads.outbound import outgoing
from threads.sinks import OutboundMessage
from threads.store.entries import Entry, MessageEntry, OutboundEntry, ReceiptEntry, TurnEntry
from threads.testing.scripted import ScriptedModel, call, calls, dispatch, say
from threads.wake import Wake

KEY = "telegram:42"
CHILD = "telegram:42:threads:dig"


async def restart(
    backend: Backend, dead: Runtime, dying: DyingStore, model: ScriptedModel, **kwargs: Any
) -> Runtime:
    """The killed process's store closed (its locks go with it), a new runtime over the data."""
    await dying.wait_dead()
    backend.stores.remove(dying.inner)
    await dying.inner.close()
    return await make_runtime(backend.open(), model, inboxes=dead.inboxes, **kwargs)


async def bury(dead: Runtime, dying: DyingStore) -> None:
    """Let the dead runtime's frozen tasks end (their store calls fail), then close it."""
    dying.reap()
    await dead.manager.close()


async def idle(runtime: Runtime, *keys: str) -> None:
    async with asyncio.timeout(DEADLINE):
        while True:
            threads = [runtime.manager.thread(k) for k in keys]
            for thread in threads:
                if thread is not None:
                    await thread.session.wait_idle()
            if all(t is None or t.state == "idle" for t in threads):
                return


def outbound(entries: Sequence[Entry]) -> list[OutboundEntry]:
    return [e for e in entries if isinstance(e, OutboundEntry)]


def marks(entries: Sequence[Entry]) -> dict[str, str]:
    """Record id -> status of its mark."""
    return {e.record: e.status for e in outbound(entries) if e.record}


def has_turn_end(session: str, entries: Sequence[Entry]) -> bool:
    return any(isinstance(e, TurnEntry) for e in entries)


def wake_sources(entries: Sequence[Entry]) -> list[str]:
    return [str(p.wake.get("source")) for p in prompts(entries)]


# -- the final text answer


@pytest.mark.parametrize(
    ("window", "dedups", "shown", "uncertain"),
    [
        # Delivered, then killed before the mark: repeated only where a repeat shows once.
        ("after_delivery", False, ["the answer"], True),
        ("after_delivery", True, ["the answer"], False),
        # Killed once the turn's end (with the answer's record) is durable, before it left.
        ("after_turn_end", False, [], True),
        ("after_turn_end", True, ["the answer"], False),
    ],
)
async def test_a_final_answer_is_never_doubled_by_a_crash_around_its_delivery(
    crash_backend: Backend, window: str, dedups: bool, shown: list[str], uncertain: bool
) -> None:
    model = ScriptedModel(say("the answer"))
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model)
    inbox = dead.inbox("user")
    inbox.dedups = dedups
    if window == "after_delivery":
        inbox.after_deliver = lambda message: dying.kill()
    else:
        dying.die_after(has_turn_end)
    await dead.manager.wake(KEY, dead.user_wake("question"))
    await dying.wait_dead()
    live = await restart(crash_backend, dead, dying, model)
    try:
        await idle(live, KEY)
        assert inbox.messages == shown
        assert len(model.requests) == 1  # the answered turn is not run again
        session_id = await live.store.resolve(KEY)
        assert session_id is not None
        entries = await stored(live.store, session_id)
        assert [t.stop_reason for t in turn_entries(entries)] == ["end_turn"]
        assert wake_sources(entries) == ["telegram"]  # no resume
        (record,) = [e for e in outbound(entries) if not e.record]
        assert record.kind == "reply"
        assert record.text == "the answer"
        assert marks(entries)[record.id] == ("uncertain" if uncertain else "delivered")
        if dedups and shown:
            assert {m.outbound_id for m in inbox.received} == {record.id}
        info = await live.manager.check_session(KEY)
        health = await live.manager.health()
        if uncertain:
            (listed,) = info["delivery_uncertain"]
            assert listed["id"] == record.id
            assert listed["text"] == "the answer"
            assert [u["session_key"] for u in health["outbound"]["uncertain"]] == [KEY]
        else:
            assert info["delivery_uncertain"] == []
            assert health["outbound"]["uncertain"] == []
    finally:
        await bury(dead, dying)
        await live.manager.close()


# -- dispatch


async def test_a_dispatch_cut_short_completes_its_sends_once_and_is_not_resumed(
    crash_backend: Backend,
) -> None:
    script = KeyedScript()
    script.add(
        KEY,
        dispatch(
            ("caller:user", "on it"),
            {"to": "subagent", "params": {"task_id": "dig"}, "body": "dig here"},
        ),
        dispatch(),  # the child_completed that follows
    )
    script.add(CHILD, say("dug"))
    model = ScriptedModel(default=script)
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model)
    # Killed right after the user got the first send: the child was not woken yet.
    dead.inbox("user").after_deliver = lambda message: dying.kill()
    await dead.manager.wake(KEY, dead.user_wake("dig for me"))
    live = await restart(crash_backend, dead, dying, model)
    try:
        await idle(live, KEY, CHILD)
        await idle(live, KEY, CHILD)
        assert live.inbox("user").messages == ["on it"]  # not repeated
        parent_id, child_id = await live.store.resolve(KEY), await live.store.resolve(CHILD)
        assert parent_id is not None
        assert child_id is not None
        parent, child = await stored(live.store, parent_id), await stored(live.store, child_id)
        # The dispatched turn is ended as dispatched, not canceled and resumed.
        assert turn_entries(parent)[0].stop_reason == "dispatch"
        assert "resume" not in wake_sources(parent)
        assert wake_sources(parent) == ["telegram", "child_completed"]
        # The child was woken once, by the send recorded before the crash.
        (task,) = prompts(child)
        assert task.message.text().endswith("dig here")
        (record,) = [e for e in outbound(parent) if e.kind == "dispatch:subagent" and not e.record]
        assert task.wake["origin"] == record.id
        statuses = marks(parent)
        assert statuses[record.id] == "delivered"
        (reply,) = [e for e in outbound(parent) if e.kind == "dispatch:caller:user"]
        assert statuses[reply.id] == "uncertain"
        # The model sees what its dispatch did when the session next runs.
        results = [
            p.content
            for e in parent
            if isinstance(e, MessageEntry)
            for p in e.message.content
            if isinstance(p, ToolResultPart) and p.name == "dispatch"
        ]
        assert record.id in results[0]
        assert "gateway stopped" in results[0]
    finally:
        await bury(dead, dying)
        await live.manager.close()


# -- child_completed


def _child_completed_prompt(session: str, entries: Sequence[Entry]) -> bool:
    return any(
        isinstance(e, MessageEntry) and e.wake.get("source") == "child_completed" for e in entries
    )


def _child_completed_record(session: str, entries: Sequence[Entry]) -> bool:
    return any(isinstance(e, OutboundEntry) and e.kind == "child_completed" for e in entries)


@pytest.mark.parametrize(
    "window",
    [
        "after_child_turn_end",  # the parent was not woken yet
        "after_parent_accepted",  # the parent took it; the child's mark was not written
    ],
)
async def test_a_child_completed_due_at_a_crash_wakes_the_parent_exactly_once(
    crash_backend: Backend, window: str
) -> None:
    script = KeyedScript()
    script.add(KEY, dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
    script.add(KEY, dispatch(("user", "the child says: dug")), dispatch(("user", "again")))
    script.add(CHILD, say("dug"))
    model = ScriptedModel(default=script)
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model)
    dying.die_after(
        _child_completed_record if window == "after_child_turn_end" else _child_completed_prompt
    )
    await dead.manager.wake(KEY, dead.user_wake("dig for me"))
    live = await restart(crash_backend, dead, dying, model)
    try:
        await idle(live, KEY, CHILD)
        await idle(live, KEY, CHILD)
        parent_id = await live.store.resolve(KEY)
        assert parent_id is not None
        parent = await stored(live.store, parent_id)
        completed = [p for p in prompts(parent) if p.wake.get("source") == "child_completed"]
        assert len(completed) == 1
        assert "status: completed" in completed[0].message.text()
        assert completed[0].message.text().endswith("dug")
        assert live.inbox(f"user of {KEY}").messages == ["the child says: dug"]
        child_id = await live.store.resolve(CHILD)
        assert child_id is not None
        (record,) = [e for e in outbound(await stored(live.store, child_id)) if not e.record]
        assert completed[0].wake["origin"] == record.id
    finally:
        await bury(dead, dying)
        await live.manager.close()


# -- tool results


class Nothing(BaseModel):
    model_config = ConfigDict(extra="forbid")


def quick_tool() -> Tool[Nothing]:
    async def handler(args: Nothing, ctx: ToolContext) -> str:
        return "ten minutes of work, done"

    return tool("quick", "Finish at once.", Nothing)(handler)


def _quick_result(session: str, entries: Sequence[Entry]) -> bool:
    return any(
        isinstance(e, MessageEntry)
        and any(isinstance(p, ToolResultPart) and p.name == "quick" for p in e.message.content)
        for e in entries
    )


async def test_a_restart_mid_batch_keeps_finished_results_and_closes_only_the_rest(
    crash_backend: Backend,
) -> None:
    blocker = Blocker()
    model = ScriptedModel(
        calls(("quick", {}), ("block", {"label": "slow"}), call_ids=("c_quick", "c_slow")),
        say("resumed"),
    )
    tools = [quick_tool(), blocker.tool()]
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model, tools=tools)
    dying.die_after(_quick_result)
    await dead.manager.wake(KEY, dead.user_wake("work"))
    live = await restart(crash_backend, dead, dying, model, tools=tools)
    try:
        await idle(live, KEY)
        session_id = await live.store.resolve(KEY)
        assert session_id is not None
        entries = await stored(live.store, session_id)
        results = {
            p.call_id: p.content
            for e in entries
            if isinstance(e, MessageEntry)
            for p in e.message.content
            if isinstance(p, ToolResultPart)
        }
        assert results == {"c_quick": "ten minutes of work, done", "c_slow": INTERRUPTED}
        # The resumed turn's model saw the finished result.
        shown = [p for m in model.requests[-1].messages for p in m.content]
        assert any(
            isinstance(p, ToolResultPart) and p.content == "ten minutes of work, done"
            for p in shown
        )
        assert live.inbox("user").messages == ["resumed"]
    finally:
        blocker.release.set()
        await bury(dead, dying)
        await live.manager.close()


# -- a send mid-turn, then a crash: the resumed turn is told


def notify_tool(dying: DyingStore) -> Tool[Nothing]:
    async def handler(args: Nothing, ctx: ToolContext) -> str:
        wake = ctx.run.payload
        assert isinstance(wake, Wake)
        note = OutboundMessage(text="still working on it")
        await ctx.run.send_now(
            [outgoing(ctx.run.send_id(), wake.sink, note, kind="notice", run_id=ctx.run.run_id)]
        )
        dying.kill()
        return "told"

    return tool("notify", "Tell the user, then die.", Nothing)(handler)


async def test_a_resumed_turn_is_told_what_it_already_sent_and_sends_it_no_more(
    crash_backend: Backend,
) -> None:
    model = ScriptedModel(calls(("notify", {})), say("done"))
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model, tools=[notify_tool(dying)])
    await dead.manager.wake(KEY, dead.user_wake("long job"))
    live = await restart(crash_backend, dead, dying, model, tools=[notify_tool(dying)])
    try:
        await idle(live, KEY)
        assert live.inbox("user").messages == ["still working on it", "done"]
        resume = model.requests[-1].messages[-1].text()
        assert RESUME_BODY in resume
        assert ALREADY_SENT in resume
        assert "still working on it" in resume
    finally:
        await bury(dead, dying)
        await live.manager.close()


# -- fsync = "on_flush"


@pytest.mark.parametrize("fsync", ["on_flush", "every_append"])
async def test_on_flush_flushes_the_session_at_every_turn_end(
    crash_backend: Backend, fsync: str
) -> None:
    config = validate(
        {
            "models": gateway_config().models.model_dump(),
            "agents": {"default": {"model": "scripted/x"}},
            "store": {"fsync": fsync},
        },
        "test",
    )
    store = DyingStore(crash_backend.open())
    runtime = await make_runtime(store, ScriptedModel(say("one"), say("two")), config=config)
    try:
        for text in ("a", "b"):
            _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake(text))
            await turn.wait(DEADLINE)
        session_id = await runtime.store.resolve(KEY)
        flushes = [s for name, s in store.calls if name == "flush"]
        if fsync == "on_flush":
            assert flushes.count(str(session_id)) >= 2  # one per turn end at least
        else:
            assert flushes == []  # every append is durable already: no extra flush
    finally:
        await runtime.manager.close()
        crash_backend.stores.remove(store.inner)
        await store.inner.close()


# -- an agent-to-agent exchange


def _hands_on_the_exchange(session: str, entries: Sequence[Entry]) -> bool:
    return any(isinstance(e, OutboundEntry) and e.kind == "a2a" for e in entries)


async def test_an_exchange_step_due_at_a_crash_runs_once_after_the_restart(
    crash_backend: Backend,
) -> None:
    script = SessionScript()
    peer = "telegram:2"
    script.add(peer, dispatch())
    script.add(
        USER,
        call("sessions_send", sessionKey=peer, message="How is the build?", timeoutSeconds=0),
        dispatch(),
        say("which branch?"),
        say("REPLY_SKIP"),
    )
    script.add(peer, say("r1: green"), say("main and dev"), say("ANNOUNCE_SKIP"))
    dying = DyingStore(crash_backend.open())
    dead = await make_rig(script, store=dying)  # type: ignore[arg-type]
    await dead.result(await dead.say(peer, "hello"))
    # Killed once the target's first reply is durable with the hand-off of round 2, which
    # the target gives only once the asking turn has ended.
    dying.die_after(_hands_on_the_exchange)
    gate = dead.model.hold(peer)
    await dead.result(await dead.say(USER, "ask the peer"))
    gate.set()
    await dying.wait_dead()
    crash_backend.stores.remove(dying.inner)
    await dying.inner.close()
    live = await make_rig(script, store=crash_backend.open())
    try:
        await live.settle()
        await live.settle()
        user_prompts, peer_prompts = live.prompts(USER), live.prompts(peer)
        assert sum("round 2 of 6" in p for p in user_prompts) == 1
        assert "r1: green" in user_prompts[2]
        assert sum("round 3 of 6" in p for p in peer_prompts) == 1
        assert "round 4 of 6" in user_prompts[3]
        assert len(user_prompts) == 4
        assert "[agent-to-agent announce step]" in peer_prompts[-1]
    finally:
        dying.reap()
        await dead.manager.close()
        await live.manager.close()


# -- a child's reply to its parent


def _reply_from_child(session: str, entries: Sequence[Entry]) -> bool:
    return any(
        isinstance(e, MessageEntry | ReceiptEntry)
        and e.wake.get("caller", {}).get("session_key") == CHILD
        for e in entries
    )


async def test_a_childs_reply_taken_just_before_a_crash_reaches_the_parent_once(
    crash_backend: Backend,
) -> None:
    script = KeyedScript()
    script.add(KEY, dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
    script.add(KEY, dispatch(("user", "the child found it")))
    script.add(CHILD, dispatch(("caller:session", "found it")))
    model = ScriptedModel(default=script)
    dying = DyingStore(crash_backend.open())
    dead = await make_runtime(dying, model)
    # The parent took the reply; the child's turn had not ended (its send is unmarked).
    dying.die_after(_reply_from_child)
    await dead.manager.wake(KEY, dead.user_wake("dig for me"))
    live = await restart(crash_backend, dead, dying, model)
    try:
        await idle(live, KEY, CHILD)
        await idle(live, KEY, CHILD)
        parent_id, child_id = await live.store.resolve(KEY), await live.store.resolve(CHILD)
        assert parent_id is not None
        assert child_id is not None
        parent = await stored(live.store, parent_id)
        replies = [p for p in prompts(parent) if p.wake.get("source") == "session"]
        assert len(replies) == 1
        assert replies[0].message.text().endswith("found it")
        # The reply woke the parent: no child_completed on top of it.
        assert "child_completed" not in wake_sources(parent)
        child = await stored(live.store, child_id)
        assert [t.stop_reason for t in turn_entries(child)] == ["dispatch"]
        assert live.inbox(f"user of {KEY}").messages == ["the child found it"]
    finally:
        await bury(dead, dying)
        await live.manager.close()

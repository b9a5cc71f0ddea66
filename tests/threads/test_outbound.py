"""The outbound ledger while nothing crashes: records before sends, marks after, one wake per origin."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.ops_cli import health_lines, session_lines
from tests.threads.agent.conftest import KeyedScript
from tests.threads.conftest import (
    DEADLINE,
    Blocker,
    Inbox,
    Runtime,
    gateway_config,
    make_runtime,
    prompts,
    stored,
)
from tests.threads.store.test_jsonl import Spy
from threads import outbound
from threads.errors import DroppedError
from threads.keys import SessionKey
from threads.sinks import Delivery, OutboundMessage
from threads.store.base import SessionStore
from threads.store.entries import OutboundEntry
from threads.store.jsonl import JsonlStore
from threads.testing.scripted import ScriptedModel, call, dispatch, say
from threads.wake import SessionCaller, Wake, WakeSource

KEY = "telegram:42"


@pytest.fixture
async def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def rt(session_store: SessionStore, model: ScriptedModel) -> AsyncIterator[Runtime]:
    runtime = await make_runtime(session_store, model)
    yield runtime
    await runtime.manager.close()


async def records_of(rt: Runtime, key: str = KEY) -> list[OutboundEntry]:
    session_id = await rt.store.resolve(key)
    assert session_id is not None
    return [e for e in await stored(rt.store, session_id) if isinstance(e, OutboundEntry)]


async def test_a_turn_with_a_reply_flushes_its_prompt_and_its_end_and_not_its_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", 0.0)  # its flush asked at once
    store = JsonlStore(tmp_path / "sessions")  # the default: every append durable
    runtime = await make_runtime(store, ScriptedModel(say("one"), say("two")))
    try:
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("a"))
        await turn.wait(DEADLINE)
        syncs = Spy(monkeypatch, "fsync")
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("b"))
        await turn.wait(DEADLINE)
        # The prompt and the turn's end (with the reply's record) are flushed, in one
        # round or two as the writer thread takes them; the reply's mark is written
        # with no flush of its own (the next prompt's covers it).
        assert len(syncs.calls) in (1, 2)
        assert [r.status for r in await records_of(runtime) if r.record] == ["delivered"] * 2
    finally:
        await runtime.manager.close()
        await store.close()


async def test_a_final_answer_is_durable_before_its_sink_gets_it(
    rt: Runtime, model: ScriptedModel
) -> None:
    model.add(say("the answer"))
    on_disk: list[list[OutboundEntry]] = []
    inbox = rt.inbox("user")

    def look(message: OutboundMessage) -> None:
        thread = rt.manager.thread(KEY)
        assert thread is not None
        on_disk.append([e for e in thread.session.entries() if isinstance(e, OutboundEntry)])

    inbox.after_deliver = look
    _accepted, turn = await rt.manager.wake_turn(KEY, rt.user_wake("question"))
    await turn.wait(DEADLINE)
    assert inbox.messages == ["the answer"]
    ((record,),) = on_disk
    assert (record.status, record.kind, record.text) == ("pending", "reply", "the answer")
    assert inbox.received[0].outbound_id == record.id
    assert record.id.startswith(f"{turn.run_id}-s1-")
    # Marked delivered once the sink took it, before the turn was decided.
    stored_records = await records_of(rt)
    assert [(r.status, r.record) for r in stored_records] == [
        ("pending", ""),
        ("delivered", record.id),
    ]


async def test_a_mark_names_its_record_and_not_again_the_records_run(
    rt: Runtime, model: ScriptedModel
) -> None:
    model.add(say("the answer"))
    _accepted, turn = await rt.manager.wake_turn(KEY, rt.user_wake("question"))
    await turn.wait(DEADLINE)
    session_id = await rt.store.resolve(KEY)
    assert session_id is not None
    loaded = await rt.store.load(session_id)
    (mark_line,) = [line for line in loaded.lines if b'"record"' in line]
    assert b'"run_id"' not in mark_line  # the record it names says the run
    (record,) = [e for e in loaded.entries if isinstance(e, OutboundEntry) and not e.record]
    assert outbound.of_run(loaded.entries, turn.run_id) == [(record, "delivered")]


async def test_every_dispatch_send_is_recorded_before_the_first_one_leaves(
    rt: Runtime, model: ScriptedModel
) -> None:
    model.add(dispatch(("caller:user", "one"), ("user", "two")))
    recorded_at_first_send: list[set[str]] = []
    inbox = rt.inbox("user")

    def look(message: OutboundMessage) -> None:
        thread = rt.manager.thread(KEY)
        assert thread is not None
        written = thread.session.entries()  # what the store acknowledged
        recorded_at_first_send.append(
            {e.id for e in written if isinstance(e, OutboundEntry) and not e.record}
        )

    inbox.after_deliver = look
    _accepted, turn = await rt.manager.wake_turn(KEY, rt.user_wake("go"))
    await turn.wait(DEADLINE)
    records = await records_of(rt)
    sends = [r for r in records if not r.record]
    assert [r.kind for r in sends] == ["dispatch:caller:user", "dispatch:user"]
    assert recorded_at_first_send[0] == {r.id for r in sends}
    assert sorted(r.status for r in records if r.record) == ["delivered", "delivered"]


async def test_a_send_whose_sink_fails_is_marked_failed_with_the_error(
    rt: Runtime, model: ScriptedModel
) -> None:
    class Broken(Inbox):
        async def deliver(self, message: OutboundMessage) -> Delivery:
            raise ConnectionError("the platform is down")

    model.add(say("lost words"))
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body="hi",
        caller=rt.user_wake("x").caller,
        sink=Broken(name="broken"),
    )
    _accepted, turn = await rt.manager.wake_turn(KEY, wake)
    await turn.wait(DEADLINE)
    (_record, mark) = await records_of(rt)
    assert mark.status == "failed"
    assert mark.error == "ConnectionError: the platform is down"


async def test_a_session_accepts_one_wake_per_origin(rt: Runtime, model: ScriptedModel) -> None:
    model.add(dispatch(), dispatch())
    wake = Wake(
        source=WakeSource.SESSION,
        body="handed over",
        caller=SessionCaller(session_key=SessionKey("telegram:1")),
        origin="s_other-t1-s1-1",
    )
    first, first_turn = await rt.manager.wake_turn(KEY, wake)
    await first_turn.wait(DEADLINE)
    second, second_turn = await rt.manager.wake_turn(KEY, wake)
    with pytest.raises(DroppedError, match="already accepted"):
        await second_turn.wait(DEADLINE)
    assert second.run_id == first.run_id
    session_id = await rt.store.resolve(KEY)
    assert session_id is not None
    assert len(prompts(await stored(rt.store, session_id))) == 1


def test_check_session_and_health_text_name_uncertain_sends() -> None:
    send = {
        "id": "s_1-t1-s1-1",
        "kind": "reply",
        "to": "telegram:42",
        "text": "the answer",
        "status": "uncertain",
        "recorded": "2026-12-01T09:00:00+00:00",
    }
    info = {"session_key": KEY, "exists": True, "delivery_uncertain": [send]}
    text = "\n".join(session_lines(info))
    assert "delivery uncertain: 1 send(s) a restart could not confirm" in text
    assert "reply to telegram:42: the answer" in text
    health = "\n".join(health_lines({"outbound": {"uncertain": [{**send, "session_key": KEY}]}}))
    assert "delivery uncertain  1 send(s) found unconfirmed at start-up" in health
    assert f"{KEY} → telegram:42" in health
    assert health_lines({"outbound": {"uncertain": []}}) == [
        "outbound:",
        "  delivery uncertain  none",
    ]


async def test_a_fork_does_not_copy_the_ledger(rt: Runtime, model: ScriptedModel) -> None:
    model.add(say("the answer"))
    _accepted, turn = await rt.manager.wake_turn(KEY, rt.user_wake("question"))
    await turn.wait(DEADLINE)
    thread = rt.manager.thread(KEY)
    assert thread is not None
    assert any(isinstance(e, OutboundEntry) for e in thread.session.entries())
    fork = await thread.session.fork(thread.session.leaf)
    try:
        assert not any(isinstance(e, OutboundEntry) for e in fork.entries())
        assert [m.text() for m in fork.context()][-1] == "the answer"
    finally:
        await fork.close()


async def test_a_hand_off_a_close_kept_from_leaving_is_made_by_the_next_start(
    session_store: SessionStore, tmp_path: Path
) -> None:
    script = KeyedScript()
    child = f"{KEY}:threads:dig"
    script.add(KEY, dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
    script.add(KEY, dispatch())
    script.add(child, call("block", label="dig"))
    blocker = Blocker()
    model = ScriptedModel(default=script)
    config = gateway_config(close_deadline_seconds=0)
    recovery = tmp_path / "recovery.json"
    first = await make_runtime(
        session_store, model, config=config, tools=[blocker.tool()], recovery_path=recovery
    )
    await first.manager.wake(KEY, first.user_wake("dig for me"))
    await blocker.reached()
    await first.manager.close()  # the child's turn is canceled; its parent cannot be woken now
    blocker.release.set()
    second = await make_runtime(
        session_store, model, config=config, tools=[blocker.tool()], recovery_path=recovery
    )
    try:
        thread = second.manager.thread(KEY)
        assert thread is not None
        await thread.session.wait_idle()
        parent_id = await session_store.resolve(KEY)
        assert parent_id is not None
        completed = [
            p
            for p in prompts(await stored(session_store, parent_id))
            if p.wake.get("source") == "child_completed"
        ]
        assert len(completed) == 1
        assert "status: failed" in completed[0].message.text()
    finally:
        await second.manager.close()


async def test_a_send_its_receiver_only_holds_in_memory_stays_open_and_goes_again_at_restart(
    session_store: SessionStore, model: ScriptedModel
) -> None:
    class Held(Inbox):
        async def deliver(self, message: OutboundMessage) -> Delivery:
            await super().deliver(message)
            return Delivery(delivered_to="web:x (queued until the page reconnects)", held=True)

    held = Held(name="page", dedups=True)
    inboxes = {"page": held}
    first = await make_runtime(session_store, model, inboxes=inboxes)
    model.add(say("kept for the page"))
    wake = Wake(source=WakeSource.WEB, body="hi", caller=first.user_wake("x").caller, sink=held)
    _accepted, turn = await first.manager.wake_turn(KEY, wake)
    await turn.wait(DEADLINE)
    assert [(r.status, r.record) for r in await records_of(first)] == [("pending", "")]
    await first.manager.close()
    second = await make_runtime(session_store, model, inboxes=inboxes)
    try:
        # Sent again under its id (the page shows it once); still only held, still open.
        assert [m.outbound_id for m in held.received] == [held.received[0].outbound_id] * 2
        assert held.messages == ["kept for the page"]
        assert [r.status for r in await records_of(second)] == ["pending"]
    finally:
        await second.manager.close()

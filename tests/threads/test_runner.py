"""A thread: wakes rendered as prompts, busy policies per source, a bounded inbox, sinks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.threads.conftest import (
    Blocker,
    Runtime,
    gateway_config,
    make_runtime,
    receipts,
    session_wake,
    stored,
    system_wake,
)
from threads.errors import BusyError
from threads.llm.echo import split_wake
from threads.store import open_store
from threads.store.base import SessionStore
from threads.testing.scripted import ScriptedModel, call, dispatch
from threads.turns import Policy
from threads.wake import UserCaller, Wake, WakeSource

KEY = "telegram:42"


@pytest.fixture
async def memory_store() -> AsyncIterator[SessionStore]:
    store = open_store("memory://")
    yield store
    await store.close()


@pytest.fixture
async def held(memory_store: SessionStore) -> AsyncIterator[tuple[Runtime, Blocker]]:
    """A runtime whose first turn in :data:`KEY` is held inside a tool call."""
    blocker = Blocker()
    rt = await make_runtime(memory_store, ScriptedModel(), tools=[blocker.tool()])
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("hold the thread"))
    await blocker.reached()
    yield rt, blocker
    blocker.release.set()
    await rt.manager.close()


async def _prompt_of(rt: Runtime, key: str, wake: Wake) -> tuple[dict[str, str], str]:
    _, turn = await rt.manager.wake_turn(key, wake)
    await turn.wait(10)
    request = rt.model.requests[-1]
    return split_wake(request.messages[-1].text())


async def test_a_wake_becomes_the_prompt_seed_000_describes_header_then_body(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(
        memory_store, ScriptedModel(), config=gateway_config(timezone="Europe/Berlin")
    )
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body="what's the weather?",
        caller=UserCaller(channel="telegram", user_id="42", name="Ada"),
        sink=rt.inbox("user"),
        created=datetime(2026, 3, 2, 12, 0, tzinfo=UTC),
    )
    fields, body = await _prompt_of(rt, KEY, wake)
    thread = rt.manager.thread(KEY)
    assert thread is not None
    assert body == "what's the weather?"
    assert fields["source"] == "telegram"
    assert fields["thread"] == KEY
    assert fields["session"] == thread.session.id
    assert fields["time"] == "2026-03-02 13:00:00 Monday Europe/Berlin"
    assert fields["sender"] == "user"
    assert "caller_session_key" not in fields
    assert "injected" not in fields
    assert fields["delivery"] == (
        "Caller is the telegram user - reply with dispatch(to=caller:user)"
    )
    await rt.manager.close()


async def test_only_a_cross_session_wake_names_the_caller_session_key(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    fields, _ = await _prompt_of(rt, "cli", session_wake("from another", "telegram:7"))
    assert fields["caller_session_key"] == "telegram:7"
    assert fields["source"] == "session"
    fields, _ = await _prompt_of(rt, "cli", system_wake("tick"))
    assert fields["sender"] == "system"
    assert "caller_session_key" not in fields
    assert fields["delivery"] == "Caller is cron - output to caller is dropped"
    await rt.manager.close()


async def test_a_message_steered_into_a_running_turn_is_marked_injected(
    held: tuple[Runtime, Blocker],
) -> None:
    rt, blocker = held
    _, steer = await rt.manager.wake_turn(KEY, rt.user_wake("by the way"))
    assert steer.policy is Policy.STEER
    blocker.release.set()
    await steer.wait(10)
    steered = rt.model.requests[-1].messages[-1]
    fields, body = split_wake(steered.text())
    assert fields["injected"] == "true"
    assert body == "by the way"


async def test_the_busy_policy_follows_the_wake_source_by_default(
    held: tuple[Runtime, Blocker],
) -> None:
    rt, _ = held
    policies = {}
    for name, wake in [
        ("telegram", rt.user_wake("user", source=WakeSource.TELEGRAM)),
        ("discord", rt.user_wake("user", source=WakeSource.DISCORD)),
        ("session", session_wake("peer", "cli")),
        ("cron", system_wake("job")),
        ("child_completed", system_wake("child", WakeSource.CHILD_COMPLETED)),
    ]:
        _, turn = await rt.manager.wake_turn(KEY, wake)
        policies[name] = turn.policy
    assert policies == {
        "telegram": Policy.STEER,
        "discord": Policy.STEER,
        "session": Policy.QUEUE,
        "cron": Policy.QUEUE,
        "child_completed": Policy.QUEUE,
    }
    thread = rt.manager.thread(KEY)
    assert thread is not None
    entries = await stored(rt.store, thread.session.id)
    assert len(receipts(entries, "queued")) == 2
    assert [r.policy for r in receipts(entries, "accepted")] == ["queue"] * 3


async def test_a_configured_busy_policy_for_a_source_replaces_the_default(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    config = gateway_config(busy_policy={"telegram": "reject"})
    rt = await make_runtime(memory_store, ScriptedModel(), config=config, tools=[blocker.tool()])
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, rt.user_wake("first"))
    await blocker.reached()
    with pytest.raises(BusyError, match="is busy with another turn"):
        await rt.manager.wake(KEY, rt.user_wake("second"))
    blocker.release.set()
    await rt.manager.close()


async def test_the_inbox_is_bounded_and_a_full_one_refuses_the_wake_naming_the_session(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(
        memory_store, ScriptedModel(), config=gateway_config(inbox_size=2), tools=[blocker.tool()]
    )
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("first"))
    await blocker.reached()
    await rt.manager.wake(KEY, system_wake("second"))
    await rt.manager.wake(KEY, rt.user_wake("third"))
    thread = rt.manager.thread(KEY)
    assert thread is not None
    before = await stored(rt.store, thread.session.id)
    with pytest.raises(BusyError, match=rf"session {thread.session.id} .*inbox is full \(2"):
        await rt.manager.wake(KEY, system_wake("fourth"))
    assert await stored(rt.store, thread.session.id) == before
    blocker.release.set()
    await thread.session.wait_idle()
    await rt.manager.close()


async def test_each_wake_is_answered_through_its_own_sink(memory_store: SessionStore) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    rt.model.add(dispatch(("caller:user", "to alice")), dispatch(("caller:user", "to bob")))
    _, one = await rt.manager.wake_turn(
        "web:room", rt.user_wake("from alice", to="alice", source=WakeSource.API)
    )
    _, two = await rt.manager.wake_turn(
        "web:room", rt.user_wake("from bob", to="bob", source=WakeSource.API)
    )
    await one.wait(10)
    await two.wait(10)
    assert await rt.inbox("alice").wait() == ["to alice"]
    assert await rt.inbox("bob").wait() == ["to bob"]
    await rt.manager.close()


async def test_a_user_facing_key_has_a_default_sink_its_channel_user(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    rt.model.add(dispatch(("user", "your reminder")))
    _, turn = await rt.manager.wake_turn(KEY, system_wake("remind them"))
    await turn.wait(10)
    thread = rt.manager.thread(KEY)
    assert thread is not None
    assert thread.default_sink is rt.inbox(f"user of {KEY}")
    assert await rt.inbox(f"user of {KEY}").wait() == ["your reminder"]
    _, job = await rt.manager.wake_turn("cron:daily", system_wake("tick"))
    await job.wait(10)
    job_thread = rt.manager.thread("cron:daily")
    assert job_thread is not None
    assert job_thread.default_sink is None
    await rt.manager.close()


async def test_wakes_to_one_key_are_accepted_in_order_while_it_starts(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    accepted = await asyncio.gather(
        *(rt.manager.wake("cli", system_wake(f"w{i}")) for i in range(5))
    )
    assert len({a.session_id for a in accepted}) == 1
    assert [a.created for a in accepted].count(True) == 1
    thread = rt.manager.thread("cli")
    assert thread is not None
    await thread.session.wait_idle()
    await rt.manager.close()

"""Cron through the whole gateway: real fires into real threads, check-ins set by an agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from channels.base import ChannelSink
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.gateway.test_skeleton import Replies
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import ToolContext, tool
from threads.store.entries import TurnEntry
from threads.testing.scripted import ScriptedModel, call, dispatch
from threads.wake import UserCaller, Wake, WakeSource


class Nothing(BaseModel):
    pass


in_tool = asyncio.Event()
release = asyncio.Event()


@tool("work", "Works until released.", Nothing)
async def work(args: Nothing, ctx: ToolContext) -> str:
    in_tool.set()
    await release.wait()
    return "worked"


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies]]:
    in_tool.clear()
    release.clear()
    script = KeyedScript()
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={
            "default": {"model": "scripted/test"},
            "plain": {"model": "scripted/test", "cron_tools": False},
        },
        cron={"poll_seconds": 0.1},
    )
    gateway = Gateway(
        config, model_clients={"scripted": ScriptedModel(default=script)}, tools=[work]
    )
    async with gateway:
        assert gateway.cli is not None
        replies = Replies()
        gateway.cli.listeners.append(replies)
        yield gateway, script, replies
        release.set()


async def test_a_check_in_an_agent_schedules_fires_a_second_later_into_its_session(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    script.add(
        "cli",
        call("schedule_check_in", at=soon, task="Check if the user responded"),
        dispatch(("caller:user", "I'll check back in a second.")),
        dispatch(("user", "Checking in, as promised.")),
    )
    await gateway.cli.submit("remind me")
    await replies.wait(2)
    wake = script.requests["cli"][2].messages[-1].text()
    assert "source: cron" in wake
    assert "Caller is cron — output to caller is dropped" in wake
    assert "Check if the user responded" in wake
    assert replies.items[-1] == "Checking in, as promised."
    assert gateway.cron is not None
    # An `at` job runs once, then is kept, disabled; the ledger lands just after the wake.
    async with asyncio.timeout(5):
        while True:
            (view,) = await gateway.cron.list_check_ins("cli")
            if not view.job.enabled and await gateway.cron.runs(view.job.id):
                break
            await asyncio.sleep(0.01)
    assert view.job.direct_wake
    (record,) = await gateway.cron.runs(view.job.id)
    assert record.status == "fired"
    assert record.run_id is not None


async def test_a_direct_wake_into_a_busy_session_queues_behind_the_running_turn(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    assert gateway.cron is not None
    script.add("cli", dispatch(("caller:user", "hello")))
    await gateway.cli.submit("first contact")
    await replies.wait(1)
    script.add(
        "cli",
        call("work"),
        dispatch(("caller:user", "work done")),
        dispatch(("user", "cron turn ran")),
    )
    await gateway.cli.submit("do the work")
    await asyncio.wait_for(in_tool.wait(), 10)
    await gateway.cron.upsert(
        gateway.cron.draft(
            id="nudge", kind="every", every="1h", task="nudge", wake_session="cli", direct_wake=True
        )
    )
    record = await gateway.cron.run_now("nudge")
    assert record is not None
    assert record.status == "fired"
    thread = gateway.manager.thread("cli")
    assert thread is not None
    running = thread.session.running
    assert running is not None
    assert running.current_tool == "work"  # the running turn was not interrupted
    assert thread.session.pending_count() == 1
    release.set()
    items = await replies.wait(3)
    assert items[1:] == ["work done", "cron turn ran"]
    await gateway.wait_idle()
    turns = [e for e in thread.session.entries() if isinstance(e, TurnEntry)]
    assert not any(t.canceled for t in turns)
    assert record.run_id in {t.run_id for t in turns}


async def test_an_agent_without_cron_tools_is_not_offered_them(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    script.add("cli", dispatch(("caller:user", "hi")))
    await gateway.manager.wake(
        "cli",
        Wake(
            source=WakeSource.CLI,
            body="which tools?",
            caller=UserCaller(channel="cli", user_id="local"),
            sink=ChannelSink(channel=gateway.cli, chat_id="cli"),
            agent="plain",
        ),
    )
    await replies.wait(1)
    tools = {t.name for t in script.requests["cli"][0].tools}
    assert "schedule_check_in" not in tools
    assert "dispatch" in tools

"""Cron through the whole gateway: real fires into real threads, check-ins set by an agent.

The gateway's cron runs on a manual clock: a check-in set "a second later"
fires when the test moves the clock there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from channels.base import ChannelSink
from config import load_config
from cron import CronService, JobNotFoundError, open_store
from cron.misfire import MisfirePolicy
from gateway.app import Gateway
from tests.clock import FixedClock, ManualClock
from tests.gateway.conftest import Replies, make_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import ToolContext, tool
from threads.messages import ToolResultPart
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
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def gw(
    tmp_path: Path, clock: ManualClock
) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies]]:
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
        config,
        model_clients={"scripted": ScriptedModel(default=script)},
        tools=[work],
        cron_clock=clock,
    )
    async with gateway:
        assert gateway.cli is not None
        replies = Replies()
        gateway.cli.listeners.append(replies)
        yield gateway, script, replies
        release.set()


async def test_a_check_in_an_agent_schedules_fires_a_second_later_into_its_session(
    gw: tuple[Gateway, KeyedScript, Replies], clock: ManualClock
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    soon = (clock.now() + timedelta(seconds=1)).isoformat()
    script.add(
        "cli",
        call("schedule_check_in", at=soon, task="Check if the user responded"),
        dispatch(("caller:user", "I'll check back in a second.")),
        dispatch(("user", "Checking in, as promised.")),
    )
    await gateway.cli.submit("remind me")
    await replies.wait(1)
    clock.advance(1)
    await replies.wait(2)
    wake = script.requests["cli"][2].messages[-1].text()
    assert "source: cron" in wake
    assert "Caller is cron - output to caller is dropped" in wake
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


def tool_result(script: KeyedScript, key: str, request: int) -> ToolResultPart:
    """The one tool result the model was shown last in its ``request``-th call for ``key``."""
    [result] = script.requests[key][request].messages[-1].tool_results()
    return result


async def test_an_agent_lists_and_removes_its_check_ins(
    gw: tuple[Gateway, KeyedScript, Replies], clock: ManualClock
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    assert gateway.cron is not None
    later = clock.now() + timedelta(hours=2)
    others = await gateway.cron.set_check_in("telegram:9", later.isoformat(), "not the cli's")
    script.add(
        "cli",
        call("schedule_check_in", at=later.isoformat(), task="first", job_id="mine-1"),
        call(
            "schedule_check_in",
            at=(later + timedelta(hours=1)).isoformat(),
            task="second",
            job_id="mine-2",
        ),
        call("list_check_ins"),
        call("remove_check_in", job_id="mine-1"),
        call("remove_check_in", job_id=others.job.id),
        call("list_check_ins"),
        dispatch(("caller:user", "tidied")),
    )
    await gateway.cli.submit("tidy my check-ins")
    assert await replies.wait(1) == ["tidied"]

    listed = json.loads(tool_result(script, "cli", 3).content)["check_ins"]
    assert [(c["job_id"], c["task"], c["enabled"]) for c in listed] == [
        ("mine-1", "first", True),
        ("mine-2", "second", True),
    ]
    removed = tool_result(script, "cli", 4)
    assert (removed.is_error, json.loads(removed.content)) == (False, {"removed": "mine-1"})
    refused = tool_result(script, "cli", 5)
    assert refused.is_error
    assert others.job.id in refused.content
    after = json.loads(tool_result(script, "cli", 6).content)["check_ins"]
    assert [c["job_id"] for c in after] == ["mine-2"]

    assert [v.job.id for v in await gateway.cron.list_check_ins("cli")] == ["mine-2"]
    with pytest.raises(JobNotFoundError):
        await gateway.cron.get("mine-1")
    assert (await gateway.cron.get(others.job.id)).job.enabled


async def test_misfire_grace_and_coalesce_come_from_the_cron_config(tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{data}"\n'
        "[store]\n"
        f'url = "jsonl://{data / "sessions"}"\n'
        "[channels.web]\n"
        "enabled = false\n"
        "[http]\n"
        "port = 0\n"
        "[cron]\n"
        "misfire_grace_seconds = 120\n"
        "coalesce = false\n"
        "poll_seconds = 0.1\n",
        encoding="utf-8",
    )
    config = load_config(path, env={})
    # Set 150 s ago, every minute: due 90 s and 30 s ago when the gateway starts. The
    # defaults (60 s, coalescing) would record the first missed; this config fires both.
    clock = ManualClock()
    set_at = clock.now() - timedelta(seconds=150)
    async with open_store(config.state_store_url()) as store:
        editor = CronService.from_config(config, store, clock=FixedClock(set_at))
        await editor.upsert(editor.draft(id="tick", kind="every", every="1m", task="tick"))

    async with Gateway(config, control=False, cron_clock=clock) as gateway:
        assert gateway.cron is not None
        assert gateway.cron.policy == MisfirePolicy(grace=timedelta(seconds=120), coalesce=False)
        async with asyncio.timeout(5):
            while len(records := await gateway.cron.runs("tick")) < 2:
                await asyncio.sleep(0.02)  # polling the ledger with a deadline
    assert [(r.status, r.scheduled, r.coalesced) for r in records] == [
        ("fired", set_at + timedelta(minutes=1), 0),
        ("fired", set_at + timedelta(minutes=2), 0),
    ]


async def test_the_newcomers_hello_job_makes_two_model_calls_not_an_endless_loop(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    # `gateway cron set-every --id hello --every 30s --task "Greet the user" --wake-session cli`
    # with a model that answers every turn in plain text.
    gateway, script, _ = gw
    assert gateway.cron is not None
    job = gateway.cron.draft(
        id="hello", kind="every", every="30s", task="Greet the user", wake_session="cli"
    )
    await gateway.cron.upsert(job)
    record = await gateway.cron.run_now("hello")
    assert record is not None
    assert record.status == "fired"
    await gateway.wait_idle()
    assert len(script.requests["cron:hello"]) == 1
    assert len(script.requests["cli"]) == 1
    assert "reply_expected: false" in script.requests["cli"][0].messages[-1].text()

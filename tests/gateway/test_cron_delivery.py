"""Cron output reaches people: a job says where its output goes, and the ledger says if it got there.

Through the whole gateway, with a scripted model: ``deliver_to`` jobs bring
their turn's text answer or ``dispatch(to=user)`` to a chat; direct wakes tell
the woken session how to reach its user; the run ledger records ``fired`` when
the wake is accepted and, separately, the delivery once the turn has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from config import GatewayConfig
from cron import CronService, RunRecord
from gateway.app import Gateway
from tests.clock import ManualClock
from tests.gateway.conftest import Replies, make_config
from tests.threads.agent.conftest import KeyedScript
from threads.testing.scripted import ScriptedModel, dispatch, say


def scripted(tmp_path: Path, **overrides: object) -> GatewayConfig:
    return make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
        cron={"poll_seconds": 0.1},
        channels={"web": {"enabled": False}},
        **overrides,
    )


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies]]:
    script = KeyedScript()
    config = scripted(tmp_path)
    gateway = Gateway(
        config,
        model_clients={"scripted": ScriptedModel(default=script)},
        cron_clock=ManualClock(),
        control=False,
    )
    async with gateway:
        assert gateway.cli is not None
        replies = Replies()
        gateway.cli.listeners.append(replies)
        yield gateway, script, replies


async def delivered(cron: CronService, job_id: str) -> RunRecord:
    """The job's newest run once its delivery is known (polled with a deadline)."""
    async with asyncio.timeout(10):
        while True:
            runs = await cron.runs(job_id)
            if runs and runs[-1].delivery and runs[-1].delivery != "pending":
                return runs[-1]
            await asyncio.sleep(0.01)  # polling the ledger with a deadline


async def fire(gateway: Gateway, job_id: str, **fields: object) -> RunRecord:
    cron = gateway.cron
    assert cron is not None
    await cron.upsert(
        cron.draft(id=job_id, kind="every", every="1h", task="Greet the user", **fields)
    )
    record = await cron.run_now(job_id)
    assert record is not None
    assert record.status == "fired", record
    return await delivered(cron, job_id)


async def test_a_deliver_to_jobs_text_answer_reaches_the_chat_and_is_recorded_delivered(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cron:hello", say("Good morning!"))
    record = await fire(gateway, "hello", deliver_to="cli")
    assert replies.items == ["Good morning!"]
    assert (record.status, record.delivery) == ("fired", "delivered")
    header = script.requests["cron:hello"][0].messages[-1].text()
    assert "delivery:" in header
    assert "Caller is cron - this job's output goes to the cli user" in header


async def test_a_deliver_to_jobs_dispatch_to_user_reaches_the_chat(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cron:hello", dispatch(("user", "Hello from cron")))
    record = await fire(gateway, "hello", deliver_to="cli")
    assert replies.items == ["Hello from cron"]
    assert record.delivery == "delivered"


async def test_a_job_that_sends_nothing_is_recorded_silent(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cron:hello", dispatch())
    record = await fire(gateway, "hello", deliver_to="cli")
    assert (record.status, record.delivery) == ("fired", "silent")
    assert replies.items == []


async def test_a_job_without_deliver_to_is_silent_and_its_header_says_so(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cron:quiet", say("nobody hears this"))
    record = await fire(gateway, "quiet")
    assert record.delivery == "silent"
    assert replies.items == []
    header = script.requests["cron:quiet"][0].messages[-1].text()
    assert "This job delivers to nobody" in header


async def test_answering_cron_as_a_caller_is_a_tool_error_that_says_what_to_do(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cron:hello", dispatch(("caller:user", "hi")), dispatch(("user", "hi, properly")))
    record = await fire(gateway, "hello", deliver_to="cli")
    [refusal] = script.requests["cron:hello"][1].messages[-1].tool_results()
    assert refusal.is_error
    assert "the caller is session None" not in refusal.content
    assert "this turn's caller is cron, a system source" in refusal.content
    assert '{"to": "user"' in refusal.content
    assert replies.items == ["hi, properly"]
    assert record.delivery == "delivered"


async def test_a_delivery_the_send_policy_blocks_is_fired_in_the_ledger_and_failed_in_delivery(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, _ = gw
    assert gateway.send_policy is not None
    await gateway.manager.open_thread("cli", create=True)
    await gateway.send_policy.set("cli", "deny")
    script.add("cron:hello", say("blocked words"))
    record = await fire(gateway, "hello", deliver_to="cli")
    assert record.status == "fired"
    assert record.delivery.startswith("failed: blocked: ")


async def test_a_direct_wake_header_says_how_to_reach_the_sessions_user(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    assert gateway.cli is not None
    script.add("cli", dispatch(("caller:user", "hello")))
    await gateway.cli.submit("first contact")
    await replies.wait(1)
    script.add("cli", dispatch(("user", "Your reminder")))
    record = await fire(gateway, "nudge", wake_session="cli", direct_wake=True)
    header = script.requests["cli"][1].messages[-1].text()
    assert "To reach your user (cli), end with dispatch(to=user)" in header
    assert replies.items == ["hello", "Your reminder"]
    assert record.delivery == "delivered"
    script.add("cli", say("talking to cron, who drops it"))
    record = await fire(gateway, "nudge2", wake_session="cli", direct_wake=True)
    assert record.delivery == "silent"


async def test_a_deliver_to_chat_whose_channel_is_not_running_fails_the_fire_saying_so(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, _, _ = gw
    cron = gateway.cron
    assert cron is not None
    await cron.upsert(
        cron.draft(id="tg", kind="every", every="1h", task="x", deliver_to="telegram:42")
    )
    record = await cron.run_now("tg")
    assert record is not None
    assert record.status == "failed"
    assert "the telegram channel is not running" in record.error


async def test_with_the_echo_model_a_deliver_to_job_shows_in_the_terminal(tmp_path: Path) -> None:
    config = make_config(tmp_path, channels={"web": {"enabled": False}}, cron={"poll_seconds": 0.1})
    async with Gateway(config, cron_clock=ManualClock(), control=False) as gateway:
        assert gateway.cli is not None
        assert gateway.cron is not None
        replies = Replies()
        gateway.cli.listeners.append(replies)
        record = await fire(gateway, "hello", deliver_to="cli")
        assert record.delivery == "delivered"
        (text,) = await replies.wait(1)
        assert text.endswith("Greet the user")
        # A direct wake into the terminal's session reaches it too: the header says how.
        await gateway.cli.submit("hi")
        await replies.wait(2)
        record = await fire(gateway, "nudge", wake_session="cli", direct_wake=True)
        assert record.delivery == "delivered"
        assert (await replies.wait(3))[2] == "Greet the user"

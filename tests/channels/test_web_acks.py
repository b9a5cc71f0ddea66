"""Each web message is acknowledged once it is durable, and a resend of it is taken once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from channels.web.history import message_ids
from gateway.testing.ports import free_port
from tests.channels.conftest import browser, open_chat, receive
from tests.channels.test_web_refusals import FailingStore, assert_plain
from tests.channels.web_rig import chat_config, chat_gateway, frames_until, kind, say
from threads.llm.echo import split_wake
from threads.store.entries import MessageEntry
from threads.testing.scripted import ScriptedModel


def prompts(model: ScriptedModel, text: str) -> int:
    """How many times the model was asked to answer ``text``."""
    return sum(
        1
        for request in model.requests
        if request.messages
        and request.messages[-1].role == "user"
        and split_wake(request.messages[-1].text())[1] == text
    )


async def test_a_message_is_acknowledged_once_the_store_holds_it(tmp_path: Path) -> None:
    model = ScriptedModel()
    model.gate = asyncio.Event()  # the turn waits: the ack cannot come from its end
    async with (
        chat_gateway(chat_config(tmp_path), model=model) as rig,
        browser() as http,
        open_chat(http, rig.web) as (ws, chat),
    ):
        await say(ws, "keep me", id="m-1")
        frames = await frames_until(ws, kind("ack", id="m-1"))
        assert "m-1" in message_ids(await rig.session_entries(chat))
        assert all(f["type"] != "reply" for f in frames)
        model.gate.set()
        assert (await receive(ws, "reply"))["text"].endswith("keep me")


async def test_a_message_the_store_refuses_is_failed_with_one_line_and_the_chat_goes_on(
    tmp_path: Path,
) -> None:
    store = FailingStore()
    async with (
        chat_gateway(chat_config(tmp_path), model=ScriptedModel(), store=store) as rig,
        browser() as http,
        open_chat(http, rig.web) as (ws, _),
    ):
        store.failure = OSError(28, "No space left on device", "/srv/data/x.jsonl")
        await say(ws, "lost to a full disk", id="m-1")
        failed = (await frames_until(ws, kind("failed", id="m-1")))[-1]
        assert "could not be saved" in failed["error"]
        assert_plain(failed["error"])
        store.failure = None
        await say(ws, "lost to a full disk", id="m-1", resend=True)  # the page's Retry
        await frames_until(ws, kind("ack", id="m-1"))
        assert (await receive(ws, "reply"))["text"].endswith("lost to a full disk")


async def test_a_message_sent_again_after_a_reconnect_runs_once(tmp_path: Path) -> None:
    model = ScriptedModel()
    model.gate = asyncio.Event()
    async with chat_gateway(chat_config(tmp_path), model=model) as rig, browser() as http:
        async with open_chat(http, rig.web) as (ws, chat):
            await say(ws, "only once", id="m-1")
            await frames_until(ws, kind("ack", id="m-1"))
        # The ack was lost with the connection: the page sends the message again.
        async with open_chat(http, rig.web) as (ws, again):
            assert again == chat
            await say(ws, "only once", id="m-1", resend=True)
            await frames_until(ws, kind("ack", id="m-1"))
            model.gate.set()
            await receive(ws, "reply")
            await rig.gateway.wait_idle()
    assert prompts(model, "only once") == 1


async def test_a_resend_after_a_restart_of_the_gateway_is_not_run_again(tmp_path: Path) -> None:
    config = chat_config(tmp_path, http={"port": free_port()})
    async with browser() as http:
        first = ScriptedModel()
        async with chat_gateway(config, model=first) as rig:
            async with open_chat(http, rig.web) as (ws, chat):
                await say(ws, "before the restart", id="m-1")
                await frames_until(ws, kind("ack", id="m-1"))
                await receive(ws, "reply")
            await rig.gateway.wait_idle()
        second = ScriptedModel()
        async with chat_gateway(config, model=second) as rig:
            async with open_chat(http, rig.web) as (ws, again):
                assert again == chat
                await say(ws, "before the restart", id="m-1", resend=True)
                await frames_until(ws, kind("ack", id="m-1"))
                await say(ws, "after the restart", id="m-2")
                replies = await frames_until(ws, kind("reply"))
            await rig.gateway.wait_idle()
            entries = await rig.session_entries(chat)
    assert replies[-1]["text"].endswith("after the restart")
    assert prompts(second, "before the restart") == 0
    said = [
        e
        for e in entries
        if isinstance(e, MessageEntry)
        and e.message.role == "user"
        and split_wake(e.message.text())[1] == "before the restart"
    ]
    assert len(said) == 1


async def test_a_new_message_with_an_id_the_chat_never_took_runs_even_marked_as_a_resend(
    tmp_path: Path,
) -> None:
    model = ScriptedModel()
    async with (
        chat_gateway(chat_config(tmp_path), model=model) as rig,
        browser() as http,
        open_chat(http, rig.web) as (ws, _),
    ):
        await say(ws, "sent while offline", id="m-9", resend=True)
        await frames_until(ws, kind("ack", id="m-9"))
        assert (await receive(ws, "reply"))["text"].endswith("sent while offline")
    assert prompts(model, "sent while offline") == 1

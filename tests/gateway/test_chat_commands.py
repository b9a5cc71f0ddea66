"""The chat commands speak plainly, an unknown one is answered with the help, /help fits the asker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway.app import Gateway
from tests.gateway.chat_double import ChatDouble
from tests.gateway.conftest import Replies, make_config
from tests.gateway.test_access import GROUP, OWNER, access_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import ToolContext, tool
from threads.testing.scripted import ScriptedModel, call, dispatch, say


class Nothing(BaseModel):
    pass


class Gate:
    started = asyncio.Event()
    release = asyncio.Event()


@tool("slow", "Takes its time.", Nothing)
async def slow(args: Nothing, ctx: ToolContext) -> str:
    Gate.started.set()
    await Gate.release.wait()
    return "done"


@pytest.fixture
async def terminal(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies]]:
    Gate.started, Gate.release = asyncio.Event(), asyncio.Event()
    script = KeyedScript()
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
        channels={"web": {"enabled": False}},
    )
    gw = Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}, tools=[slow])
    async with gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        yield gw, script, replies
        Gate.release.set()


async def test_compact_on_a_short_conversation_says_so_in_plain_words(
    terminal: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gw, script, replies = terminal
    assert gw.cli is not None
    script.add("cli", dispatch(("caller:user", "hi")))
    await gw.cli.submit("hello")
    await replies.wait(1)
    await gw.wait_idle()
    await gw.cli.submit("/compact")
    (answer,) = (await replies.wait(2))[1:]
    assert answer.startswith("Nothing to compact yet: this conversation is short (")
    assert "cut" not in answer
    assert "session s_" not in answer


async def test_compact_says_how_many_messages_became_a_summary(
    terminal: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gw, script, replies = terminal
    assert gw.cli is not None
    for n in range(3):
        script.add("cli", dispatch(("caller:user", f"answer {n}")))
        await gw.cli.submit(f"question {n} " + "words " * 50)
        await replies.wait(n + 1)
    await gw.wait_idle()
    script.add("", say("## Goal\nAnswer questions."))
    await gw.cli.submit("/compact")
    (answer,) = (await replies.wait(4))[3:]
    assert answer.startswith("Compacted: ")
    assert "older messages" in answer
    assert "stay word for word. Nothing was deleted." in answer


async def test_status_says_what_is_running_and_for_how_long_without_jargon(
    terminal: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gw, script, replies = terminal
    assert gw.cli is not None
    await gw.cli.submit("/status")
    assert await replies.wait(1) == ["No conversation yet: send a message to start one."]
    script.add("cli", call("slow"), dispatch(("caller:user", "done")))
    await gw.cli.submit("take your time")
    await asyncio.wait_for(Gate.started.wait(), 10)
    await gw.cli.submit("/status")
    running = (await replies.wait(2))[1]
    assert running.startswith("This conversation: ")
    assert "Right now: answering, for " in running
    assert "using the tool slow" in running
    assert "step" not in running
    Gate.release.set()
    await replies.wait(3)
    await gw.wait_idle()
    await gw.cli.submit("/status")
    after = (await replies.wait(4))[3]
    assert "Right now: nothing is running." in after
    assert "1 answer so far" in after


async def test_an_unknown_command_is_answered_with_the_help_and_never_reaches_the_model(
    terminal: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gw, script, replies = terminal
    assert gw.cli is not None
    await gw.cli.submit("/foo bar")
    (answer,) = await replies.wait(1)
    assert answer.startswith("There is no /foo command. Commands:\n")
    assert "/status — " in answer
    assert script.requests == {}


async def test_a_path_is_not_a_command_and_goes_to_the_model(
    terminal: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gw, script, replies = terminal
    assert gw.cli is not None
    script.add("cli", dispatch(("caller:user", "let me look")))
    await gw.cli.submit("/usr/bin/python is broken")
    assert await replies.wait(1) == ["let me look"]
    assert "/usr/bin/python is broken" in script.requests["cli"][0].messages[-1].text()


async def test_help_lists_send_only_to_an_owner(tmp_path: Path) -> None:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    gw = Gateway(
        config, model_clients={"scripted": ScriptedModel(default=script)}, channels=[telegram]
    )
    async with gw:
        chat = {"chat_id": GROUP, "chat_type": "group"}
        await telegram.push(user_id="21", text="/help", **chat)
        await telegram.push(user_id=OWNER, text="/help", **chat)
        stranger, owner = telegram.to(GROUP)
    assert "/send" not in stranger
    assert "/status — " in stranger
    assert "/send — " in owner


async def test_an_unknown_command_in_a_group_that_is_not_addressed_is_left_alone(
    tmp_path: Path,
) -> None:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    gw = Gateway(
        config, model_clients={"scripted": ScriptedModel(default=script)}, channels=[telegram]
    )
    async with gw:
        await telegram.push(
            user_id="21", text="/start@some_other_bot", chat_id=GROUP, chat_type="group"
        )
        await gw.wait_idle()
    assert telegram.sent == []
    assert script.requests == {}

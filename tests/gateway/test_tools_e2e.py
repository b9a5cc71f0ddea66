"""Tools through the whole gateway: an MCP server's and the built-ins, for the agents that name them."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.base import ChannelSink
from gateway.app import Gateway
from tests.gateway.conftest import Replies, make_config
from tests.gateway.test_thread_ops_cli import gateway_cli, write_config
from tests.threads.agent.conftest import KeyedScript
from tests.threads.mcp.conftest import stdio_settings
from tests.threads.mcp.server_script import PNG
from threads.messages import FilePart, Message
from threads.testing.scripted import ScriptedModel, call, dispatch
from threads.wake import UserCaller, Wake, WakeSource


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Replies]]:
    script = KeyedScript()
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={
            "default": {
                "model": "scripted/test",
                "tools": ["*", "exp.*", "read_file", "write_file", "run_command"],
            },
            "plain": {"model": "scripted/test"},
        },
        mcp={"servers": {"exp": stdio_settings()}},
        cron={"enabled": False},
    )
    async with Gateway(
        config, model_clients={"scripted": ScriptedModel(default=script)}, control=False
    ) as gateway:
        assert gateway.cli is not None
        replies = Replies()
        gateway.cli.listeners.append(replies)
        yield gateway, script, replies


async def ask(gateway: Gateway, text: str, agent: str = "default") -> None:
    assert gateway.cli is not None
    await gateway.manager.wake(
        "cli",
        Wake(
            source=WakeSource.CLI,
            body=text,
            caller=UserCaller(channel="cli", user_id="local"),
            sink=ChannelSink(channel=gateway.cli, chat_id="cli"),
            agent=agent,
        ),
    )


async def test_an_agent_calls_an_mcp_tool_and_a_vision_model_sees_its_image(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cli", call("exp__picture"), dispatch(("caller:user", "a red dot")))
    await ask(gateway, "draw something")
    await replies.wait(1)

    offered = {t.name for t in script.requests["cli"][0].tools}
    assert {"exp__echo", "exp__picture", "read_file", "write_file", "run_command"} <= offered
    assert "list_files" not in offered
    assert "web_fetch" not in offered
    shown = script.requests["cli"][1].messages[-1]
    assert shown.role == "tool"
    [result] = shown.tool_results()
    assert result.name == "exp__picture"
    assert result.content.startswith("a red dot\n[image: exp.picture image 1")
    [image] = [p for p in shown.content if isinstance(p, FilePart)]
    assert image.url == "data:image/png;base64," + base64.b64encode(PNG).decode()

    await gateway.wait_idle()
    thread = gateway.manager.thread("cli")
    assert thread is not None
    stored = [m for m in thread.session.context() if isinstance(m, Message) and m.role == "tool"]
    [kept] = [p for m in stored for p in m.content if isinstance(p, FilePart)]
    assert kept.url.startswith("tool-media://local/")

    health = await gateway.manager.health()
    assert health["mcp"]["exp"]["state"] == "up"
    assert "exp.picture" in health["mcp"]["exp"]["tools"]


async def test_an_agent_that_names_no_opt_in_tool_is_offered_none(
    gw: tuple[Gateway, KeyedScript, Replies],
) -> None:
    gateway, script, replies = gw
    script.add("cli", dispatch(("caller:user", "hi")))
    await ask(gateway, "which tools?", agent="plain")
    await replies.wait(1)
    offered = {t.name for t in script.requests["cli"][0].tools}
    assert "dispatch" in offered
    assert not {n for n in offered if n.startswith("exp__")}
    assert not offered & {"read_file", "write_file", "list_files", "web_fetch", "run_command"}


async def test_a_command_needing_approval_waits_for_approve_in_the_chat_then_runs_once(
    gw: tuple[Gateway, KeyedScript, Replies], tmp_path: Path
) -> None:
    gateway, script, replies = gw
    script.add(
        "cli",
        call("run_command", argv=["touch", "ran"]),
        call("write_file", path="note.txt", content="kept"),
        dispatch(("caller:user", "done")),
    )
    await ask(gateway, "work")
    (question,) = await replies.wait(1)
    workspace = tmp_path / "data" / "workspaces" / "default"
    assert question.startswith("Approval needed: the agent wants to run run_command")
    assert not (workspace / "ran").exists()
    assert gateway.approvals is not None
    (waiting,) = await gateway.approvals.waiting()
    assert f"/approve {waiting.request.id}" in question
    assert gateway.cli is not None
    await gateway.cli.submit(f"/approve {waiting.request.id}")
    await replies.wait(3)
    assert replies.items[1] == "Approved: run_command runs now."
    assert replies.items[2] == "done"
    [ran] = script.requests["cli"][1].messages[-1].tool_results()
    assert ran.content == "exit code 0"
    [wrote] = script.requests["cli"][2].messages[-1].tool_results()
    assert wrote.content == "wrote 4 bytes to note.txt (now 4 bytes)"
    assert (workspace / "note.txt").read_text() == "kept"
    assert (workspace / "ran").exists()


async def test_gateway_health_shows_a_server_that_cannot_start_and_the_gateway_runs_on(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "no-such-server")
    config = make_config(
        tmp_path,
        mcp={"servers": {"broken": {"command": missing, "reconnect_min_seconds": 60}}},
        cron={"enabled": False},
    )
    async with Gateway(config) as gateway:
        assert gateway.mcp is not None
        assert gateway.mcp.servers["broken"].state == "down"
        code, text, err = await gateway_cli(write_config(tmp_path, config), "health")
    assert code == 0, err
    assert f"  broken: down, 0 tools (cannot start {missing!r}: no such program)" in text

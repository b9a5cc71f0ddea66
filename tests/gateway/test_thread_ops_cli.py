"""health, check-session and stop-session from the CLI, against a running gateway."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.conftest import Replies, make_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import ToolContext, tool
from threads.testing.scripted import ScriptedModel, call, dispatch, say


class Nothing(BaseModel):
    pass


class Digging:
    """The events of the dig tool, made anew for each test's event loop."""

    started = asyncio.Event()
    release = asyncio.Event()


@tool("dig", "Digs for a long time.", Nothing)
async def dig(args: Nothing, ctx: ToolContext) -> str:
    Digging.started.set()
    await Digging.release.wait()
    return "dug"


def scripted_config(tmp_path: Path) -> GatewayConfig:
    return make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
    )


async def gateway_cli(config_path: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, "--config", str(config_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


def write_config(tmp_path: Path, config: GatewayConfig) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{config.data_dir}"\n'
        f'[store]\nurl = "{config.store.url}"\n'
        "[channels.web]\nenabled = false\n"
    )
    return path


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript, Path]]:
    Digging.started = asyncio.Event()
    Digging.release = asyncio.Event()
    script = KeyedScript()
    config = scripted_config(tmp_path)
    gw = Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}, tools=[dig])
    async with gw:
        yield gw, script, write_config(tmp_path, config)
        Digging.release.set()


async def test_check_session_reports_a_live_thread_as_json(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, path = running
    assert gw.cli is not None
    script.add("cli", dispatch(("caller:user", "hi")))
    await gw.cli.submit("hello")
    await gw.wait_idle()
    code, out, err = await gateway_cli(path, "check-session", "cli", "--json")
    assert code == 0, err
    info = orjson.loads(out)
    assert info["exists"]
    assert info["thread_active"]
    assert info["thread_state"] == "idle"


async def test_check_session_of_a_missing_key_says_so_and_fails(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    _, _, path = running
    code, out, _ = await gateway_cli(path, "check-session", "telegram:404")
    assert code == 1
    assert out == "telegram:404: no such session (nothing stored under this key)\n"
    code, out, _ = await gateway_cli(path, "check-session", "telegram:404", "--json")
    assert code == 1
    assert orjson.loads(out)["exists"] is False


async def test_check_session_text_reads_as_words_with_units_not_a_python_dump(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, path = running
    assert gw.cli is not None
    script.add("cli", dispatch(("caller:user", "hi")))
    await gw.cli.submit("hello")
    await gw.wait_idle()
    code, out, err = await gateway_cli(path, "check-session", "cli")
    assert code == 0, err
    assert "True" not in out
    assert "False" not in out
    assert re.search(r"on disk\s+\d+ messages, 1 turns, [\d.]+ (KiB|bytes)", out), out
    assert re.search(r"thread loaded\s+yes", out), out
    assert re.search(r"state\s+idle", out), out


async def test_health_lists_the_active_threads(running: tuple[Gateway, KeyedScript, Path]) -> None:
    gw, script, path = running
    assert gw.cli is not None
    script.add("cli", dispatch(("caller:user", "hi")))
    await gw.cli.submit("hello")
    await gw.wait_idle()
    code, out, err = await gateway_cli(path, "health", "--json")
    assert code == 0, err
    info = orjson.loads(out)
    assert [t["session_key"] for t in info["all_threads"]] == ["cli"]
    assert "cli" in info["channels"]
    code, text, _ = await gateway_cli(path, "health")
    assert code == 0
    assert text.startswith("node: ")  # which gateway process answers, first
    assert "\nthreads: 1 loaded, 0 running" in text
    assert "  cli  agent default  idle" in text


async def test_health_text_shows_every_section_the_json_has(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    _, _, path = running
    code, out, err = await gateway_cli(path, "health", "--json")
    assert code == 0, err
    sections = set(orjson.loads(out)) - {"all_threads"}
    assert {"cron", "channels", "process", "sessions", "provider", "threads"} <= sections
    code, text, _ = await gateway_cli(path, "health")
    assert code == 0
    headings = {line.split(":")[0] for line in text.splitlines() if not line.startswith(" ")}
    assert {"model" if name == "provider" else name for name in sections} <= headings
    assert "cron:\n  running          yes\n  jobs             0 (0 enabled)" in text
    assert re.search(r"channels:\n  cli\s+running", text), text


async def test_no_running_gateway_is_one_error_line_on_stderr_for_every_command(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    for command in (("health",), ("stop-session", "cli"), ("cron", "run-now", "x")):
        code, out, err = await gateway_cli(path, *command)
        assert code == 1, (command, out, err)
        assert out == ""
        assert err.startswith("error: "), (command, err)
        assert len(err.splitlines()) == 1, (command, err)


async def test_stop_session_soft_stops_a_running_child(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, path = running
    assert gw.cli is not None
    child = "cli:threads:dig"
    script.add("cli", dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
    script.add(child, call("dig"), dispatch(), say("never"))
    await gw.cli.submit("start digging")
    await asyncio.wait_for(Digging.started.wait(), 10)
    code, out, err = await gateway_cli(path, "stop-session", child)
    assert code == 0, err
    assert "next step boundary" in out
    Digging.release.set()
    await gw.wait_idle()
    thread = gw.manager.thread(child)
    assert thread is not None
    assert "soft stop" in script.requests[child][1].messages[-1].text()


async def test_stop_session_of_a_key_with_no_thread_is_an_error(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    _, _, path = running
    code, _, err = await gateway_cli(path, "stop-session", "telegram:404")
    assert code == 1
    assert "no thread is loaded for session telegram:404" in err


async def test_stop_session_without_a_running_gateway_says_so(tmp_path: Path) -> None:
    path = write_config(tmp_path, scripted_config(tmp_path))
    code, _, err = await gateway_cli(path, "stop-session", "cli")
    assert code == 1
    assert "no gateway is running" in err


async def test_check_session_reads_the_store_when_no_gateway_runs(tmp_path: Path) -> None:
    config = scripted_config(tmp_path)
    script = KeyedScript()
    script.add("cli", dispatch(("caller:user", "hi")))
    async with Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}) as gw:
        assert gw.cli is not None
        await gw.cli.submit("hello")
        await gw.wait_idle()
    code, out, err = await gateway_cli(
        write_config(tmp_path, config), "check-session", "cli", "--json"
    )
    assert code == 0, err
    info = orjson.loads(out)
    assert info["exists"]
    assert not info["thread_active"]


async def test_stop_session_ends_a_terminal_users_turn_at_once_and_tells_them(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, path = running
    assert gw.cli is not None
    replies = Replies()
    gw.cli.listeners.append(replies)
    script.add("cli", call("dig"), dispatch(("caller:user", "never")))
    await gw.cli.submit("dig for a long time")
    await asyncio.wait_for(Digging.started.wait(), 10)
    code, out, err = await gateway_cli(path, "stop-session", "cli")
    assert code == 0, err
    assert out.strip() == "cli: ended the running turn of cli"
    # Ended inside the tool call, without waiting for it.
    assert not Digging.release.is_set()
    assert await replies.wait(1) == ["(Your turn was stopped.)"]
    thread = gw.manager.thread("cli")
    assert thread is not None
    assert thread.state == "idle"


async def test_stop_session_all_stops_every_running_turn(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, path = running
    assert gw.cli is not None
    script.add("cli", call("dig"), dispatch(("caller:user", "never")))
    await gw.cli.submit("dig")
    await asyncio.wait_for(Digging.started.wait(), 10)
    code, out, err = await gateway_cli(path, "stop-session", "--all")
    assert code == 0, err
    assert out.strip() == "all sessions: ended the running turn of cli"
    code, _, err = await gateway_cli(path, "stop-session")
    assert code == 2
    assert "name one session key, or pass --all" in err


async def test_slash_stop_ends_the_running_turn_and_says_so(
    running: tuple[Gateway, KeyedScript, Path],
) -> None:
    gw, script, _ = running
    assert gw.cli is not None
    replies = Replies()
    gw.cli.listeners.append(replies)
    script.add("cli", call("dig"), dispatch(("caller:user", "never")))
    await gw.cli.submit("dig")
    await asyncio.wait_for(Digging.started.wait(), 10)
    await gw.cli.submit("/stop")
    assert await replies.wait(1) == ["Stopped the running turn and what it started."]
    await gw.cli.submit("/stop")
    assert (await replies.wait(2))[-1] == "Nothing is running."

"""Start-up refuses what cannot work, naming the setting; runtime settings reach the parts."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway.app import Gateway
from gateway.errors import StartupError
from tests.gateway.conftest import Replies, make_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import ToolContext, tool
from threads.testing.scripted import ScriptedModel, call, dispatch, say


async def test_an_unset_api_key_variable_stops_the_start_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_FOR_TESTS", raising=False)
    config = make_config(
        tmp_path,
        models={
            "default": "openai/gpt-4o-mini",
            "providers": {"openai": {"kind": "openai", "api_key_env": "NO_SUCH_KEY_FOR_TESTS"}},
        },
    )
    gateway = Gateway(config)
    with pytest.raises(
        StartupError, match=r"models.default 'openai/gpt-4o-mini'.*NO_SUCH_KEY_FOR_TESTS"
    ):
        await gateway.start()
    assert gateway.channels == {}


async def test_a_busy_web_port_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = make_config(tmp_path, http={"port": port})
        gateway = Gateway(config)
        with pytest.raises(StartupError, match=f"http.port: 127.0.0.1:{port} cannot be used"):
            await gateway.start()


def test_gateway_run_prints_a_startup_error_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_text(
        '[models]\ndefault = "openai/x"\n[models.providers.openai]\napi_key_env = "NO_SUCH_KEY_FOR_TESTS"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "run", "--config", str(tmp_path / "gateway.toml")],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "error: models.default 'openai/x'" in result.stderr
    assert "Traceback" not in result.stderr


class Nothing(BaseModel):
    pass


never = asyncio.Event()


@tool("stall", "Never returns.", Nothing)
async def stall(args: Nothing, ctx: ToolContext) -> str:
    await never.wait()
    return "unreachable"


def scripted(tmp_path: Path, **overrides: object) -> object:
    return make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
        **overrides,
    )


async def test_the_configured_tool_timeout_applies_to_tools_without_their_own(
    tmp_path: Path,
) -> None:
    script = KeyedScript()
    config = scripted(tmp_path, threads={"tool_timeout_seconds": 0.05})
    async with Gateway(
        config,
        model_clients={"scripted": ScriptedModel(default=script)},
        tools=[stall],  # type: ignore[arg-type]
    ) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        script.add("cli", call("stall"), dispatch(("caller:user", "gave up")))
        await gw.cli.submit("stall please")
        await replies.wait()
    (result,) = [p for m in script.requests["cli"][1].messages for p in m.tool_results()]
    assert result.is_error
    assert "timed out after 0.05 s" in result.content


async def test_compact_summarizes_the_chat_now_without_a_turn(tmp_path: Path) -> None:
    script = KeyedScript()
    model = ScriptedModel(default=script)
    async with Gateway(scripted(tmp_path), model_clients={"scripted": model}) as gw:  # type: ignore[arg-type]
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        for n in range(3):
            script.add("cli", dispatch(("caller:user", f"answer {n}")))
            await gw.cli.submit(f"question {n} " + "words " * 50)
            await replies.wait(n + 1)
        await gw.wait_idle()
        script.add("", say("## Goal\nAnswer questions."))
        await gw.cli.submit("/compact")
        (notice,) = (await replies.wait(4))[3:]
    assert notice.startswith("Compacted:")
    assert len(script.requests["cli"]) == 3  # no turn ran for the command


def test_the_gateway_command_has_its_groups() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"], capture_output=True, text=True, check=False
    )
    for group in (
        "run",
        "chat",
        "config",
        "health",
        "check-session",
        "stop-session",
        "cron",
        "sessions",
    ):
        assert group in result.stdout

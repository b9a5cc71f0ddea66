"""The event loop a gateway process runs on: uvloop's where installed, asyncio's on request."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
from typer.testing import CliRunner

from gateway import event_loop
from gateway.cli import app
from gateway.errors import StartupError


def running_loop_module() -> str:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    return event_loop.run(which())


def test_a_gateway_runs_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENVIRONMENT, raising=False)
    assert event_loop.loop_name() == "uvloop"
    assert running_loop_module().startswith("uvloop")


@pytest.mark.parametrize("value", ["asyncio", " Asyncio "])
def test_the_operator_can_ask_for_asyncios_own_loop(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(event_loop.ENVIRONMENT, value)
    assert event_loop.loop_name() == "asyncio"
    assert running_loop_module().startswith("asyncio")


def test_an_unknown_loop_is_refused_naming_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(event_loop.ENVIRONMENT, "trio")
    with pytest.raises(
        StartupError, match=r"GATEWAY_EVENT_LOOP='trio' is not one of uvloop, asyncio"
    ):
        event_loop.run(asyncio.sleep(0))  # the coroutine is closed, never awaited: no warning


def test_the_cli_says_a_bad_loop_in_one_line_before_any_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(event_loop.ENVIRONMENT, "trio")
    result = CliRunner().invoke(app, ["sessions", "list"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: GATEWAY_EVENT_LOOP='trio' is not one of uvloop, asyncio"
    ]


async def test_the_tests_run_on_the_gateways_loop() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop) == (event_loop.loop_name() == "uvloop")

"""``gateway sessions …``: list, history and send-policy, with and without a running gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner, Result

from config import GatewayConfig, load_config
from gateway.app import Gateway
from gateway.cli import app
from tests.threads.sessions.conftest import GatedModel, SessionScript
from threads.sinks import DropSink
from threads.testing.scripted import call, dispatch
from threads.wake import SystemCaller, Wake, WakeSource

Cli = Callable[..., Result]


def write_config(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{data}"\n'
        "[store]\n"
        f'url = "jsonl://{data / "sessions"}"\n'
        "[models]\n"
        'default = "scripted/test"\n'
        "[models.providers.scripted]\n"
        'base_url = "http://127.0.0.1:9"\n'
        "[channels.web]\n"
        "enabled = false\n"
        "[http]\n"
        "port = 0\n"
        "[threads]\n"
        "close_deadline_seconds = 0\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def cli(config_path: Path) -> Cli:
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(
            app, ["sessions", *args, "--config", str(config_path)], env={"COLUMNS": "200"}
        )

    return invoke


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


async def populate(config: GatewayConfig) -> None:
    """A terminal chat that used a tool, and a cron session: two sessions on disk."""
    script = SessionScript()
    script.add("cli", call("health"), dispatch(("caller:user", "all good")))
    script.add("cron:nightly", dispatch())
    async with Gateway(config, model_clients={"scripted": GatedModel(script)}, control=False) as gw:
        assert gw.cli is not None
        await gw.cli.submit("how are you?")
        await gw.wait_idle()
        wake = Wake(
            source=WakeSource.CRON,
            body="nightly",
            caller=SystemCaller(name="cron"),
            sink=DropSink(),
        )
        await gw.manager.wake("cron:nightly", wake)
        await gw.wait_idle()


@pytest.fixture
def populated(config_path: Path) -> GatewayConfig:
    config = load_config(config_path)
    asyncio.run(populate(config))
    return config


def test_list_prints_a_table_of_the_sessions_without_a_gateway(
    populated: GatewayConfig, cli: Cli
) -> None:
    result = cli("list")
    assert result.exit_code == 0, result.output
    assert "sessions (2)" in result.stdout
    assert "cli" in result.stdout
    assert "cron:nightly" in result.stdout
    assert "internal" in result.stdout


def test_list_fits_an_80_column_pipe_without_breaking_a_row(
    populated: GatewayConfig, config_path: Path
) -> None:
    result = CliRunner().invoke(
        app, ["sessions", "list", "--config", str(config_path)], env={"COLUMNS": ""}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    body = lines[lines.index(next(line for line in lines if line.startswith("┡"))) + 1 : -1]
    assert body
    assert all(line.startswith("│") and line.endswith("│") for line in body)


def test_list_json_filters_by_kind_and_activity(populated: GatewayConfig, cli: Cli) -> None:
    everything = as_json(cli("list", "--json"))
    assert {row["key"]: row["kind"] for row in everything["sessions"]} == {
        "cli": "main",
        "cron:nightly": "cron",
    }
    crons = as_json(cli("list", "--json", "--kinds", "cron,group"))
    assert [row["key"] for row in crons["sessions"]] == ["cron:nightly"]
    recent = as_json(cli("list", "--json", "--active-minutes", "5"))
    assert recent["count"] == 2
    (row,) = as_json(cli("list", "--json", "--kinds", "main"))["sessions"]
    assert row["transcriptPath"].endswith(f"{row['sessionId']}.jsonl")


def test_list_refuses_an_unknown_kind(cli: Cli) -> None:
    result = cli("list", "--kinds", "dm")
    assert result.exit_code == 2
    assert "--kinds dm: a kind is one of main, group, cron, hook, node, other" in result.output


def test_history_prints_the_transcript_and_tool_results_only_when_asked(
    populated: GatewayConfig, cli: Cli
) -> None:
    plain = as_json(cli("history", "main", "--json"))
    assert plain["sessionKey"] == "cli"
    assert [m["role"] for m in plain["messages"]] == ["user", "assistant", "assistant"]
    with_tools = as_json(cli("history", "cli", "--json", "--include-tools", "--limit", "2"))
    assert [m["role"] for m in with_tools["messages"]] == ["assistant", "tool"]
    text = cli("history", "cli", "--include-tools")
    assert text.exit_code == 0, text.output
    assert "→ health({})" in text.stdout
    assert "← dispatch:" in text.stdout


def test_history_accepts_a_session_id(populated: GatewayConfig, cli: Cli) -> None:
    (row,) = as_json(cli("list", "--json", "--kinds", "cron"))["sessions"]
    history = as_json(cli("history", row["sessionId"], "--json"))
    assert history["sessionKey"] == "cron:nightly"


def test_history_of_an_unknown_session_fails_naming_it(populated: GatewayConfig, cli: Cli) -> None:
    missing = cli("history", "telegram:404")
    assert missing.exit_code == 1
    assert missing.stderr == (
        "error: session key 'telegram:404' names no session; `gateway sessions list` shows them\n"
    )
    reserved = cli("history", "global")
    assert reserved.exit_code == 2
    assert "'global' is a reserved session key" in reserved.output


def test_send_policy_without_a_gateway_writes_the_session(
    populated: GatewayConfig, cli: Cli
) -> None:
    result = cli("send-policy", "cli", "deny")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("send policy for cli: deny (the session's own send policy")
    rows = {row["key"]: row for row in as_json(cli("list", "--json"))["sessions"]}
    assert rows["cli"]["sendPolicy"] == "deny"
    assert cli("send-policy", "cli", "maybe").exit_code == 2
    missing = cli("send-policy", "telegram:404", "deny")
    assert missing.exit_code == 1
    assert "names no session" in missing.output


async def test_send_policy_with_a_gateway_running_goes_through_it(
    config_path: Path, cli: Cli
) -> None:
    config = load_config(config_path)
    script = SessionScript()
    script.add("cli", dispatch(("caller:user", "hi")), dispatch(("caller:user", "blocked?")))
    async with Gateway(config, model_clients={"scripted": GatedModel(script)}) as gw:
        assert gw.cli is not None
        assert gw.send_policy is not None
        await gw.cli.submit("hello")
        await gw.wait_idle()
        # The gateway holds the session's writer lock: only the control socket can change it.
        result = await asyncio.to_thread(cli, "send-policy", "main", "deny")
        assert result.exit_code == 0, result.output
        assert "send policy for cli: deny" in result.stdout
        assert not (await gw.send_policy.check("cli")).allowed
        listing = await asyncio.to_thread(cli, "list", "--json")
        (row,) = as_json(listing)["sessions"]
        assert row["sendPolicy"] == "deny"  # read from the store while the gateway runs

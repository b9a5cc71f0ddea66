"""``gateway heartbeat set|off|list|runs``: per-session heartbeats, from the command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from gateway.cli import app
from tests.gateway.test_sessions_cli import write_config
from threads.ids import new_session_id
from threads.store.entries import Header
from threads.store.jsonl import JsonlStore


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = write_config(tmp_path)

    async def session() -> None:
        store = JsonlStore(tmp_path / "data" / "sessions")
        header = Header(id=new_session_id(), meta={"key": "telegram:42"})
        await store.create(header)
        await store.point("telegram:42", header.id)
        await store.close()

    asyncio.run(session())
    return path


def heartbeat(config_path: Path, *args: str) -> Result:
    return CliRunner().invoke(
        app, ["heartbeat", *args, "--config", str(config_path)], env={"COLUMNS": "200"}
    )


def test_set_list_and_off_a_sessions_heartbeat(config_path: Path) -> None:
    done = heartbeat(
        config_path,
        "set",
        "telegram:42",
        "--every",
        "45m",
        "--active",
        "08:00-22:00",
        "--tz",
        "Europe/Berlin",
    )
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        "heartbeat for telegram:42: every 45m between 08:00-22:00 (Europe/Berlin); "
        "the first one in 45m\n"
    )
    listed = heartbeat(config_path, "list", "--json")
    (row,) = orjson.loads(listed.stdout)["heartbeats"]
    assert (row["key"], row["every_seconds"], row["active"], row["tz"]) == (
        "telegram:42",
        2700.0,
        "08:00-22:00",
        "Europe/Berlin",
    )
    assert heartbeat(config_path, "list").stdout == (
        "telegram:42: every 45m, 08:00-22:00 Europe/Berlin\n"
    )
    assert heartbeat(config_path, "runs", "telegram:42").stdout == "telegram:42: no beats yet\n"
    assert heartbeat(config_path, "off", "telegram:42").stdout == "heartbeat for telegram:42: off\n"
    assert heartbeat(config_path, "list").stdout == "no heartbeats\n"
    again = heartbeat(config_path, "off", "telegram:42")
    assert again.exit_code == 1
    assert "has no heartbeat" in again.output


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["telegram:404", "--every", "30m"], 1, "names no session"),
        (["telegram:42", "--every", "soon"], 2, "--every: 'soon' is not an interval"),
        (
            ["telegram:42", "--every", "30s"],
            2,
            "--every: Input should be greater than or equal to 60",
        ),
        (
            ["telegram:42", "--every", "1h", "--active", "8-22"],
            2,
            "--active: '8-22' is not active hours",
        ),
        (
            ["telegram:42", "--every", "1h", "--tz", "Mars/Base"],
            2,
            "--tz: 'Mars/Base' is not an IANA time zone",
        ),
    ],
)
def test_set_refuses_bad_input_in_one_line(
    config_path: Path, args: list[str], code: int, said: str
) -> None:
    result = heartbeat(config_path, "set", *args)
    assert result.exit_code == code, result.output
    assert said in result.output
    assert heartbeat(config_path, "list").stdout == "no heartbeats\n"

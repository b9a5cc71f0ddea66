"""The walking skeleton: a terminal message through every real module and back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from config import GatewayConfig
from gateway.app import Gateway
from gateway.errors import StartupError
from tests.gateway.conftest import Replies


def session_lines(data_dir: Path) -> list[dict[str, object]]:
    files = list((data_dir / "sessions").glob("s_*.jsonl"))
    assert len(files) == 1, files
    return [orjson.loads(line) for line in files[0].read_bytes().splitlines()]


async def test_a_terminal_message_is_echoed_and_the_turn_is_stored(config: GatewayConfig) -> None:
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("hello, gateway")
        (reply,) = await replies.wait()
        await gw.wait_idle()
    assert reply.endswith("hello, gateway")
    assert "No model is configured" in reply
    lines = session_lines(config.data_dir)
    assert lines[0]["type"] == "session"
    kinds = [line["type"] for line in lines[1:]]
    # The prompt; the model's dispatch call with its send recorded before it left; the
    # dispatch result with the send's mark; the turn's end.
    assert kinds == ["message", "message", "outbound", "message", "outbound", "turn"]
    record, mark = lines[3], lines[5]
    assert (record["status"], record["kind"]) == ("pending", "dispatch:caller:user")
    assert (mark["status"], mark["record"]) == ("delivered", record["id"])
    prompt = lines[1]
    assert prompt["run_id"].endswith("-t1")  # type: ignore[union-attr]
    assert "source: cli" in str(prompt["message"])
    turn = lines[-1]
    assert turn["stop_reason"] == "dispatch"


async def test_the_notice_is_said_once_per_session(config: GatewayConfig) -> None:
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("one")
        await replies.wait(1)
        await gw.cli.submit("two")
        items = await replies.wait(2)
    assert "No model is configured" in items[0]
    assert items[1] == "two"


async def test_the_conversation_survives_a_restart(config: GatewayConfig) -> None:
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("before")
        await replies.wait()
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("after")
        (reply,) = await replies.wait()
        thread = gw.manager.thread("cli")
        assert thread is not None
        texts = [m.text() for m in thread.session.context()]
    assert reply == "after"
    assert any(t.endswith("before") for t in texts)


def test_gateway_chat_answers_piped_stdin(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_HTTP__PORT"] = "0"  # a free port: another gateway may hold the default one
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "chat"],
        input="hello from a pipe\nsecond line\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "hello from a pipe" in result.stdout
    assert "second line" in result.stdout
    assert list((tmp_path / "data" / "sessions").glob("s_*.jsonl"))


async def test_a_second_gateway_on_the_same_data_dir_refuses_to_start(
    config: GatewayConfig,
) -> None:
    async with Gateway(config) as first:
        second = Gateway(config)
        with pytest.raises(StartupError, match="already running a gateway on the data directory"):
            await second.start()
        # It stopped before starting any channel, and the first one still answers.
        assert second.channels == {}
        assert first.cli is not None
        replies = Replies()
        first.cli.listeners.append(replies)
        await first.cli.submit("still here")
        assert (await replies.wait())[0].endswith("still here")

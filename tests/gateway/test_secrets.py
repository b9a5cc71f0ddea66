"""Secrets never leave: no log line and no command output holds a password, key or token.

Each test sets secrets where an operator would — a Redis password in the store
URLs, a provider ``api_key``, a Telegram token — drives the commands, logs at
DEBUG, and greps everything printed and logged for the secret values.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.app import Gateway
from gateway.cli import app
from tests.conftest import require_service
from tests.cron.conftest import delete_keys
from tests.gateway.conftest import Replies
from tests.threads.store.conftest import delete_prefix, redis_prefix
from threads.store.redis import RedisStore
from threads.testing.fake_openai import FakeOpenAIServer

PASSWORD = "s3cretpw-" + secrets.token_hex(4)
API_KEY = "sk-test-" + secrets.token_hex(8)
BOT_TOKEN = "123456:tg-" + secrets.token_hex(8)
SECRETS = (PASSWORD, API_KEY, BOT_TOKEN)


def leaked(*texts: str) -> list[str]:
    return [secret for secret in SECRETS if any(secret in text for text in texts)]


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):
        yield caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every record as a handler would print it: message, arguments, exception text."""
    return caplog.text + "\n".join(str(r.args) + r.getMessage() for r in caplog.records)


def secret_config(tmp_path: Path, *, store_url: str, state_url: str, model_url: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f'[store]\nurl = "{store_url}"\nstate_url = "{state_url}"\n'
        f'[models]\ndefault = "openai/fake-model"\n'
        f'[models.providers.openai]\nbase_url = "{model_url}"\napi_key = "{API_KEY}"\n'
        f'[channels.telegram]\ntoken = "{BOT_TOKEN}"\n'
        "[channels.web]\nenabled = false\n"
        "[http]\nport = 0\n"  # never the default port another gateway may hold
    )
    return path


def test_no_command_prints_or_logs_a_secret_when_the_redis_cannot_be_reached(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    unreachable = f"redis://:{PASSWORD}@127.0.0.1:1/0"
    path = secret_config(
        tmp_path, store_url=unreachable, state_url=unreachable, model_url="http://127.0.0.1:9/v1"
    )
    runner = CliRunner()
    commands = [
        ["config", "check", str(path)],
        ["run", "--config", str(path), "--verbose"],
        ["cron", "list", "--config", str(path)],
        ["cron", "set-every", "--id", "digest", "--every", "1h", "--task", "sum up",
         "--config", str(path)],
        ["cron", "runs", "digest", "--config", str(path)],
        ["check-session", "cli", "--config", str(path)],
        ["health", "--config", str(path)],
        ["sessions", "list", "--config", str(path)],
        ["sessions", "history", "cli", "--config", str(path)],
    ]  # fmt: skip
    outputs = []
    for command in commands:
        result = runner.invoke(app, command)
        outputs.append(result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            command,
            result.exception,
        )
        if command[0] != "config":
            assert result.exit_code == 1, (command, result.output)
    assert "redis://:***@127.0.0.1:1/0" in "\n".join(outputs)  # the URL is named, redacted
    assert leaked(*outputs, logged(debug_logs)) == []


async def test_a_running_gateway_and_the_commands_against_it_never_show_a_secret(
    tmp_path: Path, debug_logs: pytest.LogCaptureFixture
) -> None:
    require_service("redis", "127.0.0.1", 6379)
    # The local Redis's default user has no password and accepts any, so a URL
    # that carries one connects, and every line that names the URL is exercised.
    session_prefix = redis_prefix()
    cron_prefix = f"test:cron:{secrets.token_hex(8)}:"
    store_url = f"redis://default:{PASSWORD}@127.0.0.1:6379/1"
    state_url = f"redis://default:{PASSWORD}@127.0.0.1:6379/5?cron_prefix={cron_prefix}"
    async with FakeOpenAIServer(api_key=API_KEY) as server:
        path = secret_config(
            tmp_path, store_url=store_url, state_url=state_url, model_url=server.base_url
        )
        from config import load_config

        config = load_config(path, env={})
        store = RedisStore(store_url, prefix=session_prefix)
        outputs: list[str] = []
        try:
            async with Gateway(config, store=store) as gw:
                assert gw.cli is not None
                replies = Replies()
                gw.cli.listeners.append(replies)
                await gw.cli.submit("hello")
                assert (await replies.wait())[0].endswith("hello")
                for command in (
                    ["health", "--json"],
                    ["check-session", "cli", "--json"],
                    ["cron", "set-every", "--id", "digest", "--every", "1h", "--task", "sum up"],
                    ["cron", "list"],
                    ["sessions", "list"],
                ):
                    code, out, err = await gateway_cli(path, *command)
                    assert code == 0, (command, out, err)
                    outputs += [out, err]
        finally:
            await store.close()
            await delete_prefix(session_prefix)
            await delete_keys(cron_prefix)
    assert server.requests  # the key was used, on the wire only
    text = logged(debug_logs)
    assert "cron: started" in text  # the start-up line that names the state store
    assert "redis://default:***@127.0.0.1:6379/5" in text
    assert "redis://default:***@127.0.0.1:6379/1" in "".join(outputs)  # health names the store
    assert leaked(*outputs, text) == []


async def gateway_cli(config_path: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, "--config", str(config_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()

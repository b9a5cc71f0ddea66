"""A real ``gateway run`` killed (SIGKILL) while a call waits for approval.

The request is in the session before the question reaches the chat, so the
gateway started again lists the same request; the button pressed on the
question sent before the kill resumes the turn, and the call runs once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest

from channels.approvals import button_data
from channels.testing import FakeTelegram
from tests.gateway.test_approvals_telegram import keyboard
from tests.gateway.test_thread_ops_cli import gateway_cli
from threads.testing.fake_openai import FakeOpenAIServer, Reply, ToolCall

BOT_TOKEN = "123456:kill-test"
COUNT = "import pathlib; p = pathlib.Path('runs'); p.write_text(p.read_text() + 'x' if p.exists() else 'x')"


def write_config(tmp_path: Path, fake: FakeTelegram, model_url: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        '[models]\ndefault = "fake/model"\n'
        f'[models.providers.fake]\nkind = "openai"\nbase_url = "{model_url}"\napi_key = "k"\n'
        '[agents.default]\ntools = ["*", "run_command"]\n'
        "[channels.web]\nenabled = false\n"
        "[http]\nenabled = false\n"
        "[cron]\nenabled = false\n"
        "[channels.telegram]\nenabled = true\n"
        f'token = "{fake.token}"\nbase_url = "{fake.base_url}"\n'
        f'base_file_url = "{fake.base_file_url}"\n'
        '[channels.telegram.access]\ndm_policy = "open"\n'
    )
    return path


@asynccontextmanager
async def gateway_run(config: Path, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``gateway run`` as its own process; killed at the end if the test left it running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PTB_TIMEDELTA"] = "true"
    with log.open("ab") as out:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "run", "--config", str(config), "--log-level", "info",
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=env,
        )  # fmt: skip
    try:
        yield child
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


@pytest.mark.timeout(300)  # five processes one after another: seconds each on a loaded machine
async def test_a_gateway_killed_while_a_call_waits_shows_the_same_request_and_runs_it_once(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "data" / "workspaces" / "default"
    log = tmp_path / "gateway.log"
    async with FakeTelegram(bot_username="gw_bot") as fake, FakeOpenAIServer() as model:
        model.script(
            Reply(
                tool_calls=[
                    ToolCall(name="run_command", arguments={"argv": [sys.executable, "-c", COUNT]})
                ]
            ),
            Reply(text="Done: it ran."),
        )
        config = write_config(tmp_path, fake, model.base_url)
        ann = fake.user("Ann")
        async with gateway_run(config, log) as first:
            await fake.wait_for_poll(timeout=60)
            fake.send_dm(ann, "count one run")
            (asked,) = await fake.wait_for_sent(ann, 1, timeout=60)
            assert (asked.text or "").startswith(
                "Approval needed: the agent wants to run run_command"
            )
            data = keyboard(asked)[0][1]
            request_id = data.rsplit(":", 1)[1]
            await fake.wait_until(lambda: not fake.pending_updates() or None, timeout=30)
            first.send_signal(signal.SIGKILL)
            assert await first.wait() == -signal.SIGKILL
        assert not (workspace / "runs").exists()

        async with gateway_run(config, log) as second:
            await fake.wait_for_poll(timeout=60)
            code, out, err = await gateway_cli(config, "approvals", "list", "--json")
            assert code == 0, err
            (listed,) = orjson.loads(out)["requests"]
            assert (listed["id"], listed["tool"]) == (request_id, "run_command")
            assert listed["session_key"] == f"telegram:{ann.id}"

            fake.press_button(asked, ann, button_data("approve", request_id))
            # The answer may stream in as a draft edited in place: wait for its final text.
            await fake.wait_until(
                lambda: [s.text for s in fake.sent(ann)[1:]] == ["Done: it ran."],
                timeout=60,
                what="the resumed turn's answer",
            )
            assert (workspace / "runs").read_text() == "x"
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 60) == 0

        async with gateway_run(config, log) as third:
            await fake.wait_for_poll(timeout=60)
            code, out, err = await gateway_cli(config, "approvals", "list", "--json")
            assert code == 0, err
            assert orjson.loads(out)["requests"] == []
            third.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(third.wait(), 60) == 0
    assert (workspace / "runs").read_text() == "x"
    assert model.request_count == 2

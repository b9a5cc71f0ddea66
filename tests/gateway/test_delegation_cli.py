"""``gateway sessions cancel``: an operator cancels a delegation in the running gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from config import load_config
from gateway.app import Gateway
from tests.gateway.test_sessions_cli import Cli, cli, write_config
from tests.threads.sessions.conftest import SUBAGENT, GatedModel, SessionScript
from threads.store.entries import PoolReceiptEntry
from threads.testing.scripted import call, dispatch, say

__all__ = ["cli"]  # the fixture, shared with the other sessions CLI tests


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    """The sessions CLI tests' config (its HTTP server is on a free port already)."""
    return write_config(tmp_path)


async def test_cancel_stops_a_running_child_and_its_parent_records_it(
    config_path: Path, cli: Cli
) -> None:
    config = load_config(config_path)
    script = SessionScript()
    script.add("cli", call("sessions_spawn", task="dig deep"), dispatch(("caller:user", "on it")))
    script.add(SUBAGENT, say("never"), say("ANNOUNCE_SKIP"))
    model = GatedModel(script)
    gate = model.hold(SUBAGENT)
    async with Gateway(config, model_clients={"scripted": model}) as gw:
        assert gw.cli is not None
        await gw.cli.submit("delegate it")
        await model.reached(SUBAGENT)
        (delegation,) = gw.manager.pool.delegations()
        child = str(delegation.child)
        result = await asyncio.to_thread(cli, "cancel", child)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"canceled the delegation to {child} (running); cli ")
        gate.set()
        await gw.wait_idle()

        async def settled() -> bool:
            thread = gw.manager.thread("cli")
            assert thread is not None
            receipts = [e for e in thread.session.entries() if isinstance(e, PoolReceiptEntry)]
            return receipts[-1].status == "canceled"

        async with asyncio.timeout(10):
            while not await settled():
                await asyncio.sleep(0.01)  # polling with a deadline
        again = await asyncio.to_thread(cli, "cancel", child)
        assert again.exit_code == 1
        assert f"no delegation to {child} is in flight" in again.output


def test_cancel_without_a_gateway_says_there_is_nothing_to_cancel(cli: Cli) -> None:
    result = cli("cancel", "agent:default:subagent:x")
    assert result.exit_code == 1
    assert "no gateway is running here" in result.output

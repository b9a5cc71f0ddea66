"""Pool tests: the session-tools rig (real manager, agent loop and pool) with ``delegate_task``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from config import GatewayConfig
from tests.threads.sessions.conftest import USER, Rig, SessionScript, make_rig, session_config
from threads.pool.tools import delegate_task_tool
from threads.store.base import SessionStore
from threads.store.entries import Header, PoolReceiptEntry


async def pool_rig(
    script: SessionScript,
    config: GatewayConfig | None = None,
    *,
    store: SessionStore | None = None,
    recover: bool = False,
) -> Rig:
    return await make_rig(script, config, store=store, recover=recover, tools=[delegate_task_tool])


def slots(n: int, **threads: Any) -> GatewayConfig:
    """The session-tools config with ``n`` delegation slots per session."""
    return session_config(
        agent_defaults={"subagents": {"max_concurrent": n}},
        threads={"close_deadline_seconds": 0, **threads},
    )


@pytest.fixture
def script() -> SessionScript:
    return SessionScript()


@pytest.fixture
async def rig(script: SessionScript) -> AsyncIterator[Rig]:
    runtime = await pool_rig(script)
    yield runtime
    await runtime.manager.close()


def receipts(rig: Rig, key: str = USER) -> list[PoolReceiptEntry]:
    thread = rig.manager.thread(key)
    assert thread is not None
    return [e for e in thread.session.entries() if isinstance(e, PoolReceiptEntry)]


async def header_of(rig: Rig, key: str) -> Header:
    session_id = await rig.store.resolve(key)
    assert session_id is not None
    return (await rig.store.load(session_id)).header

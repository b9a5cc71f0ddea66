"""Pool tests: the session-tools rig (real manager, agent loop and pool) with ``delegate_task``.

:func:`approvals_rig` adds ``deploy``, a tool that waits for a person's approval
(the approvals gate on a :class:`ManualClock`), so a child can park.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from config import GatewayConfig
from tests.clock import ManualClock
from tests.threads.sessions.conftest import USER, Rig, SessionScript, make_rig, session_config
from threads.agent.tools import Tool, ToolContext
from threads.approvals.door import Decision
from threads.approvals.gate import DurableApprovals
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


class DeployArgs(BaseModel):
    env: str


def deploy_tool(ran: list[str]) -> Tool[DeployArgs]:
    """``deploy``: needs a person's approval; each call that really ran is added to ``ran``."""

    async def deploy(args: DeployArgs, ctx: ToolContext) -> str:
        ran.append(args.env)
        return f"deployed to {args.env}"

    return Tool(
        name="deploy",
        description="Deploy the service.",
        args=DeployArgs,
        handler=deploy,
        requires_approval=True,
    )


async def approvals_rig(
    script: SessionScript,
    ran: list[str],
    config: GatewayConfig | None = None,
    *,
    store: SessionStore | None = None,
    recover: bool = False,
) -> Rig:
    """The pool rig with ``deploy``, which parks the turn that calls it until decided."""
    config = config or slots(4)
    return await make_rig(
        script,
        config,
        store=store,
        recover=recover,
        tools=[delegate_task_tool, deploy_tool(ran)],
        approvals=DurableApprovals(config, clock=ManualClock()),
    )


async def decide(rig: Rig, key: str, outcome: str, reason: str = "") -> None:
    """Decide the one request ``key``'s session waits on, as an operator would."""
    thread = await rig.manager.open_thread(key)
    assert thread is not None
    (request,) = thread.session.approvals.pending()
    decision = Decision(
        request_id=request.id, outcome=outcome, reason=reason, who="cli (ops)", via="cli"
    )
    await thread.session.approvals.decide([decision], now=ManualClock().now())


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

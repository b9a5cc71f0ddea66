"""A runtime with approvals: the real manager, loop, gate and service over a scripted model.

``deploy`` needs a person's approval (``requires_approval``); every call that
really ran is in ``Rig.ran``. Expiry runs on a :class:`ManualClock`, grants
live in an in-memory state store, sessions in a jsonl store a restart reopens.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from config import GatewayConfig, validate
from tests.clock import ManualClock
from tests.threads.conftest import Inbox
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import Tool, ToolContext, ToolRegistry
from threads.approvals.gate import DurableApprovals
from threads.approvals.grants import GrantBook
from threads.approvals.service import ApprovalService
from threads.dispatch import dispatch_tool
from threads.keys import SessionKey
from threads.manager import ThreadManager
from threads.ops import check_session_tool, health_tool
from threads.state.memory import MemoryStateStore
from threads.store import open_store
from threads.store.base import SessionStore
from threads.testing.scripted import ScriptedModel
from threads.turns import Turn
from threads.wake import UserCaller, Wake, WakeSource


class DeployArgs(BaseModel):
    env: str


def approval_config(**approvals: Any) -> GatewayConfig:
    return validate(
        {
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            "agents": {"default": {"model": "scripted/x", "tools": ["*", "deploy"]}},
            "approvals": approvals,
        },
        "test",
    )


@dataclass
class Rig:
    """One gateway's runtime; :meth:`restart` is a new process over the same store."""

    store_url: str
    config: GatewayConfig
    model: ScriptedModel = field(default_factory=ScriptedModel)
    clock: ManualClock = field(default_factory=ManualClock)
    state: MemoryStateStore = field(default_factory=MemoryStateStore)
    ran: list[dict[str, Any]] = field(default_factory=list)
    inboxes: dict[str, Inbox] = field(default_factory=dict)
    hold: asyncio.Event | None = None  # set: deploy waits for it once started
    deploying: asyncio.Event = field(default_factory=asyncio.Event)
    store: SessionStore | None = None
    manager: ThreadManager | None = None
    service: ApprovalService | None = None

    def deploy_tool(self) -> Tool[DeployArgs]:
        async def deploy(args: DeployArgs, ctx: ToolContext) -> str:
            self.ran.append({"env": args.env, "key": ctx.key})
            self.deploying.set()
            if self.hold is not None:
                await self.hold.wait()
            return f"deployed to {args.env}"

        return Tool(
            name="deploy",
            description="Deploy the service.",
            args=DeployArgs,
            handler=deploy,
            opt_in=True,
            requires_approval=True,
        )

    def inbox(self, key: str) -> Inbox:
        return self.inboxes.setdefault(key, Inbox(name=key))

    async def start(self) -> None:
        self.store = open_store(self.store_url)
        grants = GrantBook(self.state)
        registry = ToolRegistry(
            [dispatch_tool, check_session_tool, health_tool, self.deploy_tool()],
            approvals=DurableApprovals(self.config, clock=self.clock, grants=grants),
        )
        loop = AgentLoop(
            config=self.config,
            models=Models(self.config.models, clients={"scripted": self.model}),
            tools=registry,
        )

        def user_sinks(key: SessionKey) -> Inbox:
            return self.inbox(str(key))

        def channel_sinks(wire: Mapping[str, str]) -> Inbox:
            return self.inbox(wire["chat"])

        self.manager = ThreadManager(
            store=self.store,
            agent=loop,
            config=self.config,
            user_sinks=user_sinks,
            channel_sinks=channel_sinks,
        )
        loop.services = self.manager
        self.service = ApprovalService(self.manager, clock=self.clock, grants=grants)
        await self.manager.start()
        await self.service.start()

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()
        if self.manager is not None:
            await self.manager.close()
        if self.store is not None:
            await self.store.close()

    async def restart(self) -> None:
        await self.close()
        await self.start()

    async def say(self, key: str, text: str, user: str = "7") -> Turn:
        assert self.manager is not None
        wake = Wake(
            source=WakeSource.TELEGRAM,
            body=text,
            caller=UserCaller(channel="telegram", user_id=user, name="Ada"),
            sink=self.inbox(key),
        )
        _accepted, turn = await self.manager.wake_turn(key, wake)
        return turn


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    r = Rig(store_url=f"jsonl://{tmp_path / 'sessions'}", config=approval_config())
    await r.start()
    yield r
    await r.close()

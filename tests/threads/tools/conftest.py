"""Calling built-in tools the way the agent loop does: through a registry, for one agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config import GatewayConfig, validate
from threads.agent.tools import ToolContext, ToolOutput, ToolRegistry
from threads.approvals.gate import DurableApprovals
from threads.clock import MonotonicClock
from threads.messages import ToolCallPart
from threads.tools import builtin_tools


def tools_config(tmp_path: Path, **sections: Any) -> GatewayConfig:
    """A configuration with data under ``tmp_path``; ``sections`` are top-level tables."""
    data: dict[str, Any] = {"data_dir": str(tmp_path / "data")}
    data.update(sections)
    return validate(data, "test")


class Caller:
    """Calls tools as ``agent`` would, through a registry with the configured approval gate."""

    def __init__(self, config: GatewayConfig, agent: str = "default") -> None:
        self.config = config
        self.registry = ToolRegistry(
            builtin_tools(config), approvals=DurableApprovals(config, clock=MonotonicClock())
        )
        self.agent = agent
        self._ids = 0

    async def __call__(self, name: str, **args: Any) -> ToolOutput:
        tools, _ = self.registry.select([name])
        self._ids += 1
        call = ToolCallPart(id=f"c{self._ids}", name=name, args=args)
        ctx = ToolContext(run=None, key="cli", agent=self.agent)  # type: ignore[arg-type]
        _, output = await self.registry.call(tools, call, ctx)
        return output

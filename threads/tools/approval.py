"""Which calls need a person's approval, and what happens to them until approvals exist.

A tool marked ``requires_approval`` (``run_command`` by default; an MCP
server's tools when its section says so) needs a person's yes before it
runs — unless the calling agent lists it in ``auto_approve``. Asking a
person is not built yet: :class:`ConfigApprovals` lets auto-approved calls
run and refuses the rest with a message that says how to allow them. The
approvals feature replaces this gate (:class:`~threads.agent.tools.ApprovalGate`)
with one that asks and waits; :func:`needs_approval` stays the rule.
"""

from __future__ import annotations

from typing import Any

from config.models import GatewayConfig
from threads.agent.tools import Tool, ToolContext, ToolOutput
from threads.messages import ToolCallPart


def needs_approval(tool: Tool[Any], agent: str, config: GatewayConfig) -> bool:
    """Whether a call of ``tool`` by ``agent`` needs a person's approval."""
    if not tool.requires_approval:
        return False
    settings = config.agents.get(agent)
    patterns = settings.auto_approve if settings is not None else []
    return not any(tool.matches(p) for p in patterns)


def how_to_allow(tool: Tool[Any], agent: str) -> str:
    """The configuration that lets ``agent`` run ``tool`` without asking."""
    setting = (
        "[tools.run_command] requires_approval = false"
        if tool.name == "run_command"
        else f"requires_approval = false in [mcp.servers.{tool.shown.split('.', 1)[0]}]"
        if tool.label
        else ""
    )
    also = f"; or, for every agent, {setting}" if setting else ""
    return f'add "{tool.shown}" to auto_approve in [agents.{agent}]{also}'


class ConfigApprovals:
    """The approval gate until approvals exist: the config decides, and no one is asked."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config

    async def review(
        self, tool: Tool[Any], call: ToolCallPart, ctx: ToolContext
    ) -> ToolOutput | None:
        if not needs_approval(tool, ctx.agent, self.config):
            return None
        return ToolOutput(
            content=(
                f"{tool.shown} was not run: it needs a person's approval, and approvals are not "
                "available in this gateway yet. Tell the user; an operator can allow it by "
                f"configuration: {how_to_allow(tool, ctx.agent)}."
            ),
            is_error=True,
        )

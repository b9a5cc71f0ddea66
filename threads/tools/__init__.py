"""Built-in tools an agent may opt into: its files, the web, and commands.

Every one is opt-in (``*`` does not include them): an agent gets one when its
``tools`` names it. ``[tools.files]``, ``[tools.web_fetch]`` and
``[tools.run_command]`` set their limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from config.models import GatewayConfig
from threads.agent.tools import Tool
from threads.tools.files import files_tools
from threads.tools.run_command import run_command_tool
from threads.tools.web_fetch import web_fetch_tool


def workspace_dir(config: GatewayConfig, agent: str) -> Path:
    """Where ``agent``'s files tools and commands work: its own setting, else one per agent."""
    settings = config.agents.get(agent)
    if settings is not None and settings.workspace is not None:
        return settings.workspace
    root = config.tools.files.workspaces or config.data_dir / "workspaces"
    return root / agent


def builtin_tools(config: GatewayConfig) -> list[Tool[Any]]:
    """The built-in opt-in tools, with the configured limits."""

    def workspace_of(agent: str) -> Path:
        return workspace_dir(config, agent)

    return [
        *files_tools(config.tools.files, workspace_of),
        web_fetch_tool(config.tools.web_fetch),
        run_command_tool(config.tools.run_command, workspace_of),
    ]

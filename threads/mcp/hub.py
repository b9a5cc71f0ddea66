"""Every configured MCP server, started and stopped together, their tools in one registry.

The gateway owns the hub: :meth:`McpHub.start` at start-up (waiting at most
``[mcp] start_wait_seconds`` for the servers' first connection; the rest
keep connecting), :meth:`McpHub.close` at close. Each server's tools live in
the registry group ``mcp:<name>`` while it is up. :meth:`McpHub.health` is
the ``mcp`` part of the gateway's health.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config.tools import McpConfig
from threads.agent.tools import Tool, ToolRegistry
from threads.mcp.connection import McpServer
from threads.mcp.transport import StderrLog
from threads.store.private import make_private_dir
from threads.tools.images import ImageStore

log = logging.getLogger(__name__)


class McpHub:
    """The MCP servers of one gateway."""

    def __init__(
        self,
        config: McpConfig,
        registry: ToolRegistry,
        *,
        log_dir: Path,
        images: ImageStore | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.log_dir = log_dir
        self.servers = {
            name: McpServer(
                name,
                settings,
                publish=self._publish,
                stderr=StderrLog(log_dir / f"mcp-{name}.log"),
                images=images,
                env=env,
            )
            for name, settings in config.servers.items()
            if settings.enabled
        }

    def _publish(self, group: str, tools: list[Tool[Any]]) -> None:
        refused = self.registry.replace_group(group, tools)
        for name in refused:
            log.warning("%s: tool %s is not offered: another tool has that name", group, name)

    async def start(self) -> None:
        """Start every server; wait a while for their first attempts to finish."""
        if not self.servers:
            return
        await asyncio.to_thread(make_private_dir, self.log_dir)
        for server in self.servers.values():
            server.start()
        waits = [asyncio.ensure_future(s.wait_for("up", "down")) for s in self.servers.values()]
        _, pending = await asyncio.wait(waits, timeout=self.config.start_wait_seconds)
        for wait in pending:
            wait.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for name, server in self.servers.items():
            if server.state != "up":
                log.warning("MCP server %s is not up yet: %s", name, server.error or server.state)

    async def close(self) -> None:
        """Disconnect every server (stdio servers are stopped)."""
        results = await asyncio.gather(
            *(s.close() for s in self.servers.values()), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise ExceptionGroup("MCP servers did not close cleanly", failures)

    def health(self) -> dict[str, Any]:
        return {name: server.health() for name, server in self.servers.items()}

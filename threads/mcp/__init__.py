"""MCP tool servers: connected per configuration, their tools offered to the agents that name them."""

from threads.mcp.connection import McpServer
from threads.mcp.hub import McpHub

__all__ = ["McpHub", "McpServer"]

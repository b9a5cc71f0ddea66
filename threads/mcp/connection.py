"""One MCP server: connected, its tools published, and replaced when it drops.

A supervisor task owns the connection (the SDK's client lives in one task
from enter to exit). Its states:

    starting ──► up ──► down ──(backoff)──► starting … ──► stopped

*up* publishes the server's tools to the registry; leaving *up* withdraws
them. The connection is lost when its stream ends (a stdio server exited),
when a call finds it closed, or when the periodic probe (a fresh tool list)
fails; each failure waits ``reconnect_min_seconds``, doubling up to
``reconnect_max_seconds``, before the next attempt. A call made while the
server is not up, or cut short by its loss, is a tool error that says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any, Literal

import httpx2
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Implementation
from mcp_types import Tool as McpTool
from pydantic import ValidationError

from config.tools import McpServerConfig
from threads.agent.tools import AnyArgs, Tool, ToolContext, ToolOutput
from threads.mcp.names import label, wire_names
from threads.mcp.results import to_output
from threads.mcp.transport import ConfigMissing, StderrLog, open_transport
from threads.tools.images import ImageStore

log = logging.getLogger(__name__)

State = Literal["starting", "up", "down", "stopped"]
Publish = Callable[[str, list[Tool[Any]]], None]
"""Replace the tools of a group (``mcp:<server>``) in the registry."""

CLIENT_INFO = Implementation(name="chat-gateway", version="0.1.0")
_MAX_PAGES = 100
_CLOSE_SECONDS = 10.0


def describe(exc: BaseException) -> str:
    """One line for a failure to connect or to stay connected."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(describe(e) for e in exc.exceptions))
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return "the connection closed"
        return f"the server answered an error: {exc.message}"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, httpx2.HTTPError):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _schema(tool: McpTool) -> dict[str, Any]:
    schema = dict(tool.input_schema)
    schema.pop("$schema", None)
    schema.setdefault("type", "object")
    if schema.get("type") == "object":
        schema.setdefault("properties", {})
    return schema


def _signature(tools: list[McpTool]) -> list[tuple[str, str, Any]]:
    return [(t.name, t.description or "", t.input_schema) for t in tools]


class McpServer:
    """The connection to one configured MCP server, kept up by its own task."""

    def __init__(
        self,
        name: str,
        settings: McpServerConfig,
        *,
        publish: Publish,
        stderr: StderrLog,
        images: ImageStore | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.group = f"mcp:{name}"
        self.state: State = "starting"
        self.error = ""
        self.since = time.time()
        self.failures = 0
        self.next_attempt: float | None = None
        self.tools: list[str] = []
        self._publish = publish
        self._stderr = stderr
        self._images = images
        self._env = env
        self._client: Client | None = None
        self._lost = asyncio.Event()
        self._lost_reason = ""
        self._closing = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._was_up = False

    # -- lifetime

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp server {self.name}")

    async def close(self) -> None:
        """Disconnect (stopping a stdio server) and withdraw the tools."""
        self._closing.set()
        self._lost.set()
        task = self._task
        if task is None:
            return
        if self.state == "starting":
            # A start may take connect_timeout_seconds; closing does not wait for it.
            task.cancel()
        done, _ = await asyncio.wait({task}, timeout=_CLOSE_SECONDS)
        if not done:
            log.warning(
                "MCP server %s did not disconnect in %g s; canceled", self.name, _CLOSE_SECONDS
            )
            task.cancel()
            await asyncio.wait({task})
        if self.state != "stopped":
            self._set("stopped")
        if not task.cancelled() and (failure := task.exception()) is not None:
            raise failure

    async def wait_for(self, *states: State) -> None:
        """Return once the server is in one of ``states``."""
        while self.state not in states:
            changed = self._changed
            await changed.wait()

    def _set(self, state: State, error: str = "") -> None:
        self.state, self.error, self.since = state, error, time.time()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._lost_reason = reason
            self._lost.set()

    # -- the supervisor

    async def _supervise(self) -> None:
        delay = self.settings.reconnect_min_seconds
        while not self._closing.is_set():
            self._set("starting", self.error)
            self._was_up = False
            try:
                await self._connect_and_serve()
                reason = self._lost_reason or "the connection closed"
            except Exception as exc:
                reason = self._explain(exc)
                log.debug("MCP server %s failed", self.name, exc_info=True)
            finally:
                self._client = None
                self._withdraw()
            if self._closing.is_set():
                break
            if self._was_up:
                delay = self.settings.reconnect_min_seconds
            self.failures += 1
            log.warning("MCP server %s is down: %s; retrying in %g s", self.name, reason, delay)
            self.next_attempt = time.time() + delay
            self._set("down", reason)
            try:
                async with asyncio.timeout(delay):
                    await self._closing.wait()
            except TimeoutError:
                pass
            self.next_attempt = None
            delay = min(delay * 2, self.settings.reconnect_max_seconds)
        self._set("stopped")

    def _explain(self, exc: Exception) -> str:
        if isinstance(exc, ConfigMissing):
            return str(exc)
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.settings.connect_timeout_seconds:g} s"
        elif isinstance(exc, FileNotFoundError) and self.settings.command:
            reason = f"cannot start {self.settings.command!r}: no such program"
        else:
            reason = describe(exc)
        said = self._stderr.last_line() if self.settings.command else ""
        return f"{reason} (its stderr: {said})" if said else reason

    async def _connect_and_serve(self) -> None:
        """Connect, publish the tools, and wait for the connection's loss."""
        self._lost.clear()
        self._lost_reason = ""
        if self._closing.is_set():
            self._lost.set()  # closed between the loop's check and here: serve nothing
        settings = self.settings
        async with AsyncExitStack() as stack:
            async with asyncio.timeout(settings.connect_timeout_seconds):
                transport = await open_transport(
                    self.name,
                    settings,
                    stack,
                    stderr=self._stderr,
                    on_end=lambda: self._lose(self._ended()),
                    env=self._env,
                )
                client = Client(
                    transport,
                    read_timeout_seconds=settings.connect_timeout_seconds,
                    client_info=CLIENT_INFO,
                    cache=None,
                )
                await stack.enter_async_context(client)
                listing = await self._list(client)
            self._client = client
            self._offer(listing)
            self.failures = 0
            self._was_up = True
            self._set("up")
            log.info("MCP server %s is up with %d tools", self.name, len(listing))
            await self._serve(client, listing)

    def _ended(self) -> str:
        if self.settings.command:
            said = self._stderr.last_line()
            return "the server exited" + (f" (its stderr: {said})" if said else "")
        return "the server closed the connection"

    async def _serve(self, client: Client, listing: list[McpTool]) -> None:
        """Wait for the loss of the connection, probing it every ``probe_seconds``."""
        probe = self.settings.probe_seconds
        while True:
            if not probe:
                await self._lost.wait()
                return
            try:
                async with asyncio.timeout(probe):
                    await self._lost.wait()
                return
            except TimeoutError:
                pass
            try:
                async with asyncio.timeout(self.settings.connect_timeout_seconds):
                    fresh = await self._list(client)
            except Exception as exc:
                self._lose(f"it stopped answering: {describe(exc)}")
                return
            if _signature(fresh) != _signature(listing):
                listing = fresh
                self._offer(listing)

    async def _list(self, client: Client) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    # -- tools

    def _offer(self, listing: list[McpTool]) -> None:
        names = wire_names(self.name, [t.name for t in listing])
        tools: list[Tool[Any]] = []
        for item in listing:
            shown = label(self.name, item.name)
            description = (item.description or item.title or item.name).strip()
            tools.append(
                Tool(
                    name=names[item.name],
                    label=shown,
                    description=f"{description} (tool {item.name} of MCP server {self.name})",
                    args=AnyArgs,
                    schema=_schema(item),
                    handler=self._handler(item.name, shown),
                    timeout=self.settings.timeout_seconds + 5,
                    group=self.group,
                    opt_in=True,
                    requires_approval=self.settings.requires_approval,
                )
            )
        self.tools = [t.shown for t in tools]
        self._publish(self.group, tools)

    def _withdraw(self) -> None:
        if self.tools:
            self.tools = []
            self._publish(self.group, [])

    def _handler(self, tool: str, shown: str) -> Callable[[AnyArgs, ToolContext], Any]:
        async def handle(args: AnyArgs, ctx: ToolContext) -> ToolOutput:
            return await self.call(tool, shown, args.model_dump())

        return handle

    async def call(self, tool: str, shown: str, arguments: dict[str, Any]) -> ToolOutput:
        """Call ``tool`` on the server; every failure is an output the model can read."""
        client = self._client
        if client is None or self.state != "up":
            why = f" ({self.error})" if self.error else ""
            return ToolOutput(
                content=f"{shown} is not available: MCP server {self.name} is {self.state}{why}; "
                "its tools are withdrawn until it is back. Do without it, or try again later.",
                is_error=True,
            )
        timeout = self.settings.timeout_seconds
        try:
            result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return ToolOutput(
                    content=f"{shown} timed out after {timeout:g} s "
                    f"(mcp.servers.{self.name}.timeout_seconds)",
                    is_error=True,
                )
            if exc.code == CONNECTION_CLOSED:
                self._lose("the connection closed during a call")
                return ToolOutput(
                    content=f"{shown} failed: MCP server {self.name} went away during the call; "
                    "it is being reconnected. Do without it, or try again later.",
                    is_error=True,
                )
            return ToolOutput(content=f"{shown} failed: {exc.message}", is_error=True)
        except ValidationError as exc:
            return ToolOutput(
                content=f"{shown} failed: the server's answer was malformed ({exc.error_count()} "
                "errors)",
                is_error=True,
            )
        return await to_output(result, shown, self._images)

    # -- reports

    def health(self) -> dict[str, Any]:
        settings = self.settings
        out: dict[str, Any] = {
            "transport": settings.transport,
            "target": settings.command if settings.command else settings.safe_url,
            "state": self.state,
            "since": datetime.fromtimestamp(self.since, UTC).isoformat(),
            "tools": list(self.tools),
        }
        if self.error:
            out["error"] = self.error
        if self.failures:
            out["failures"] = self.failures
        if self.next_attempt is not None:
            out["next_attempt"] = datetime.fromtimestamp(self.next_attempt, UTC).isoformat()
        return out

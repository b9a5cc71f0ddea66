"""An MCP hub against the test server, over stdio or streamable HTTP, and calls through a registry."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from config.tools import McpConfig
from threads.agent.tools import ToolContext, ToolOutput, ToolRegistry
from threads.mcp import McpHub, McpServer
from threads.messages import ToolCallPart
from threads.tools.images import ImageStore

SCRIPT = str(Path(__file__).with_name("server_script.py"))
FAST = {"reconnect_min_seconds": 0.05, "reconnect_max_seconds": 0.2, "probe_seconds": 0}


def stdio_settings(*extra: str, **settings: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [SCRIPT, "stdio", *extra], **FAST, **settings}


class Rig:
    """A started hub with one server, ``exp``, and its registry."""

    def __init__(self, hub: McpHub, registry: ToolRegistry, images: ImageStore) -> None:
        self.hub = hub
        self.registry = registry
        self.images = images
        self.server: McpServer = hub.servers["exp"]
        self._remembered: dict[str, Any] = {}

    def offered(self) -> dict[str, str]:
        """The label → wire name of every tool offered now."""
        tools, _ = self.registry.select(["exp.*"])
        return {t.shown: name for name, t in tools.items()}

    async def call(self, tool: str, **args: Any) -> ToolOutput:
        """Call ``exp.<tool>`` as a turn that selected it earlier would (even if withdrawn since)."""
        wire = f"exp__{tool}"
        known = self.registry.get(wire)
        tools = {wire: known} if known is not None else self._remembered
        _, output = await self.registry.call(
            tools,
            ToolCallPart(id="c1", name=wire, args=args),
            ToolContext(run=None, key="cli", agent="default"),  # type: ignore[arg-type]
        )
        return output

    def remember(self) -> None:
        """Keep the tools selected now, as a turn in flight holds them."""
        self._remembered = dict(self.registry.select(["exp.*"])[0])


@asynccontextmanager
async def running(
    tmp_path: Path, settings: dict[str, Any], *, start_wait: float = 30
) -> AsyncIterator[Rig]:
    registry = ToolRegistry()
    images = ImageStore(tmp_path / "media")
    hub = McpHub(
        McpConfig.model_validate({"servers": {"exp": settings}, "start_wait_seconds": start_wait}),
        registry,
        log_dir=tmp_path / "logs",
        images=images,
    )
    await hub.start()
    try:
        yield Rig(hub, registry, images)
    finally:
        await hub.close()


class HttpServer:
    """The test server over streamable HTTP in a subprocess, on a loopback port kept across restarts."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = 0
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "http", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    server = HttpServer(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def until(condition: Any, seconds: float = 20) -> None:
    """Poll ``condition()`` until it holds, failing after ``seconds``."""
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)

"""Several real ``gateway run`` processes on one Redis, for tests and benchmarks.

A :class:`Cluster` writes one configuration per node (its own data
directory and HTTP port, the same ``redis://`` store under a key prefix of
its own, the same Telegram bot in webhook mode or the OpenAI-compatible API,
the same model provider),
starts the processes, and stops or kills them. A :class:`Balancer` stands
where a load balancer stands in front of the gateways: Telegram (the fake
Bot API) posts every update to it, and it passes each one on to a node
chosen at random — so a chat's messages reach different processes, and the
gateways must route them to the key's owner.

Everything listens on loopback; the processes' output goes to a log file
per node (``<root>/<node>.log``), which a failing test can show.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.control import ask_at
from gateway.testing.ports import free_port

READY = b"gateway running"
SECRET = "cluster-webhook-secret"


def toml_value(value: Any) -> str:
    """A TOML value for a str, number, bool or flat list (enough for these configs)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return orjson.dumps(str(value)).decode()


def toml_text(tables: dict[str, dict[str, Any]]) -> str:
    """A TOML document of dotted tables, each a flat mapping."""
    lines: list[str] = []
    for name, table in tables.items():
        if name:
            lines.append(f"[{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
        lines.append("")
    return "\n".join(lines)


class Balancer:
    """Passes each POSTed webhook update to one of the nodes, at random; counts where."""

    def __init__(self) -> None:
        self.backends: dict[str, str] = {}
        self.sent: Counter[str] = Counter()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/telegram/default"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/telegram/default", self._pass_on)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _pass_on(self, request: web.Request) -> web.Response:
        """Forward to a live node; one that refuses the connection is skipped (it died)."""
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower().startswith("x-telegram")}
        headers["Content-Type"] = "application/json"
        assert self._session is not None
        order = list(self.backends.items())
        random.shuffle(order)
        for node, base in order:
            try:
                async with self._session.post(
                    f"{base}/telegram/default", data=body, headers=headers
                ) as answer:
                    if answer.status < 500:
                        self.sent[node] += 1
                        return web.Response(status=answer.status, text=await answer.text())
            except aiohttp.ClientError:
                continue
        return web.Response(status=502, text="no gateway answered")


@dataclass
class Node:
    """One gateway process: its name, its files, and the process once started."""

    name: str
    root: Path
    port: int
    process: asyncio.subprocess.Process | None = None
    log: Any = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.root / self.name

    @property
    def config_path(self) -> Path:
        return self.root / f"{self.name}.toml"

    @property
    def log_path(self) -> Path:
        return self.root / f"{self.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def ask(self, op: str, **fields: Any) -> dict[str, Any] | None:
        """The node's answer to a control operation; None when it does not listen."""
        return await ask_at(self.data_dir / "gateway.sock", op, **fields)


class Cluster:
    """N gateway processes sharing a Redis store; see the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        store_url: str,
        model_url: str,
        telegram: dict[str, Any] | None = None,
        api: bool = False,
        lease_seconds: float,
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.root = root
        self.store_url = store_url
        self.telegram = telegram
        self.api = api
        self.model_url = model_url
        self.lease_seconds = lease_seconds
        self.extra = extra or {}
        self.nodes: dict[str, Node] = {}

    def config(self, node: Node) -> str:
        tables: dict[str, dict[str, Any]] = {
            "": {"data_dir": str(node.data_dir), "node_id": node.name},
            "store": {"url": self.store_url},
            "cluster": {"lease_seconds": self.lease_seconds},
            "http": {"port": node.port},
            "models": {"default": "fake/model"},
            "models.providers.fake": {"kind": "openai", "base_url": self.model_url,
                                      "api_key": "sk-fake", "max_retries": 0},
            "channels.cli": {"enabled": False},
            "channels.web": {"enabled": False},
            "channels.api": {"enabled": self.api},
        }  # fmt: skip
        if self.telegram is not None:
            tables["channels.telegram"] = self.telegram
            tables["channels.telegram.access"] = {"dm_policy": "open"}
        for name, table in self.extra.items():
            tables[name] = {**tables.get(name, {}), **table}
        return toml_text(tables)

    async def start(self, name: str, *, timeout: float = 60.0) -> Node:
        """Start node ``name`` (a port of its own) and wait until it says it runs."""
        node = self.nodes.get(name) or Node(name=name, root=self.root, port=free_port())
        self.nodes[name] = node
        node.config_path.write_text(self.config(node))
        node.log = node.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        node.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "run", "--config", str(node.config_path),
            stdin=asyncio.subprocess.DEVNULL, stdout=node.log, stderr=node.log, env=env,
            cwd=self.root,
        )  # fmt: skip
        await self.wait_output(node, READY, timeout=timeout)
        return node

    async def wait_output(self, node: Node, text: bytes, *, timeout: float = 60.0) -> None:
        """Wait (with a deadline) until the node's log holds ``text``; its log if it exits."""
        async with asyncio.timeout(timeout):
            while text not in node.log_path.read_bytes():
                if node.process is not None and node.process.returncode is not None:
                    raise RuntimeError(f"node {node.name} exited:\n{node.output()}")
                await asyncio.sleep(0.05)

    async def kill(self, name: str) -> None:
        """SIGKILL the node (no cleanup: its leases are left to lapse) and reap it."""
        node = self.nodes[name]
        assert node.process is not None
        node.process.send_signal(signal.SIGKILL)
        await node.process.wait()
        self._close_log(node)

    async def stop(self, name: str, *, timeout: float = 60.0) -> int:
        """SIGTERM the node and wait for it to exit; its exit code."""
        node = self.nodes[name]
        assert node.process is not None
        if node.process.returncode is None:
            node.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(timeout):
            code = await node.process.wait()
        self._close_log(node)
        return code

    @staticmethod
    def _close_log(node: Node) -> None:
        if node.log is not None:
            node.log.close()
            node.log = None

    async def close(self) -> None:
        """Stop every node still running (SIGKILL past the deadline)."""
        for name, node in self.nodes.items():
            if node.process is not None and node.process.returncode is None:
                try:
                    await self.stop(name, timeout=30)
                except TimeoutError:
                    await self.kill(name)
            self._close_log(node)

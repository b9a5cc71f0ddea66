"""``gateway run`` as a real process: configured, started, stopped, killed, restarted.

:func:`write_config` writes a ``gateway.toml`` for a gateway on a fake model
server, with its web chat on a free port and everything else it could listen
on turned off. :class:`GatewayRun` starts ``python -m gateway run`` on it
(``fault`` arms a fault point: the process SIGKILLs itself there, see
:mod:`threads.faults`), waits for the banner and reads the web chat's address
from it. stderr goes to a log file, so a failure can show what the gateway said.
Nothing here sleeps: every wait is on the process or its output, with a deadline.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import redis.asyncio as aioredis

from channels.testing.web_client import WebChat
from config.loading import ENV_FAULT, ENV_PREFIX
from gateway.control import connected
from gateway.errors import GatewayError

BANNER_END = "stop with Ctrl-C"
WEB_LINE = "web chat:"
STORES = ("jsonl", "sqlite", "redis")


async def delete_keys(redis_url: str, prefix: str) -> None:
    """Delete the keys under ``prefix`` in the Redis database at ``redis_url``, and only those.

    Gateways that shared a Redis database under prefixes of their own are
    cleaned up after this way; nothing flushes a database others may be using.
    """
    client = aioredis.Redis.from_url(redis_url)
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=f"{prefix}*", count=500):
            batch.append(key)
            if len(batch) >= 500:
                await client.unlink(*batch)
                batch.clear()
        if batch:
            await client.unlink(*batch)
    finally:
        await client.aclose()


class StartError(GatewayError):
    """``gateway run`` ended before it printed its banner (a start that failed)."""


def store_url(kind: str, data: Path, *, redis: str = "") -> str:
    """The session store URL of ``kind`` (one of :data:`STORES`) under ``data``.

    ``redis`` is the Redis database URL, with a ``cron_prefix`` of its own (for redis only).
    """
    if kind == "jsonl":
        return f"jsonl://{data / 'sessions'}"
    if kind == "sqlite":
        return f"sqlite:///{data / 'sessions.db'}"
    if kind == "redis":
        return redis
    raise ValueError(f"unknown store kind {kind!r}; one of {', '.join(STORES)}")


def write_config(root: Path, *, store: str, model_url: str, extra: str = "") -> Path:
    """``root/gateway.toml``: data in ``root/data``, sessions in ``store``, every agent on
    the OpenAI-compatible model at ``model_url`` (``…/v1``), the web chat on a free port.

    Agents see every session (so ``sessions_send`` reaches another chat), agents
    reply back once, cron and the terminal channel are off, and gateway state
    stays in the data directory whatever the store. ``extra`` is appended as is.
    """
    data = root / "data"
    path = root / "gateway.toml"
    path.write_text(
        f"""data_dir = "{data}"

[store]
url = "{store}"
state_url = "sqlite:///{data / "gateway.db"}"

[models]
default = "fake/fake-model"

[models.providers.fake]
base_url = "{model_url}"
api_key = "not-a-secret"
max_retries = 0

[agents.default]
session_tools_visibility = "all"

[session.agent_to_agent]
max_ping_pong_turns = 1

[http]
port = 0

[channels.cli]
enabled = false

[cron]
enabled = false
{extra}"""
    )
    return path


class GatewayRun:
    """One ``gateway run`` process on ``config``; ``fault`` arms a fault point ("" none).

    Use ``await start()``, then :attr:`web_url`; end it with :meth:`stop`,
    :meth:`kill`, or wait for a fault to end it with :meth:`wait`.
    """

    def __init__(self, config: Path, *, fault: str = "", log: Path | None = None) -> None:
        self.config = config
        self.data = config.parent / "data"  # as write_config lays it out
        self.fault = fault
        self.log = log or config.with_name(f"gateway-{fault or 'run'}.log")
        self.web_url = ""
        self.banner: list[str] = []
        self._process: asyncio.subprocess.Process | None = None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    async def start(self, within: float = 60.0) -> None:
        """Start and wait for the banner; :class:`StartError` (with the log) when it ends first."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
        if self.fault:
            env[ENV_FAULT] = self.fault
        with self.log.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway", "run", "--config", str(self.config),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
                cwd=self.config.parent, env=env, start_new_session=True,
            )  # fmt: skip
        stdout = self._process.stdout
        assert stdout is not None
        try:
            async with asyncio.timeout(within):
                while True:
                    line = (await stdout.readline()).decode(errors="replace")
                    if not line:
                        code = await self._process.wait()
                        raise StartError(
                            f"gateway run exited {code} before it started:\n{self.tail()}"
                        )
                    self.banner.append(line.rstrip("\n"))
                    if WEB_LINE in line:
                        self.web_url = line.split(WEB_LINE, 1)[1].strip()
                    if BANNER_END in line:
                        return
        except TimeoutError:
            await self.kill()
            raise StartError(
                f"gateway run did not start within {within:g} s:\n{self.tail()}"
            ) from None

    async def wait(self, within: float = 60.0) -> int:
        """The exit code once the process has ended (``-9``: killed), within ``within`` seconds."""
        assert self._process is not None, "not started"
        try:
            async with asyncio.timeout(within):
                return await self._process.wait()
        except TimeoutError:
            raise TimeoutError(
                f"gateway run still runs after {within:g} s:\n{self.tail()}"
            ) from None

    async def stop(self, within: float = 60.0) -> int:
        """SIGTERM, as a supervisor stops it, and its exit code."""
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
        return await self.wait(within)

    async def kill(self) -> None:
        """SIGKILL it if it still runs, and reap it."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()

    async def idle(self, within: float = 60.0) -> None:
        """Return once no turn runs or waits in the gateway (asked on its control socket)."""
        async with asyncio.timeout(within), connected(self.data / "gateway.sock") as control:
            if control is None:
                raise StartError(f"gateway run has no control socket in {self.data}")
            await control.call("idle")

    def tail(self, lines: int = 40) -> str:
        """The end of what the process wrote to stderr."""
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def settle(run: GatewayRun, chats: Sequence[WebChat], *, quiet_rounds: int = 2) -> None:
    """Return once the gateway has nothing left to do and each chat has read all it was sent.

    A round waits for the gateway to be idle, then for a barrier on every chat.
    Work a finished turn sets going (a parent woken by its child, the next
    step of an agent-to-agent exchange) starts another turn, which the next
    round waits for; so it ends after ``quiet_rounds`` rounds in a row that
    brought no frame.
    """
    quiet = 0
    while quiet < quiet_rounds:
        before = sum(len(chat.frames) for chat in chats)
        await run.idle()
        for chat in chats:
            await chat.barrier()
        barriers = len(chats)
        quiet = quiet + 1 if sum(len(chat.frames) for chat in chats) == before + barriers else 0

"""A Redis server of a test's own, on a free loopback port, that the test may stop and start.

Outage tests must not touch the shared server on 6379. This one keeps its
data in an append-only file fsynced on every write, so a SIGKILL and a start
on the same port bring back everything it had acknowledged: a store outage,
not a data loss. Without the ``redis-server`` binary the test is skipped —
except in CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.testing.ports import free_port

START_WITHIN = 20.0


class PrivateRedis:
    """One ``redis-server`` process at a time, always on the same port and data directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start the server (again) and return once it answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        client = aioredis.Redis.from_url(self.url)
        try:
            async with asyncio.timeout(START_WITHIN):
                while True:
                    try:
                        if await client.ping():
                            return
                    except (RedisError, OSError):
                        pass
                    if self._proc.returncode is not None:
                        raise RuntimeError(f"redis-server exited with {self._proc.returncode}")
                    await asyncio.sleep(0.02)  # polling for the server, with a deadline
        finally:
            await client.aclose()

    async def kill(self) -> None:
        """SIGKILL the server: every client call fails until :meth:`start`."""
        if self._proc is None or self._proc.returncode is not None:
            return
        self._proc.send_signal(signal.SIGKILL)
        await self._proc.wait()


class LostReply:
    """A TCP hop in front of a Redis server that can lose the reply to one script call.

    Armed with :meth:`lose_next_reply`, the next ``EVALSHA`` a client sends
    reaches the server, which runs it; its reply never comes back — the
    client's connection is cut instead, as a network fault would. The write
    happened, and the client was told it failed.
    """

    def __init__(self, port: int) -> None:
        self._target = port
        self._armed = False
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next_reply(self) -> None:
        self._armed = True

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        cut = asyncio.Event()
        task = asyncio.ensure_future(self._carry(reader, writer, up_reader, up_writer, cut))
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)

    async def _carry(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        cut: asyncio.Event,
    ) -> None:
        """Both directions of one connection, until either side ends or a reply is lost."""
        try:
            pumps = [
                asyncio.ensure_future(self._upstream(reader, up_writer, cut)),
                asyncio.ensure_future(self._downstream(up_reader, writer, cut)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            for end in (writer, up_writer):
                end.close()
                with contextlib.suppress(OSError):
                    await end.wait_closed()

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        while chunk := await reader.read(65536):
            if self._armed and b"EVALSHA" in chunk.upper():
                self._armed = False
                cut.set()
            writer.write(chunk)
            await writer.drain()

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        while chunk := await reader.read(65536):
            if cut.is_set():
                return  # the reply is lost with the connection
            writer.write(chunk)
            await writer.drain()


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI requires it")
        pytest.skip("redis-server is not installed (set CI=1 to make this a failure)")
    server = PrivateRedis(tmp_path / "redis")
    await server.start()
    try:
        yield server
    finally:
        await server.kill()

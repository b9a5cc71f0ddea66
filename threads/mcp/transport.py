"""The transports to one MCP server, built from its configuration, each watched for its end.

A stdio server is a subprocess (its stderr appended to a log file of its
own); a URL server is reached over streamable HTTP with the configured
headers. ``${NAME}`` in ``env`` and ``headers`` is filled from the gateway's
environment here, at connect time, so the secrets never sit in the config.

The SDK's sessions notice a closed stream only when a request is waiting on
it, so every transport's read stream is wrapped: when it ends (the server
exited, or hung up), ``on_end`` is called and the connection can be
replaced at once rather than at the next call.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, cast

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from config.tools import McpServerConfig, env_references, fill_env
from threads.store.private import open_private

MAX_LOG_BYTES = 1_000_000
# The SDK's read timeout for an HTTP server's responses: long, as a response
# stream may stay open while a tool works (each call has its own timeout).
_READ_SECONDS = 300.0


class ConfigMissing(LookupError):
    """A ``${NAME}`` the server's settings name is not set in the environment."""


def filled(values: Mapping[str, str], where: str, env: Mapping[str, str]) -> dict[str, str]:
    """``values`` with every ``${NAME}`` filled from ``env``; :class:`ConfigMissing` names a gap."""
    out = {}
    for key, value in values.items():
        missing = [name for name in env_references(value) if name not in env]
        if missing:
            raise ConfigMissing(f"{where}.{key} names ${{{missing[0]}}}, which is not set")
        out[key] = fill_env(value, env)
    return out


class StderrLog:
    """The file a stdio server's stderr goes to, and what it wrote since the last start."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._start = 0

    def open(self) -> TextIO:
        fd = open_private(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        if os.fstat(fd).st_size > MAX_LOG_BYTES:
            os.ftruncate(fd, 0)
        self._start = os.fstat(fd).st_size
        return os.fdopen(fd, "a", encoding="utf-8")

    def last_line(self) -> str:
        """The last line the server wrote to stderr since it was started ('' if none)."""
        try:
            fd = open_private(self.path, os.O_RDONLY)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(self._start, size - 4096)
            handle.seek(start)
            tail = handle.read().decode("utf-8", errors="replace")
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""


class _WatchedRead:
    """A read stream that calls ``on_end`` once when it ends; everything else passes through."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    def _ended(self) -> None:
        on_end, self._on_end = self._on_end, lambda: None
        on_end()

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except Exception:
            self._ended()
            raise

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._ended()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result

    def __getattr__(self, name: str) -> Any:
        # The SDK reads ``last_context`` off the streams that carry one.
        return getattr(self._inner, name)


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[TransportStreams], on_end: Callable[[], None]
) -> AsyncIterator[TransportStreams]:
    async with transport as (read, write):
        yield cast(TransportStreams, (_WatchedRead(read, on_end), write))


async def open_transport(
    name: str,
    settings: McpServerConfig,
    stack: AsyncExitStack,
    *,
    stderr: StderrLog,
    on_end: Callable[[], None],
    env: Mapping[str, str] | None = None,
) -> AbstractAsyncContextManager[TransportStreams]:
    """The transport to server ``name``; what it opens (a log file, an HTTP client) closes with ``stack``."""
    source = os.environ if env is None else env
    where = f"mcp.servers.{name}"
    if settings.command:
        server_env = filled(settings.env, f"{where}.env", source)
        errlog = stderr.open()
        stack.callback(errlog.close)
        params = StdioServerParameters(
            command=settings.command,
            args=list(settings.args),
            env=server_env or None,
            cwd=settings.cwd,
        )
        return _watched(stdio_client(params, errlog=errlog), on_end)
    headers = filled(settings.headers, f"{where}.headers", source)
    timeout = httpx2.Timeout(
        settings.connect_timeout_seconds, read=max(_READ_SECONDS, settings.timeout_seconds)
    )
    client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=timeout))
    return _watched(streamable_http_client(settings.url, http_client=client), on_end)

"""Web chat test helpers: a browser-like HTTP client and a chat opened the way the page opens it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.web import AppRunner, TCPSite

from channels.web import WebChannel
from gateway.app import Gateway
from tests.gateway.conftest import make_config


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(make_config(tmp_path), control=False) as gw:
        yield gw


@pytest.fixture
def web(gateway: Gateway) -> WebChannel:
    assert gateway.web is not None
    return gateway.web


@asynccontextmanager
async def served(channel: WebChannel) -> AsyncIterator[WebChannel]:
    """The chat alone on its own loopback server (the gateway serves it on its HTTP server)."""
    runner = AppRunner(channel.app(), access_log=None)
    await runner.setup()
    await TCPSite(runner, "127.0.0.1", 0).start()
    channel.port = int(runner.addresses[0][1])
    try:
        yield channel
    finally:
        await runner.cleanup()


def browser() -> aiohttp.ClientSession:
    """An HTTP client that keeps cookies for 127.0.0.1 as a browser does (one per person)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


def origin_of(web: WebChannel) -> str:
    """The ``Origin`` the chat's own page sends."""
    return f"http://{web.host}:{web.port}"


async def receive(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    """The next frame of ``kind``, skipping others."""
    while True:
        message = await ws.receive_json(timeout=10)
        if message["type"] == kind:
            return dict(message)


async def frames_until_reply(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    """Every frame up to and including the next reply."""
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "reply":
        frames.append(dict(await ws.receive_json(timeout=10)))
    return frames


@asynccontextmanager
async def open_chat(
    http: aiohttp.ClientSession, web: WebChannel, *, load_page: bool = True
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, str]]:
    """Load the page (it sets the chat cookie) and open its socket; yields (socket, chat id)."""
    if load_page:
        async with http.get(web.url) as page:
            assert page.status == 200
    async with http.ws_connect(f"{web.url}ws", origin=origin_of(web)) as ws:
        hello = await receive(ws, "hello")
        yield ws, str(hello["chat"])

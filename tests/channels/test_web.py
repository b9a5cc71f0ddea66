"""The web chat: a browser's WebSocket through the whole gateway and back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.web import MAX_TEXT
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from threads.sinks import OutboundMessage


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with Gateway(make_config(tmp_path)) as gw:
        yield gw


async def receive(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        message = await ws.receive_json(timeout=10)
        if message["type"] == kind:
            return dict(message)


async def test_the_page_is_served(gateway: Gateway) -> None:
    assert gateway.web is not None
    async with aiohttp.ClientSession() as http, http.get(gateway.web.url) as response:
        assert response.status == 200
        assert "<title>Gateway chat</title>" in await response.text()


async def test_a_web_message_is_answered_over_the_websocket(gateway: Gateway) -> None:
    assert gateway.web is not None
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{gateway.web.url}ws?chat=t1") as ws,
    ):
        assert (await receive(ws, "hello"))["chat"] == "t1"
        await ws.send_json({"text": "hello from the browser"})
        reply = await receive(ws, "reply")
    assert reply["text"].endswith("hello from the browser")
    assert await gateway.manager.session_exists("web:t1")


async def test_a_malformed_message_gets_an_error_and_the_chat_goes_on(gateway: Gateway) -> None:
    assert gateway.web is not None
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{gateway.web.url}ws?chat=t2") as ws,
    ):
        await ws.send_str("not json")
        assert "must be JSON" in (await receive(ws, "error"))["error"]
        await ws.send_json({"text": "x" * (MAX_TEXT + 1)})
        assert f"the limit is {MAX_TEXT}" in (await receive(ws, "error"))["error"]
        await ws.send_json({"text": "still here"})
        assert (await receive(ws, "reply"))["text"].endswith("still here")
    assert not await gateway.manager.session_exists("web:t3")


async def test_a_bad_chat_id_is_refused(gateway: Gateway) -> None:
    assert gateway.web is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{gateway.web.url}ws?chat=../x") as response,
    ):
        assert response.status == 400


async def test_a_reply_to_a_closed_page_waits_for_it_to_reconnect(gateway: Gateway) -> None:
    assert gateway.web is not None
    delivered = await gateway.web.deliver("t4", OutboundMessage(text="later"))
    assert "queued" in delivered.delivered_to
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{gateway.web.url}ws?chat=t4") as ws,
    ):
        assert (await receive(ws, "reply"))["text"] == "later"

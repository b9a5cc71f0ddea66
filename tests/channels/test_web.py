"""The web chat: a browser's WebSocket through the whole gateway and back."""

from __future__ import annotations

import socket
from pathlib import Path

from channels.web import MAX_TEXT, WebChannel
from gateway.app import Gateway
from tests.channels.conftest import browser, open_chat, receive
from tests.gateway.conftest import make_config
from threads.sinks import OutboundMessage


async def test_the_page_is_served(web: WebChannel) -> None:
    async with browser() as http, http.get(web.url) as response:
        assert response.status == 200
        assert "<title>Gateway chat</title>" in await response.text()


async def test_the_pages_scripts_and_style_are_served(web: WebChannel) -> None:
    async with browser() as http:
        async with http.get(f"{web.url}chat/chat.js") as response:
            assert response.status == 200
            assert response.content_type == "text/javascript"
            assert "new WebSocket(" in await response.text()
        for name in ("view.js", "composer.js"):
            async with http.get(f"{web.url}chat/{name}") as response:
                assert response.content_type == "text/javascript"
        async with http.get(f"{web.url}chat/chat.css") as response:
            assert response.content_type == "text/css"
        async with http.get(f"{web.url}chat/nothing.js") as response:
            assert response.status == 404


async def test_a_web_message_is_answered_over_the_websocket(
    gateway: Gateway, web: WebChannel
) -> None:
    async with browser() as http, open_chat(http, web) as (ws, chat):
        await ws.send_json({"text": "hello from the browser"})
        reply = await receive(ws, "reply")
    assert reply["text"].endswith("hello from the browser")
    assert await gateway.manager.session_exists(f"web:{chat}")


async def test_frames_go_out_as_utf_8_text_without_escapes(web: WebChannel) -> None:
    async with browser() as http, open_chat(http, web) as (ws, _):
        await ws.send_json({"text": "héllo wörld ✓"})
        while True:
            raw = (await ws.receive(timeout=10)).data
            if '"type":"reply"' in raw:
                break
    # orjson writes what the page shows as it is; the stdlib's json would write \u00e9.
    assert "héllo wörld ✓" in raw
    assert "\\u" not in raw


async def test_a_malformed_message_gets_an_error_and_the_chat_goes_on(web: WebChannel) -> None:
    async with browser() as http, open_chat(http, web) as (ws, _):
        await ws.send_str("not json")
        assert "must be JSON" in (await receive(ws, "error"))["error"]
        await ws.send_json({"text": "x" * (MAX_TEXT + 1)})
        assert f"the limit is {MAX_TEXT}" in (await receive(ws, "error"))["error"]
        await ws.send_json({"text": "still here"})
        assert (await receive(ws, "reply"))["text"].endswith("still here")


async def test_each_browser_gets_a_chat_of_its_own(web: WebChannel) -> None:
    async with browser() as alice, browser() as bob:
        async with open_chat(alice, web) as (_, alices), open_chat(bob, web) as (_, bobs):
            assert alices != bobs
        async with open_chat(alice, web) as (_, again):
            assert again == alices


async def test_a_client_that_opens_the_socket_without_the_page_keeps_its_chat(
    web: WebChannel,
) -> None:
    async with browser() as http:
        async with open_chat(http, web, load_page=False) as (_, chat):
            pass
        async with open_chat(http, web, load_page=False) as (_, again):
            assert again == chat


async def test_a_reply_to_a_closed_page_waits_for_it_to_reconnect(web: WebChannel) -> None:
    async with browser() as http:
        async with open_chat(http, web) as (_, chat):
            pass
        delivered = await web.deliver(chat, OutboundMessage(text="later"))
        assert "queued" in delivered.delivered_to
        async with open_chat(http, web) as (ws, again):
            assert again == chat
            assert (await receive(ws, "reply"))["text"] == "later"


async def test_a_reply_carries_its_outbound_id_and_a_repeat_waits_in_the_backlog_once(
    web: WebChannel,
) -> None:
    async with browser() as http:
        async with open_chat(http, web) as (ws, chat):
            await web.deliver(chat, OutboundMessage(text="answer", outbound_id="s_1-t1-s1-1"))
            reply = await receive(ws, "reply")
            assert (reply["text"], reply["id"]) == ("answer", "s_1-t1-s1-1")
        # A restart repeats an unconfirmed send to the web chat: it deduplicates.
        assert web.dedups
        for _ in range(2):
            await web.deliver(chat, OutboundMessage(text="later", outbound_id="s_1-t2-s1-1"))
        await web.deliver(chat, OutboundMessage(text="after"))
        async with open_chat(http, web) as (ws, _):
            assert (await receive(ws, "reply"))["text"] == "later"
            assert (await receive(ws, "reply"))["text"] == "after"


async def test_a_chat_outlives_a_restart_of_the_gateway(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = make_config(tmp_path, http={"port": port})
    async with browser() as http:
        async with Gateway(config, control=False) as gw:
            assert gw.web is not None
            async with open_chat(http, gw.web) as (_, chat):
                pass
        async with Gateway(config, control=False) as gw:
            assert gw.web is not None
            async with open_chat(http, gw.web, load_page=False) as (_, again):
                assert again == chat
    key = config.data_dir / "state" / "web_secret"
    assert key.stat().st_mode & 0o777 == 0o600

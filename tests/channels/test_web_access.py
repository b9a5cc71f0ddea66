"""Who may use the web chat: its own page's origin, the chat's cookie, the token."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import hdrs
from yarl import URL

from channels.errors import ChannelError
from channels.web import WebChannel
from gateway.app import Gateway
from gateway.errors import StartupError
from tests.channels.conftest import browser, frames_until_reply, open_chat, origin_of, receive
from tests.gateway.conftest import make_config
from threads.sinks import OutboundMessage

SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def handshake(
    http: aiohttp.ClientSession,
    url: str,
    *,
    origin: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> int:
    """The status a WebSocket upgrade to ``url`` is answered with (101 when it opened)."""
    try:
        async with http.ws_connect(url, origin=origin, headers=headers):
            return 101
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://127.0.0.1:1", "http://localhost.evil.example", "null"]
)
async def test_a_page_on_another_origin_is_refused(web: WebChannel, origin: str) -> None:
    async with browser() as http:
        assert await handshake(http, f"{web.url}ws", origin=origin) == 403
        async with http.get(f"{web.url}ws", headers={hdrs.ORIGIN: origin}) as response:
            reason = await response.text()
    assert response.status == 403
    assert "may not open this web chat" in reason
    assert "\n" not in reason.strip()


async def test_the_chats_own_page_may_open_it(web: WebChannel) -> None:
    async with browser() as http:
        assert await handshake(http, f"{web.url}ws", origin=origin_of(web)) == 101
        localhost = f"http://localhost:{web.port}"
        assert await handshake(http, f"{localhost}/ws", origin=localhost) == 101


async def test_an_origin_in_allowed_origins_may_open_the_chat(tmp_path: Path) -> None:
    config = make_config(
        tmp_path, channels={"web": {"allowed_origins": ["https://Chat.Example.com/"]}}
    )
    async with Gateway(config, control=False) as gw, browser() as http:
        assert gw.web is not None
        url = f"{gw.web.url}ws"
        assert await handshake(http, url, origin="https://chat.example.com") == 101
        assert await handshake(http, url, origin="https://chat.example.com:444") == 403
        assert await handshake(http, url, origin="http://chat.example.com") == 403


async def test_a_client_that_sends_no_origin_is_let_in(web: WebChannel) -> None:
    # Browsers always send Origin on a WebSocket upgrade; a client without one
    # (curl, a script) is not a page that a hostile site could drive.
    async with browser() as http:
        assert await handshake(http, f"{web.url}ws") == 101


async def test_a_rebound_host_name_is_refused_without_a_token(web: WebChannel) -> None:
    # DNS rebinding: a hostile name resolving to 127.0.0.1 is its page's own origin.
    evil = f"evil.example:{web.port}"
    async with browser() as http:
        async with http.get(web.url, headers={hdrs.HOST: evil}) as response:
            assert response.status == 403
            assert "only on loopback names" in await response.text()
        async with http.get(f"{web.url}ws", headers={hdrs.HOST: evil}) as response:
            assert response.status == 403


async def test_a_socket_that_knows_only_another_chats_id_cannot_read_write_or_take_its_backlog(
    gateway: Gateway, web: WebChannel
) -> None:
    async with browser() as owner, browser() as stranger:
        async with open_chat(owner, web) as (mine, chat):
            await mine.send_json({"text": "my own words"})
            await receive(mine, "reply")
            await gateway.wait_idle()
            before = await gateway.manager.check_session(f"web:{chat}")
            forged = {
                "unsigned": chat,
                "wrongly signed": f"{chat}.{'A' * 43}",
                "signed for another chat": cookie_of(owner, web).replace(chat, "0" * 16, 1),
            }
            for cookie in forged.values():
                stranger.cookie_jar.clear()
                stranger.cookie_jar.update_cookies({web.chat_cookie: cookie}, yarl_url(web))
                async with stranger.ws_connect(
                    f"{web.url}ws?chat={chat}", origin=origin_of(web)
                ) as theirs:
                    hello = await receive(theirs, "hello")
                    assert hello["chat"] != chat
                    await web.deliver(chat, OutboundMessage(text="for the owner's eyes"))
                    await theirs.send_json({"text": "written by a stranger"})
                    seen = await frames_until_reply(theirs)
                assert all("owner's eyes" not in str(f) for f in seen)
                assert (await receive(mine, "reply"))["text"] == "for the owner's eyes"
            await gateway.wait_idle()
            after = await gateway.manager.check_session(f"web:{chat}")
            assert after["message_count"] == before["message_count"]

        await web.deliver(chat, OutboundMessage(text="waiting for the owner"))
        stranger.cookie_jar.clear()
        stranger.cookie_jar.update_cookies({web.chat_cookie: chat}, yarl_url(web))
        async with stranger.ws_connect(f"{web.url}ws?chat={chat}", origin=origin_of(web)) as ws:
            await receive(ws, "hello")
            await ws.send_json({"text": "anything for me?"})
            seen = await frames_until_reply(ws)
        assert all("waiting for the owner" not in str(f) for f in seen)

        async with open_chat(owner, web, load_page=False) as (mine, again):
            assert again == chat
            assert (await receive(mine, "reply"))["text"] == "waiting for the owner"


async def test_every_response_carries_the_security_headers(web: WebChannel) -> None:
    async with browser() as http:
        for path, status in [
            ("", 200),
            ("chat/chat.js", 200),
            ("chat/chat.css", 200),
            ("nothing-here", 404),
        ]:
            async with http.get(f"{web.url}{path}") as response:
                assert response.status == status
                assert_secure(response.headers)
        async with http.get(f"{web.url}ws", headers={hdrs.ORIGIN: "http://evil.example"}) as r:
            assert r.status == 403
            assert_secure(r.headers)


async def test_the_page_runs_no_inline_script_or_style(web: WebChannel) -> None:
    async with browser() as http, http.get(web.url) as response:
        page = await response.text()
        policy = response.headers["Content-Security-Policy"]
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="/chat/chat.js">']
    assert not re.search(r"\son\w+=", page, re.IGNORECASE), "an inline event handler"
    assert "<style" not in page
    assert not re.search(r"\sstyle=", page, re.IGNORECASE), "an inline style"
    assert "script-src 'self'" in policy
    assert "style-src 'self'" in policy
    assert "unsafe" not in policy


async def test_the_page_inserts_markup_only_from_the_servers_rendering(web: WebChannel) -> None:
    """Everything is text (textContent), but an answer's HTML, which the server renders
    with raw HTML off: the only ``innerHTML`` sets it from a frame's ``html``."""
    scripts = {}
    async with browser() as http:
        for name in ("chat.js", "view.js", "composer.js"):
            async with http.get(f"{web.url}chat/{name}") as response:
                scripts[name] = await response.text()
    assert "textContent" in scripts["view.js"]
    for name, script in scripts.items():
        for sink in ("outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
            assert sink not in script, (name, sink)
        for line in script.splitlines():
            if "innerHTML" in line:
                assert name == "view.js"
                assert re.fullmatch(
                    r"\s*(node|this\.draftNode)\.innerHTML = html;  // trusted: .*", line
                )


# -- the token


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[WebChannel]:
    config = make_config(tmp_path, channels={"web": {"token": "s3cret-token"}})
    async with Gateway(config, control=False) as gw:
        assert gw.web is not None
        yield gw.web


async def test_with_a_token_the_page_and_the_socket_refuse_who_lacks_it(
    guarded: WebChannel,
) -> None:
    async with browser() as http:
        for query in ("", "?token=wrong"):
            async with http.get(f"{guarded.url}{query}") as response:
                assert response.status == 401
                assert "needs its token" in await response.text()
                assert_secure(response.headers)
        assert await handshake(http, f"{guarded.url}ws", origin=origin_of(guarded)) == 401
        assert await handshake(http, f"{guarded.url}ws?token=s3cret-token") == 401


async def test_the_token_once_in_the_address_lets_that_browser_in(guarded: WebChannel) -> None:
    async with browser() as http:
        async with http.get(f"{guarded.url}?token=s3cret-token", allow_redirects=False) as r:
            assert r.status == 303
            assert r.headers[hdrs.LOCATION] == "/"
            assert "s3cret-token" not in r.headers.getall(hdrs.SET_COOKIE)[0]
        async with open_chat(http, guarded) as (ws, _):
            await ws.send_json({"text": "let in"})
            assert (await receive(ws, "reply"))["text"].endswith("let in")


async def test_a_client_may_send_the_token_as_a_bearer_header(guarded: WebChannel) -> None:
    async with browser() as http:
        bearer = {"Authorization": "Bearer s3cret-token"}
        assert await handshake(http, f"{guarded.url}ws", headers=bearer) == 101
        wrong = {"Authorization": "Bearer s3cret-tokem"}
        assert await handshake(http, f"{guarded.url}ws", headers=wrong) == 401


async def test_the_token_may_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-a-file\n")
    config = make_config(tmp_path, channels={"web": {"token_file": str(tmp_path / "token")}})
    async with Gateway(config, control=False) as gw, browser() as http:
        assert gw.web is not None
        async with http.get(gw.web.url) as response:
            assert response.status == 401
        async with http.get(f"{gw.web.url}?token=from-a-file") as response:
            assert response.status == 200


async def test_an_empty_token_file_stops_the_start_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    config = make_config(tmp_path, channels={"web": {"token_file": str(tmp_path / "token")}})
    with pytest.raises(StartupError, match=r"^channels\.web\.token_file .* is empty$"):
        await Gateway(config, control=False).start()


async def test_a_damaged_key_file_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    (config.data_dir / "state").mkdir(parents=True, mode=0o700)
    config.data_dir.chmod(0o700)
    (config.data_dir / "state" / "web_secret").write_text("not a key\n")
    with pytest.raises(StartupError, match=r"web_secret is not a web chat key: delete it"):
        await Gateway(config, control=False).start()


def test_a_channel_off_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ChannelError, match=r"http\.host '0\.0\.0\.0' is not a loopback"):
        WebChannel(host="0.0.0.0", port=0)
    assert WebChannel(host="0.0.0.0", port=0, token="t").host == "0.0.0.0"


# -- helpers


def assert_secure(headers: Mapping[str, str]) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, name
    policy = headers.get("Content-Security-Policy", "")
    for directive in ("script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert directive in policy


def cookie_of(http: aiohttp.ClientSession, web: WebChannel) -> str:
    (value,) = [c.value for c in http.cookie_jar if c.key == web.chat_cookie]
    return value


def yarl_url(web: WebChannel) -> URL:
    return URL(web.url)

"""web_fetch: text from the web within its caps; loopback and private addresses refused by default."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.threads.tools.conftest import Caller, tools_config
from threads.tools.html_text import html_to_text

PAGE = """<!doctype html><html><head><title>The  Page</title>
<style>body { color: red }</style><script>alert("no")</script></head>
<body><h1>Hello</h1><p>First <b>paragraph</b> with a <a href="https://example.com/x">link</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""


class Site:
    """A loopback web server whose routes the tests set."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.release = asyncio.Event()
        self.base = ""

        async def page(request: web.Request) -> web.Response:
            return web.Response(text=PAGE, content_type="text/html")

        async def plain(request: web.Request) -> web.Response:
            return web.Response(text="just text", content_type="text/plain")

        async def image(request: web.Request) -> web.Response:
            return web.Response(body=b"\x89PNG....", content_type="image/png")

        async def big(request: web.Request) -> web.Response:
            return web.Response(text="x" * 5000, content_type="text/plain")

        async def streamed(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            for _ in range(10):
                await response.write(b"y" * 1000)
            await response.write_eof()
            return response

        async def slow(request: web.Request) -> web.Response:
            await self.release.wait()
            return web.Response(text="late")

        async def hop(request: web.Request) -> web.Response:
            raise web.HTTPFound(request.query["to"])

        async def missing(request: web.Request) -> web.Response:
            raise web.HTTPNotFound()

        for path, handler in {
            "/page": page,
            "/plain": plain,
            "/image": image,
            "/big": big,
            "/streamed": streamed,
            "/slow": slow,
            "/hop": hop,
            "/missing": missing,
        }.items():
            self.app.router.add_get(path, handler)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    site = Site()
    runner = web.AppRunner(site.app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    site.base = f"http://127.0.0.1:{port}"
    yield site
    site.release.set()
    await runner.cleanup()


def caller(tmp_path: Path, **web_fetch: Any) -> Caller:
    return Caller(tools_config(tmp_path, tools={"web_fetch": web_fetch}))


async def test_a_loopback_address_is_refused_by_default(tmp_path: Path, site: Site) -> None:
    output = await caller(tmp_path)("web_fetch", url=f"{site.base}/page")
    assert output.is_error
    assert "127.0.0.1 is a loopback address; web_fetch reaches public addresses only" in (
        output.content
    )


async def test_a_name_resolving_to_loopback_is_refused_by_default(
    tmp_path: Path, site: Site
) -> None:
    port = site.base.rsplit(":", 1)[1]
    output = await caller(tmp_path)("web_fetch", url=f"http://localhost:{port}/page")
    assert output.is_error
    assert "localhost resolves to" in output.content
    assert "loopback address" in output.content


@pytest.mark.parametrize(
    "url",
    ["http://10.1.2.3/", "http://192.168.0.1/", "http://169.254.169.254/latest", "http://[::1]/"],
)
async def test_private_and_link_local_addresses_are_refused_without_connecting(
    tmp_path: Path, url: str
) -> None:
    output = await caller(tmp_path)("web_fetch", url=url)
    assert output.is_error
    assert "web_fetch reaches public addresses only" in output.content


async def test_with_allow_private_a_page_comes_back_as_its_readable_text(
    tmp_path: Path, site: Site
) -> None:
    output = await caller(tmp_path, allow_private=True)("web_fetch", url=f"{site.base}/page")
    assert not output.is_error, output.content
    assert output.content == (
        f"URL: {site.base}/page\nTitle: The Page\n\n"
        "Hello\n\nFirst paragraph with a link [https://example.com/x].\n\n- one\n\n- two"
    )


async def test_an_allowed_network_is_reached_and_a_redirect_out_of_it_is_refused(
    tmp_path: Path, site: Site
) -> None:
    call = caller(tmp_path, allow_networks=["127.0.0.1/32"])
    plain = await call("web_fetch", url=f"{site.base}/plain")
    assert plain.content.endswith("\n\njust text")
    port = site.base.rsplit(":", 1)[1]
    output = await call("web_fetch", url=f"{site.base}/hop?to=http://127.0.0.2:{port}/plain")
    assert output.is_error
    assert "127.0.0.2 is a loopback address" in output.content


async def test_redirects_are_followed_up_to_the_cap(tmp_path: Path, site: Site) -> None:
    call = caller(tmp_path, allow_private=True, max_redirects=1)
    one = await call("web_fetch", url=f"{site.base}/hop?to=/plain")
    assert one.content == f"URL: {site.base}/plain\n\njust text"
    two = await call("web_fetch", url=f"{site.base}/hop?to=/hop%3Fto%3D/plain")
    assert two.is_error
    assert "redirects more than 1 times ([tools.web_fetch] max_redirects)" in two.content


async def test_a_body_over_the_cap_is_refused_whether_declared_or_streamed(
    tmp_path: Path, site: Site
) -> None:
    call = caller(tmp_path, allow_private=True, max_bytes=4000)
    for path in ("/big", "/streamed"):
        output = await call("web_fetch", url=f"{site.base}{path}")
        assert output.is_error
        assert "is larger than 4000 bytes, the cap ([tools.web_fetch] max_bytes)" in output.content


async def test_long_text_is_cut_at_max_chars_and_says_so(tmp_path: Path, site: Site) -> None:
    output = await caller(tmp_path, allow_private=True, max_chars=100)(
        "web_fetch", url=f"{site.base}/big"
    )
    assert not output.is_error
    assert output.content.endswith(
        "x" * 100 + "\n[cut: the text is 5000 characters; showing the first 100]"
    )


async def test_content_that_is_not_text_is_refused(tmp_path: Path, site: Site) -> None:
    output = await caller(tmp_path, allow_private=True)("web_fetch", url=f"{site.base}/image")
    assert output.is_error
    assert "is image/png, not text" in output.content


async def test_an_error_status_and_a_bad_scheme_are_told(tmp_path: Path, site: Site) -> None:
    call = caller(tmp_path, allow_private=True)
    missing = await call("web_fetch", url=f"{site.base}/missing")
    assert missing.content == f"{site.base}/missing answered HTTP 404 Not Found"
    ftp = await call("web_fetch", url="file:///etc/passwd")
    assert ftp.is_error
    assert "is not an http:// or https:// URL" in ftp.content


async def test_a_server_slower_than_the_timeout_is_given_up(tmp_path: Path, site: Site) -> None:
    output = await caller(tmp_path, allow_private=True, timeout_seconds=0.2)(
        "web_fetch", url=f"{site.base}/slow"
    )
    assert output.is_error
    assert "did not answer within 0.2 s ([tools.web_fetch] timeout_seconds)" in output.content


def test_the_extractor_drops_scripts_and_styles_and_keeps_the_words() -> None:
    title, text = html_to_text(
        "<title>T</title><script>var a = '<p>no</p>'</script><style>p{}</style>"
        "<p>a &amp; b</p><div>c<br>d</div><noscript>enable js</noscript><p>e</p>"
    )
    assert title == "T"
    assert text == "a & b\n\nc\nd\n\ne"

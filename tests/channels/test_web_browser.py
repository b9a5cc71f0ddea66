"""The web chat in a real browser: Debian's Chromium driven through Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest
from aiohttp.web import Application, AppRunner, Request, Response, TCPSite
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright, expect

from channels.web import WebChannel

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Skipped only on a machine without chromium and outside CI; CI installs it (.ci/run).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]
# The flags a closed network needs: nothing phones home, nothing waits on it.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

HOSTILE_PAGE = """<!doctype html><title>waiting</title><script>
const ws = new WebSocket("ws://127.0.0.1:%d/ws");
ws.onmessage = (ev) => { document.title = "read: " + ev.data; };
ws.onclose = () => { if (document.title === "waiting") document.title = "refused"; };
</script>"""


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM is not None
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


async def connected(page: Page, web: WebChannel) -> None:
    """Open the chat and wait until its socket is live.

    Waits through Playwright's own assertions: ``page.wait_for_function`` with a
    string re-evaluates it in the page with ``eval``, which the page's policy
    refuses, so it failed whenever the condition was not already true on its
    first look (a loaded machine).
    """
    await page.goto(web.url)
    await expect(page.locator("#status")).to_have_attribute("data-state", "live")


async def test_in_a_browser_the_page_runs_under_its_policy_and_shows_replies_as_text(
    browser: Browser, web: WebChannel
) -> None:
    page = await browser.new_page()
    problems: list[str] = []

    def note(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            problems.append(message.text)

    page.on("console", note)
    page.on("pageerror", lambda error: problems.append(str(error)))
    await connected(page, web)
    hostile = "<img src=x onerror=\"document.title='pwned'\"><b>bold</b>"
    await page.fill("#text", hostile)
    await page.press("#text", "Enter")
    reply = page.locator(".bot")
    await expect(reply).to_contain_text("<b>bold</b>")
    await expect(page.locator(".me .text")).to_have_text(hostile)
    assert await page.locator(".bot b, .bot img, .me b, .me img").count() == 0
    assert await page.title() == "Gateway chat"
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(246, 246, 244)", "the page's stylesheet was blocked"
    assert problems == []
    (cookie,) = await page.context.cookies()
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"


async def test_in_a_browser_a_page_on_another_port_cannot_read_the_chat(
    browser: Browser, web: WebChannel
) -> None:
    page = await browser.new_page()
    await connected(page, web)  # the browser now holds this chat's cookie

    async def serve(request: Request) -> Response:
        return Response(text=HOSTILE_PAGE % web.port, content_type="text/html")

    hostile = Application()
    hostile.router.add_get("/", serve)
    runner = AppRunner(hostile, access_log=None)
    await runner.setup()
    await TCPSite(runner, "127.0.0.1", 0).start()
    try:
        port = runner.addresses[0][1]
        await page.goto(f"http://127.0.0.1:{port}/")
        await page.wait_for_function("document.title !== 'waiting'")
        assert await page.title() == "refused"
    finally:
        await runner.cleanup()

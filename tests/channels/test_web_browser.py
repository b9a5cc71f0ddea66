"""The web chat in a real browser: Debian's Chromium driven through Playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest
from aiohttp.web import Application, AppRunner, Request, Response, TCPSite
from playwright.async_api import Browser, ConsoleMessage, async_playwright

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


async def test_in_a_browser_the_page_runs_under_its_policy_and_shows_replies_as_text(
    browser: Browser, web: WebChannel
) -> None:
    page = await browser.new_page()
    problems: list[str] = []

    def note(message: ConsoleMessage) -> None:
        # The browser's own favicon probe is no part of the page.
        if message.type in ("error", "warning") and "favicon" not in message.location["url"]:
            problems.append(message.text)

    page.on("console", note)
    page.on("pageerror", lambda error: problems.append(str(error)))
    await page.goto(web.url)
    await page.wait_for_function("document.getElementById('status').textContent.includes('web:')")
    await page.fill("#text", "<img src=x onerror=\"document.title='pwned'\"><b>bold</b>")
    await page.press("#text", "Enter")
    reply = page.locator(".bot")
    await reply.wait_for()
    assert "<b>bold</b>" in (await reply.text_content() or "")
    assert await page.locator(".bot *").count() == 0
    assert await page.title() == "Gateway chat"
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(246, 246, 244)", "the page's style was blocked"
    assert problems == []
    (cookie,) = await page.context.cookies()
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"


async def test_in_a_browser_a_page_on_another_port_cannot_read_the_chat(
    browser: Browser, web: WebChannel
) -> None:
    page = await browser.new_page()
    await page.goto(web.url)  # the browser now holds this chat's cookie
    await page.wait_for_function("document.getElementById('status').textContent.includes('web:')")

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

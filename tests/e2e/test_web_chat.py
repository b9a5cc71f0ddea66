"""The web chat in a real browser, against the whole gateway: what a person sees and does."""

from __future__ import annotations

import asyncio
import os
import re
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from playwright.async_api import Page, WebSocketRoute, expect
from pydantic import BaseModel

from tests.channels.test_web_acks import prompts
from tests.channels.test_web_browser import CHROMIUM
from tests.channels.test_web_refusals import FailingStore
from tests.channels.web_rig import ChatRig, chat_config, chat_gateway
from tests.e2e.conftest import PHONE, Problems, watch
from threads.agent.tools import ToolContext, tool
from threads.sinks import OutboundMessage
from threads.testing.fake_model import Reply, ToolCall
from threads.testing.fake_openai import FakeOpenAIServer
from threads.testing.scripted import ScriptedModel, say

# Skipped only on a machine without chromium and outside CI; CI installs it (.ci/run).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]

ANSWER = (
    "## Result\n\nIt is **done**, with `code` and a [link](https://example.com).\n\n"
    "```python\nprint('<b>hi</b>')\n```\n\n<script>window.pwned = 1</script>"
)
CODE = "print('<b>hi</b>')\n"


class Nothing(BaseModel):
    pass


class Holding:
    """The hold tool's gate, made anew for each test's event loop (see the fixture)."""

    release = asyncio.Event()


@tool("hold", "Holds the turn until the test releases it.", Nothing)
async def hold(args: Nothing, ctx: ToolContext) -> str:
    await Holding.release.wait()
    return "held"


@pytest.fixture(autouse=True)
def fresh_hold() -> None:
    Holding.release = asyncio.Event()


@pytest.fixture
async def echo(tmp_path: Path) -> AsyncIterator[ChatRig]:
    """A gateway whose model answers each message with the message itself."""
    async with chat_gateway(chat_config(tmp_path), model=ScriptedModel()) as rig:
        yield rig


async def open_chat(page: Page, rig: ChatRig) -> None:
    await page.goto(rig.web.url)
    await expect(page.locator("#status")).to_have_attribute("data-state", "live")


async def send(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def text_of(page: Page, selector: str) -> list[str]:
    """The exact text of each element (``textContent``, line breaks kept)."""
    found = await page.locator(selector).evaluate_all("(nodes) => nodes.map((n) => n.textContent)")
    return [str(text) for text in found]


async def test_a_round_trip_shows_typing_streams_the_answer_and_renders_its_markdown(
    tmp_path: Path, page: Page, problems: Problems
) -> None:
    last = asyncio.Event()
    chunks = ["## Result\n\nIt is **done**", ANSWER.removeprefix("## Result\n\nIt is **done**")]
    async with FakeOpenAIServer() as server:
        server.script(
            Reply(tool_calls=[ToolCall(name="hold")]), Reply(text=ANSWER, chunks=chunks, gate=last)
        )
        config = chat_config(tmp_path, base_url=server.base_url)
        async with chat_gateway(config, tools=[hold]) as rig:
            await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
            await open_chat(page, rig)
            await page.fill("#text", "first line")
            await page.press("#text", "Shift+Enter")
            await page.keyboard.type("second line")
            await page.press("#text", "Enter")
            assert await text_of(page, ".me .text") == ["first line\nsecond line"]
            await expect(page.locator(".me .state")).to_have_text("sent ✓")
            # The tool holds the turn: no word of the answer yet, and the page says so.
            await expect(page.locator("#typing")).to_be_visible()
            await expect(page.locator("details.tools summary")).to_have_text("Using hold…")
            Holding.release.set()
            await expect(page.locator("details.tools summary")).to_have_text("Used hold")
            # The answer's first words show, rendered, before it is complete.
            await expect(page.locator(".bot.draft h2")).to_have_text("Result")
            await expect(page.locator(".bot.draft strong")).to_have_text("done")
            await expect(page.locator("#typing")).to_have_count(0)
            assert await page.locator(".bot:not(.draft)").count() == 0
            last.set()
            answer = page.locator(".bot:not(.draft)")
            await expect(answer.locator("a")).to_have_attribute("href", "https://example.com")
            await expect(page.locator(".bot.draft")).to_have_count(0)
            await expect(answer.locator("pre code")).to_have_text(CODE)
            assert "<script>window.pwned = 1</script>" in (await answer.text_content() or "")
            assert await answer.locator("script, img").count() == 0
            assert await page.evaluate("window.pwned") is None
            await answer.locator("button.copy").click()
            await expect(answer.locator("button.copy")).to_have_text("Copied")
            assert await page.evaluate("navigator.clipboard.readText()") == CODE
            # The tool call is part of the conversation, folded, after a reload too.
            await page.reload()
            await expect(page.locator("details.tools summary")).to_have_text("Used hold")
            assert not await page.locator("details.tools").evaluate("(d) => d.open")
            await expect(page.locator(".bot h2")).to_have_text("Result")
    assert problems == []


async def test_a_reload_keeps_the_conversation_and_a_second_tab_sees_both_sides(
    echo: ChatRig, page: Page, problems: Problems
) -> None:
    await open_chat(page, echo)
    await send(page, "hello from the first tab")
    await expect(page.locator(".bot")).to_have_count(1)
    second = await page.context.new_page()
    watch(second, problems)
    await open_chat(second, echo)
    await expect(second.locator(".me .text")).to_have_text(["hello from the first tab"])
    await expect(second.locator(".bot")).to_have_count(1)
    await send(second, "hello from the second tab")
    for tab in (page, second):
        await expect(tab.locator(".me .text")).to_have_text(
            ["hello from the first tab", "hello from the second tab"]
        )
        await expect(tab.locator(".bot")).to_have_count(2)
    await page.reload()
    await expect(page.locator(".me .text")).to_have_text(
        ["hello from the first tab", "hello from the second tab"]
    )
    await expect(page.locator(".me .state")).to_have_text(["sent ✓", "sent ✓"])
    await expect(page.locator(".bot").nth(1)).to_contain_text("hello from the second tab")
    assert problems == []


async def test_a_reply_sent_again_under_its_id_is_shown_once(
    echo: ChatRig, page: Page, problems: Problems
) -> None:
    await open_chat(page, echo)
    chat = (await page.get_attribute("#status", "title") or "").removeprefix("web:")
    for _ in range(2):  # what the ledger does after a restart that could not tell
        await echo.web.deliver(chat, OutboundMessage(text="only once", outbound_id="t1-s1-1"))
    await echo.web.deliver(chat, OutboundMessage(text="the next one", outbound_id="t1-s1-2"))
    await expect(page.locator(".bot")).to_have_text(["only once", "the next one"])
    assert problems == []


async def test_new_chat_starts_a_clean_view_in_every_tab(
    echo: ChatRig, page: Page, problems: Problems
) -> None:
    await open_chat(page, echo)
    await send(page, "an old subject")
    await expect(page.locator(".bot")).to_have_count(1)
    second = await page.context.new_page()
    await open_chat(second, echo)
    await expect(second.locator(".me")).to_have_count(1)
    await page.click("#new-chat")
    for tab in (page, second):
        await expect(tab.locator(".bot")).to_have_text([re.compile("^Started a new conversation")])
    for tab in (page, second):
        await expect(tab.locator("#log")).not_to_contain_text("an old subject")
    await page.reload()
    await expect(page.locator("#status")).to_have_attribute("data-state", "live")
    await expect(page.locator("#log .msg")).to_have_count(0)
    assert problems == []


@pytest.mark.parametrize("screen", ["desktop", "phone"])
async def test_a_twenty_thousand_character_word_wraps_inside_its_bubble(
    echo: ChatRig, page: Page, phone: Page, screen: str
) -> None:
    tab = phone if screen == "phone" else page
    found = watch(tab)
    await open_chat(tab, echo)
    await send(tab, "x" * 20_000)
    await expect(tab.locator(".bot")).to_have_count(1)
    width = await tab.evaluate("document.documentElement.clientWidth")
    for bubble in (tab.locator(".me"), tab.locator(".bot")):
        box = await bubble.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= width
    assert await tab.evaluate("document.documentElement.scrollWidth") <= width
    assert await tab.locator("#log").evaluate("(log) => log.scrollWidth <= log.clientWidth")
    assert found == []


async def test_a_lost_connection_is_shown_retried_and_the_unacknowledged_message_runs_once(
    tmp_path: Path, page: Page, problems: Problems
) -> None:
    model = ScriptedModel()
    model.gate = asyncio.Event()
    connections: list[str] = []
    reachable = asyncio.Event()
    retried = asyncio.Event()

    async def route(ws: WebSocketRoute) -> None:
        connections.append("opened")
        if len(connections) > 2:
            retried.set()
        if len(connections) > 1 and not reachable.is_set():
            await ws.close()  # the gateway cannot be reached
            return
        server = ws.connect_to_server()

        async def to_page(message: str | bytes) -> None:
            frame: dict[str, Any] = orjson.loads(message)
            if len(connections) == 1 and frame["type"] == "ack":
                await ws.close()  # the connection drops with the acknowledgement in flight
                return
            ws.send(message)

        server.on_message(to_page)

    async with chat_gateway(chat_config(tmp_path), model=model) as rig:
        await page.route_web_socket("**/ws", route)
        await open_chat(page, rig)
        await send(page, "only once")
        await expect(page.locator("#banner")).to_be_visible()
        await expect(page.locator("#banner-text")).to_contain_text("Reconnecting")
        await expect(page.locator("#status")).to_have_attribute("data-state", "disconnected")
        await expect(page.locator(".me .state")).to_have_text("sending…")
        await asyncio.wait_for(retried.wait(), 20)  # it keeps trying on its own
        reachable.set()
        await page.click("#retry")
        await expect(page.locator("#banner")).to_be_hidden()
        await expect(page.locator(".me .state")).to_have_text("sent ✓")
        model.gate.set()
        await expect(page.locator(".bot")).to_have_count(1)
        await rig.gateway.wait_idle()
        await expect(page.locator(".me")).to_have_count(1)
    assert prompts(model, "only once") == 1
    assert problems == []


async def test_a_message_the_gateway_cannot_save_is_marked_failed_and_can_be_retried(
    tmp_path: Path, page: Page, problems: Problems
) -> None:
    store = FailingStore()
    async with chat_gateway(chat_config(tmp_path), model=ScriptedModel(), store=store) as rig:
        await open_chat(page, rig)
        store.failure = OSError(28, "No space left on device")
        await send(page, "into a full disk")
        mine = page.locator(".me")
        await expect(mine).to_have_attribute("data-state", "failed")
        await expect(mine.locator(".state")).to_contain_text(
            "not sent: The message could not be saved"
        )
        store.failure = None
        await mine.locator("button.retry").click()
        await expect(mine.locator(".state")).to_have_text("sent ✓")
        await expect(page.locator(".bot")).to_contain_text("into a full disk")
    assert problems == []


async def test_on_a_phone_the_chat_fits_the_screen(echo: ChatRig, phone: Page) -> None:
    found = watch(phone)
    assert echo.model is not None
    wide = "```\n" + "a_very_long_line_of_code = " + "1 + " * 60 + "1\n```"
    echo.model.add(
        say(
            f"{wide}\n\n| a | b | c | d | e | f | g | h |\n|---|---|---|---|---|---|---|---|\n"
            + "| 123456 " * 8
            + "|"
        )
    )
    await open_chat(phone, echo)
    await send(phone, "show me code")
    await expect(phone.locator(".bot .code")).to_be_visible()
    width = PHONE["width"]
    assert await phone.evaluate("document.documentElement.scrollWidth") <= width
    for selector in (".bot", ".bot .code", ".bot .table", "#text", "#send", "#new-chat"):
        box = await phone.locator(selector).bounding_box()
        assert box is not None, selector
        assert box["x"] >= 0, selector
        assert box["x"] + box["width"] <= width, selector
    # The code and the table scroll inside themselves; the composer stays on screen.
    assert await phone.locator(".bot .code pre").evaluate("(p) => p.scrollWidth > p.clientWidth")
    composer = await phone.locator("#composer").bounding_box()
    assert composer is not None
    assert composer["y"] + composer["height"] <= PHONE["height"] + 1
    assert found == []


def png(width: int = 4, height: int = 3) -> bytes:
    """A small valid PNG (solid blue), made here rather than kept as a file."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x20\x60\xd0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


async def test_a_picture_is_sent_shown_and_kept_and_a_file_over_the_cap_is_refused_in_one_line(
    tmp_path: Path, page: Page, problems: Problems
) -> None:
    config = chat_config(
        tmp_path, channels={"cli": {"enabled": False}, "web": {"max_file_bytes": 1000}}
    )
    async with chat_gateway(config, model=ScriptedModel()) as rig:
        await open_chat(page, rig)
        await page.set_input_files(
            "#file",
            files=[
                {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * 2000}
            ],
        )
        await expect(page.locator("#notice")).to_have_text(
            "big.bin is 2.0 KB: a message may carry up to 1000 bytes of files, so it was not added."
        )
        await expect(page.locator("#attachments")).to_be_hidden()
        await page.set_input_files(
            "#file", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": png()}]
        )
        await expect(page.locator("#attachments li")).to_contain_text("dot.png")
        await expect(page.locator("#notice")).to_be_hidden()
        await send(page, "what colour is this?")
        await expect(page.locator(".me .state")).to_have_text("sent ✓")
        await expect(page.locator(".bot")).to_have_count(1)
        await rig.gateway.wait_idle()
        await page.reload()
        picture = page.locator(".me .files img")
        await expect(picture).to_have_attribute("alt", "dot.png")
        assert (await picture.get_attribute("src") or "").startswith("/files/")
        await expect(picture).to_have_js_property("naturalWidth", 4)
    assert problems == []

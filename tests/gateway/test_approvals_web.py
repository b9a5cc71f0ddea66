"""Approvals in the web chat: the question with buttons over the socket, a press, the answer."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright, expect

from gateway.app import Gateway
from tests.channels.conftest import browser, open_chat, receive
from tests.channels.test_web_browser import CHROMIUM, CHROMIUM_ARGS
from tests.gateway.conftest import make_config
from tests.gateway.test_approvals_telegram import DEPLOY, RAN
from tests.threads.agent.conftest import KeyedScript
from threads.testing.scripted import ScriptedModel, call, dispatch


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, KeyedScript]]:
    RAN.clear()
    script = KeyedScript()
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
    )
    client = ScriptedModel(default=script)
    async with Gateway(
        config, model_clients={"scripted": client}, control=False, tools=[DEPLOY]
    ) as gw:
        yield gw, script


async def test_a_press_in_the_page_approves_and_the_turn_answers(
    gateway: tuple[Gateway, KeyedScript],
) -> None:
    gw, script = gateway
    assert gw.web is not None
    async with browser() as http, open_chat(http, gw.web) as (ws, chat):
        script.add(f"web:{chat}", call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        await ws.send_json({"text": "deploy to eu"})
        question = await receive(ws, "approval")
        assert question["text"].startswith("Approval needed: the agent wants to run deploy")
        assert [label for _data, label in question["buttons"]] == ["Approve", "Always", "Deny"]
        assert RAN == []
        await ws.send_json({"press": question["buttons"][0][0]})
        # The question settles before the press is answered; the resumed turn runs beside
        # both, so its reply may come first (with typing and its tools around it when slow).
        frames: list[dict[str, Any]] = []
        while len([f for f in frames if f["type"] in ("approval_settled", "reply")]) < 3:
            frame = await ws.receive_json(timeout=10)
            if frame["type"] in ("approval_settled", "reply"):
                frames.append(frame)
        settled = {
            "type": "approval_settled",
            "id": question["id"],
            "text": f"✅ Approved by web:{chat}: deploy runs.",
        }
        assert settled in frames
        replies = [f["text"] for f in frames if f["type"] == "reply"]
        assert sorted(replies) == ["Approved: deploy runs now.", "Deployed."]
        answer = next(i for i, f in enumerate(frames) if f.get("text", "").startswith("Approved"))
        assert frames.index(settled) < answer
        assert RAN == ["eu"]


async def test_a_press_of_a_button_the_server_never_made_is_refused(
    gateway: tuple[Gateway, KeyedScript],
) -> None:
    gw, _script = gateway
    assert gw.web is not None
    async with browser() as http, open_chat(http, gw.web) as (ws, _chat):
        await ws.send_json({"press": "rm -rf /"})
        assert (await receive(ws, "error"))["error"] == "that button does nothing any more"


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs Debian's chromium")
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.mark.browser
async def test_in_a_browser_approve_is_a_button_and_the_question_then_says_how_it_went(
    chromium: Browser, gateway: tuple[Gateway, KeyedScript]
) -> None:
    gw, script = gateway
    assert gw.web is not None
    page = await chromium.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    await page.goto(gw.web.url)
    # The page's policy refuses page.wait_for_function's eval: wait through expect.
    await expect(page.locator("#status")).to_have_attribute("data-state", "live")
    chat = (await page.get_attribute("#status", "title") or "").removeprefix("web:")
    script.add(f"web:{chat}", call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
    await page.fill("#text", "deploy to eu")
    await page.press("#text", "Enter")
    question = page.locator(".approval")
    await question.get_by_role("button", name="Approve").click()
    await page.locator(".bot", has_text="Deployed.").wait_for()
    assert await question.text_content() == f"✅ Approved by web:{chat}: deploy runs."
    assert await question.locator("button").count() == 0
    assert RAN == ["eu"]
    assert problems == []

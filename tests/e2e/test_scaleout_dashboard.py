"""The dashboard's Nodes view in a real browser: every node of the cluster, and its threads."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from gateway.app import Gateway
from tests.channels.test_web_browser import CHROMIUM
from tests.e2e.conftest import Problems
from tests.gateway.chat_double import ChatDouble
from tests.gateway.http.admin.conftest import TOKEN
from tests.gateway.test_scaleout import DEADLINE, Node, node_config
from tests.threads.cluster.conftest import LeaseClock, lease_clock, space
from threads.testing.scripted import ScriptedModel

__all__ = ["lease_clock", "space"]  # the fixtures this module uses from the cluster tests

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]


@pytest.fixture
async def nodes(
    tmp_path: Path, space: str, lease_clock: LeaseClock
) -> AsyncIterator[tuple[Node, Node]]:
    """Node a serves the dashboard; node b runs the turns."""
    started: list[Node] = []
    try:
        for name in ("a", "b"):
            more = {"admin": {"enabled": True, "token": TOKEN}} if name == "a" else {}
            chat, model = ChatDouble("telegram"), ScriptedModel()
            gateway = Gateway(
                node_config(tmp_path, name, space, **more),
                model_clients={"scripted": model},
                channels=[chat],
                control=False,
                lease_clock=lease_clock,
            )
            await gateway.start()
            started.append(Node(gateway, chat, model))
        yield started[0], started[1]
    finally:
        for node in reversed(started):
            await node.gateway.close()


async def test_the_nodes_view_shows_every_node_with_its_keys_and_its_running_threads(
    nodes: tuple[Node, Node], page: Page, problems: Problems
) -> None:
    a, b = nodes
    b.model.gate = asyncio.Event()
    await b.chat.push(chat_id="1", user_id="1", text="<b>slow</b>")
    async with asyncio.timeout(DEADLINE):
        await b.model.called.wait()
    assert b.gateway.member is not None
    await b.gateway.member.publish()  # what its next tick would publish
    assert a.gateway.admin is not None
    await page.goto(a.gateway.admin.url)
    await page.fill("#token", TOKEN)
    await page.click("#login-form button[type=submit]")
    await page.click('nav [data-view="nodes"]')
    card_b = page.locator('#nodes-list section[data-node="b"]')
    await expect(card_b).to_have_attribute("data-state", "alive")
    await expect(card_b.locator(".keys")).to_have_text("owns 1 keys: telegram:1")
    row = card_b.locator('tr[data-key="telegram:1"]')
    await expect(row).to_have_attribute("data-state", "running")
    card_a = page.locator('#nodes-list section[data-node="a"]')
    await expect(card_a.locator("h3")).to_have_text("a (this node)")
    await expect(page.locator("#nodes-summary")).to_contain_text("2 of 2 nodes alive")
    b.model.gate.set()
    async with asyncio.timeout(DEADLINE):
        await b.gateway.wait_idle()
    await b.gateway.member.publish()
    await page.click("#nodes-refresh")
    await expect(row).to_have_attribute("data-state", "idle")
    assert problems == []

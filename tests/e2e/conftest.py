"""Whole-gateway tests in a real browser: Debian's Chromium driven through Playwright.

A test that fails leaves a screenshot of its page in ``tests/e2e/artifacts/``
(named after the test), so a failure in CI can be seen, not guessed at.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Generator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright

from tests.channels.test_web_browser import CHROMIUM, CHROMIUM_ARGS

ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    item.stash[REPORTS] = {**item.stash.get(REPORTS, {}), report.when: report}


REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def failed(item: pytest.Item) -> bool:
    return any(report.failed for report in item.stash.get(REPORTS, {}).values())


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


class Problems(list[str]):
    """What went wrong inside the page: script errors, and console errors or warnings.

    A refused API call (a 4xx the page expects and shows) is logged by Chromium as
    "Failed to load resource"; that is the page working, not a problem.
    """

    def note(self, message: ConsoleMessage) -> None:
        if message.type not in ("error", "warning"):
            return
        if message.text.startswith(
            "Failed to load resource: the server responded with a status of 4"
        ):
            return
        self.append(f"{message.type}: {message.text}")


DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@asynccontextmanager
async def page_in(
    browser: Browser, request: pytest.FixtureRequest, **options: Any
) -> AsyncIterator[Page]:
    """A fresh page in a context of its own; every tab of it screenshotted when the test fails."""
    context = await browser.new_context(**options)
    opened = await context.new_page()
    try:
        yield opened
    finally:
        if failed(request.node):
            ARTIFACTS.mkdir(exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            for index, tab in enumerate(p for p in context.pages if not p.is_closed()):
                suffix = f"-tab{index + 1}" if index else ""
                await tab.screenshot(path=str(ARTIFACTS / f"{name}{suffix}.png"), full_page=True)
        await context.close()


@pytest.fixture
async def page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A desktop-sized page; screenshotted when the test fails."""
    async with page_in(browser, request, viewport=DESKTOP) as opened:
        yield opened


@pytest.fixture
async def phone(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A phone-sized page (touch, narrow, dense pixels); screenshotted when the test fails."""
    async with page_in(
        browser, request, viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2
    ) as opened:
        yield opened


def watch(page: Page, found: Problems | None = None) -> Problems:
    """Everything that goes wrong inside ``page`` from now on (added to ``found``)."""
    found = Problems() if found is None else found
    page.on("console", found.note)
    page.on("pageerror", lambda error: found.append(f"page error: {error}"))
    return found


@pytest.fixture
def problems(page: Page) -> Problems:
    """Everything that goes wrong inside ``page`` from now on."""
    return watch(page)

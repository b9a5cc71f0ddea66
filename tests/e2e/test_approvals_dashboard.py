"""Approvals in the dashboard, in a real browser: a waiting call approved with its button."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.channels.test_web_browser import CHROMIUM
from tests.e2e.conftest import Problems
from tests.e2e.test_admin_dashboard import log_in
from tests.gateway.http.admin.conftest import TOKEN
from tests.gateway.telegram_rig import telegram_gateway
from tests.gateway.test_approvals_telegram import DEPLOY, RAN, question
from threads.testing.scripted import call, dispatch

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]


async def test_a_waiting_call_is_approved_in_the_dashboard_and_the_turn_goes_on(
    page: Page, problems: Problems, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    RAN.clear()
    admin = {"enabled": True, "token": TOKEN}
    async with telegram_gateway(tmp_path, tools=[DEPLOY], admin=admin) as tg:
        ann = tg.fake.user("Ann")
        key = f"telegram:{ann.id}"
        tg.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        tg.fake.send_dm(ann, "deploy <b>now</b>")
        _asked, request_id = await question(tg, ann)
        assert tg.gateway.admin is not None
        await log_in(page, tg.gateway.admin.url)
        await page.click("nav [data-view=approvals]")
        row = page.locator(f'tr[data-request="{request_id}"]')
        await expect(row).to_contain_text('{"env":"eu"}')
        await expect(row).to_contain_text(key)
        await row.get_by_role("button", name="Always").click()
        await expect(page.locator("#notice")).to_have_text(f"approved deploy in {key}")
        await expect(page.locator("#approvals-empty")).to_be_visible()
        await expect(page.locator("#grants-body tr")).to_contain_text("deploy")
        sent = await tg.fake.wait_for_sent(ann, 2)
        assert sent[1].text == "Deployed."
        assert RAN == ["eu"]
        await page.locator("#grants-body tr").get_by_role("button", name="Revoke").click()
        await page.locator("#grants-body tr").get_by_role("button", name="Confirm revoke").click()
        await expect(page.locator("#grants-empty")).to_be_visible()
    assert problems == []

"""The admin dashboard in a real browser, against the whole gateway and the scripted model."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from channels.pairing import APPROVED_TEXT
from tests.channels.test_web_browser import CHROMIUM
from tests.e2e.conftest import Problems
from tests.gateway.http.admin.conftest import TOKEN, AdminRig, admin_gateway
from tests.gateway.telegram_rig import telegram_gateway
from tests.gateway.test_thread_ops_cli import Digging
from threads.testing.scripted import call, dispatch, say

# Skipped only on a machine without chromium and outside CI; CI installs it (.ci/run).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("CI"),
        reason="needs Debian's chromium (apt-get install chromium)",
    ),
]

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[AdminRig]:
    async with admin_gateway(tmp_path) as found:
        yield found


def dashboard(rig: AdminRig) -> str:
    assert rig.gateway.admin is not None
    return rig.gateway.admin.url


async def log_in(page: Page, url: str) -> None:
    await page.goto(url)
    await page.fill("#token", TOKEN)
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")


async def test_logging_in_with_the_admin_token(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    await page.goto(dashboard(rig))
    await expect(page.locator("#login")).to_be_visible()
    await page.fill("#token", "not-the-admin-token")
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#login-error")).to_have_text("the admin token is wrong")
    await expect(page.locator("#app")).to_be_hidden()
    await page.fill("#token", TOKEN)
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    assert await page.evaluate("sessionStorage.getItem('gateway-admin-token')") == TOKEN
    assert await page.context.cookies() == []
    await page.reload()  # the tab keeps its token
    await expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    await page.click("#logout")
    await expect(page.locator("#login")).to_be_visible()
    assert await page.evaluate("sessionStorage.getItem('gateway-admin-token')") is None
    background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(246, 246, 244)", "the stylesheet was blocked"
    assert problems == []


async def test_a_gateway_that_shuts_down_says_so_while_the_view_reconnects(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    await log_in(page, dashboard(rig))
    assert rig.gateway.admin is not None
    await rig.gateway.admin.streams.close()
    status = page.locator("#live-status")
    # Said while the stream ends, and still said while every retry is refused.
    await expect(status).to_have_text(re.compile(r"^the gateway is shutting down · "))
    await expect(status).to_have_attribute("data-state", "connecting")


async def test_a_thread_appears_and_runs_live_when_a_message_is_sent(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    await log_in(page, dashboard(rig))
    await expect(page.locator("#threads-empty")).to_be_visible()
    rig.script.add("telegram:1", call("dig"), say("dug"))
    talking = asyncio.ensure_future(rig.talk("telegram:1", "dig a hole"))
    row = page.locator('#threads-body tr[data-key="telegram:1"]')
    await expect(row).to_have_attribute("data-state", "running")
    await expect(row.locator(".tool")).to_have_text("dig")
    Digging.release.set()
    await expect(row).to_have_attribute("data-state", "idle")
    await talking
    await expect(page.locator("#metrics-summary")).to_contain_text("1 turns, 2 model calls")
    assert await page.locator("#chart-turns svg polyline").count() >= 1
    assert problems == []


async def test_a_running_session_is_stopped_with_its_stop_button(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    rig.script.add("telegram:1", call("dig"), dispatch(("caller:user", "never")))
    await log_in(page, dashboard(rig))
    talking = asyncio.ensure_future(rig.talk("telegram:1", "dig forever"))
    row = page.locator('#threads-body tr[data-key="telegram:1"]')
    await expect(row).to_have_attribute("data-state", "running")
    await row.locator("button.stop").click()
    await expect(page.locator("#notice")).to_have_text(
        "telegram:1: ended the running turn of telegram:1"
    )
    await expect(row).to_have_attribute("data-state", "idle")
    result = await talking
    assert result.stop_reason == "canceled"
    assert not Digging.release.is_set()  # ended inside the tool, without waiting for it
    assert problems == []


async def test_a_cron_job_is_made_in_the_editor_which_explains_the_expression_while_typing(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    await log_in(page, dashboard(rig))
    await page.click("nav [data-view=cron]")
    await page.click("#job-new")
    await page.fill("#job-id", "standup")
    preview = page.locator("#explain")
    await page.locator("#job-expr").press_sequentially("0 9 *")
    await expect(preview).to_have_attribute("data-state", "error")
    await expect(preview).to_contain_text("expr")
    await page.locator("#job-expr").press_sequentially(" * 1-5")
    fires = preview.locator("ol.fires li")
    await expect(fires).to_have_count(5)
    await expect(fires.first).to_contain_text("09:00:00 UTC")
    await page.fill("#job-timezone", "Asia/Tokyo")
    await expect(preview).to_contain_text("in Asia/Tokyo")
    await expect(fires.first).to_contain_text("09:00:00 Asia/Tokyo")
    await page.fill("#job-task", "Ask the team what they are doing today")
    await page.click("#job-form button[type=submit]")
    row = page.locator('#jobs-body tr[data-id="standup"]')
    await expect(row).to_contain_text("0 9 * * 1-5 (Asia/Tokyo)")
    assert rig.gateway.cron is not None
    job = (await rig.gateway.cron.get("standup")).job
    assert (job.expr, job.timezone, job.enabled) == ("0 9 * * 1-5", "Asia/Tokyo", True)
    await row.get_by_role("button", name="Run now").click()
    await expect(page.locator("#notice")).to_have_text("cron job standup: fired")
    await row.get_by_role("button", name="Runs").click()
    await expect(page.locator("#runs-body tr")).to_have_count(1)
    await expect(page.locator("#runs-body")).to_contain_text("run-now")
    assert problems == []


async def test_a_refused_job_marks_the_field_that_was_refused(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    await log_in(page, dashboard(rig))
    await page.click("nav [data-view=cron]")
    await page.click("#job-new")
    await page.fill("#job-id", "bad")
    await page.fill("#job-expr", "* * * * *")
    await page.fill("#job-timezone", "Mars/Olympus")
    await page.fill("#job-task", "never")
    await page.click("#job-form button[type=submit]")
    await expect(page.locator("#job-error")).to_contain_text("not an IANA time zone")
    await expect(page.locator("#job-timezone")).to_have_attribute("aria-invalid", "true")
    assert problems == []


async def test_a_strangers_pairing_code_is_approved_in_the_dashboard(
    page: Page, problems: Problems, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    admin = {"enabled": True, "token": TOKEN}
    async with telegram_gateway(tmp_path, telegram={"access": {}}, admin=admin) as tg:
        ann = tg.fake.user("Ann")
        tg.fake.send_dm(ann, "hello?")
        [pairing] = await tg.fake.wait_for_sent(ann, 1)
        assert tg.gateway.pairing is not None
        [request] = (await tg.gateway.pairing.listing())["telegram"].pending
        assert request.code in (pairing.text or "")
        assert tg.gateway.admin is not None
        await log_in(page, tg.gateway.admin.url)
        await page.click("nav [data-view=pairing]")
        pending = page.locator(f'[data-channel="telegram"] tr[data-code="{request.code}"]')
        await expect(pending).to_contain_text("Ann")
        await pending.get_by_role("button", name="Approve").click()
        await expect(page.locator("#notice")).to_have_text(
            "approved Ann on telegram; they were told"
        )
        await expect(
            page.locator(f'[data-channel="telegram"] tr[data-user="{ann.id}"]')
        ).to_be_visible()
        told = await tg.fake.wait_for_sent(ann, 2)
        assert told[1].text == APPROVED_TEXT
        assert tg.gateway.pairing.is_paired("telegram", str(ann.id))
    assert problems == []


async def test_a_transcript_holding_markup_shows_it_as_text_and_runs_nothing(
    rig: AdminRig, page: Page, problems: Problems
) -> None:
    rig.script.add(
        "telegram:1",
        call("check_session", session_key=HOSTILE),
        dispatch(("caller:user", HOSTILE)),  # refused (its caller is dropped): the model goes on
        say(HOSTILE),
    )
    await rig.talk("telegram:1", HOSTILE)
    await log_in(page, dashboard(rig))
    await page.click("nav [data-view=sessions]")
    await page.click('#sessions-body tr[data-key="telegram:1"] button')
    transcript = page.locator("#transcript")
    await expect(transcript.locator("article.msg")).to_have_count(6)
    await expect(transcript.locator("article.user .text")).to_have_text(HOSTILE)
    await expect(transcript.locator("article.assistant .text").last).to_have_text(HOSTILE)
    await expect(transcript.locator(".sends li")).to_have_text(f"→ caller:user: {HOSTILE}")
    call_args = transcript.locator("details.call pre").first
    await expect(call_args).to_contain_text("<script>window.pwned = 1</script>")
    assert await transcript.locator("script, img").count() == 0
    assert await page.locator("img").count() == 0
    assert await page.evaluate("window.pwned") is None
    assert await page.title() == "Gateway admin"
    # A live message with markup in it is shown as text as well.
    rig.script.add("telegram:1", say(f"again {HOSTILE}"))
    await rig.talk("telegram:1", "once more")
    await expect(transcript.locator("article.assistant .text").last).to_have_text(
        f"again {HOSTILE}"
    )
    assert await transcript.locator("script, img").count() == 0
    assert await page.evaluate("window.pwned") is None
    assert problems == []

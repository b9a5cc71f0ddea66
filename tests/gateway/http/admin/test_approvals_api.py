"""Approvals from the admin API: list, approve (always), deny, grants, revoke."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.http.admin.conftest import TOKEN, ApiClient
from tests.gateway.telegram_rig import TelegramRig, telegram_gateway
from tests.gateway.test_approvals_telegram import DEPLOY, RAN, question
from threads.testing.scripted import call, dispatch


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    RAN.clear()


@asynccontextmanager
async def approvals_gateway(tmp_path: Path) -> AsyncIterator[tuple[TelegramRig, ApiClient]]:
    admin = {"enabled": True, "token": TOKEN}
    async with telegram_gateway(tmp_path, tools=[DEPLOY], admin=admin) as rig:
        assert rig.gateway.http is not None
        async with aiohttp.ClientSession() as http:
            yield rig, ApiClient(http, rig.gateway.http.url + "api")


async def test_a_waiting_call_is_listed_and_approved_always_from_the_dashboard(
    tmp_path: Path,
) -> None:
    async with approvals_gateway(tmp_path) as (rig, api):
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        rig.fake.send_dm(ann, "deploy")
        _asked, request_id = await question(rig, ann)
        (listed,) = (await api.ok("GET", "/approvals"))["requests"]
        assert (listed["id"], listed["session_key"], listed["tool"]) == (request_id, key, "deploy")
        assert listed["args"] == {"env": "eu"}
        assert listed["caller"]["user_id"] == str(ann.id)

        decision = await api.ok("POST", f"/approvals/{request_id}/approve", {"always": True})
        assert (decision["outcome"], decision["who"], decision["via"]) == (
            "approve",
            "dashboard (admin)",
            "dashboard",
        )
        sent = await rig.fake.wait_for_sent(ann, 2)
        assert sent[1].text == "Deployed."
        assert (
            sent[0].text
            == "✅ Approved by dashboard (admin), and allowed from now on here: deploy runs."
        )
        assert RAN == ["eu"]

        (grant,) = (await api.ok("GET", "/grants"))["grants"]
        assert (grant["id"], grant["key"]) == (decision["grant"], key)
        status, body = await api.post(f"/approvals/{request_id}/approve", {"always": False})
        assert status == 409
        assert "already approved by dashboard (admin)" in body["error"]["message"]
        revoked = await api.ok("POST", f"/grants/{grant['id']}/revoke")
        assert revoked["id"] == grant["id"]
        assert (await api.ok("GET", "/grants"))["grants"] == []
        status, _body = await api.post(f"/grants/{grant['id']}/revoke")
        assert status == 404


async def test_deny_from_the_dashboard_tells_the_model_and_the_chat(tmp_path: Path) -> None:
    async with approvals_gateway(tmp_path) as (rig, api):
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Not deployed.")))
        rig.fake.send_dm(ann, "deploy")
        _asked, request_id = await question(rig, ann)
        await api.ok("POST", f"/approvals/{request_id}/deny", {"reason": "change freeze"})
        sent = await rig.fake.wait_for_sent(ann, 2)
        assert sent[0].text == "⛔ Denied by dashboard (admin): deploy was not run (change freeze)."
        (result,) = rig.script.requests[key][-1].messages[-1].tool_results()
        assert result.content == "DENIED: change freeze"
        assert RAN == []
        status, _body = await api.post("/approvals/e_nope/deny", {"reason": "x", "extra": 1})
        assert status == 400

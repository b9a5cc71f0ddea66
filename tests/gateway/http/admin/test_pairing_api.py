"""Pairing from the admin API: a stranger's DM over the fake Telegram, approved, denied, revoked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from channels.pairing import APPROVED_TEXT, DENIED_TEXT
from tests.gateway.http.admin.conftest import TOKEN, ApiClient
from tests.gateway.telegram_rig import TelegramRig, telegram_gateway


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-telegram-bot warns on int durations unless opted in; warnings are errors here.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@asynccontextmanager
async def paired_gateway(tmp_path: Path) -> AsyncIterator[tuple[TelegramRig, ApiClient]]:
    admin = {"enabled": True, "token": TOKEN}
    async with telegram_gateway(tmp_path, telegram={"access": {}}, admin=admin) as rig:
        assert rig.gateway.http is not None
        async with aiohttp.ClientSession() as http:
            yield rig, ApiClient(http, rig.gateway.http.url + "api")


async def code_of(rig: TelegramRig, text: str) -> str:
    assert "Pairing code:" in text
    assert rig.gateway.pairing is not None
    [request] = (await rig.gateway.pairing.listing())["telegram"].pending
    assert request.code in text
    return request.code


async def test_a_strangers_code_is_listed_and_approved(tmp_path: Path) -> None:
    async with paired_gateway(tmp_path) as (rig, api):
        ann = rig.fake.user("Ann")
        rig.fake.send_dm(ann, "hello")
        [pairing] = await rig.fake.wait_for_sent(ann, 1)
        code = await code_of(rig, pairing.text or "")
        listing = await api.ok("GET", "/pairing")
        [pending] = listing["channels"]["telegram"]["pending"]
        assert (pending["code"], pending["user_name"]) == (code, "Ann")
        body = await api.ok("POST", "/pairing/telegram/approve", {"code": code.lower()})
        assert body["told"] is True
        assert body["request"]["user_id"] == str(ann.id)
        told = await rig.fake.wait_for_sent(ann, 2)
        assert told[1].text == APPROVED_TEXT
        listing = await api.ok("GET", "/pairing")
        assert listing["channels"]["telegram"]["pending"] == []
        assert [u["user_id"] for u in listing["channels"]["telegram"]["paired"]] == [str(ann.id)]
        status, body = await api.post("/pairing/telegram/approve", {"code": code})
        assert status == 404
        assert "unknown pairing code" in body["error"]["message"]


async def test_a_denied_stranger_is_told_once_and_a_revoke_unpairs(tmp_path: Path) -> None:
    async with paired_gateway(tmp_path) as (rig, api):
        bob = rig.fake.user("Bob")
        rig.fake.send_dm(bob, "let me in")
        [pairing] = await rig.fake.wait_for_sent(bob, 1)
        code = await code_of(rig, pairing.text or "")
        body = await api.ok("POST", "/pairing/telegram/deny", {"code": code})
        assert body["told"] is True
        told = await rig.fake.wait_for_sent(bob, 2)
        assert told[1].text == DENIED_TEXT
        status, _ = await api.post("/pairing/telegram/revoke", {"user": str(bob.id)})
        assert status == 404
        assert rig.gateway.pairing is not None
        rig.fake.send_dm(bob, "again")
        [*_, again] = await rig.fake.wait_for_sent(bob, 3)
        await api.ok(
            "POST", "/pairing/telegram/approve", {"code": await code_of(rig, again.text or "")}
        )
        body = await api.ok("POST", "/pairing/telegram/revoke", {"user": str(bob.id)})
        assert body["user"]["user_id"] == str(bob.id)
        assert not rig.gateway.pairing.is_paired("telegram", str(bob.id))


async def test_pairing_errors_name_the_channel_and_the_field(tmp_path: Path) -> None:
    async with paired_gateway(tmp_path) as (_rig, api):
        status, body = await api.post("/pairing/fax/approve", {"code": "ABCDEFGH"})
        assert status == 404
        assert "unknown channel 'fax'" in body["error"]["message"]
        status, body = await api.post("/pairing/telegram/approve", {})
        assert (status, body["error"]["field"]) == (400, "code")
        status, body = await api.post("/pairing/telegram/approve", {"code": "ABCDEFGH"})
        assert status == 404

"""Access control over the real Telegram adapter, against the fake Bot API server.

python-telegram-bot polls ``channels.testing.FakeTelegram``; the gateway's
access check sits between the adapter and the threads exactly as in
production.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from channels.access import CONTEXT_CLOSE, CONTEXT_OPEN
from channels.pairing import APPROVED_TEXT
from tests.gateway.telegram_rig import TelegramRig, telegram_gateway
from threads.testing.scripted import dispatch

TEAM = -1009876


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-telegram-bot warns on int durations unless opted in; warnings are errors here.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


def guarded(tmp_path: Path) -> AbstractAsyncContextManager[TelegramRig]:
    """The gateway with the default access rules; only the TEAM group is served."""
    return telegram_gateway(tmp_path, telegram={"access": {"groups": [str(TEAM)]}})


async def test_a_stranger_pairs_over_telegram_and_then_talks_to_the_model(
    tmp_path: Path,
) -> None:
    async with guarded(tmp_path) as rig:
        gw, fake, script = rig.gateway, rig.fake, rig.script
        ann = fake.user("Ann")
        fake.send_dm(ann, "hello")
        [pairing] = await fake.wait_for_sent(ann, 1)
        assert pairing.text is not None
        assert "Pairing code:" in pairing.text
        assert script.requests == {}
        assert gw.pairing is not None
        [request] = (await gw.pairing.listing())["telegram"].pending
        assert (request.user_id, request.user_name) == (str(ann.id), "Ann")
        await gw.pairing.approve("telegram", request.code)
        approved = await fake.wait_for_sent(ann, 2)
        assert approved[1].text == APPROVED_TEXT
        script.add(f"telegram:{ann.id}", dispatch(("caller:user", "hi Ann")))
        fake.send_dm(ann, "hello again")
        answered = await fake.wait_for_sent(ann, 3)
        assert answered[2].text == "hi Ann"


async def test_group_chatter_reaches_the_model_only_with_a_mention(tmp_path: Path) -> None:
    async with guarded(tmp_path) as rig:
        gw, fake, script = rig.gateway, rig.fake, rig.script
        team = fake.group("Team", supergroup=True, id=TEAM)
        elsewhere = fake.group("Elsewhere", supergroup=True)
        ann, bob = fake.user("Ann"), fake.user("Bob")
        fake.send_group(elsewhere, ann, "hi bot", mention=True)
        fake.send_group(team, ann, "the build is red")
        key = f"telegram:group:{TEAM}"
        script.add(key, dispatch(("caller:user", "on it")))
        fake.send_group(team, bob, "why?", mention=True)
        [answer] = await fake.wait_for_sent(team, 1)
        assert answer.text == "on it"
        await gw.wait_idle()
        [request] = script.requests[key]
        body = request.messages[-1].text()
        assert f"{CONTEXT_OPEN}\nAnn: the build is red\n{CONTEXT_CLOSE}\n" in body
        assert fake.sent(elsewhere) == []

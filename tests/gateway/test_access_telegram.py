"""Access control over the real Telegram adapter, against the fake Bot API server.

python-telegram-bot polls ``channels.testing.FakeTelegram``; the gateway's
access check sits between the adapter and the threads exactly as in
production.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from channels.access import CONTEXT_CLOSE, CONTEXT_OPEN
from channels.pairing import APPROVED_TEXT
from channels.testing import FakeTelegram, TgChat
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.threads.agent.conftest import KeyedScript
from threads.testing.scripted import ScriptedModel, dispatch


@dataclass
class Bot:
    gw: Gateway
    fake: FakeTelegram
    script: KeyedScript
    team: TgChat


@pytest.fixture
async def bot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bot]:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    async with FakeTelegram(bot_username="helper_bot") as fake:
        team = fake.group("Team", supergroup=True)
        config = make_config(
            tmp_path,
            models={
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            agents={"default": {"model": "scripted/test"}},
            channels={
                "web": {"enabled": False},
                "telegram": {
                    "enabled": True,
                    "token": fake.token,
                    "base_url": fake.base_url,
                    "base_file_url": fake.base_file_url,
                    "stream_edits": False,
                    "rate_limit": False,  # PTB's limiter needs an extra this venv lacks
                    "access": {"groups": [str(team.id)]},
                },
            },
        )
        script = KeyedScript()
        gateway = Gateway(config, model_clients={"scripted": ScriptedModel(default=script)})
        async with gateway as gw:
            yield Bot(gw=gw, fake=fake, script=script, team=team)


async def test_a_stranger_pairs_over_telegram_and_then_talks_to_the_model(bot: Bot) -> None:
    gw, fake, script = bot.gw, bot.fake, bot.script
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


async def test_group_chatter_reaches_the_model_only_with_a_mention(bot: Bot) -> None:
    gw, fake, script = bot.gw, bot.fake, bot.script
    ann, bob = fake.user("Ann"), fake.user("Bob")
    stranger_group = fake.group("Elsewhere", supergroup=True)
    fake.send_group(stranger_group, ann, "hi bot", mention=True)
    fake.send_group(bot.team, ann, "the build is red")
    key = f"telegram:group:{bot.team.id}"
    script.add(key, dispatch(("caller:user", "on it")))
    fake.send_group(bot.team, bob, "why?", mention=True)
    [answer] = await fake.wait_for_sent(bot.team, 1)
    assert answer.text == "on it"
    await gw.wait_idle()
    [request] = script.requests[key]
    body = request.messages[-1].text()
    assert f"{CONTEXT_OPEN}\nAnn: the build is red\n{CONTEXT_CLOSE}\n" in body
    assert fake.sent(stranger_group) == []

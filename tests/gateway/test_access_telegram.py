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
from tests.gateway.test_thread_ops_cli import gateway_cli, write_config
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


async def test_a_stranger_is_approved_from_the_cli_and_the_model_answers(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path, control=True, telegram={"access": {}}) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("Ann")
        fake.send_dm(ann, "hello")
        [pairing] = await fake.wait_for_sent(ann, 1)
        assert pairing.text is not None
        code = pairing.text.split("Pairing code:")[1].split()[0]
        config = write_config(tmp_path, rig.gateway.config)
        status, out, err = await gateway_cli(config, "pairing", "approve", "telegram", code)
        assert status == 0, err
        assert "Ann" in out
        approved = await fake.wait_for_sent(ann, 2)
        assert approved[1].text == APPROVED_TEXT
        script.add(f"telegram:{ann.id}", dispatch(("caller:user", "welcome")))
        fake.send_dm(ann, "hello again")
        answered = await fake.wait_for_sent(ann, 3)
        assert answered[2].text == "welcome"
        assert len(script.requests[f"telegram:{ann.id}"]) == 1  # "hello" never reached it


async def test_a_forum_topic_is_its_own_conversation_and_replies_stay_in_it(
    tmp_path: Path,
) -> None:
    async with guarded(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        team = fake.group("Team", forum=True, id=TEAM)
        ann = fake.user("Ann")
        ideas = fake.open_topic(team, "Ideas", by=ann)
        key = f"telegram:group:{TEAM}:topic:{ideas}"
        script.add(key, dispatch(("caller:user", "noted in the topic")))
        trigger = fake.send_group(team, ann, "a new idea", mention=True, topic=ideas)
        [answer] = await fake.wait_for_sent(team, 1)
        assert answer.text == "noted in the topic"
        assert answer.message_thread_id == ideas
        assert answer.reply_to_message_id == trigger.message_id  # answers the trigger
        assert f"telegram:group:{TEAM}" not in script.requests

"""Access control through the whole gateway: pairing from the CLI, groups, owners, restarts.

A chat double stands where the Telegram adapter will stand; the model is
scripted per session; ``gateway pairing`` runs as a real subprocess against
the running gateway's control socket, or against the state store when no
gateway runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from channels.access import CONTEXT_CLOSE, CONTEXT_OPEN
from channels.pairing import APPROVED_TEXT, DENIED_TEXT
from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.chat_double import ChatDouble
from tests.gateway.conftest import make_config
from tests.gateway.test_thread_ops_cli import gateway_cli
from tests.threads.agent.conftest import KeyedScript
from threads.testing.scripted import ScriptedModel, dispatch

# Telegram's group chats are "group:<id>" (a forum topic "group:<id>:topic:<n>");
# `groups` lists the ids.
GROUP_ID, GROUP, OTHER_GROUP, OWNER = "-100", "group:-100", "group:-200", "42"


def access_config(tmp_path: Path) -> GatewayConfig:
    return make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
        channels={
            "web": {"enabled": False},
            "telegram": {"access": {"groups": [GROUP_ID], "owners": [OWNER]}},
        },
    )


def write_config(tmp_path: Path, config: GatewayConfig) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{config.data_dir}"\n'
        f'[store]\nurl = "{config.store.url}"\n'
        "[channels.web]\nenabled = false\n"
    )
    return path


@dataclass
class Running:
    gw: Gateway
    script: KeyedScript
    telegram: ChatDouble
    path: Path

    async def code_of(self, user: str) -> str:
        assert self.gw.pairing is not None
        pending = (await self.gw.pairing.listing())["telegram"].pending
        [request] = [r for r in pending if r.user_id == user]
        return request.code


def gateway(config: GatewayConfig, script: KeyedScript, telegram: ChatDouble) -> Gateway:
    return Gateway(
        config, model_clients={"scripted": ScriptedModel(default=script)}, channels=[telegram]
    )


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    async with gateway(config, script, telegram) as gw:
        yield Running(gw, script, telegram, write_config(tmp_path, config))


async def test_a_stranger_s_direct_message_gets_a_code_and_never_reaches_a_model(
    running: Running,
) -> None:
    gw, telegram = running.gw, running.telegram
    await telegram.push(chat_id="11", user_id="11", user_name="Ada", text="hello")
    await gw.wait_idle()
    code = await running.code_of("11")
    [reply] = telegram.to("11")
    assert f"Pairing code: {code}" in reply
    assert f"gateway pairing approve telegram {code}" in reply
    assert running.script.requests == {}
    assert await gw.store.resolve("telegram:11") is None  # not even stored


async def test_approving_from_the_cli_tells_the_user_and_their_next_message_runs_a_turn(
    running: Running,
) -> None:
    gw, telegram, script = running.gw, running.telegram, running.script
    await telegram.push(chat_id="11", user_id="11", user_name="Ada", text="hello")
    code = await running.code_of("11")
    status, out, err = await gateway_cli(running.path, "pairing", "approve", "telegram", code)
    assert status == 0, err
    assert out == "telegram: approved user 11 (Ada)\nthey were told to send their message again\n"
    assert telegram.to("11")[-1] == APPROVED_TEXT
    script.add("telegram:11", dispatch(("caller:user", "hi Ada")))
    await telegram.push(chat_id="11", user_id="11", user_name="Ada", text="hello again")
    await gw.wait_idle()
    assert telegram.to("11")[-1] == "hi Ada"
    assert "hello again" in script.requests["telegram:11"][0].messages[-1].text()


async def test_a_denied_user_is_told_once_and_a_new_message_asks_anew(running: Running) -> None:
    telegram = running.telegram
    await telegram.push(chat_id="11", user_id="11", text="hello")
    code = await running.code_of("11")
    status, out, err = await gateway_cli(running.path, "pairing", "deny", "telegram", code.lower())
    assert status == 0, err
    assert out == "telegram: denied user 11\nthey were told\n"
    assert telegram.to("11")[1:] == [DENIED_TEXT]
    await telegram.push(chat_id="11", user_id="11", text="please?")
    assert await running.code_of("11") != code
    assert running.script.requests == {}


async def test_a_revoked_user_is_asked_for_a_code_again(running: Running) -> None:
    gw, telegram = running.gw, running.telegram
    assert gw.pairing is not None
    await telegram.push(chat_id="11", user_id="11", user_name="Ada", text="hello")
    await gw.pairing.approve("telegram", await running.code_of("11"))
    status, out, err = await gateway_cli(running.path, "pairing", "revoke", "telegram", "11")
    assert status == 0, err
    assert out == "telegram: unpaired user 11 (Ada)\n"
    await telegram.push(chat_id="11", user_id="11", text="still there?")
    await gw.wait_idle()
    assert "Pairing code:" in telegram.to("11")[-1]
    assert running.script.requests == {}


async def test_a_fourth_stranger_is_refused_while_three_codes_wait(running: Running) -> None:
    telegram = running.telegram
    for user in ("11", "12", "13", "14"):
        await telegram.push(chat_id=user, user_id=user, user_name=f"Name {user}", text="hi")
    assert telegram.to("14") == [
        "This bot has too many pairing requests waiting right now; try again later."
    ]
    status, out, err = await gateway_cli(running.path, "pairing", "list")
    assert status == 0, err
    assert "pending (3):" in out
    assert "user 14" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    status, out, err = await gateway_cli(running.path, "pairing", "list", "--json")
    assert status == 0, err
    pending = orjson.loads(out)["channels"]["telegram"]["pending"]
    assert [p["user_id"] for p in pending] == ["11", "12", "13"]


async def test_group_chatter_is_kept_and_given_to_the_next_mentioned_message(
    running: Running,
) -> None:
    gw, telegram, script = running.gw, running.telegram, running.script
    chat = {"chat_id": GROUP, "chat_type": "group"}
    await telegram.push(user_id="21", user_name="Ada", text="the build is red", **chat)
    await telegram.push(user_id="22", user_name="Bo", text="since the merge", **chat)
    await gw.wait_idle()
    assert script.requests == {}
    assert telegram.sent == []
    script.add(f"telegram:{GROUP}", dispatch(("caller:user", "looking")))
    await telegram.push(user_id="23", user_name="Cy", text="@bot why?", mentioned=True, **chat)
    await gw.wait_idle()
    assert telegram.to(GROUP) == ["looking"]
    [request] = script.requests[f"telegram:{GROUP}"]
    body = request.messages[-1].text()
    expected = "\n".join(
        [CONTEXT_OPEN, "Ada: the build is red", "Bo: since the merge", CONTEXT_CLOSE, "@bot why?"]
    )
    assert expected in body


async def test_group_chatter_comes_before_the_quoted_message_the_user_replied_to(
    running: Running,
) -> None:
    gw, telegram, script = running.gw, running.telegram, running.script
    chat = {"chat_id": GROUP, "chat_type": "group"}
    await telegram.push(user_id="21", user_name="Ada", text="lunch?", **chat)
    script.add(f"telegram:{GROUP}", dispatch(("caller:user", "noted")))
    await telegram.push(
        user_id="22",
        user_name="Bo",
        text="and what about this?",
        reply_to="7",
        reply_to_text="the deploy is at 3",
        reply_to_bot=True,
        **chat,
    )
    await gw.wait_idle()
    body = script.requests[f"telegram:{GROUP}"][0].messages[-1].text()
    expected = "\n".join(
        [
            CONTEXT_OPEN,
            "Ada: lunch?",
            CONTEXT_CLOSE,
            "(replying to the bot:)",
            "> the deploy is at 3",
            "",
            "and what about this?",
        ]
    )
    assert expected in body


async def test_a_group_that_is_not_allowlisted_gets_no_reply_and_no_turn(
    running: Running,
) -> None:
    gw, telegram = running.gw, running.telegram
    await telegram.push(
        chat_id=OTHER_GROUP, chat_type="group", user_id="21", text="@bot hi", mentioned=True
    )
    await telegram.push(chat_id=OTHER_GROUP, chat_type="group", user_id="21", text="/status")
    await gw.wait_idle()
    assert telegram.sent == []
    assert running.script.requests == {}
    assert await gw.store.resolve(f"telegram:{OTHER_GROUP}") is None


async def test_send_is_refused_to_a_non_owner_and_obeyed_for_the_channel_s_owner(
    running: Running,
) -> None:
    telegram = running.telegram
    chat = {"chat_id": GROUP, "chat_type": "group"}
    await telegram.push(user_id="21", text="/send off", **chat)
    await telegram.push(user_id=OWNER, text="/send off", **chat)
    assert telegram.to(GROUP) == [
        "Only an owner of this bot can use /send.",
        f"Send policy for telegram:{GROUP}: deny (this session's own setting).",
    ]
    assert running.script.requests == {}


async def test_a_pairing_survives_a_gateway_restart(tmp_path: Path) -> None:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    async with gateway(config, script, telegram) as gw:
        assert gw.pairing is not None
        await telegram.push(chat_id="11", user_id="11", text="hello")
        [request] = (await gw.pairing.listing())["telegram"].pending
        await gw.pairing.approve("telegram", request.code)
    telegram = ChatDouble("telegram")
    script.add("telegram:11", dispatch(("caller:user", "welcome back")))
    async with gateway(config, script, telegram) as gw:
        await telegram.push(chat_id="11", user_id="11", text="hello after the restart")
        await gw.wait_idle()
    assert telegram.to("11") == ["welcome back"]


async def test_an_approval_made_with_no_gateway_running_is_told_at_the_next_start(
    tmp_path: Path,
) -> None:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    path = write_config(tmp_path, config)
    async with gateway(config, script, telegram) as gw:
        assert gw.pairing is not None
        await telegram.push(chat_id="11", user_id="11", user_name="Ada", text="hello")
        [request] = (await gw.pairing.listing())["telegram"].pending
    status, out, err = await gateway_cli(path, "pairing", "approve", "telegram", request.code)
    assert status == 0, err
    assert out == "telegram: approved user 11 (Ada)\nthey are told when the gateway next runs\n"
    status, out, err = await gateway_cli(path, "pairing", "list")
    assert status == 0, err
    assert "user 11 (Ada)  approved" in out
    telegram = ChatDouble("telegram")
    script.add("telegram:11", dispatch(("caller:user", "hi Ada")))
    async with gateway(config, script, telegram) as gw:
        assert await telegram.wait(1) == [("11", APPROVED_TEXT)]
        await telegram.push(chat_id="11", user_id="11", text="hello again")
        await gw.wait_idle()
    assert telegram.to("11") == [APPROVED_TEXT, "hi Ada"]


async def test_pairing_errors_are_one_line_naming_the_problem_with_or_without_a_gateway(
    tmp_path: Path,
) -> None:
    script, telegram = KeyedScript(), ChatDouble("telegram")
    config = access_config(tmp_path)
    path = write_config(tmp_path, config)
    calls = [
        (("approve", "telegram", "ABCD2345"), "unknown pairing code 'ABCD2345' on telegram"),
        (
            ("deny", "slack", "ABCD2345"),
            "unknown channel 'slack': pairing is for telegram, discord",
        ),
        (("revoke", "discord", "5"), "discord user 5 is not paired"),
    ]
    async with gateway(config, script, telegram):
        for args, words in calls:
            status, out, err = await gateway_cli(path, "pairing", *args)
            assert (status, out) == (1, "")
            assert err.startswith(f"error: {words}")
            assert err.count("\n") == 1
            assert len(err) <= 81  # one line of at most 80 columns
    for args, words in calls:
        status, out, err = await gateway_cli(path, "pairing", *args)
        assert (status, out) == (1, "")
        assert err.startswith(f"error: {words}")

"""Discord end to end: the real adapter and discord.py against the fake Discord."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from channels.access import CONTEXT_OPEN
from channels.pairing import APPROVED_TEXT
from channels.testing import DcFile, FakeDiscord
from tests.gateway.discord_rig import discord_gateway
from tests.gateway.test_telegram import LONG_ANSWER, Streaming, eventually
from tests.gateway.test_thread_ops_cli import gateway_cli, write_config
from threads.messages import FilePart
from threads.testing.scripted import ScriptedModel, dispatch


async def test_a_direct_message_gets_the_models_answer(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        ann = rig.fake.user("ann")
        rig.script.add(f"discord:{ann.id}", dispatch(("caller:user", "Hello **Ann**!")))
        rig.fake.send_dm(ann, "hi there")
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.content == "Hello **Ann**!"
        (request,) = rig.script.requests[f"discord:{ann.id}"]
        prompt = request.messages[-1].text()
        assert "source: discord" in prompt
        assert prompt.endswith("hi there")


async def test_a_stranger_pairs_from_the_cli_and_then_talks_to_the_model(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path, control=True, discord={"access": {}}) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("ann")
        fake.send_dm(ann, "hello")
        (pairing,) = await fake.wait_for_sent(ann, 1)
        assert pairing.content is not None
        code = pairing.content.split("Pairing code:")[1].split()[0]
        status, _, err = await gateway_cli(
            write_config(tmp_path, rig.gateway.config), "pairing", "approve", "discord", code
        )
        assert status == 0, err
        approved = await fake.wait_for_sent(ann, 2)
        assert approved[1].content == APPROVED_TEXT
        script.add(f"discord:{ann.id}", dispatch(("caller:user", "welcome")))
        fake.send_dm(ann, "hello again")
        answered = await fake.wait_for_sent(ann, 3)
        assert answered[2].content == "welcome"
        assert len(script.requests[f"discord:{ann.id}"]) == 1


async def test_a_guild_channel_answers_a_mention_and_keeps_the_rest_as_context(
    tmp_path: Path,
) -> None:
    channel_id = 7001
    access = {"groups": [str(channel_id)]}
    async with discord_gateway(tmp_path, discord={"access": access}) as rig:
        fake, script = rig.fake, rig.script
        guild = fake.guild("Team")
        general = fake.text_channel(guild, "general", id=channel_id)
        elsewhere = fake.text_channel(guild, "random")
        ann, bob = fake.user("ann"), fake.user("bob")
        fake.send_in_channel(elsewhere, ann, "hi bot", mention=True)
        fake.send_in_channel(general, ann, "the build is red")
        key = f"discord:channel:{channel_id}"
        script.add(key, dispatch(("caller:user", "on it")))
        trigger = fake.send_in_channel(general, bob, "why?", mention=True)
        (answer,) = await fake.wait_for_sent(general, 1)
        assert answer.content == "on it"
        assert answer.message_reference is not None
        assert int(answer.message_reference["message_id"]) == trigger.message_id
        await rig.gateway.wait_idle()
        (request,) = script.requests[key]
        body = request.messages[-1].text()
        assert CONTEXT_OPEN in body
        assert "the build is red" in body
        assert fake.sent(elsewhere) == []


async def test_a_listed_guild_allows_its_channels_and_threads_and_no_other_guilds(
    tmp_path: Path,
) -> None:
    team_id = 6001
    async with discord_gateway(tmp_path, discord={"access": {"groups": [str(team_id)]}}) as rig:
        fake, script = rig.fake, rig.script
        team, other = fake.guild("Team", id=team_id), fake.guild("Other")
        general, outside = fake.text_channel(team, "general"), fake.text_channel(other, "general")
        ann = fake.user("ann")
        thread = fake.thread(general, "ideas", by=ann)
        fake.send_in_channel(outside, ann, "hi bot", mention=True)
        script.add(f"discord:channel:{general.id}", dispatch(("caller:user", "in general")))
        thread_key = f"discord:channel:{general.id}:thread:{thread.id}"
        script.add(thread_key, dispatch(("caller:user", "in the thread")))
        fake.send_in_channel(general, ann, "hi bot", mention=True)
        fake.send_in_channel(thread, ann, "an idea", mention=True)
        (answer,) = await fake.wait_for_sent(general, 1)
        assert answer.content == "in general"
        (answer,) = await fake.wait_for_sent(thread, 1)
        assert answer.content == "in the thread"
        await rig.gateway.wait_idle()
        assert fake.sent(outside) == []


async def test_a_thread_is_its_own_conversation(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        guild = fake.guild("Team")
        general = fake.text_channel(guild, "general")
        ann = fake.user("ann")
        thread = fake.thread(general, "ideas", by=ann)
        key = f"discord:channel:{general.id}:thread:{thread.id}"
        script.add(key, dispatch(("caller:user", "in the thread")))
        fake.send_in_channel(thread, ann, "an idea", mention=True)
        (answer,) = await fake.wait_for_sent(thread, 1)
        assert answer.content == "in the thread"
        assert fake.sent(general) == []


async def test_a_long_answer_arrives_as_ordered_chunks_within_the_limit(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        ann = rig.fake.user("ann")
        rig.script.add(f"discord:{ann.id}", dispatch(("caller:user", LONG_ANSWER)))
        rig.fake.send_dm(ann, "everything")
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        sent = rig.fake.sent(ann)
        assert len(sent) >= 6
        assert all(len(m.content or "") <= 2000 for m in sent)
        shown = "\n".join(m.content or "" for m in sent)
        positions = [shown.index(f"print({n})") for n in range(12)]
        assert positions == sorted(positions)
        assert all((m.content or "").count("```") % 2 == 0 for m in sent)  # fences closed


async def test_everyone_in_model_text_pings_nobody(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        guild = fake.guild("Team")
        general = fake.text_channel(guild, "general")
        ann = fake.user("ann")
        key = f"discord:channel:{general.id}"
        script.add(key, dispatch(("caller:user", f"@everyone look, and <@{ann.id}>")))
        fake.send_in_channel(general, ann, "say it", mention=True)
        (answer,) = await fake.wait_for_sent(general, 1)
        assert not answer.pinged_everyone
        assert answer.pinged_roles == ()
        assert answer.pinged_users in ((), (ann.id,))  # at most the person it answers


async def test_a_slash_command_is_answered_without_a_turn(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake = rig.fake
        names = {c["name"] for c in fake.commands()}
        assert {"new", "reset", "stop", "status", "help", "send", "compact"} <= names
        ann = fake.user("ann")
        interaction = fake.slash_command(ann, "status")
        await fake.wait_for_callback(interaction)
        (answer,) = await fake.wait_until(
            lambda: [m for m in fake.sent(interaction=interaction) if m.content]
        )
        assert len(fake.sent(interaction=interaction)) == 1  # the "thinking…" note became it
        assert answer.ephemeral
        assert answer.content == "No conversation yet: send a message to start one."
        assert rig.script.requests == {}


async def test_new_typed_in_a_direct_message_starts_a_clean_conversation(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("ann")
        key = f"discord:{ann.id}"
        script.add(key, dispatch(("caller:user", "one")), dispatch(("caller:user", "two")))
        fake.send_dm(ann, "remember the number 41")
        await fake.wait_for_sent(ann, 1)
        fake.send_dm(ann, "/new")
        reset = (await fake.wait_for_sent(ann, 2))[-1]
        assert "new conversation" in reset.content.lower()
        assert len(script.requests[key]) == 1  # the command ran no turn
        fake.send_dm(ann, "what number?")
        assert (await fake.wait_for_sent(ann, 3))[-1].content == "two"
        first, second = script.requests[key]
        assert "remember the number 41" in first.messages[-1].text()
        # Not "41" alone: a message id or a time in a wake's header may hold those digits.
        assert not any("the number 41" in m.text() for m in second.messages)


async def test_a_dropped_gateway_socket_resumes_without_losing_or_doubling_a_message(
    tmp_path: Path,
) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("ann")
        key = f"discord:{ann.id}"
        script.add(key, dispatch(("caller:user", "one")), dispatch(("caller:user", "two")))
        fake.send_dm(ann, "first")
        await fake.wait_for_sent(ann, 1)
        await fake.drop_connection()
        fake.send_dm(ann, "while it was down")
        await fake.wait_for_sent(ann, 2)
        await rig.gateway.wait_idle()
        assert [m.content for m in fake.sent(ann)] == ["one", "two"]
        assert len(script.requests[key]) == 2
        assert any(h.kind == "resume" for h in fake.handshakes())


async def test_a_rate_limit_delays_the_reply_but_does_not_double_it(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("ann")
        fake.dm_channel(ann)
        fake.fail_next("POST /channels/{channel_id}/messages", status=429, retry_after=0.05)
        script.add(f"discord:{ann.id}", dispatch(("caller:user", "patience")))
        fake.send_dm(ann, "hi")
        await fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        assert [m.content for m in fake.sent(ann)] == ["patience"]


async def test_a_reply_discord_could_not_take_is_tried_again_and_arrives_once(
    tmp_path: Path,
) -> None:
    async with discord_gateway(tmp_path) as rig:
        fake, script = rig.fake, rig.script
        ann = fake.user("ann")
        fake.dm_channel(ann)
        # 503 is raised by discord.py at once (it retries only 500/502/504/524): ours to retry.
        fake.fail_next("POST /channels/{channel_id}/messages", status=503, times=2)
        script.add(f"discord:{ann.id}", dispatch(("caller:user", "patience")))
        fake.send_dm(ann, "hi")
        await fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        assert [m.content for m in fake.sent(ann)] == ["patience"]


async def test_typing_shows_while_the_model_works(tmp_path: Path) -> None:
    model = ScriptedModel(default=dispatch(("caller:user", "done")))
    model.gate = asyncio.Event()
    async with discord_gateway(tmp_path, model=model) as rig:
        ann = rig.fake.user("ann")
        rig.fake.send_dm(ann, "think")
        await rig.fake.wait_until(lambda: rig.fake.typing() or None)
        model.gate.set()
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.content == "done"


async def test_a_session_reaches_a_discord_user_by_channel_and_user_id(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        ann = rig.fake.user("ann")
        assert rig.gateway.cli is not None
        rig.script.add(
            "cli",
            dispatch(
                {
                    "to": "session",
                    "params": {"channel": "discord", "user_id": str(ann.id)},
                    "body": "Please greet Ann",
                }
            ),
        )
        rig.script.add(f"discord:{ann.id}", dispatch(("user", "Hello Ann!")))
        await rig.gateway.cli.submit("greet ann on discord")
        (greeting,) = await rig.fake.wait_for_sent(ann, 1)
        assert greeting.content == "Hello Ann!"


async def test_an_image_attachment_reaches_the_model_as_an_image(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        ann = rig.fake.user("ann")
        rig.script.add(f"discord:{ann.id}", dispatch(("caller:user", "a cat")))
        image = DcFile(filename="cat.png", data=b"\x89PNG fake", content_type="image/png")
        rig.fake.send_dm(ann, "what is this?", attachments=[image])
        await rig.fake.wait_for_sent(ann, 1)
        (request,) = rig.script.requests[f"discord:{ann.id}"]
        (part,) = [p for p in request.messages[-1].content if isinstance(p, FilePart)]
        assert part.url == "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()


async def test_an_edited_message_runs_marked_edited(tmp_path: Path) -> None:
    async with discord_gateway(tmp_path) as rig:
        ann = rig.fake.user("ann")
        key = f"discord:{ann.id}"
        rig.script.add(key, dispatch(("caller:user", "a")), dispatch(("caller:user", "b")))
        sent = rig.fake.send_dm(ann, "helo")
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        rig.fake.edit_message(sent, "hello")
        await rig.fake.wait_for_sent(ann, 2)
        await eventually(lambda: len(rig.script.requests[key]) == 2, "the edit's turn")
        assert rig.script.requests[key][1].messages[-1].text().endswith("[edited] hello")


async def test_a_refused_token_is_one_line_and_stops_only_discord(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gateway.app import Gateway
    from tests.gateway.conftest import Replies, make_config
    from tests.threads.agent.conftest import KeyedScript

    script = KeyedScript()
    script.add("cli", dispatch(("caller:user", "still here")))
    async with FakeDiscord(bot_name="gw-bot") as fake:
        config = make_config(
            tmp_path,
            models={
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            agents={"default": {"model": "scripted/test"}},
            http={"port": 0},
            channels={
                "discord": {
                    "enabled": True,
                    "token": "not-the-token",
                    "api_base": fake.api_url,
                    "gateway_url": fake.ws_url,
                },
            },
        )
        async with Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}) as gw:
            health = await gw.manager.health()
            assert health["channels"]["discord"]["running"] is False
            assert "refused the bot token" in health["channels"]["discord"]["stopped"]
            assert gw.cli is not None
            replies = Replies()
            gw.cli.listeners.append(replies)
            await gw.cli.submit("hello")
            assert await replies.wait(1) == ["still here"]
    lines = [r.getMessage() for r in caplog.records if "discord channel stopped" in r.getMessage()]
    assert len(lines) == 1
    assert "not-the-token" not in caplog.text


async def test_a_streamed_answer_grows_in_one_message(tmp_path: Path) -> None:
    model = Streaming("Hello", ", Ann", " — done.")
    async with discord_gateway(tmp_path, model=model, discord={"edit_seconds": 0.0}) as rig:
        ann = rig.fake.user("ann")
        rig.fake.send_dm(ann, "hi")
        model.release[0].set()
        (draft,) = await rig.fake.wait_for_sent(ann, 1)
        assert draft.content == "Hello"
        model.release[1].set()
        model.release[2].set()
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        (message,) = rig.fake.sent(ann)
        assert message.content == "Hello, Ann — done."

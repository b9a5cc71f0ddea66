"""Approvals on Discord: the question with buttons, a press, the resumed turn."""

from __future__ import annotations

from pathlib import Path

from channels.approvals import button_data
from channels.testing.discord_world import DcSentMessage
from tests.gateway.discord_rig import discord_gateway
from tests.gateway.test_approvals_telegram import DEPLOY, RAN
from threads.testing.scripted import call, dispatch


def custom_ids(message: DcSentMessage) -> list[tuple[str, str]]:
    return [(b["label"], b["custom_id"]) for row in message.components for b in row["components"]]


async def test_a_press_on_approve_resumes_the_turn_and_the_question_says_so(
    tmp_path: Path,
) -> None:
    RAN.clear()
    async with discord_gateway(tmp_path, tools=[DEPLOY]) as rig:
        fake = rig.fake
        ann = fake.user("ann")
        key = f"discord:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        fake.send_dm(ann, "deploy to eu")
        (asked,) = await fake.wait_for_sent(ann, 1)
        assert asked.content is not None
        assert asked.content.startswith("Approval needed: the agent wants to run deploy")
        request_id = custom_ids(asked)[0][1].rsplit(":", 1)[1]
        assert custom_ids(asked) == [
            ("Approve", button_data("approve", request_id)),
            ("Always", button_data("always", request_id)),
            ("Deny", button_data("deny", request_id)),
        ]
        assert RAN == []

        press = fake.press_button(asked, ann, button_data("approve", request_id))
        await fake.wait_for_callback(press)
        (answer,) = await fake.wait_until(
            lambda: [m for m in fake.sent(interaction=press) if m.content]
        )
        assert answer.ephemeral
        assert answer.content == "Approved: deploy runs now."
        replies = await fake.wait_until(
            lambda: [m for m in fake.sent(ann) if m.content == "Deployed."]
        )
        assert len(replies) == 1
        assert RAN == ["eu"]
        (question,) = [m for m in fake.sent(ann) if m.message_id == asked.message_id]
        assert question.content == f"✅ Approved by discord:{ann.id} (ann): deploy runs."
        assert question.components == ()


async def test_in_a_guild_channel_only_the_person_who_asked_decides(tmp_path: Path) -> None:
    RAN.clear()
    channel_id = 7001
    access = {"groups": [str(channel_id)]}
    async with discord_gateway(tmp_path, tools=[DEPLOY], discord={"access": access}) as rig:
        fake = rig.fake
        guild = fake.guild("Team")
        general = fake.text_channel(guild, "general", id=channel_id)
        ann, eve = fake.user("ann"), fake.user("eve")
        key = f"discord:channel:{channel_id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        fake.send_in_channel(general, ann, "deploy", mention=True)
        (asked,) = await fake.wait_for_sent(general, 1)
        request_id = custom_ids(asked)[0][1].rsplit(":", 1)[1]
        press = fake.press_button(asked, eve, button_data("approve", request_id))
        (answer,) = await fake.wait_until(
            lambda: [m for m in fake.sent(interaction=press) if m.content]
        )
        assert answer.ephemeral
        assert answer.content.startswith("You can't decide this one")
        assert RAN == []
        press = fake.press_button(asked, ann, button_data("approve", request_id))
        await fake.wait_until(lambda: [m for m in fake.sent(general) if m.content == "Deployed."])
        assert RAN == ["eu"]

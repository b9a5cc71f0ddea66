"""Approvals in Telegram: the question with its keyboard, a press, the resumed turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from channels.approvals import button_data
from channels.testing.telegram_world import SentMessage
from gateway.app import Gateway
from tests.clock import ManualClock
from tests.gateway.telegram_rig import TelegramRig, telegram_gateway
from threads.agent.tools import Tool, ToolContext
from threads.messages import ToolResultPart
from threads.testing.scripted import call, dispatch

RAN: list[str] = []


class DeployArgs(BaseModel):
    env: str


async def _deploy(args: DeployArgs, ctx: ToolContext) -> str:
    RAN.append(args.env)
    return f"deployed to {args.env}"


DEPLOY = Tool(
    name="deploy",
    description="Deploy the service.",
    args=DeployArgs,
    handler=_deploy,
    requires_approval=True,
)


@pytest.fixture(autouse=True)
def _setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    RAN.clear()


def keyboard(message: SentMessage) -> list[tuple[str, str]]:
    markup: Any = message.reply_markup or {}
    return [(b["text"], b["callback_data"]) for row in markup["inline_keyboard"] for b in row]


async def question(rig: TelegramRig, user: Any) -> tuple[SentMessage, str]:
    (asked,) = await rig.fake.wait_for_sent(user, 1)
    (_, data), *_ = keyboard(asked)
    return asked, data.rsplit(":", 1)[1]


async def settled_question(rig: TelegramRig, user: Any) -> list[SentMessage]:
    """The question, once edited to say how it was decided (its keyboard gone)."""
    return await rig.fake.wait_until(
        lambda: [m for m in rig.fake.sent(user)[:1] if m.edits and m.reply_markup is None] or None
    )


def deploy_gateway(tmp_path: Path, **kwargs: Any) -> Any:
    return telegram_gateway(tmp_path, tools=[DEPLOY], **kwargs)


async def test_a_press_on_approve_resumes_the_turn_and_the_answer_arrives(tmp_path: Path) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Deployed.")))
        rig.fake.send_dm(ann, "deploy to eu")
        asked, request_id = await question(rig, ann)
        assert asked.text is not None
        assert asked.text.startswith("Approval needed: the agent wants to run deploy")
        assert '"env": "eu"' in asked.text
        assert keyboard(asked) == [
            ("Approve", button_data("approve", request_id)),
            ("Always", button_data("always", request_id)),
            ("Deny", button_data("deny", request_id)),
        ]
        assert RAN == []

        rig.fake.press_button(asked, ann, button_data("approve", request_id))
        sent = await rig.fake.wait_for_sent(ann, 2)
        assert sent[1].text == "Deployed."
        assert RAN == ["eu"]
        # The resumed turn runs beside the press's answer: either may come first.
        (answer,) = await rig.fake.wait_until(lambda: rig.fake.callback_answers or None)
        assert answer["text"] == "Approved: deploy runs now."
        (edited,) = await settled_question(rig, ann)
        assert edited.text == f"✅ Approved by telegram:{ann.id} (Ann): deploy runs."
        assert edited.reply_markup is None


async def test_deny_tells_the_model_and_a_second_press_says_it_was_decided(
    tmp_path: Path,
) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Not deployed.")))
        rig.fake.send_dm(ann, "deploy")
        asked, request_id = await question(rig, ann)
        rig.fake.press_button(asked, ann, button_data("deny", request_id))
        await rig.fake.wait_for_sent(ann, 2)
        shown = rig.script.requests[key][-1].messages[-1]
        (result,) = shown.tool_results()
        assert result.content == "DENIED: Ann said no"
        rig.fake.press_button(asked, ann, button_data("approve", request_id))
        await rig.fake.wait_until(lambda: len(rig.fake.callback_answers) == 2 or None)
        stale = rig.fake.callback_answers[1]["text"]
        assert (
            stale
            == f"This request is no longer waiting: it was already denied by telegram:{ann.id} (Ann)."
        )
        assert RAN == []


async def test_someone_else_in_the_group_cannot_decide(tmp_path: Path) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann, eve = rig.fake.user("Ann"), rig.fake.user("Eve")
        group = rig.fake.group("Ops")
        rig.script.add(f"telegram:group:{group.id}", call("deploy", env="eu"))
        rig.fake.send_group(group, ann, "deploy", mention=True)
        asked, request_id = await question(rig, group)
        rig.fake.press_button(asked, eve, button_data("approve", request_id))
        await rig.fake.wait_until(lambda: rig.fake.callback_answers or None)
        (answer,) = rig.fake.callback_answers
        assert answer["text"].startswith("You can't decide this one")
        assert RAN == []
        assert rig.gateway.approvals is not None
        assert len(await rig.gateway.approvals.waiting()) == 1


async def test_always_adds_a_grant_so_the_same_call_runs_without_asking(tmp_path: Path) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(
            key,
            call("deploy", env="eu"),
            dispatch(("caller:user", "one")),
            call("deploy", env="eu"),
            dispatch(("caller:user", "two")),
        )
        rig.fake.send_dm(ann, "deploy")
        asked, request_id = await question(rig, ann)
        rig.fake.press_button(asked, ann, button_data("always", request_id))
        await rig.fake.wait_for_sent(ann, 2)
        rig.fake.send_dm(ann, "again")
        sent = await rig.fake.wait_for_sent(ann, 3)
        assert sent[2].text == "two"
        assert RAN == ["eu", "eu"]
        assert rig.gateway.approvals is not None
        (grant,) = await rig.gateway.approvals.grants_of(key)
        assert grant.who == f"telegram:{ann.id} (Ann)"


async def test_status_says_the_chat_waits_for_an_approval(tmp_path: Path) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", call("deploy", env="eu"))
        rig.fake.send_dm(ann, "deploy")
        _asked, request_id = await question(rig, ann)
        rig.fake.send_dm(ann, "/status")
        status = (await rig.fake.wait_for_sent(ann, 2))[1].text
        assert status is not None
        assert (
            f"Right now: waiting for approval to run deploy (/approve {request_id} or "
            f"/deny {request_id})."
        ) in status


async def test_an_expired_question_is_edited_to_say_so(tmp_path: Path) -> None:
    clock = ManualClock()
    async with deploy_gateway(tmp_path, approval_clock=clock) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, call("deploy", env="eu"), dispatch(("caller:user", "Too late.")))
        rig.fake.send_dm(ann, "deploy")
        _asked, _request_id = await question(rig, ann)
        gateway: Gateway = rig.gateway
        clock.advance(gateway.config.approvals.expiry_seconds + 1)
        sent = await rig.fake.wait_for_sent(ann, 2)
        assert sent[1].text == "Too late."
        (edited,) = await settled_question(rig, ann)
        assert edited.text == "⌛ Expired: deploy was not run (no one decided in time)."
        assert RAN == []


async def test_a_message_while_a_call_waits_is_told_why_and_runs_after_the_decision(
    tmp_path: Path,
) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(
            key,
            call("deploy", env="eu"),
            dispatch(("caller:user", "Deployed.")),
            dispatch(("caller:user", "And hello.")),
        )
        rig.fake.send_dm(ann, "deploy")
        asked, request_id = await question(rig, ann)
        rig.fake.send_dm(ann, "also say hello")
        waits = (await rig.fake.wait_for_sent(ann, 2))[1]
        assert waits.text == (
            f"Your message waits until the pending approval is decided (/approve {request_id} "
            "or /deny)."
        )
        assert len(rig.script.requests[key]) == 1  # nothing ran for it yet
        rig.fake.press_button(asked, ann, button_data("approve", request_id))
        sent = await rig.fake.wait_for_sent(ann, 4)
        assert [m.text for m in sent[2:]] == ["Deployed.", "And hello."]


async def test_stop_denies_the_waiting_call_and_runs_nothing(tmp_path: Path) -> None:
    async with deploy_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", call("deploy", env="eu"))
        rig.fake.send_dm(ann, "deploy")
        _asked, _request_id = await question(rig, ann)
        rig.fake.send_dm(ann, "/compact")
        refused = (await rig.fake.wait_for_sent(ann, 2))[1].text
        assert refused is not None
        assert "has a tool call waiting for approval" in refused
        rig.fake.send_dm(ann, "/stop")
        stopped = (await rig.fake.wait_for_sent(ann, 3))[2]
        assert stopped.text == "Stopped the running turn and what it started."
        assert rig.gateway.approvals is not None
        assert await rig.gateway.approvals.waiting() == []
        thread = rig.gateway.manager.thread(f"telegram:{ann.id}")
        assert thread is not None
        (result,) = [
            p.content
            for m in thread.session.context()
            for p in m.content
            if isinstance(p, ToolResultPart)
        ]
        assert result == "DENIED: stopped by the user"
        assert RAN == []

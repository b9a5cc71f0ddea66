"""The send policy: rules, per-session overrides, /send, and enforcement on every delivery path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from config.models import SendPolicyConfig
from tests.threads.sessions.conftest import (
    SUBAGENT,
    USER,
    Rig,
    SessionScript,
    make_rig,
    session_config,
)
from threads.keys import SessionKey
from threads.sessions.policy import SendPolicy, decide, send_command
from threads.sinks import DropSink
from threads.store.entries import CustomEntry
from threads.testing.scripted import call, dispatch, say
from threads.wake import SystemCaller, Wake, WakeSource

GROUP = "telegram:group:-1001"
DENY_TELEGRAM_GROUPS = {
    "send_policy": {
        "rules": [{"match": {"channel": "telegram", "chat_type": "group"}, "action": "deny"}]
    },
    "owners": ["telegram:42"],
}


def rules(*rules: dict[str, Any], default: str = "allow") -> SendPolicyConfig:
    return SendPolicyConfig.model_validate({"rules": list(rules), "default": default})


def deny(**match: str) -> dict[str, Any]:
    return {"match": match, "action": "deny"}


def allow(**match: str) -> dict[str, Any]:
    return {"match": match, "action": "allow"}


# -- decisions


def test_a_matching_deny_wins_even_after_a_matching_allow() -> None:
    config = rules(allow(channel="discord"), deny(chat_type="group"), allow(key_prefix="discord:"))
    decision = decide(config, "discord:channel:5")
    assert not decision.allowed
    assert decision.reason == "send policy rule 2 (chatType=group) denies it"


def test_a_matching_allow_beats_a_deny_default() -> None:
    config = rules(allow(key_prefix="telegram:"), default="deny")
    assert decide(config, "telegram:5").allowed
    assert not decide(config, "discord:5").allowed
    assert decide(config, "discord:5").reason == "the default send policy is deny"


def test_rules_match_channel_chat_type_and_key_prefix_together() -> None:
    config = rules(deny(channel="telegram", chat_type="group", key_prefix="telegram:group:-100"))
    assert not decide(config, "telegram:group:-1001").allowed
    assert decide(config, "telegram:group:-2001").allowed  # prefix differs
    assert decide(config, "telegram:1001").allowed  # a direct chat
    assert decide(config, "discord:channel:-1001").allowed  # another channel


def test_the_seed_channel_names_match_too() -> None:
    assert not decide(rules(deny(channel="webchat")), "web:abc").allowed


def test_a_group_rule_covers_channels_and_a_channel_rule_only_channels() -> None:
    assert not decide(rules(deny(chat_type="group")), "discord:channel:5").allowed
    assert decide(rules(deny(chat_type="channel")), "telegram:group:-1001").allowed


def test_the_session_override_decides_before_the_rules() -> None:
    config = rules(deny(channel="telegram"))
    assert decide(config, "telegram:5", override="allow").allowed
    assert not decide(rules(), "telegram:5", override="deny").allowed
    assert not decide(config, "telegram:5", override=None).allowed


# -- enforcement


@pytest.fixture
async def policed(script: SessionScript) -> Any:
    rig = await make_rig(script, session_config(session=DENY_TELEGRAM_GROUPS), policy=True)
    yield rig
    await rig.manager.close()


def blocked(rig: Rig, key: str) -> list[dict[str, Any]]:
    thread = rig.manager.thread(key)
    assert thread is not None
    return [
        e.data
        for e in thread.session.entries()
        if isinstance(e, CustomEntry) and e.kind == "send_blocked"
    ]


async def test_a_reply_to_a_denied_chat_is_blocked_recorded_and_reported(
    policed: Rig, script: SessionScript
) -> None:
    script.add(GROUP, dispatch(("caller:user", "hello group")))
    result = await policed.result(await policed.say(GROUP, "hi bot"))
    assert policed.inbox(GROUP).messages == []
    (record,) = blocked(policed, GROUP)
    assert record["text"] == "hello group"
    assert "rule 1 (channel=telegram chatType=group)" in record["reason"]
    (sent,) = result.data["delivered_to"]
    assert "rule 1" in sent["blocked"]


async def test_a_final_text_answer_to_a_denied_chat_is_blocked_too(
    policed: Rig, script: SessionScript
) -> None:
    script.add(GROUP, say("plain text answer"))
    await policed.result(await policed.say(GROUP, "hi bot"))
    assert policed.inbox(GROUP).messages == []
    assert blocked(policed, GROUP)[0]["text"] == "plain text answer"


async def test_a_cron_woken_message_to_the_user_is_blocked_by_the_override(
    policed: Rig, script: SessionScript
) -> None:
    script.add(USER, dispatch(("caller:user", "hi")), dispatch(("user", "your digest")))
    await policed.result(await policed.say(USER, "hello"))
    assert policed.policy is not None
    await policed.policy.set(USER, "deny")
    wake = Wake(
        source=WakeSource.CRON, body="digest", caller=SystemCaller(name="cron"), sink=DropSink()
    )
    _accepted, turn = await policed.manager.wake_turn(USER, wake)
    await policed.result(turn)
    assert policed.inbox(USER).messages == ["hi"]
    (record,) = blocked(policed, USER)
    assert record["text"] == "your digest"
    assert "the session's own send policy is deny" in record["reason"]


async def test_an_agent_to_agent_announce_is_blocked_by_the_targets_policy(
    policed: Rig, script: SessionScript
) -> None:
    script.add(GROUP, dispatch())
    await policed.result(await policed.say(GROUP, "hi"))
    script.add(
        USER,
        call("sessions_send", sessionKey=GROUP, message="ping", timeoutSeconds=5),
        dispatch(),
        say("REPLY_SKIP"),
    )
    script.add(GROUP, say("pong"), say("telling my group"))
    await policed.result(await policed.say(USER, "go"))
    await policed.settle()
    assert policed.inbox(GROUP).messages == []
    assert blocked(policed, GROUP)[0]["text"] == "telling my group"


async def test_a_spawn_announce_is_blocked_by_the_requesters_policy(
    policed: Rig, script: SessionScript
) -> None:
    script.add(GROUP, call("sessions_spawn", task="count"), dispatch())
    script.add(SUBAGENT, say("3"), say("Result: 3"))
    await policed.result(await policed.say(GROUP, "delegate"))
    await policed.settle()
    assert policed.inbox(GROUP).messages == []
    (record,) = blocked(policed, GROUP)
    assert record["text"].startswith("Sub-agent ")


# -- /send and overrides


@dataclass(frozen=True)
class Typed:
    channel: str
    user_id: str


async def test_send_on_off_inherit_sets_the_override_and_answers_with_the_policy(
    policed: Rig, script: SessionScript
) -> None:
    assert policed.policy is not None
    command = send_command(policed.policy)
    owner = Typed(channel="telegram", user_id="42")
    group = SessionKey(GROUP)
    answer = await command(owner, group, "on")
    assert answer == f"Send policy for {GROUP}: allow (this session's own setting)."
    script.add(GROUP, dispatch(("caller:user", "now allowed")))
    await policed.result(await policed.say(GROUP, "hi"))
    assert policed.inbox(GROUP).messages == ["now allowed"]
    answer = await command(owner, group, "inherit")
    assert answer.startswith(f"Send policy for {GROUP}: deny, inherited (send policy rule 1")
    answer = await command(owner, SessionKey(USER), "off")
    assert answer == f"Send policy for {USER}: deny (this session's own setting)."
    assert await command(owner, SessionKey(USER), "") == answer
    assert "takes on, off or inherit" in await command(owner, group, "maybe")


async def test_send_is_owner_only_except_at_the_terminal(policed: Rig) -> None:
    assert policed.policy is not None
    command = send_command(policed.policy)
    answer = await command(Typed(channel="telegram", user_id="7"), SessionKey(USER), "off")
    assert answer.startswith("Only an owner can change the send policy")
    assert (await policed.policy.check(USER)).allowed
    answer = await command(Typed(channel="cli", user_id="local"), SessionKey("cli"), "off")
    assert answer == "Send policy for cli: deny (this session's own setting)."


async def test_an_override_is_durable_in_the_session(policed: Rig, script: SessionScript) -> None:
    assert policed.policy is not None
    script.add(USER, dispatch())
    await policed.result(await policed.say(USER, "hi"))
    await policed.policy.set(USER, "deny")
    fresh = SendPolicy(policed.manager)  # no cache: reads the session
    assert not (await fresh.check(USER)).allowed
    await policed.manager.evict_idle(0)
    assert not (await SendPolicy(policed.manager).check(USER)).allowed
    await policed.policy.set(USER, "inherit")
    assert (await SendPolicy(policed.manager).check(USER)).allowed


async def test_sessions_list_shows_the_session_override(
    policed: Rig, script: SessionScript
) -> None:
    assert policed.policy is not None
    script.add(GROUP, dispatch())
    await policed.result(await policed.say(GROUP, "hi"))
    await policed.policy.set(GROUP, "allow")
    script.add(USER, call("sessions_list"), dispatch())
    await policed.result(await policed.say(USER, "list"))
    (listing,) = policed.tool_results(USER, "sessions_list")
    policies = {row["key"]: row["sendPolicy"] for row in listing["sessions"]}
    assert policies == {GROUP: "allow", USER: None}

"""Who may read what: a chat session sees its own session and what it started, unless granted more."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.threads.sessions.conftest import Rig, SessionScript, make_rig, session_config
from threads.testing.scripted import call, dispatch

WEB = "web:abc"
TERMINAL = "cli"
OTHER = "telegram:2"
SECRET = "my bank PIN is 4321"


def scoped(**sections: Any) -> Any:
    """The default agent without a grant: the scope comes from the requesting session."""
    return session_config({"default": {"model": "scripted/test"}}, **sections)


async def three_chats(rig: Rig, script: SessionScript) -> None:
    for key in (TERMINAL, OTHER, WEB):
        script.add(key, dispatch())
        await rig.result(await rig.say(key, SECRET if key == TERMINAL else "hello"))


@pytest.fixture
async def scoped_rig(script: SessionScript) -> AsyncIterator[Rig]:
    rig = await make_rig(script, scoped())
    yield rig
    await rig.manager.close()


async def test_a_chat_session_lists_only_its_own_session_and_what_it_started(
    scoped_rig: Rig, script: SessionScript
) -> None:
    await three_chats(scoped_rig, script)
    script.add(
        WEB,
        dispatch({"to": "subagent", "params": {"task_id": "look"}, "body": "look"}),
        call("sessions_list"),
        dispatch(),
    )
    script.add(f"{WEB}:threads:look", dispatch())
    await scoped_rig.result(await scoped_rig.say(WEB, "delegate"))
    await scoped_rig.settle()
    await scoped_rig.result(await scoped_rig.say(WEB, "list"))
    (listing,) = scoped_rig.tool_results(WEB, "sessions_list")
    assert {row["key"] for row in listing["sessions"]} == {WEB, f"{WEB}:threads:look"}


async def test_a_web_visitor_cannot_read_the_terminal_users_history(
    scoped_rig: Rig, script: SessionScript
) -> None:
    await three_chats(scoped_rig, script)
    script.add(WEB, call("sessions_history", sessionKey=TERMINAL), dispatch())
    await scoped_rig.result(await scoped_rig.say(WEB, "read cli"))
    (refused,) = scoped_rig.tool_results(WEB, "sessions_history")
    assert refused.startswith(f"session {TERMINAL} is not visible from {WEB}")
    assert SECRET not in str(scoped_rig.script.requests[WEB][-1].messages)


async def test_sessions_send_into_another_users_chat_is_refused(
    scoped_rig: Rig, script: SessionScript
) -> None:
    await three_chats(scoped_rig, script)
    script.add(
        WEB, call("sessions_send", sessionKey=OTHER, message="hi", timeoutSeconds=0), dispatch()
    )
    await scoped_rig.result(await scoped_rig.say(WEB, "poke"))
    (refused,) = scoped_rig.tool_results(WEB, "sessions_send")
    assert f"session {OTHER} is not visible from {WEB}" in refused
    assert len(scoped_rig.prompts(OTHER)) == 1  # never woken by WEB


@pytest.mark.parametrize(
    "params",
    [{"session_key": TERMINAL}, {"channel": "telegram", "user_id": "99"}],
    ids=["existing session", "a new chat"],
)
async def test_dispatch_from_a_chat_session_cannot_wake_another_conversation(
    scoped_rig: Rig, script: SessionScript, params: dict[str, str]
) -> None:
    await three_chats(scoped_rig, script)
    script.add(WEB, dispatch({"to": "session", "params": params, "body": "psst"}), dispatch())
    await scoped_rig.result(await scoped_rig.say(WEB, "go"))
    errors = [
        p.content
        for m in scoped_rig.script.requests[WEB][-1].messages
        for p in m.tool_results()
        if p.is_error
    ]
    assert any("may not wake" in e for e in errors)
    assert len(scoped_rig.prompts(TERMINAL)) == 1
    assert not await scoped_rig.manager.session_exists("telegram:99")


async def test_the_terminal_an_owner_and_a_cron_job_see_every_session(
    script: SessionScript,
) -> None:
    rig = await make_rig(script, scoped(session={"owners": [OTHER]}))
    try:
        await three_chats(rig, script)
        for key in (TERMINAL, OTHER, "cron:report"):
            script.add(key, call("sessions_list"), dispatch())
            await rig.result(await rig.say(key, "list"))
            (listing,) = rig.tool_results(key, "sessions_list")
            assert {TERMINAL, OTHER, WEB} <= {row["key"] for row in listing["sessions"]}, key
    finally:
        await rig.manager.close()


async def test_an_agent_granted_every_session_sees_them_from_any_chat(
    script: SessionScript,
) -> None:
    rig = await make_rig(
        script,
        session_config(
            {
                "default": {"model": "scripted/test"},
                "concierge": {"model": "scripted/test", "session_tools_visibility": "all"},
            }
        ),
    )
    try:
        await three_chats(rig, script)
        script.add(WEB, call("sessions_history", sessionKey=TERMINAL), dispatch())
        await rig.result(await rig.say(WEB, "read", agent="concierge"))
        (history,) = rig.tool_results(WEB, "sessions_history")
        assert history["sessionKey"] == TERMINAL
    finally:
        await rig.manager.close()

"""Sandboxed sessions see only the sessions they spawned (unless visibility is "all")."""

from __future__ import annotations

from typing import Any

from tests.threads.sessions.conftest import USER, Rig, SessionScript, make_rig, session_config
from threads.testing.scripted import call, dispatch, say

BOXED = "telegram:9"
BOXED_CHILD = "agent:boxed:subagent:"


def config(visibility: str = "spawned") -> Any:
    return session_config(
        {"boxed": {"model": "scripted/test", "sandboxed": True}},
        agent_defaults={"sandbox": {"session_tools_visibility": visibility}},
    )


async def boxed_with_a_child(rig: Rig, script: SessionScript) -> str:
    """USER has a session; BOXED (sandboxed) spawns one child; the child key."""
    script.add(USER, dispatch())
    await rig.result(await rig.say(USER, "hi"))
    script.add(BOXED, call("sessions_spawn", task="count"), dispatch())
    script.add(BOXED_CHILD, say("3"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(BOXED, "delegate", agent="boxed"))
    await rig.settle()
    (spawned,) = rig.tool_results(BOXED, "sessions_spawn")
    return str(spawned["childSessionKey"])


async def test_a_sandboxed_session_lists_only_the_sessions_it_spawned(
    script: SessionScript,
) -> None:
    rig = await make_rig(script, config())
    try:
        child = await boxed_with_a_child(rig, script)
        script.add(BOXED, call("sessions_list"), dispatch())
        await rig.result(await rig.say(BOXED, "list", agent="boxed"))
        (listing,) = rig.tool_results(BOXED, "sessions_list")
        assert [row["key"] for row in listing["sessions"]] == [child]
    finally:
        await rig.manager.close()


async def test_a_sandboxed_session_cannot_read_or_message_a_session_it_did_not_spawn(
    script: SessionScript,
) -> None:
    rig = await make_rig(script, config())
    try:
        child = await boxed_with_a_child(rig, script)
        script.add(
            BOXED,
            call("sessions_history", sessionKey=USER),
            call("sessions_send", sessionKey=USER, message="psst", timeoutSeconds=0),
            call("sessions_history", sessionKey=child),
            dispatch(),
        )
        await rig.result(await rig.say(BOXED, "snoop", agent="boxed"))
        refused, own = rig.tool_results(BOXED, "sessions_history")
        (send_refused,) = rig.tool_results(BOXED, "sessions_send")
        for error in (refused, send_refused):
            assert f"session {USER} is not visible from {BOXED}" in error
            assert "session_tools_visibility = 'spawned'" in error
        assert own["sessionKey"] == child
        assert len(rig.prompts(USER)) == 1  # USER was never woken
    finally:
        await rig.manager.close()


async def test_visibility_all_lets_a_sandboxed_session_see_every_session(
    script: SessionScript,
) -> None:
    rig = await make_rig(script, config("all"))
    try:
        child = await boxed_with_a_child(rig, script)
        script.add(BOXED, call("sessions_list"), dispatch())
        await rig.result(await rig.say(BOXED, "list", agent="boxed"))
        (listing,) = rig.tool_results(BOXED, "sessions_list")
        assert {row["key"] for row in listing["sessions"]} == {USER, BOXED, child}
    finally:
        await rig.manager.close()


async def test_an_unsandboxed_session_sees_every_session(rig: Rig, script: SessionScript) -> None:
    script.add("telegram:2", dispatch())
    await rig.result(await rig.say("telegram:2", "hi"))
    script.add(USER, call("sessions_list"), dispatch())
    await rig.result(await rig.say(USER, "list"))
    (listing,) = rig.tool_results(USER, "sessions_list")
    assert {row["key"] for row in listing["sessions"]} == {USER, "telegram:2"}

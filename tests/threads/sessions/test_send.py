"""sessions_send: accepted at once or waited for, agent-to-agent context, ping-pong, announce."""

from __future__ import annotations

from typing import Any

from tests.threads.sessions.conftest import (
    USER,
    Rig,
    SessionScript,
    make_rig,
    session_config,
)
from threads.llm.base import ModelRequest, ModelResponse
from threads.sessions.agent_to_agent import HOPS
from threads.store.entries import MessageEntry
from threads.testing.scripted import Step, call, dispatch, say

PEER = "telegram:2"
THIRD = "telegram:3"


async def seed(rig: Rig, *keys: str) -> None:
    """Give each key a session (a user message answered silently)."""
    for key in keys:
        rig.script.add(key, dispatch())
        await rig.result(await rig.say(key, "hello"))


def send(key: str = PEER, message: str = "How is the build?", timeout: float = 5) -> ModelResponse:
    return call("sessions_send", sessionKey=key, message=message, timeoutSeconds=timeout)


async def test_timeout_zero_returns_accepted_before_the_target_runs(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    gate = rig.model.hold(PEER)
    script.add(USER, send(timeout=0), dispatch(("caller:user", "asked")), say("REPLY_SKIP"))
    script.add(PEER, say("green"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask the peer"))
    (answer,) = rig.tool_results(USER, "sessions_send")
    assert answer["status"] == "accepted"
    assert answer["runId"].endswith("-t2")
    await rig.model.reached(PEER)  # the target's run had not answered when the tool returned
    gate.set()
    await rig.settle()
    assert "green" in rig.prompts(USER)[-1]


async def test_a_positive_timeout_waits_for_the_run_and_returns_its_reply(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    script.add(USER, send(), dispatch(("caller:user", "done")), say("REPLY_SKIP"))
    script.add(PEER, dispatch(("caller:session", "green, 0 failures")), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask the peer"))
    (answer,) = rig.tool_results(USER, "sessions_send")
    assert answer["status"] == "ok"
    assert answer["reply"] == "green, 0 failures"
    assert answer["sessionKey"] == PEER
    await rig.settle()


async def test_a_wait_that_times_out_says_so_and_the_run_goes_on(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    gate = rig.model.hold(PEER)
    script.add(USER, send(timeout=0.05), dispatch(("caller:user", "later")), say("REPLY_SKIP"))
    script.add(PEER, say("finally green"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask the peer"))
    (answer,) = rig.tool_results(USER, "sessions_send")
    assert answer["status"] == "timeout"
    assert "sessions_history" in answer["error"]
    gate.set()
    await rig.settle()
    thread = rig.manager.thread(PEER)
    assert thread is not None
    assert any("finally green" in m.text() for m in thread.session.context())


async def test_a_failed_run_returns_status_error(rig: Rig, script: SessionScript) -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("the model is down")

    await seed(rig, PEER)
    script.add(USER, send(), dispatch(("caller:user", "failed")))
    script.add(PEER, broken)
    await rig.result(await rig.say(USER, "ask the peer"))
    (answer,) = rig.tool_results(USER, "sessions_send")
    assert answer["status"] == "error"
    assert "the model is down" in answer["error"]
    await rig.settle()


async def test_the_primary_run_gets_agent_to_agent_context(rig: Rig, script: SessionScript) -> None:
    await seed(rig, PEER)
    script.add(USER, send(message="status?"), dispatch(), say("REPLY_SKIP"))
    script.add(PEER, say("fine"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask"))
    await rig.settle()
    primary = rig.prompts(PEER)[1]
    assert "[agent-to-agent message]" in primary
    assert f"Session {USER} (agent default) sent you this with sessions_send" in primary
    assert f'caller_session_key: "{USER}"' in primary
    assert primary.endswith("status?")


async def test_reply_back_alternates_requester_and_target_until_reply_skip(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    script.add(USER, send(timeout=0), dispatch(), say("which branch?"), say("REPLY_SKIP"))
    script.add(PEER, say("r1: green"), say("main and dev"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask"))
    await rig.settle()
    user_prompts, peer_prompts = rig.prompts(USER), rig.prompts(PEER)
    assert "round 2 of 6" in user_prompts[2]
    assert "r1: green" in user_prompts[2]
    assert "round 3 of 6" in peer_prompts[2]
    assert "which branch?" in peer_prompts[2]
    assert "round 4 of 6" in user_prompts[3]
    assert "main and dev" in user_prompts[3]
    assert len(user_prompts) == 4  # REPLY_SKIP ended it: no round 5
    announce = peer_prompts[3]
    assert "[agent-to-agent announce step]" in announce
    assert "Original request: How is the build?\n" in announce
    assert "Round-1 reply: r1: green\n" in announce
    assert "Latest reply: main and dev\n" in announce


async def test_the_ping_pong_stops_at_max_ping_pong_turns(script: SessionScript) -> None:
    config = session_config(session={"agent_to_agent": {"max_ping_pong_turns": 2}})
    rig = await make_rig(script, config)
    try:
        await seed(rig, PEER)
        script.add(USER, send(timeout=0), dispatch(), say("u2"), say("u4 (never asked)"))
        script.add(PEER, say("t1"), say("t3"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "ask"))
        await rig.settle()
        assert len(rig.prompts(USER)) == 3  # the ask, and one reply round
        assert "round 3 of 3" in rig.prompts(PEER)[2]
        assert "[agent-to-agent announce step]" in rig.prompts(PEER)[3]
        (left,) = script.scripts[USER]
        assert left.message.text() == "u4 (never asked)"  # type: ignore[union-attr]
    finally:
        await rig.manager.close()


async def test_max_ping_pong_turns_zero_runs_no_reply_back(script: SessionScript) -> None:
    config = session_config(session={"agent_to_agent": {"max_ping_pong_turns": 0}})
    rig = await make_rig(script, config)
    try:
        await seed(rig, PEER)
        script.add(USER, send(), dispatch())
        script.add(PEER, say("t1"), say("ANNOUNCE_SKIP"))
        await rig.result(await rig.say(USER, "ask"))
        await rig.settle()
        assert len(rig.prompts(USER)) == 2  # the user's message and the tool result: no reply round
        assert "[agent-to-agent announce step]" in rig.prompts(PEER)[-1]
    finally:
        await rig.manager.close()


async def test_a_loop_through_three_sessions_cannot_exceed_the_cap(script: SessionScript) -> None:
    # cap = 1 + max_ping_pong_turns = 2 agent-to-agent turns per chain.
    config = session_config(session={"agent_to_agent": {"max_ping_pong_turns": 1}})
    rig = await make_rig(script, config)
    try:
        await seed(rig, PEER, THIRD)
        script.add(USER, send(PEER, "pass it on", timeout=0), dispatch())
        script.add(
            PEER, send(THIRD, "pass it on", timeout=0), say("REPLY_SKIP"), say("ANNOUNCE_SKIP")
        )
        script.add(
            THIRD, send(USER, "pass it on", timeout=0), say("REPLY_SKIP"), say("ANNOUNCE_SKIP")
        )
        await rig.result(await rig.say(USER, "start the ring"))
        await rig.settle()
        assert rig.tool_results(PEER, "sessions_send")[0]["status"] == "accepted"
        (refused,) = rig.tool_results(THIRD, "sessions_send")
        assert "agent-to-agent limit reached" in refused
        assert "answer your caller instead" in refused
        assert len(rig.prompts(USER)) == 2  # the ring never came back to the first session
    finally:
        await rig.manager.close()


def ring_member(key: str, passes_to: str, *, first: bool = False) -> Step:
    """A session's model in a ring of sessions: every message is passed on, every exchange kept up.

    The ``first`` member starts the ring from its user's message and answers
    the message that comes back round; the others pass each agent-to-agent
    message on to ``passes_to``. Reply rounds are always answered (never
    REPLY_SKIP) and announces skipped, so only the hop cap ends anything.
    """

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "tool":  # its sessions_send went out
            return dispatch() if first else say(f"{key} passed it on")
        prompt = last.text()
        if "[agent-to-agent announce step]" in prompt:
            return say("ANNOUNCE_SKIP")
        if "[agent-to-agent reply" in prompt:
            return say(f"{key} talks on")
        if first and "[agent-to-agent message]" in prompt:
            return say(f"{key} got it back")
        return send(passes_to, "pass it on", timeout=0)

    return respond


def stored_hops(rig: Rig, *keys: str) -> list[int]:
    """The agent-to-agent depth of every turn the sessions ran (0: not agent-to-agent)."""
    hops = []
    for key in keys:
        thread = rig.manager.thread(key)
        assert thread is not None
        for entry in thread.session.entries():
            if isinstance(entry, MessageEntry) and entry.run_id and entry.wake:
                hops.append(int(entry.wake.get("meta", {}).get(HOPS, "0")))
    return hops


async def test_a_nested_exchange_runs_no_reply_round_past_the_hop_cap(
    script: SessionScript,
) -> None:
    # cap = 1 + max_ping_pong_turns = 3 agent-to-agent turns per chain. USER → PEER runs at
    # depth 1, PEER → THIRD (sent from PEER's primary run) at 2, THIRD → USER at 3.
    config = session_config(session={"agent_to_agent": {"max_ping_pong_turns": 2}})
    rig = await make_rig(script, config)
    try:
        await seed(rig, PEER, THIRD)
        script.add(USER, *[ring_member(USER, PEER, first=True)] * 20)  # more than can run
        script.add(PEER, *[ring_member(PEER, THIRD)] * 20)
        script.add(THIRD, *[ring_member(THIRD, USER)] * 20)
        await rig.result(await rig.say(USER, "start the ring"))
        await rig.settle()
        hops = stored_hops(rig, USER, PEER, THIRD)
        assert max(hops) == 3  # the chain reached the cap and never went past it

        def rounds(speaker: str, other: str) -> int:
            """Reply rounds ``speaker`` ran answering ``other`` (one request each)."""
            heading = f"Session {other} replied:"
            return sum("[agent-to-agent reply" in p and heading in p for p in rig.prompts(speaker))

        # USER ↔ PEER (depth 1): both rounds max_ping_pong_turns allows (depths 2 and 3).
        assert (rounds(USER, PEER), rounds(PEER, USER)) == (1, 1)
        # PEER ↔ THIRD (depth 2): one round at depth 3, not a second at depth 4.
        assert (rounds(PEER, THIRD), rounds(THIRD, PEER)) == (1, 0)
        # THIRD ↔ USER (depth 3): none.
        assert (rounds(THIRD, USER), rounds(USER, THIRD)) == (0, 0)
    finally:
        await rig.manager.close()


async def test_the_announce_reply_goes_to_the_target_channel_user(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    script.add(USER, send(), dispatch(), say("REPLY_SKIP"))
    script.add(PEER, say("green"), say(f"FYI: {USER} asked about the build; I said green."))
    await rig.result(await rig.say(USER, "ask"))
    await rig.settle()
    announce = rig.prompts(PEER)[-1]
    assert "Original request: How is the build?" in announce
    assert "Round-1 reply: green" in announce
    assert rig.inbox(PEER).messages == [f"FYI: {USER} asked about the build; I said green."]


async def test_announce_skip_keeps_the_target_channel_silent(
    rig: Rig, script: SessionScript
) -> None:
    await seed(rig, PEER)
    script.add(USER, send(), dispatch(), say("REPLY_SKIP"))
    script.add(PEER, say("green"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask"))
    await rig.settle()
    assert "[agent-to-agent announce step]" in rig.prompts(PEER)[-1]
    assert rig.inbox(PEER).messages == []


async def test_ok_is_returned_without_waiting_for_the_announce(
    rig: Rig, script: SessionScript
) -> None:
    gates: list[Any] = []

    def answer_then_hold(request: ModelRequest) -> ModelResponse:
        gates.append(rig.model.hold(PEER))  # the next request of PEER (the announce) waits
        return say("green")

    await seed(rig, PEER)
    script.add(USER, send(), dispatch(("caller:user", "peer says green")), say("REPLY_SKIP"))
    script.add(PEER, answer_then_hold, say("announcing"))
    result = await rig.result(await rig.say(USER, "ask"))
    assert result.stop_reason == "dispatch"
    assert rig.tool_results(USER, "sessions_send")[0]["status"] == "ok"
    await rig.model.reached(PEER)
    assert rig.inbox(PEER).messages == []  # the announce is still pending
    gates[0].set()
    await rig.settle()
    assert rig.inbox(PEER).messages == ["announcing"]


async def test_a_session_id_is_accepted_as_the_target(rig: Rig, script: SessionScript) -> None:
    await seed(rig, PEER)
    peer_id = await rig.store.resolve(PEER)
    script.add(USER, send(key=str(peer_id)), dispatch(), say("REPLY_SKIP"))
    script.add(PEER, say("green"), say("ANNOUNCE_SKIP"))
    await rig.result(await rig.say(USER, "ask"))
    await rig.settle()
    (answer,) = rig.tool_results(USER, "sessions_send")
    assert answer["sessionKey"] == PEER
    assert answer["reply"] == "green"


async def test_an_unknown_target_is_an_error_that_names_it(rig: Rig, script: SessionScript) -> None:
    script.add(USER, send(key="telegram:404"), dispatch())
    await rig.result(await rig.say(USER, "ask"))
    (error,) = rig.tool_results(USER, "sessions_send")
    assert "session key 'telegram:404' names no session" in error
    assert "sessions_list" in error


async def test_a_session_cannot_send_to_itself(rig: Rig, script: SessionScript) -> None:
    script.add(USER, send(key=USER), dispatch())
    await rig.result(await rig.say(USER, "ask"))
    (error,) = rig.tool_results(USER, "sessions_send")
    assert "cannot send to itself" in error

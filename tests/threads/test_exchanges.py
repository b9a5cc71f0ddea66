"""Every exchange between sessions is bounded: chains, depths and answers that expect no reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.threads.agent.conftest import (
    KeyedScript,
    Runtime,
    agent_config,
    make_runtime,
    thread_of,
)
from tests.threads.test_dispatch import settle
from threads.errors import ChainStoppedError, ExchangeLimitError
from threads.keys import SessionKey
from threads.llm.base import ModelRequest, ModelResponse
from threads.testing.scripted import ScriptedModel, dispatch, say
from threads.wake import SessionCaller, SystemCaller, Wake, WakeSource, wake_from_wire, wake_to_wire

CRON = "cron:hello"
USER = "telegram:1"


def cron_fire(rt: Runtime, report_to: str) -> Wake:
    """What cron sends for ``set-every --id hello --task ... --wake-session <report_to>``."""
    return Wake(
        source=WakeSource.CRON,
        body="Greet the user",
        caller=SystemCaller(name="cron"),
        sink=rt.manager.session_sink(SessionKey(report_to), SessionKey(CRON)),
        meta={"cron_job": "hello", "report_to": report_to},
    )


def last_prompt(request: ModelRequest) -> str:
    return next(m.text() for m in reversed(request.messages) if m.role == "user")


def dispatch_reports(rt: Runtime, key: str) -> list[dict[str, Any]]:
    thread = rt.manager.thread(key)
    assert thread is not None
    return [
        dict(orjson.loads(part.content))
        for message in thread.session.context()
        for part in message.tool_results()
        if part.name == "dispatch"
    ]


@pytest.fixture
async def plain() -> AsyncIterator[tuple[Runtime, KeyedScript]]:
    """A runtime whose model answers every unscripted turn in plain text."""
    script = KeyedScript()
    rt = await make_runtime(ScriptedModel(default=script))
    yield rt, script
    await rt.manager.close()


async def test_a_plain_answer_to_a_session_is_delivered_once_and_invites_no_reply(
    plain: tuple[Runtime, KeyedScript],
) -> None:
    rt, script = plain
    await rt.manager.wake_turn(CRON, cron_fire(rt, "cli"))
    await settle(rt)
    assert len(script.requests[CRON]) == 1
    assert len(script.requests["cli"]) == 1
    woken = last_prompt(script.requests["cli"][0])
    assert 'caller_session_key: "cron:hello"' in woken
    assert "reply_expected: false" in woken
    assert "exchange_depth: 1" in woken
    assert "expects no reply" in woken


async def test_replies_that_always_answer_stop_at_the_exchange_depth_and_the_model_is_told() -> (
    None
):
    def always_answer(request: ModelRequest) -> ModelResponse:
        if "caller_session_key" in last_prompt(request):
            return dispatch(("caller:session", "and to you!"))
        return say("Hello!")

    model = ScriptedModel(default=always_answer)
    rt = await make_runtime(model, agent_config(threads={"max_exchange_depth": 4}))
    try:
        await rt.manager.wake_turn(CRON, cron_fire(rt, "cli"))
        await settle(rt)
        # The fire at depth 0, then one turn per depth 1..4; the depth-5 reply wakes nobody.
        assert len(model.requests) == 5
        last = dispatch_reports(rt, CRON)[-1]
        (send,) = last["delivered_to"]
        assert "blocked" in send
        assert "threads.max_exchange_depth" in send["blocked"]
        assert "recorded here and wakes nobody" in send["blocked"]
    finally:
        await rt.manager.close()


async def test_a_parent_that_always_delegates_again_stops_at_the_depth() -> None:
    parent = USER
    child = f"{USER}:threads:dig"

    def delegate(request: ModelRequest) -> ModelResponse:
        if thread_of(request) == parent:
            return dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig more"})
        return say("dug")

    model = ScriptedModel(default=delegate)
    rt = await make_runtime(model, agent_config(threads={"max_exchange_depth": 4}))
    try:
        await rt.say(parent, "dig")
        await settle(rt)
        # user 0 → child 1 → completion 2 → child 3 → completion 4 → the next child is refused.
        assert len(model.requests) == 5
        (send,) = dispatch_reports(rt, parent)[-1]["delivered_to"]
        assert "threads.max_exchange_depth" in send["blocked"]
        assert rt.manager.thread(child) is not None
    finally:
        await rt.manager.close()


async def test_the_manager_names_a_chain_for_a_wake_no_session_caused(
    plain: tuple[Runtime, KeyedScript],
) -> None:
    rt, _ = plain
    _, turn = await rt.manager.wake_turn(CRON, cron_fire(rt, "cli"))
    await turn.wait(10)
    thread = rt.manager.thread("cli")
    assert thread is not None
    await settle(rt)
    # The chain the fire started is the one its reply into cli carried.
    cron_prompt = rt.manager.thread(CRON)
    assert cron_prompt is not None
    fire = next(e for e in cron_prompt.session.entries() if getattr(e, "wake", None))
    reply = next(e for e in thread.session.entries() if getattr(e, "wake", None))
    assert fire.wake["chain"].startswith("c_")  # type: ignore[attr-defined]
    assert reply.wake["chain"] == fire.wake["chain"]  # type: ignore[attr-defined]
    assert reply.wake["depth"] == 1  # type: ignore[attr-defined]
    assert reply.wake["expects_reply"] is False  # type: ignore[attr-defined]


async def test_a_wake_past_the_depth_or_of_a_stopped_chain_is_refused(
    plain: tuple[Runtime, KeyedScript],
) -> None:
    rt, script = plain
    deep = Wake(
        source=WakeSource.SESSION,
        body="deep",
        caller=SessionCaller(session_key=SessionKey("cron:a")),
        chain="c_deep",
        depth=7,
    )
    with pytest.raises(ExchangeLimitError, match="may go 6"):
        await rt.manager.wake("cron:b", deep)
    rt.manager.chains.cut("c_stopped", 2, "stopped in a test")
    shallower = Wake(
        source=WakeSource.SESSION,
        body="before the cut",
        caller=SessionCaller(session_key=SessionKey("cron:a")),
        chain="c_stopped",
        depth=1,
    )
    await rt.manager.wake("cron:b", shallower)
    with pytest.raises(ChainStoppedError, match="stopped in a test"):
        await rt.manager.wake("cron:b", Wake(**{**_fields(shallower), "depth": 2}))
    await settle(rt)
    assert len(script.requests["cron:b"]) == 1


def _fields(wake: Wake) -> dict[str, Any]:
    return {name: getattr(wake, name) for name in wake.__dataclass_fields__}


def test_a_wakes_chain_depth_and_reply_expectation_survive_its_wire_form() -> None:
    wake = Wake(
        source=WakeSource.SESSION,
        body="",
        caller=SessionCaller(session_key=SessionKey("cron:a")),
        chain="c_x",
        depth=3,
        expects_reply=False,
    )
    back = wake_from_wire(wake_to_wire(wake), "", lambda wire: wake.sink)
    assert (back.chain, back.depth, back.expects_reply) == ("c_x", 3, False)


async def test_a_child_completion_carries_the_childs_chain_one_deeper() -> None:
    seen: list[Wake] = []

    def parent_or_child(request: ModelRequest) -> ModelResponse:
        if thread_of(request) != USER:
            return say("dug")
        if "source: telegram" in last_prompt(request):
            return dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"})
        return dispatch()

    rt = await make_runtime(ScriptedModel(default=parent_or_child))
    try:
        rt.manager.observe(lambda thread, wake, turn: seen.append(wake))
        await rt.say(USER, "go")
        await settle(rt)
        first, to_child, completed = seen
        assert to_child.chain == first.chain
        assert to_child.depth == 1
        assert completed.source is WakeSource.CHILD_COMPLETED
        assert completed.chain == first.chain
        assert completed.depth == 2
    finally:
        await rt.manager.close()

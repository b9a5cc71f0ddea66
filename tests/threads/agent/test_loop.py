"""The agent loop: steps, concurrent tool calls, drain points, caps, named agents, usage."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from pydantic import BaseModel

from tests.threads.agent.conftest import Runtime, agent_config, make_runtime
from threads.agent.tools import ToolContext, tool
from threads.llm.base import ModelRequest, ModelResponse
from threads.messages import Usage
from threads.store.entries import TurnEntry
from threads.testing.scripted import ScriptedModel, call, calls, dispatch, say
from threads.turns import Outcome


class Nothing(BaseModel):
    pass


def turn_entries(runtime: Runtime, key: str) -> list[TurnEntry]:
    thread = runtime.manager.thread(key)
    assert thread is not None
    return [e for e in thread.session.entries() if isinstance(e, TurnEntry)]


async def test_a_text_answer_ends_the_turn_and_reaches_the_caller(runtime: Runtime) -> None:
    runtime.model.add(say("Hello there."))
    result = await runtime.result(await runtime.say("telegram:1", "hi"))
    assert result.stop_reason == "end_turn"
    assert runtime.inbox("telegram:1").messages == ["Hello there."]


async def test_independent_calls_of_one_step_run_concurrently_in_call_order(
    runtime: Runtime,
) -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()

    @tool("tool_a", "A", Nothing)
    async def tool_a(args: Nothing, ctx: ToolContext) -> str:
        a_started.set()
        await b_started.wait()  # only finishes if b runs at the same time
        return "a done"

    @tool("tool_b", "B", Nothing)
    async def tool_b(args: Nothing, ctx: ToolContext) -> str:
        b_started.set()
        await a_started.wait()
        return "b done"

    runtime.loop.tools.register(tool_a)
    runtime.loop.tools.register(tool_b)
    runtime.model.add(calls(("tool_a", {}), ("tool_b", {})), say("both"))
    await runtime.result(await runtime.say("telegram:1", "go"))
    results = [p.content for p in runtime.model.requests[1].messages[-1].tool_results()]
    assert results == ["a done", "b done"]


async def test_the_step_cap_ends_the_turn_and_is_recorded(model: ScriptedModel) -> None:
    runtime = await make_runtime(
        model, agent_config(default={"model": "scripted/test", "max_steps": 3})
    )
    try:
        model.add(*(call("health") for _ in range(5)))
        result = await runtime.result(await runtime.say("telegram:1", "loop"))
        assert result.stop_reason == "max_steps"
        assert result.steps == 3
        (entry,) = turn_entries(runtime, "telegram:1")
        assert entry.stop_reason == "max_steps"
        assert entry.steps == 3
    finally:
        await runtime.manager.close()


async def test_usage_is_summed_per_turn_and_stored_on_the_turn_entry(runtime: Runtime) -> None:
    runtime.model.add(
        _with_usage(call("health"), 100, 10, 40),
        _with_usage(dispatch(("caller:user", "ok")), 150, 5, 90),
    )
    await runtime.result(await runtime.say("telegram:1", "count"))
    (entry,) = turn_entries(runtime, "telegram:1")
    assert entry.usage == Usage(input_tokens=250, output_tokens=15, cached_tokens=130)
    assert entry.last_input == 150


def _with_usage(response: ModelResponse, inp: int, out: int, cached: int) -> ModelResponse:
    return replace(response, usage=Usage(input_tokens=inp, output_tokens=out, cached_tokens=cached))


async def test_a_wake_may_name_another_agent(model: ScriptedModel) -> None:
    config = agent_config(
        researcher={
            "model": "scripted/test",
            "instructions": "You research things.",
            "tools": ["check_session"],
        }
    )
    runtime = await make_runtime(model, config)
    try:
        model.add(say("found it"))
        await runtime.result(await runtime.say("telegram:1", "look", agent="researcher"))
        request: ModelRequest = model.requests[0]
        assert "You research things." in request.system
        assert {t.name for t in request.tools} == {"check_session", "dispatch"}
    finally:
        await runtime.manager.close()


async def test_a_steer_is_drained_after_the_tool_batch(runtime: Runtime) -> None:
    in_tool, release = asyncio.Event(), asyncio.Event()

    @tool("wait_here", "Waits.", Nothing)
    async def wait_here(args: Nothing, ctx: ToolContext) -> str:
        in_tool.set()
        await release.wait()
        return "waited"

    runtime.loop.tools.register(wait_here)
    runtime.model.add(call("wait_here"), say("noted both"))
    first = await runtime.say("telegram:1", "start")
    await asyncio.wait_for(in_tool.wait(), 5)
    steer = await runtime.say("telegram:1", "and also this")
    release.set()
    await runtime.result(first)
    await steer.wait(5)
    assert steer.outcome is Outcome.DELIVERED
    texts = [m.text() for m in runtime.model.requests[1].messages]
    injected = [t for t in texts if "and also this" in t]
    assert injected
    assert "injected: true" in injected[0]


async def test_a_steer_at_the_final_answer_redirects_into_one_more_step(runtime: Runtime) -> None:
    release = asyncio.Event()
    runtime.model.gate = release
    runtime.model.add(say("first answer"), say("answer with the steer"))
    first = await runtime.say("telegram:1", "question")
    # The model is waiting at its gate: the turn is running.
    await asyncio.wait_for(runtime.model.called.wait(), 5)
    steer = await runtime.say("telegram:1", "one more thing")
    release.set()
    result = await runtime.result(first)
    assert result.steps == 2
    assert steer.outcome is Outcome.DELIVERED
    assert runtime.inbox("telegram:1").messages == ["answer with the steer"]


async def test_the_next_turn_sends_the_very_tool_message_the_last_request_ended_with(
    runtime: Runtime,
) -> None:
    # The client keeps a conversation's encoding up to the object its last request ended
    # with; the next turn reuses it only if the session's context holds that same object.
    @tool("noop", "Does nothing.", Nothing)
    async def noop(args: Nothing, ctx: ToolContext) -> str:
        return "ok"

    runtime.loop.tools.register(noop)
    runtime.model.add(call("noop"), say("done"), say("again"))
    await runtime.result(await runtime.say("telegram:1", "first"))
    await runtime.result(await runtime.say("telegram:1", "second"))
    ended_with = runtime.model.requests[1].messages
    next_turn = runtime.model.requests[2].messages
    assert ended_with[-1].role == "tool"
    assert next_turn[len(ended_with) - 1] is ended_with[-1]

"""What the loop does when things go wrong, and the settings that bound it."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from config import validate
from tests.threads.agent.conftest import Runtime, make_runtime
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolRegistry
from threads.dispatch import dispatch_tool
from threads.keys import SessionKey
from threads.llm.base import ModelRequest, ModelResponse
from threads.llm.errors import ContextOverflowError, ModelHTTPError, RateLimitError
from threads.manager import ThreadManager
from threads.messages import Usage
from threads.store.memory import MemoryStore
from threads.testing.fake_openai import FakeOpenAIServer, Reply
from threads.testing.scripted import ScriptedModel, call, dispatch, say
from threads.turns import RunStart, TextDelta
from threads.wake import SessionCaller, UserCaller, Wake, WakeSource


def failing(request: ModelRequest) -> ModelResponse:
    raise ModelHTTPError("scripted", 500, "upstream exploded")


async def test_a_turn_the_model_fails_tells_the_chat_user(runtime: Runtime) -> None:
    runtime.model.add(failing)
    result = await runtime.result(await runtime.say("telegram:1", "hello"))
    assert result.stop_reason == "error"
    assert "upstream exploded" in result.error
    (notice,) = runtime.inbox("telegram:1").messages
    assert notice == "(Sorry — the model is unavailable (provider scripted).)"


def broken(request: ModelRequest) -> ModelResponse:
    raise ValueError("URL http://user:hunter2@10.0.0.5:8000/v1 has credentials")


async def test_a_turn_that_fails_with_any_error_tells_the_chat_user_without_internals(
    runtime: Runtime,
) -> None:
    runtime.model.add(broken)
    result = await runtime.result(await runtime.say("telegram:1", "hello"))
    assert result.stop_reason == "error"
    assert "ValueError" in result.error
    (notice,) = runtime.inbox("telegram:1").messages
    assert notice == "(Sorry — something went wrong on our side and this turn failed.)"


async def test_a_rate_limited_model_is_named_by_its_provider_only(runtime: Runtime) -> None:
    def limited(request: ModelRequest) -> ModelResponse:
        raise RateLimitError("scripted", 429, "slow down, see https://internal.example/quota")

    runtime.model.add(limited)
    await runtime.result(await runtime.say("telegram:1", "hello"))
    (notice,) = runtime.inbox("telegram:1").messages
    assert "provider scripted" in notice
    assert "internal.example" not in notice


async def test_the_step_cap_defaults_to_fifty_and_the_user_is_told(runtime: Runtime) -> None:
    runtime.model.add(*(call("health") for _ in range(60)))
    result = await runtime.result(await runtime.say("telegram:1", "loop forever"))
    assert result.stop_reason == "max_steps"
    assert result.steps == 50
    assert "stopped after 50 steps" in runtime.inbox("telegram:1").messages[-1]


async def test_a_summarizer_failure_at_the_threshold_lets_the_turn_run(
    model: ScriptedModel,
) -> None:
    config = validate(
        {
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
                "settings": {
                    "scripted/test": {
                        "context_window": 2000,
                        "reserve_tokens": 500,
                        "keep_recent_tokens": 60,
                    }
                },
            },
            "agents": {"default": {"model": "scripted/test"}},
        },
        "test",
    )
    runtime = await make_runtime(model, config)
    try:
        model.add(replace(dispatch(("caller:user", "one")), usage=Usage(input_tokens=1900)))
        await runtime.result(await runtime.say("telegram:1", "first " * 30))
        model.add(failing, dispatch(("caller:user", "answered anyway")))
        result = await runtime.result(await runtime.say("telegram:1", "second"))
        assert result.stop_reason == "dispatch"
        assert runtime.inbox("telegram:1").messages[-1] == "answered anyway"
    finally:
        await runtime.manager.close()


async def test_a_later_step_overflowing_again_fails_instead_of_compacting_twice(
    runtime: Runtime,
) -> None:
    runtime.model.add(dispatch(("caller:user", "A")))
    await runtime.result(await runtime.say("telegram:1", "alpha " * 30))
    runtime.model.add(dispatch(("caller:user", "B")))
    await runtime.result(await runtime.say("telegram:1", "beta " * 30))

    def overflow(request: ModelRequest) -> ModelResponse:
        raise ContextOverflowError("maximum context length exceeded")

    runtime.model.add(overflow, say("## Goal\nsummary"), call("health"), overflow, say("never"))
    result = await runtime.result(await runtime.say("telegram:1", "gamma"))
    assert result.stop_reason == "error"
    assert "ContextOverflowError" in result.error


async def test_the_echo_model_answers_a_session_caller_with_caller_session() -> None:
    config = validate({}, "test")
    loop = AgentLoop(
        config=config, models=Models(config.models), tools=ToolRegistry([dispatch_tool])
    )
    manager = ThreadManager(store=MemoryStore(), agent=loop, config=config)
    loop.services = manager
    await manager.start()
    try:
        _, first = await manager.wake_turn(
            "cli",
            Wake(source=WakeSource.CLI, body="hi", caller=UserCaller(channel="cli", user_id="u")),
        )
        await first.wait(5)
        _, turn = await manager.wake_turn(
            "web:other",
            Wake(source=WakeSource.CLI, body="hi", caller=UserCaller(channel="web", user_id="u")),
        )
        await turn.wait(5)
        _, asked = await manager.wake_turn(
            "web:other",
            Wake(
                source=WakeSource.SESSION,
                body="ping from cli",
                caller=SessionCaller(session_key=SessionKey("cli")),
                sink=manager.session_sink(SessionKey("cli"), SessionKey("web:other")),
            ),
        )
        result = await asked.wait(5)
        assert result is not None
        (sent,) = result.data["delivered_to"]
        assert sent["to"] == "caller:session"
        assert sent["delivered_to"] == "session cli"
    finally:
        await manager.close()


async def test_streamed_text_reaches_the_turn_events_before_the_turn_ends() -> None:
    hold = asyncio.Event()
    async with FakeOpenAIServer(api_key="k") as server:
        server.script(Reply(text="Hello there, world", gate=hold))
        config = validate(
            {
                "models": {
                    "providers": {
                        "fake": {"kind": "openai", "base_url": server.base_url, "api_key": "k"}
                    }
                },
                "agents": {"default": {"model": "fake/fake-model"}},
            },
            "test",
        )
        models = Models(config.models)
        loop = AgentLoop(config=config, models=models, tools=ToolRegistry([dispatch_tool]))
        manager = ThreadManager(store=MemoryStore(), agent=loop, config=config)
        loop.services = manager
        await manager.start()
        try:
            _, turn = await manager.wake_turn(
                "api:1",
                Wake(
                    source=WakeSource.API, body="hi", caller=UserCaller(channel="api", user_id="u")
                ),
            )
            events = turn.events()
            started = await asyncio.wait_for(anext(events), 10)
            assert isinstance(started, RunStart)
            first = await asyncio.wait_for(anext(events), 10)
            assert isinstance(first, TextDelta)
            assert not turn.done()  # the answer's last event is still held by the server
            assert server.requests[0].body["stream"] is True
            hold.set()
            await turn.wait(10)
        finally:
            await manager.close()
            await models.close()

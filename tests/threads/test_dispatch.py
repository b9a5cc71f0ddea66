"""dispatch and the thread operations of seed 000, through the real manager and loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from tests.threads.agent.conftest import KeyedScript, Runtime, agent_config, make_runtime
from threads.agent.tools import ToolContext, tool
from threads.errors import ThreadNotLoadedError
from threads.llm.base import ModelRequest, ModelResponse
from threads.messages import Message, ReasoningPart, ToolCallPart
from threads.sinks import DropSink
from threads.supervision import Supervisor
from threads.testing.scripted import ScriptedModel, call, dispatch, say
from threads.turns import Run, RunResult
from threads.wake import SystemCaller, Wake, WakeSource

USER = "telegram:1"


@pytest.fixture
def script() -> KeyedScript:
    return KeyedScript()


@pytest.fixture
async def rt(script: KeyedScript) -> AsyncIterator[Runtime]:
    # The chat user is an owner: its dispatch may wake other sessions (scoping: test_scoping.py).
    config = agent_config(
        owners=[USER], search={"model": "scripted/test", "instructions": "You search."}
    )
    runtime = await make_runtime(ScriptedModel(default=script), config)
    yield runtime
    await runtime.manager.close()


def tool_errors(request: ModelRequest) -> list[str]:
    return [p.content for m in request.messages for p in m.tool_results() if p.is_error]


def report(request: ModelRequest) -> dict[str, Any]:
    """The last dispatch result the model was shown."""
    results = [p for m in request.messages for p in m.tool_results() if p.name == "dispatch"]
    return dict(orjson.loads(results[-1].content))


async def cron_wake(runtime: Runtime, key: str, body: str) -> RunResult:
    wake = Wake(
        source=WakeSource.CRON,
        body=body,
        caller=SystemCaller(name="cron"),
        sink=DropSink(reason="cron"),
    )
    _, turn = await runtime.manager.wake_turn(key, wake)
    result = await turn.wait(10)
    assert result is not None
    return result


async def settle(runtime: Runtime) -> None:
    """Wait until no thread is running or holds queued work (children included)."""
    async with asyncio.timeout(10):
        while True:
            busy = [t.session for t in runtime.manager.threads() if t.session.busy]
            background = [
                t
                for t in runtime.manager._tasks
                if not t.done() and t.get_name().startswith("child_completed")
            ]
            if not busy and not background:
                return
            await asyncio.gather(*(s.wait_idle() for s in busy), *background)


# -- replies to the caller


async def test_caller_user_replies_to_the_channel_user(rt: Runtime, script: KeyedScript) -> None:
    script.add(USER, dispatch(("caller:user", "Hi!")))
    result = await rt.result(await rt.say(USER, "hello"))
    assert rt.inbox(USER).messages == ["Hi!"]
    assert result.data["delivered_to"][0]["delivered_to"] == f"test:{USER}"


async def test_caller_session_from_a_user_wake_is_an_error_the_model_can_fix(
    rt: Runtime, script: KeyedScript
) -> None:
    script.add(USER, dispatch(("caller:session", "Hi")), dispatch(("caller:user", "Hi")))
    await rt.result(await rt.say(USER, "hello"))
    (error,) = tool_errors(script.requests[USER][1])
    assert "sends[0].to 'caller:session'" in error
    assert '{"to": "caller:user"' in error
    assert rt.inbox(USER).messages == ["Hi"]


async def test_caller_user_from_a_session_wake_is_an_error_pointing_to_caller_session(
    rt: Runtime, script: KeyedScript
) -> None:
    child = f"{USER}:threads:ask"
    script.add(USER, dispatch({"to": "subagent", "params": {"task_id": "ask"}, "body": "ask"}))
    script.add(USER, dispatch())
    script.add(child, dispatch(("caller:user", "the answer")), dispatch(("caller:session", "42")))
    await rt.result(await rt.say(USER, "go"))
    await settle(rt)
    (error,) = tool_errors(script.requests[child][1])
    assert "sends[0].to 'caller:user' asserts the channel user woke you" in error
    assert f"the caller is session {USER}" in error
    assert '{"to": "caller:session", "body": ...}' in error
    back = script.requests[USER][1].messages[-1].text()
    assert f'caller_session_key: "{child}"' in back
    assert back.endswith("42")
    assert rt.inbox(USER).messages == []  # nothing reached the channel user


async def test_no_caller_form_is_valid_for_a_drop_sink_caller(
    rt: Runtime, script: KeyedScript
) -> None:
    script.add(
        USER,
        dispatch(("caller:user", "done")),
        dispatch(("caller:session", "done")),
        dispatch(),
    )
    result = await cron_wake(rt, USER, "check in")
    first, second = (tool_errors(r)[-1] for r in script.requests[USER][1:3])
    assert "output is dropped" in first
    assert "output is dropped" in second
    assert result.stop_reason == "dispatch"
    assert rt.inbox(USER).messages == []


async def test_dispatch_with_no_sends_ends_silently_with_history_recorded(
    rt: Runtime, script: KeyedScript
) -> None:
    script.add(USER, dispatch())
    result = await rt.result(await rt.say(USER, "ignore me"))
    assert result.stop_reason == "dispatch"
    assert rt.inbox(USER).messages == []
    thread = rt.manager.thread(USER)
    assert thread is not None
    assert any("ignore me" in m.text() for m in thread.session.context())


async def test_user_reaches_the_channel_user_when_cron_woke_the_session(
    rt: Runtime, script: KeyedScript
) -> None:
    script.add(USER, dispatch(("caller:user", "seed")), dispatch(("user", "Your report is ready.")))
    await rt.result(await rt.say(USER, "first contact"))
    await cron_wake(rt, USER, "report finished")
    assert rt.inbox(USER).messages[-1] == "Your report is ready."


async def test_user_is_refused_in_a_session_that_is_not_user_facing(
    rt: Runtime, script: KeyedScript
) -> None:
    child = f"{USER}:threads:t1"
    script.add(USER, dispatch({"to": "subagent", "params": {"task_id": "t1"}, "body": "work"}))
    script.add(child, dispatch(("user", "hello human")), say("done"))
    await rt.result(await rt.say(USER, "go"))
    await settle(rt)
    (error,) = tool_errors(script.requests[child][1])
    assert "only valid in a user-facing session" in error


# -- validation of children and sessions


@pytest.mark.parametrize(
    ("send", "expected"),
    [
        ({"to": "subagent", "body": "x"}, "params.task_id is required"),
        (
            {"to": "subagent", "body": "x", "params": {"task_id": "Bad Id"}},
            "must match [a-z0-9_-]+",
        ),
        (
            {"to": "fork", "body": "x", "params": {"task_id": "a", "agent": "nobody"}},
            "not a configured agent",
        ),
        (
            {"to": "subagent", "body": "x", "params": {"task_id": "a", "color": "red"}},
            "unknown keys",
        ),
        (
            {"to": "session", "body": "x", "params": {"session_key": "telegram:404"}},
            "does not exist",
        ),
        ({"to": "session", "body": "x", "params": {"session_key": USER}}, "cannot wake itself"),
        ({"to": "session", "body": "x", "params": {}}, "needs session_key, or channel and user_id"),
        (
            {
                "to": "session",
                "body": "x",
                "params": {"session_key": "cli", "channel": "telegram", "user_id": "2"},
            },
            "two exclusive forms",
        ),
        (
            {"to": "session", "body": "x", "params": {"channel": "fax", "user_id": "2"}},
            "is not a channel",
        ),
        ({"to": "caller:user", "body": ""}, "body is empty"),
        ({"to": "caller:user", "body": "x", "params": {"a": "b"}}, "params must be empty"),
        ({"to": "elsewhere", "body": "x"}, "sends.0.to"),
    ],
)
async def test_each_invalid_send_is_a_tool_error_naming_the_field(
    rt: Runtime, script: KeyedScript, send: dict[str, Any], expected: str
) -> None:
    script.add(USER, call("dispatch", sends=[send]), dispatch())
    result = await rt.result(await rt.say(USER, "go"))
    (error,) = tool_errors(script.requests[USER][1])
    assert expected in error
    assert result.steps == 2


def resend_as_shown(request: ModelRequest) -> ModelResponse:
    """The model's fix: the send exactly as the last tool error showed it."""
    error = tool_errors(request)[-1]
    return dispatch(orjson.loads(error.split("Send it as ", 1)[1]))


@pytest.mark.parametrize(
    ("send", "expected", "target"),
    [
        (
            {"to": "subagent", "body": "dig", "task_id": "dig"},
            "task_id belongs in params, not at the top level of the send: a send has only to, "
            'body and params. Send it as {"to": "subagent", "body": "dig", "params": '
            '{"task_id": "dig"}}',
            f"{USER}:threads:dig",
        ),
        (
            {"to": "fork", "body": "think", "params": {"task_id": "t"}, "agent": "search"},
            "agent belongs in params, not at the top level of the send: a send has only to, "
            'body and params. Send it as {"to": "fork", "body": "think", "params": '
            '{"task_id": "t", "agent": "search"}}',
            f"{USER}:fork:t",
        ),
        (
            {"to": "session", "body": "hi", "session_key": "telegram:2"},
            "session_key belongs in params, not at the top level of the send: a send has only "
            'to, body and params. Send it as {"to": "session", "body": "hi", "params": '
            '{"session_key": "telegram:2"}}',
            "telegram:2",
        ),
        (
            {"to": "session", "body": "hi", "channel": "telegram", "user_id": "2"},
            "channel, user_id belong in params, not at the top level of the send: a send has "
            'only to, body and params. Send it as {"to": "session", "body": "hi", "params": '
            '{"channel": "telegram", "user_id": "2"}}',
            "telegram:2",
        ),
    ],
    ids=["task_id", "agent", "session_key", "channel+user_id"],
)
async def test_a_param_given_outside_params_is_an_error_saying_it_belongs_in_params(
    rt: Runtime, script: KeyedScript, send: dict[str, Any], expected: str, target: str
) -> None:
    script.add("telegram:2", dispatch())
    await rt.result(await rt.say("telegram:2", "exist"))
    script.add(USER, call("dispatch", sends=[send]), resend_as_shown, dispatch())
    script.add(target, dispatch())
    result = await rt.result(await rt.say(USER, "go"))
    (error,) = tool_errors(script.requests[USER][1])
    assert error == f"invalid arguments for dispatch:\n- sends.0: {expected}"
    assert "Extra inputs are not permitted" not in error
    (delivered,) = result.data["delivered_to"]
    assert delivered["session_key"] == target  # the shape shown is one dispatch accepts
    await settle(rt)


async def test_validation_is_all_or_nothing(rt: Runtime, script: KeyedScript) -> None:
    script.add(
        USER,
        call(
            "dispatch",
            sends=[
                {"to": "caller:user", "body": "on my way"},
                {"to": "subagent", "body": "work", "params": {"task_id": "NOPE"}},
            ],
        ),
        dispatch(),
    )
    await rt.result(await rt.say(USER, "go"))
    assert rt.inbox(USER).messages == []
    assert not await rt.manager.session_exists(f"{USER}:threads:NOPE".lower())


async def test_at_most_one_caller_and_one_user_send_and_unique_targets(
    rt: Runtime, script: KeyedScript
) -> None:
    twice = {"to": "subagent", "body": "w", "params": {"task_id": "same"}}
    script.add(
        USER,
        call(
            "dispatch",
            sends=[{"to": "caller:user", "body": "a"}, {"to": "caller:user", "body": "b"}],
        ),
        call("dispatch", sends=[{"to": "user", "body": "a"}, {"to": "user", "body": "b"}]),
        call("dispatch", sends=[twice, twice]),
        dispatch(),
    )
    await rt.result(await rt.say(USER, "go"))
    errors = [tool_errors(r)[-1] for r in script.requests[USER][1:4]]
    assert "at most one caller:*" in errors[0]
    assert "at most one 'user'" in errors[1]
    assert "a second time" in errors[2]


# -- children


async def test_a_subagent_gets_its_key_and_its_answer_comes_back_as_child_completed(
    rt: Runtime, script: KeyedScript
) -> None:
    child = f"{USER}:threads:find-news"
    script.add(
        USER,
        dispatch(
            {
                "to": "subagent",
                "params": {"task_id": "find-news", "agent": "search"},
                "body": "Find news",
            }
        ),
        dispatch(("user", "News: it rained.")),
    )
    script.add(child, say("It rained."))
    result = await rt.result(await rt.say(USER, "news?"))
    delivered = result.data["delivered_to"][0]
    assert delivered["session_key"] == child
    assert delivered["note"] == "created"
    await settle(rt)
    completion = script.requests[USER][1].messages[-1].text()
    assert "source: child_completed" in completion
    assert f"child: {child}" in completion
    assert "It rained." in completion
    assert "Caller is child_completed - output to caller is dropped" in completion
    assert "You search." in script.requests[child][0].system
    assert rt.inbox(USER).messages == ["News: it rained."]


async def test_reusing_a_task_id_resumes_the_existing_child(
    rt: Runtime, script: KeyedScript
) -> None:
    child = f"{USER}:threads:t"
    spawn = dispatch({"to": "subagent", "params": {"task_id": "t"}, "body": "work"})
    script.add(USER, spawn, dispatch(), spawn, dispatch())
    script.add(child, say("one"), say("two"))
    await rt.result(await rt.say(USER, "first"))
    await settle(rt)
    result = await rt.result(await rt.say(USER, "second"))
    assert result.data["delivered_to"][0]["note"] == "resumed"
    await settle(rt)
    child_thread = rt.manager.thread(child)
    assert child_thread is not None
    texts = [m.text() for m in child_thread.session.context()]
    assert any(t.endswith("one") for t in texts)


async def test_caller_session_replies_route_back_and_recurse_until_one_side_halts(
    rt: Runtime, script: KeyedScript
) -> None:
    child = f"{USER}:threads:q"
    script.add(
        USER,
        dispatch({"to": "subagent", "params": {"task_id": "q"}, "body": "ask me something"}),
        dispatch(("caller:session", "blue")),
        dispatch(),
    )
    script.add(
        child,
        dispatch(("caller:session", "favourite colour?")),
        dispatch(("caller:session", "thanks, noted")),
    )
    await rt.result(await rt.say(USER, "start"))
    await settle(rt)
    parent_second = script.requests[USER][1].messages[-1].text()
    assert f'caller_session_key: "{child}"' in parent_second
    assert "favourite colour?" in parent_second
    child_second = script.requests[child][1].messages[-1].text()
    assert f'caller_session_key: "{USER}"' in child_second
    assert "blue" in child_second
    assert len(script.requests[USER]) == 3  # the exchange ended: no further wakes
    assert "thanks, noted" in script.requests[USER][2].messages[-1].text()


async def test_a_misrouted_wake_can_be_answered_with_caller_session(
    rt: Runtime, script: KeyedScript
) -> None:
    other = "telegram:2"
    script.add(other, dispatch(("caller:user", "hi")))
    await rt.result(await rt.say(other, "exist"))
    script.add(
        USER,
        dispatch(
            {"to": "session", "params": {"session_key": other}, "body": "Alice's report is ready"}
        ),
        dispatch(),
    )
    script.add(
        other, dispatch(("caller:session", "Wrong session: I am Bob's; try Alice's session."))
    )
    await rt.result(await rt.say(USER, "tell alice"))
    await settle(rt)
    back = script.requests[USER][1].messages[-1].text()
    assert f'caller_session_key: "{other}"' in back
    assert "Wrong session" in back


async def test_channel_and_user_id_create_the_session_on_first_contact(
    rt: Runtime, script: KeyedScript
) -> None:
    target = "telegram:99"
    script.add(
        USER,
        dispatch(
            {
                "to": "session",
                "params": {"channel": "telegram", "user_id": "99"},
                "body": "Say hi to Zhao",
            }
        ),
    )
    script.add(target, dispatch(("user", "Hello Zhao!")))
    result = await rt.result(await rt.say(USER, "greet 99"))
    assert result.data["delivered_to"][0]["note"] == "created"
    await settle(rt)
    assert rt.inbox(target).messages == ["Hello Zhao!"]
    prompt = script.requests[target][0].messages[-1].text()
    assert f'caller_session_key: "{USER}"' in prompt


async def test_a_new_fork_starts_from_the_stripped_history(
    rt: Runtime, script: KeyedScript
) -> None:
    fork = f"{USER}:fork:reflect"
    thinking = ModelResponse(
        message=Message(
            role="assistant",
            content=(
                ReasoningPart(text="private musing: check health first", signature="sig"),
                ToolCallPart(id="call_think", name="health", args={}),
            ),
        ),
        stop_reason="tool_use",
    )
    script.add(USER, thinking, dispatch(("caller:user", "the answer is 42")))
    await rt.result(await rt.say(USER, "what is the answer?"))
    parent = rt.manager.thread(USER)
    assert parent is not None
    assert any(  # the parent keeps its reasoning: the fork's copy is what drops it
        isinstance(part, ReasoningPart) for m in parent.session.context() for part in m.content
    )
    script.add(
        USER, dispatch({"to": "fork", "params": {"task_id": "reflect"}, "body": "Reflect on it"})
    )
    script.add(fork, dispatch())
    await rt.result(await rt.say(USER, "fork please"))
    await settle(rt)
    seen = script.requests[fork][0].messages
    assert all(m.role in ("user", "assistant") for m in seen)
    text = "\n".join(m.text() for m in seen)
    assert "what is the answer?" in text
    assert "[tool health(" in text
    assert "source: telegram" not in text.split("Reflect on it")[0]
    assert "private musing" not in text
    assert not any(isinstance(part, ReasoningPart) for m in seen for part in m.content)
    thread = rt.manager.thread(fork)
    assert thread is not None
    assert thread.session.header.parent is not None


# -- progress and soft stop


class Nothing(BaseModel):
    pass


def child_run(runtime: Runtime, key: str) -> Run:
    """The run in flight in ``key``'s thread."""
    thread = runtime.manager.thread(key)
    assert thread is not None
    assert thread.session.running is not None
    return thread.session.running


async def test_progress_wakes_report_a_long_child_about_once_per_interval(
    script: KeyedScript,
) -> None:
    config = agent_config()
    config = config.model_copy(
        update={
            "threads": config.threads.model_copy(
                update={"progress_after_seconds": 1e-9, "progress_interval_seconds": 60.0}
            )
        }
    )
    release = asyncio.Event()
    started = asyncio.Event()

    @tool("crawl", "Crawls for a long time.", Nothing)
    async def crawl(args: Nothing, ctx: ToolContext) -> str:
        started.set()
        await release.wait()
        return "crawled"

    runtime = await make_runtime(ScriptedModel(default=script), config, [crawl], supervise=False)
    now = [0.0]
    supervisor = Supervisor(runtime.manager, clock=lambda: now[0])
    supervisor.start(scanning=False)
    child = f"{USER}:threads:crawl"
    try:
        script.add(
            USER, dispatch({"to": "subagent", "params": {"task_id": "crawl"}, "body": "crawl"})
        )
        script.add(USER, dispatch(), dispatch(), dispatch())
        script.add(child, call("crawl"), say("crawl result: 7 pages"))
        await runtime.result(await runtime.say(USER, "go"))
        await asyncio.wait_for(started.wait(), 5)
        now[0] = child_run(runtime, child).started + 1
        assert await supervisor.scan() == 1
        assert await supervisor.scan() == 0  # not again within the interval
        now[0] += 61
        assert await supervisor.scan() == 1
        release.set()
        await settle(runtime)
        progress = [r.messages[-1].text() for r in script.requests[USER][1:3]]
        for text in progress:
            assert "source: progress" in text
            assert f"child: {child}" in text
            assert "current_tool: crawl" in text
            assert "recent_tool_calls: crawl" in text
            assert "7 pages" not in text
    finally:
        await runtime.manager.close()


async def test_no_progress_wake_before_progress_after_seconds(script: KeyedScript) -> None:
    config = agent_config()
    config = config.model_copy(
        update={
            "threads": config.threads.model_copy(
                update={"progress_after_seconds": 60.0, "progress_interval_seconds": 30.0}
            )
        }
    )
    release, started = asyncio.Event(), asyncio.Event()

    @tool("crawl", "Crawls for a long time.", Nothing)
    async def crawl(args: Nothing, ctx: ToolContext) -> str:
        started.set()
        await release.wait()
        return "crawled"

    runtime = await make_runtime(ScriptedModel(default=script), config, [crawl], supervise=False)
    now = [0.0]
    supervisor = Supervisor(runtime.manager, clock=lambda: now[0])
    supervisor.start(scanning=False)
    child = f"{USER}:threads:crawl"
    try:
        script.add(
            USER, dispatch({"to": "subagent", "params": {"task_id": "crawl"}, "body": "crawl"})
        )
        script.add(USER, dispatch(), dispatch())
        script.add(child, call("crawl"), say("crawled 7 pages"))
        await runtime.result(await runtime.say(USER, "go"))
        await asyncio.wait_for(started.wait(), 5)
        # The child's start, put on the test's clock: monotonic seconds plus 60.0 may round
        # to a hair under 60 seconds after them, and this test judges the threshold exactly.
        child_run(runtime, child).started = 1_000.0
        now[0] = 1_000.0
        assert await supervisor.scan() == 0  # just started
        now[0] = 1_059.0
        assert await supervisor.scan() == 0  # a second short of progress_after_seconds
        assert len(script.requests[USER]) == 1
        now[0] = 1_060.0
        assert await supervisor.scan() == 1  # at the threshold
        release.set()
        await settle(runtime)
        progress = script.requests[USER][1].messages[-1].text()
        assert "source: progress" in progress
        assert "elapsed_seconds: 60\n" in progress
        assert "source: child_completed" in script.requests[USER][2].messages[-1].text()
    finally:
        await runtime.manager.close()


async def test_a_soft_stop_ends_the_child_at_the_next_boundary_without_child_completed(
    script: KeyedScript,
) -> None:
    release, started = asyncio.Event(), asyncio.Event()

    @tool("dig", "Digs.", Nothing)
    async def dig(args: Nothing, ctx: ToolContext) -> str:
        started.set()
        await release.wait()
        return "dug"

    runtime = await make_runtime(ScriptedModel(default=script), agent_config(), [dig])
    child = f"{USER}:threads:dig"
    try:
        script.add(USER, dispatch({"to": "subagent", "params": {"task_id": "dig"}, "body": "dig"}))
        script.add(child, call("dig"), dispatch(), say("never reached"))
        await runtime.result(await runtime.say(USER, "go"))
        await asyncio.wait_for(started.wait(), 5)
        await runtime.manager.stop(child)
        thread = runtime.manager.thread(child)
        assert thread is not None
        assert thread.session.running is not None  # the in-flight tool call is not killed
        release.set()
        await settle(runtime)
        control = script.requests[child][1].messages[-1].text()
        assert "soft stop" in control
        assert len(script.requests[USER]) == 1  # no child_completed
        info = await runtime.manager.check_session(child)
        assert info["thread_state"] == "idle"
    finally:
        await runtime.manager.close()


async def test_stopping_a_key_with_no_loaded_thread_is_an_error(rt: Runtime) -> None:
    with pytest.raises(ThreadNotLoadedError, match="no thread is loaded"):
        await rt.manager.stop("telegram:404")


# -- check_session and health


async def test_check_session_reports_its_three_states(rt: Runtime, script: KeyedScript) -> None:
    missing = await rt.manager.check_session("telegram:404")
    assert missing == {"session_key": "telegram:404", "exists": False, "thread_active": False}
    script.add(USER, dispatch(("caller:user", "hi")))
    await rt.result(await rt.say(USER, "hello"))
    live = await rt.manager.check_session(USER)
    assert live["exists"]
    assert live["thread_active"]
    assert live["thread_state"] == "idle"
    assert live["message_count"] >= 3
    assert live["agent"] == "default"
    await rt.manager.evict_idle(0)
    stored = await rt.manager.check_session(USER)
    assert stored["exists"]
    assert not stored["thread_active"]


async def test_health_lists_every_active_thread(rt: Runtime, script: KeyedScript) -> None:
    script.add(USER, call("health"), dispatch(("caller:user", "ok")))
    await rt.result(await rt.say(USER, "how are you"))
    health = orjson.loads(
        next(p.content for m in script.requests[USER][1].messages for p in m.tool_results())
    )
    (entry,) = health["all_threads"]
    assert entry["session_key"] == USER
    assert entry["state"] == "running"
    assert entry["current_tool"] == "health"
    assert {"provider", "sessions", "process"} <= set(health)

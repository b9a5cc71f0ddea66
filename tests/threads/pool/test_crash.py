"""A real ``gateway run`` SIGKILLed while a delegation runs: the restart settles or resumes it.

The gateway talks to a fake OpenAI server in this process. The terminal user
(over the control socket) asks for a delegation; the parent's model calls
``delegate_task`` (synchronous) or ``sessions_spawn`` (asynchronous); the
child's first model call is held, and while it is held the gateway is
killed. A second ``gateway run`` over the same data directory must then:

* sync: record the child's cut run as canceled without running it again,
  settle the delegation ``canceled`` and answer the delegating call with
  that, so the parent's resumed turn reads it;
* async: resume the child's run, which answers, and settle ``done``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.control import ControlClient
from tests.gateway.terminal_driver import READY_WITHIN, STOP_WITHIN, Background, gateway_env
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.store.entries import Entry, MessageEntry, PoolReceiptEntry, TurnEntry
from threads.testing.fake_openai import FakeOpenAIServer, RecordedRequest, Reply, ToolCall

pytestmark = pytest.mark.slow

BANNER = "stop with Ctrl-C"
ASK = "please delegate the sum"
CHILD_MARKERS = ("[delegated task]", "[sub-agent task]")


def user_texts(request: RecordedRequest) -> list[str]:
    body = request.body if isinstance(request.body, dict) else {}
    out = []
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append(str(content))
    return out


def is_child(request: RecordedRequest) -> bool:
    return any(marker in text for text in user_texts(request) for marker in CHILD_MARKERS)


class Model:
    """Answers parent and child by what they were shown; holds the child until the kill."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.hold_child = True

    def __call__(self, request: RecordedRequest) -> Reply:
        texts = user_texts(request)
        last = texts[-1] if texts else ""
        body = request.body if isinstance(request.body, dict) else {}
        after_tool = (body.get("messages") or [{}])[-1].get("role") == "tool"
        if is_child(request):
            if "[sub-agent announce step]" in last:
                return Reply(text="Result: 42\nNotes: none")
            if self.hold_child:
                return Reply(text="never sent", delay=600)
            return Reply(text="42")
        if after_tool or "restarted" in last:
            return Reply(text="noted")
        args: dict[str, Any] = {"task": "add 40 and 2"}
        if self.tool == "delegate_task":
            args["timeoutSeconds"] = 600
        return Reply(tool_calls=[ToolCall(name=self.tool, arguments=args)])


@pytest.fixture
async def model_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def processes() -> Iterator[list[Background]]:
    started: list[Background] = []
    yield started
    for process in started:
        process.close()


def env_for(tmp_path: Path, server: FakeOpenAIServer) -> dict[str, str]:
    return gateway_env(
        tmp_path,
        GATEWAY_MODELS__DEFAULT="fake/model",
        GATEWAY_MODELS__PROVIDERS__FAKE__BASE_URL=f"{server.url}/v1",
        GATEWAY_MODELS__PROVIDERS__FAKE__API_KEY="not-a-secret",
        GATEWAY_THREADS__CLOSE_DEADLINE_SECONDS="0",
    )


async def start(tmp_path: Path, env: dict[str, str], processes: list[Background]) -> Background:
    gateway = Background(["run"], cwd=tmp_path, env=env)
    processes.append(gateway)
    await asyncio.to_thread(gateway.expect, BANNER)
    return gateway


async def until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_WITHIN
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {READY_WITHIN} s: {what}")
        await asyncio.sleep(0.05)  # polling another process's files, with a deadline


async def sessions(tmp_path: Path) -> dict[str, list[Entry]]:
    """Every session key's entries, read as another process reads the store."""
    store = open_store(f"jsonl://{tmp_path / 'data' / 'sessions'}", StoreOptions(no_lock=True))
    try:
        out = {}
        for key, session_id in (await store.keys()).items():
            out[key] = (await store.load(session_id)).entries
        return out
    finally:
        await store.close()


def receipts(entries: list[Entry]) -> list[PoolReceiptEntry]:
    return [e for e in entries if isinstance(e, PoolReceiptEntry)]


@pytest.mark.parametrize(
    ("tool", "settled", "child_calls"),
    [("delegate_task", "canceled", 1), ("sessions_spawn", "done", 3)],
)
async def test_a_delegation_running_when_the_gateway_is_killed_is_settled_after_the_restart(
    tmp_path: Path,
    model_server: FakeOpenAIServer,
    processes: list[Background],
    tool: str,
    settled: str,
    child_calls: int,
) -> None:
    model = Model(tool)
    model_server.default = model
    env = env_for(tmp_path, model_server)
    first = await start(tmp_path, env, processes)
    client = await ControlClient.connect(tmp_path / "data" / "gateway.sock")
    assert client is not None
    await client.call("chat", text=ASK)
    await until(lambda: any(is_child(r) for r in model_server.requests), "the child's model call")

    async def running() -> bool:
        cli = (await sessions(tmp_path)).get("cli", [])
        return [r.status for r in receipts(cli)] == ["accepted", "running"]

    await until(running, "the delegation recorded running")
    first.process.send_signal(signal.SIGKILL)
    await asyncio.to_thread(first.process.wait)
    await client.wait_disconnected()
    await client.close()

    model.hold_child = False
    second = await start(tmp_path, env, processes)

    async def settled_receipt() -> PoolReceiptEntry | None:
        cli = (await sessions(tmp_path)).get("cli", [])
        found = [r for r in receipts(cli) if r.status not in ("accepted", "running")]
        return found[0] if found else None

    settlement = await until(settled_receipt, "the delegation settled after the restart")
    assert settlement.status == settled
    everything = await sessions(tmp_path)
    cli = everything["cli"]
    assert [r.status for r in receipts(cli)] == ["accepted", "running", settled]
    (child_key,) = [k for k in everything if k.startswith("agent:default:subagent:")]
    child = everything[child_key]
    # The child's cut run is recorded as canceled by the restart.
    assert next(t.canceled for t in child if isinstance(t, TurnEntry)) is True
    if tool == "delegate_task":
        answers = [
            p
            for e in cli
            if isinstance(e, MessageEntry)
            for p in e.message.tool_results()
            if p.call_id == receipts(cli)[0].call
        ]
        (answer,) = answers
        assert answer.is_error
        assert "gateway restarted while it ran" in answer.content
    else:
        assert settlement.stop == "42"

    async def child_requests() -> bool:
        return sum(is_child(r) for r in model_server.requests) >= child_calls

    await until(child_requests, "the child's model calls")
    second.signal(signal.SIGTERM)
    assert await asyncio.to_thread(second.ended_within, STOP_WITHIN) == 0
    assert sum(is_child(r) for r in model_server.requests) == child_calls

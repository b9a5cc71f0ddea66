"""A runtime over the real modules: memory store, manager, agent loop, scripted model."""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from config import GatewayConfig, validate
from tests.threads.conftest import Inbox
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import Tool, ToolRegistry
from threads.dispatch import dispatch_tool
from threads.keys import SessionKey
from threads.llm.base import ModelRequest, ModelResponse
from threads.llm.echo import split_wake
from threads.manager import ThreadManager
from threads.ops import check_session_tool, health_tool
from threads.store.memory import MemoryStore
from threads.supervision import Supervisor
from threads.testing.scripted import ScriptedModel, Step, say
from threads.turns import RunResult, Turn
from threads.wake import UserCaller, Wake, WakeSource


def agent_config(
    owners: Sequence[str] = (),
    threads: Mapping[str, Any] | None = None,
    **agents: Mapping[str, Any],
) -> GatewayConfig:
    """The default agent (and ``agents``) on the scripted model; ``owners`` go to session.owners."""
    agents_data: dict[str, Any] = {"default": {"model": "scripted/test"}}
    agents_data.update(agents)
    return validate(
        {
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            "agents": agents_data,
            "threads": {
                "progress_after_seconds": 0.2,
                "progress_interval_seconds": 0.2,
                **(threads or {}),
            },
            "session": {"owners": list(owners)},
        },
        "test",
    )


@dataclass
class Runtime:
    manager: ThreadManager
    model: ScriptedModel
    loop: AgentLoop
    inboxes: dict[str, Inbox] = field(default_factory=dict)

    def inbox(self, key: str) -> Inbox:
        return self.inboxes.setdefault(key, Inbox(name=key))

    async def say(self, key: str, text: str, *, agent: str | None = None) -> Turn:
        """A channel user's message to ``key``; returns the turn it started."""
        wake = Wake(
            source=WakeSource.TELEGRAM,
            body=text,
            caller=UserCaller(channel="telegram", user_id="7"),
            sink=self.inbox(key),
            agent=agent,
        )
        _accepted, turn = await self.manager.wake_turn(key, wake)
        return turn

    async def result(self, turn: Turn) -> RunResult:
        result = await turn.wait(10)
        assert result is not None
        return result


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


async def make_runtime(
    model: ScriptedModel,
    config: GatewayConfig | None = None,
    tools: Iterable[Tool[Any]] = (),
    *,
    supervise: bool = True,
) -> Runtime:
    config = config or agent_config()
    registry = ToolRegistry([dispatch_tool, check_session_tool, health_tool, *tools])
    loop = AgentLoop(
        config=config, models=Models(config.models, clients={"scripted": model}), tools=registry
    )
    runtime_box: list[Runtime] = []

    def user_sinks(key: SessionKey) -> Inbox | None:
        return runtime_box[0].inbox(str(key))

    manager = ThreadManager(store=MemoryStore(), agent=loop, config=config, user_sinks=user_sinks)
    loop.services = manager
    runtime = Runtime(manager=manager, model=model, loop=loop)
    runtime_box.append(runtime)
    await manager.start()
    if supervise:
        Supervisor(manager).start()
    return runtime


@pytest.fixture
async def runtime(model: ScriptedModel) -> AsyncIterator[Runtime]:
    rt = await make_runtime(model)
    yield rt
    await rt.manager.close()


def thread_of(request: ModelRequest) -> str:
    """The ``thread`` field of the newest wake header the model was shown."""
    for message in reversed(request.messages):
        if message.role == "user":
            fields, _ = split_wake(message.text())
            if "thread" in fields:
                return fields["thread"]
    return ""


class KeyedScript:
    """Per-session scripts for one shared model: each request is answered by its thread's script."""

    def __init__(self) -> None:
        self.scripts: dict[str, deque[Step]] = defaultdict(deque)
        self.requests: dict[str, list[ModelRequest]] = defaultdict(list)

    def add(self, key: str, *steps: Step) -> None:
        self.scripts[key].extend(steps)

    def __call__(self, request: ModelRequest) -> ModelResponse:
        key = thread_of(request)
        # A snapshot: the loop keeps appending to the list it sent.
        self.requests[key].append(dataclasses.replace(request, messages=list(request.messages)))
        steps = self.scripts[key]
        if not steps:
            return say(f"(nothing scripted for {key})")
        step = steps.popleft()
        return step(request) if callable(step) else step

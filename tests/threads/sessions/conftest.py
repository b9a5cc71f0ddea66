"""Session-tool tests: the real manager and agent loop, a model scripted per session.

Built like ``tests/threads/agent/conftest.py``'s runtime (its :class:`Inbox`,
:class:`KeyedScript` and ``thread_of``), with the session tools registered,
the sub-agent tool filter installed, a store the test may keep across a
restart, channel users' sinks optionally behind the send policy, and a model
that can hold one session's requests until the test lets them go.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from config import GatewayConfig, validate
from tests.threads.agent.conftest import Inbox, KeyedScript, thread_of
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ApprovalGate, Tool, ToolRegistry
from threads.dispatch import dispatch_tool
from threads.keys import SessionKey
from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse
from threads.manager import ThreadManager
from threads.ops import check_session_tool, health_tool
from threads.pool.recovery import Recovered, recover_delegations
from threads.sessions.access import SubagentToolFilter
from threads.sessions.policy import SendPolicy
from threads.sessions.tools import SESSION_TOOLS
from threads.sinks import Sink
from threads.store.base import SessionStore
from threads.store.memory import MemoryStore
from threads.supervision import Supervisor
from threads.testing.scripted import Step, say
from threads.turns import RunResult, Turn
from threads.wake import UserCaller, Wake, WakeSource

USER = "telegram:1"
SUBAGENT = "agent:default:subagent:"
BACKGROUND = ("a2a", "delegation", "child_completed")


class SessionScript(KeyedScript):
    """Per-session scripts; a script added under a prefix ending in ':' serves every key under it."""

    def __call__(self, request: ModelRequest) -> ModelResponse:
        key = thread_of(request)
        if not self.scripts.get(key):
            for prefix, steps in self.scripts.items():
                if prefix.endswith(":") and key.startswith(prefix) and steps:
                    snapshot = dataclasses.replace(request, messages=list(request.messages))
                    self.requests[key].append(snapshot)
                    step = steps.popleft()
                    return step(request) if callable(step) else step
        return super().__call__(request)

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.requests if k.startswith(prefix))


class GatedModel:
    """A model client answering from a script; a held session's requests wait for release."""

    def __init__(self, script: SessionScript) -> None:
        self.script = script
        self._gates: dict[str, asyncio.Event] = {}
        self.waiting: dict[str, asyncio.Event] = {}

    def hold(self, key: str) -> asyncio.Event:
        """Hold ``key``'s requests (a key ending in ':' holds every key under it)."""
        gate = self._gates[key] = asyncio.Event()
        self.waiting[key] = asyncio.Event()
        return gate

    async def reached(self, key: str) -> None:
        """Return once a held request of ``key`` is waiting."""
        async with asyncio.timeout(10):
            await self.waiting[key].wait()

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        key = thread_of(request)
        for held, gate in self._gates.items():
            if key == held or (held.endswith(":") and key.startswith(held)):
                self.waiting[held].set()
                await gate.wait()
        return self.script(request)

    async def close(self) -> None:
        return None


def session_config(agents: Mapping[str, Any] | None = None, **sections: Any) -> GatewayConfig:
    """The tools' own behaviour, with the default agent granted every session.

    Which sessions a chat session may see by default is tested in test_scoping.py.
    """
    agents_data: dict[str, Any] = {
        "default": {"model": "scripted/test", "session_tools_visibility": "all"}
    }
    agents_data.update(agents or {})
    data: dict[str, Any] = {
        "models": {"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        "agents": agents_data,
        "threads": {"close_deadline_seconds": 0},
    }
    data.update(sections)
    return validate(data, "test")


@dataclass
class Rig:
    manager: ThreadManager
    model: GatedModel
    script: SessionScript
    store: SessionStore
    policy: SendPolicy | None = None
    inboxes: dict[str, Inbox] = field(default_factory=dict)
    recovered: Recovered | None = None

    def inbox(self, key: str) -> Inbox:
        return self.inboxes.setdefault(key, Inbox(name=key))

    def user_sink(self, key: str) -> Sink:
        sink: Sink = self.inbox(key)
        return self.policy.wrap(key, sink) if self.policy is not None else sink

    async def say(self, key: str, text: str, *, agent: str | None = None) -> Turn:
        """A channel user's message to ``key``; the turn it started."""
        wake = Wake(
            source=WakeSource.TELEGRAM,
            body=text,
            caller=UserCaller(channel="telegram", user_id="7"),
            sink=self.user_sink(key),
            agent=agent,
        )
        _accepted, turn = await self.manager.wake_turn(key, wake)
        return turn

    async def result(self, turn: Turn) -> RunResult:
        result = await turn.wait(10)
        assert result is not None
        return result

    async def settle(self) -> None:
        """Wait until no thread runs or holds work and no exchange or delegation is pending."""
        async with asyncio.timeout(10):
            while True:
                busy = [t.session for t in self.manager.threads() if t.session.busy]
                background = [
                    t
                    for t in self.manager._tasks
                    if not t.done() and t.get_name().startswith(BACKGROUND)
                ]
                if not busy and not background:
                    return
                await asyncio.gather(*(s.wait_idle() for s in busy), *background)

    def tool_results(self, key: str, name: str) -> list[Any]:
        """Every result of tool ``name`` that ``key``'s model was shown, parsed when JSON."""
        seen: dict[str, Any] = {}
        for request in self.script.requests[key]:
            for message in request.messages:
                for part in message.tool_results():
                    if part.name == name:
                        seen[part.call_id] = _parsed(part.content)
        return list(seen.values())

    def prompts(self, key: str) -> list[str]:
        """The newest user message of each request ``key``'s model got."""
        out = []
        for request in self.script.requests[key]:
            users = [m for m in request.messages if m.role == "user"]
            out.append(users[-1].text() if users else "")
        return out


def _parsed(content: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content


async def make_rig(
    script: SessionScript,
    config: GatewayConfig | None = None,
    *,
    store: SessionStore | None = None,
    policy: bool = False,
    recover: bool = False,
    tools: Sequence[Tool[Any]] = (),
    approvals: ApprovalGate | None = None,
) -> Rig:
    """A started rig; with ``recover``, delegations are recovered first, as a gateway does.

    ``approvals`` reviews calls before they run (a tool may then park for a person).
    """
    config = config or session_config()
    model = GatedModel(script)
    registry = ToolRegistry(
        [dispatch_tool, check_session_tool, health_tool, *SESSION_TOOLS, *tools],
        approvals=approvals,
    )
    loop = AgentLoop(
        config=config,
        models=Models(config.models, clients={"scripted": model}),
        tools=registry,
        tool_filter=SubagentToolFilter(config),
    )
    box: list[Rig] = []

    def user_sinks(key: SessionKey) -> Sink:
        return box[0].user_sink(key)

    store = store or MemoryStore()
    manager = ThreadManager(store=store, agent=loop, config=config, user_sinks=user_sinks)
    loop.services = manager
    rig = Rig(manager=manager, model=model, script=script, store=store)
    if policy:
        rig.policy = SendPolicy(manager)
    box.append(rig)
    if recover:
        rig.recovered = await recover_delegations(manager)
    await manager.start()
    Supervisor(manager).start(scanning=False)
    return rig


@pytest.fixture
def script() -> SessionScript:
    return SessionScript()


@pytest.fixture
async def rig(script: SessionScript) -> AsyncIterator[Rig]:
    runtime = await make_rig(script)
    yield runtime
    await runtime.manager.close()


def reply(text: str) -> Step:
    """A final text answer (what a turn replies to its caller)."""
    return say(text)


async def eventually(predicate: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``predicate`` until it holds, failing after a deadline (never a bare sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"still not true after 10 s: {what}")
        await asyncio.sleep(0.005)  # polling with a deadline

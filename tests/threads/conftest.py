"""Helpers for the runtime tests: both stores, a hand-driven agent, and a manager over the real loop.

Session tests drive :class:`threads.session.Session` with :class:`HandAgent`, whose
turns are small async functions; thread and manager tests run the real agent
loop against a :class:`~threads.testing.scripted.ScriptedModel`. Nothing here
sleeps to wait: turns are held open on events.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from config import GatewayConfig, validate
from tests.conftest import require_service
from tests.threads.store.conftest import (
    REDIS_HOST,
    REDIS_PORT,
    Backend,
    backend_location,
    delete_prefix,
)
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import Tool, ToolContext, ToolRegistry, tool
from threads.dispatch import dispatch_tool
from threads.ids import new_entry_id, new_session_id
from threads.keys import SessionKey
from threads.manager import ThreadManager
from threads.messages import Message
from threads.ops import check_session_tool, health_tool
from threads.sinks import Delivery, OutboundMessage
from threads.store import open_store
from threads.store.base import SessionStore
from threads.store.entries import Entry, Header, MessageEntry, ReceiptEntry, TurnEntry
from threads.testing.scripted import ScriptedModel
from threads.turns import Run, RunResult
from threads.wake import SessionCaller, SystemCaller, UserCaller, Wake, WakeSource, wake_to_wire

DEADLINE = 10.0

# -- stores


@pytest.fixture(params=["memory", "jsonl"])
async def session_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SessionStore]:
    """Every session test runs on the in-process store and on the embedded default (jsonl)."""
    url = "memory://" if request.param == "memory" else f"jsonl://{tmp_path / 'sessions'}"
    store = open_store(url)
    yield store
    await store.close()


@pytest.fixture(params=["jsonl", "sqlite", "redis"])
async def crash_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A place a process can die on: a directory, a SQLite file or a Redis prefix."""
    name: str = request.param
    if name == "redis":
        require_service("redis", REDIS_HOST, REDIS_PORT)
    found = Backend(name=name, location=backend_location(name, tmp_path), shared=True)
    try:
        yield found
    finally:
        try:
            await found.close_all()
        finally:
            if name == "redis":
                await delete_prefix(found.location)


async def stored(store: SessionStore, session_id: str) -> list[Entry]:
    """What the store holds for a session now (a fresh load, not the session's memory)."""
    return (await store.load(session_id)).entries


def kinds(entries: Iterable[Entry]) -> list[str]:
    return [e.TYPE for e in entries]


def prompts(entries: Iterable[Entry]) -> list[MessageEntry]:
    """The prompt entries: messages that start a turn (they carry its run id)."""
    return [e for e in entries if isinstance(e, MessageEntry) and e.run_id]


def turn_entries(entries: Iterable[Entry]) -> list[TurnEntry]:
    return [e for e in entries if isinstance(e, TurnEntry)]


def receipts(entries: Iterable[Entry], status: str | None = None) -> list[ReceiptEntry]:
    return [
        e for e in entries if isinstance(e, ReceiptEntry) and (status is None or e.status == status)
    ]


def texts(entries: Iterable[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


async def plant(store: SessionStore, header: Header, entries: Iterable[Entry]) -> None:
    """Store a whole session file as given, without the checks a writer makes."""
    from threads.store.codec import encode_entry, encode_header

    data = encode_header(header) + b"".join(encode_entry(e) for e in entries)
    await store.plant(header.id, data)  # type: ignore[attr-defined]


async def accepted_and_never_run(
    store: SessionStore, key: str, body: str, *, chat: str, created: datetime | None = None
) -> str:
    """A session a killed gateway left under ``key``: one user wake accepted, never run.

    Its replies go to the channel chat ``chat`` (a runtime's inbox of that name).
    """
    header = Header(
        id=new_session_id(),
        created=created or datetime.now(UTC),
        meta={"key": key, "agent": "default"},
    )
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body=body,
        caller=UserCaller(channel="telegram", user_id="7"),
        sink=Inbox(name=chat),
    )
    receipt = ReceiptEntry(
        id=new_entry_id(),
        status="accepted",
        msg=Message.user(body),
        run_id=f"{header.id}-t1",
        turn=new_entry_id(),
        policy="queue",
        wake=wake_to_wire(wake),
    )
    await plant(store, header, [receipt])
    await store.point(key, header.id)
    return header.id


class FullDisk:
    """A jsonl store's seam: file writes fail with ENOSPC half-way through a batch while full.

    Pass it as ``JsonlStore(..., pause=FullDisk())``; it runs on the store's
    writer thread, as the ``os.write`` it stands for does.
    """

    def __init__(self) -> None:
        self._full = threading.Event()
        self.refused = 0

    def fill(self) -> None:
        self._full.set()

    def free(self) -> None:
        self._full.clear()

    def __call__(self, point: str) -> None:
        if point == "append:half-written" and self._full.is_set():
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")


# -- a hand-driven agent for session tests

TurnScript = Callable[[Run], Awaitable[RunResult]]


class HandAgent:
    """An agent whose turns are scripted one by one; unscripted turns answer ``ok``.

    ``runs`` records every run it was given; ``started`` is set when a run
    begins (cleared by the test to catch the next one).
    """

    def __init__(self, *turns: TurnScript) -> None:
        self.turns: deque[TurnScript] = deque(turns)
        self.runs: list[Run] = []
        self.started = asyncio.Event()

    def add(self, *turns: TurnScript) -> None:
        self.turns.extend(turns)

    async def run(self, run: Run) -> RunResult:
        self.runs.append(run)
        self.started.set()
        script = self.turns.popleft() if self.turns else answer("ok")
        return await script(run)


def answer(text: str) -> TurnScript:
    """A turn that answers ``text`` in one step."""

    async def turn(run: Run) -> RunResult:
        run.steps = 1
        run.stage(Message.assistant(text))
        return RunResult(stop_reason="end_turn", text=text, steps=1)

    return turn


@dataclass
class Hold:
    """Holds a turn open: ``entered`` is set when the turn reaches it, ``release`` lets it go."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def reached(self) -> None:
        async with asyncio.timeout(DEADLINE):
            await self.entered.wait()

    def turn(self, text: str = "held") -> TurnScript:
        async def turn(run: Run) -> RunResult:
            self.entered.set()
            await self.release.wait()
            return await answer(text)(run)

        return turn


# -- a manager over the real agent loop


class BlockArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = ""


@dataclass
class Blocker:
    """A tool that waits until released: a turn held mid-tool."""

    name: str = "block"
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[str] = field(default_factory=list)

    def tool(self) -> Tool[BlockArgs]:
        async def handler(args: BlockArgs, ctx: ToolContext) -> str:
            self.calls.append(args.label)
            self.entered.set()
            await self.release.wait()
            return f"released {args.label}"

        return tool(self.name, "Wait until the test releases the call.", BlockArgs)(handler)

    async def reached(self, count: int = 1) -> None:
        async with asyncio.timeout(DEADLINE):
            while len(self.calls) < count:
                self.entered.clear()
                await self.entered.wait()


@dataclass
class Inbox:
    """A channel endpoint that keeps what it is sent.

    With ``dedups`` it shows a message once per outbound id, as the web chat
    does (``received`` still counts every delivery); ``after_deliver`` runs
    after a message is taken (a test kills the process there).
    """

    name: str = "user"
    messages: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    dedups: bool = False
    received: list[OutboundMessage] = field(default_factory=list)
    after_deliver: Callable[[OutboundMessage], None] | None = None
    _shown: set[str] = field(default_factory=set, repr=False)

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        return f"Caller is the {self.name} - reply with dispatch(to=caller:user)"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "channel", "channel": "test", "chat": self.name}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        repeat = bool(message.outbound_id) and message.outbound_id in self._shown
        self.received.append(message)
        self._shown.add(message.outbound_id)
        if not (self.dedups and repeat):
            self.messages.append(message.text)
        self.arrived.set()
        if self.after_deliver is not None:
            self.after_deliver(message)
        return Delivery(delivered_to=f"test:{self.name}")

    async def wait(self, count: int = 1) -> list[str]:
        async with asyncio.timeout(DEADLINE):
            while len(self.messages) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.messages


def gateway_config(*, timezone: str = "UTC", **threads: Any) -> GatewayConfig:
    """A configuration whose default agent talks to the scripted model."""
    return validate(
        {
            "timezone": timezone,
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            "agents": {"default": {"model": "scripted/x"}},
            "threads": threads,
        },
        "test",
    )


@dataclass
class Runtime:
    """A thread manager over a store, the agent loop and a scripted model, with channel inboxes."""

    manager: ThreadManager
    model: ScriptedModel
    store: SessionStore
    inboxes: dict[str, Inbox] = field(default_factory=dict)

    def inbox(self, name: str) -> Inbox:
        return self.inboxes.setdefault(name, Inbox(name=name))

    def user_wake(
        self, body: str, *, source: WakeSource = WakeSource.TELEGRAM, to: str = ""
    ) -> Wake:
        return Wake(
            source=source,
            body=body,
            caller=UserCaller(channel=source.value, user_id="7", name="Ada"),
            sink=self.inbox(to or "user"),
        )


def system_wake(body: str, source: WakeSource = WakeSource.CRON) -> Wake:
    from threads.sinks import DropSink

    return Wake(
        source=source,
        body=body,
        caller=SystemCaller(name=source.value),
        sink=DropSink(reason=source.value),
    )


def session_wake(body: str, caller: str) -> Wake:
    from threads.sinks import DropSink

    return Wake(
        source=WakeSource.SESSION,
        body=body,
        caller=SessionCaller(session_key=SessionKey(caller)),
        sink=DropSink(reason="test"),
    )


async def make_runtime(
    store: SessionStore,
    model: ScriptedModel,
    *,
    config: GatewayConfig | None = None,
    tools: Iterable[Tool[Any]] = (),
    recovery_path: Path | None = None,
    start: bool = True,
    inboxes: dict[str, Inbox] | None = None,
) -> Runtime:
    """A runtime over ``store``; ``inboxes`` are the channel endpoints (kept across a restart)."""
    config = config or gateway_config()
    registry = ToolRegistry([dispatch_tool, check_session_tool, health_tool, *tools])
    loop = AgentLoop(
        config=config, models=Models(config.models, clients={"scripted": model}), tools=registry
    )
    inboxes = {} if inboxes is None else inboxes

    def channel_sinks(wire: Mapping[str, str]) -> Inbox:
        name = wire.get("chat", "user")
        return inboxes.setdefault(name, Inbox(name=name))

    def user_sinks(key: SessionKey) -> Inbox:
        return inboxes.setdefault(f"user of {key}", Inbox(name=f"user of {key}"))

    manager = ThreadManager(
        store=store,
        agent=loop,
        config=config,
        channel_sinks=channel_sinks,
        user_sinks=user_sinks,
        recovery_path=recovery_path,
    )
    loop.services = manager
    runtime = Runtime(manager=manager, model=model, store=store, inboxes=inboxes)
    if start:
        await manager.start()
    return runtime

"""Turns: busy policies, the Turn handle a send returns, and the Run an agent drives.

A :class:`Turn` stands for one accepted send, whatever becomes of it: a run of
its own, a message steered into another run, a follow-up, or nothing. A
:class:`Run` is the agent's view of one running turn: its context, the wake it
answers, and the doors back into the session (stage and flush step messages,
drain steered messages, see a soft stop).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from threads.errors import ClosedError, DroppedError
from threads.messages import Message, ToolCallPart, Usage
from threads.outbound import Outgoing, send, send_id
from threads.sinks import Delivery
from threads.store.entries import Entry

if TYPE_CHECKING:
    from threads.session import Session

Flush = Callable[["Run", Sequence[Entry]], Awaitable[None]]


class Policy(StrEnum):
    """What a send does while a turn runs."""

    QUEUE = "queue"
    REJECT = "reject"
    STEER = "steer"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"
    COLLECT = "collect"


class Outcome(StrEnum):
    """How a turn ended (``running`` until it has).

    ``parked``: the run stopped at a call that waits for a person's decision;
    the session is pending until the decision resumes it.
    """

    RUNNING = "running"
    ANSWERED = "answered"
    PARKED = "parked"
    DELIVERED = "delivered"
    DEFERRED = "deferred"
    DROPPED = "dropped"
    FAILED = "failed"
    CANCELED = "canceled"
    NOT_PERSISTED = "not_persisted"  # the run ended, and its end could not be written
    FORWARDED = "forwarded"


# -- run events, streamed by Turn.events()


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart:
    call_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFinish:
    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFinish:
    step: int
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStart:
    """The run began: it holds a turn slot and its first model call is next."""

    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinish:
    result: RunResult


Event = RunStart | TextDelta | ToolStart | ToolFinish | StepFinish | RunFinish


@dataclass(frozen=True, slots=True, kw_only=True)
class Parked:
    """A call left unexecuted until a person decides it: the turn ends pending on it.

    ``tool`` is the name people see (an MCP tool's label); ``expiry`` is when
    an undecided request is denied on its own (None: never).
    """

    call: ToolCallPart
    tool: str
    reason: str
    expiry: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """One parked call and its decision, as the run that resumes the boundary applies it.

    ``outcome`` is ``approve`` (the call runs, once) or ``deny`` (the model
    reads ``DENIED: <reason>``).
    """

    call: ToolCallPart
    outcome: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What a run produced.

    ``stop_reason`` is ``dispatch`` (the turn ended with a dispatch call),
    ``end_turn`` (a final text answer), ``max_steps`` (the step cap), ``stopped``
    (a soft stop), ``parked`` (calls wait for a decision: ``parked`` names
    them), ``canceled`` or ``error``. ``data`` carries what the agent wants its
    caller to see (the dispatch report).
    """

    stop_reason: str
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    error: str = ""
    last_input: int = 0
    data: Mapping[str, Any] = field(default_factory=dict)
    parked: tuple[Parked, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.error and self.stop_reason not in ("canceled", "error")


class Agent(Protocol):
    """What a session runs for each turn."""

    async def run(self, run: Run) -> RunResult: ...


class NoRuns:
    """The agent of a session opened to edit it (a CLI's write), never to run a turn."""

    async def run(self, run: Run) -> RunResult:
        raise RuntimeError(f"session {run.session.id} was opened to be edited, not to run turns")


class Turn:
    """The handle of one accepted send. Safe to await from any task."""

    def __init__(self, turn_id: str, run_id: str, policy: Policy) -> None:
        self.id = turn_id
        self.run_id = run_id
        self.policy = policy
        self.outcome = Outcome.RUNNING
        self.next: Turn | None = None
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        self._done = asyncio.Event()
        self._events: list[Event] = []
        self._new_event = asyncio.Event()
        self._callbacks: list[Callable[[Turn], None]] = []

    def done(self) -> bool:
        return self._done.is_set()

    async def wait(self, timeout: float | None = None) -> RunResult | None:
        """The run's result once the turn is decided.

        ``None`` for a steer (delivered or deferred: the answer is another
        turn's). A failed or canceled run still returns its result, whose
        ``error`` and ``stop_reason`` say how it ended (``outcome`` names it).
        Raises :class:`DroppedError` for a dropped message,
        :class:`ClosedError` when the session closed before it ran,
        :class:`NotRunError` when its prompt could not be written,
        :class:`NotPersistedError` when it ran and its end could not be
        written (the run's result rides on the error, and on ``result``), and
        :class:`TimeoutError` when ``timeout`` passes first (the turn goes on).
        """
        if timeout is None:
            await self._done.wait()
        else:
            async with asyncio.timeout(timeout):
                await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.result

    async def events(self) -> AsyncGenerator[Event, None]:
        """The run's events in order; may be iterated more than once."""
        index = 0
        while True:
            while index < len(self._events):
                yield self._events[index]
                index += 1
            if self._done.is_set():
                return
            self._new_event.clear()
            await self._new_event.wait()

    def add_done_callback(self, callback: Callable[[Turn], None]) -> None:
        """Call ``callback(turn)`` when the turn is decided (at once if it is)."""
        if self.done():
            callback(self)
        else:
            self._callbacks.append(callback)

    # -- the session's side

    def emit(self, event: Event) -> None:
        self._events.append(event)
        self._new_event.set()

    def finish(
        self,
        outcome: Outcome,
        result: RunResult | None = None,
        error: BaseException | None = None,
    ) -> None:
        if self.done():
            return
        self.outcome = outcome
        self.result = result
        self.error = error
        self._done.set()
        self._new_event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def drop(self) -> None:
        self.finish(
            Outcome.DROPPED, error=DroppedError(f"message {self.id} was dropped from the queue")
        )

    def close(self, session: str) -> None:
        self.finish(Outcome.CANCELED, error=ClosedError(session))


class Run:
    """The agent's handle on one running turn.

    ``messages`` is the context the run starts from (the prompt last), a
    sequence of its own that the agent extends as the run goes: the session's
    context shared up to that point, not copied (:class:`threads.context.RunContext`).
    ``stage`` holds step messages; ``flush`` makes them durable; ``drain``
    flushes, then delivers steered messages into the run (durably) and returns
    them. Messages staged and not flushed when the run ends land with the turn
    entry, in one batch. A run that resumes an approval boundary has no
    prompt: ``resumption`` holds the parked calls and their decisions, which
    it applies before its first model call.

    Sends go through the outbound ledger (:mod:`threads.outbound`):
    ``send_now`` records them durably, with what is staged, then hands them
    to their sinks (a notice mid-turn, the sends of ``dispatch``); ``outbox``
    holds the sends made once the turn's end is durable (the final answer, a
    closing notice). ``ledger`` holds the marks (and records) that ride with
    the next write.

    A step the store holds back is written late (``late_steps`` counts them).
    ``rerun`` closes the run's ledger as a failed attempt and goes on under a
    new run id (the overflow re-run).
    """

    def __init__(
        self,
        *,
        session: Session,
        run_id: str,
        turn: Turn,
        messages: MutableSequence[Message],
        payload: Any,
        policy: Policy,
        resumption: tuple[Resolution, ...] = (),
    ) -> None:
        self.session = session
        self.run_id = run_id
        self.turn = turn
        self.messages = messages
        self.payload = payload
        self.policy = policy
        self.resumption = resumption
        self.started = time.monotonic()
        self.steps = 0
        self.current_tool = ""
        self.tool_history: list[str] = []
        self.staged: list[Message] = []
        self.ledger: list[Entry] = []
        self.outbox: list[Outgoing] = []
        self.stop_requested = False
        self.late_steps = 0
        self._sends = 0
        self._flush: Flush | None = None
        self._drain: Callable[[Run], Awaitable[list[Message]]] | None = None
        self._rerun: Callable[[Run, str, Usage], Awaitable[None]] | None = None

    def bind(
        self,
        flush: Flush,
        drain: Callable[[Run], Awaitable[list[Message]]],
        rerun: Callable[[Run, str, Usage], Awaitable[None]] | None = None,
    ) -> None:
        self._flush = flush
        self._drain = drain
        self._rerun = rerun

    def stage(self, *messages: Message) -> None:
        self.staged.extend(messages)

    async def flush(self) -> None:
        if (self.staged or self.ledger) and self._flush is not None:
            await self._flush(self, ())

    def send_id(self) -> str:
        """A new stable id for a send of this run: the run, the step, the send's index."""
        self._sends += 1
        return send_id(self.run_id, self.steps, self._sends)

    async def record(self, sends: Sequence[Outgoing]) -> None:
        """Make ``sends`` durable (pending), with everything staged, before any leaves."""
        if self._flush is None:
            raise RuntimeError(f"run {self.run_id} is not bound to a session")
        await self._flush(self, [out.record for out in sends])

    async def send_now(self, sends: Sequence[Outgoing]) -> list[Delivery | None]:
        """Record ``sends``, then hand each to its sink; their marks ride with the next write."""
        await self.record(sends)
        deliveries: list[Delivery | None] = []
        for out in sends:
            delivery, done = await send(out)
            if done is not None:
                self.ledger.append(done)
            deliveries.append(delivery)
        return deliveries

    async def drain(self) -> list[Message]:
        """Deliver waiting steers into this run; empty when none wait."""
        if self._drain is None:
            return []
        return await self._drain(self)

    async def rerun(self, error: str, usage: Usage) -> None:
        """Record this attempt as ended by ``error`` (its ``usage`` spent) and go on as a new run.

        The attempt's turn entry names the new run id (``rerun``) before the
        new run does anything; ``run_id`` and the turn's become the new one.
        """
        if self._rerun is not None:
            await self._rerun(self, error, usage)

    def has_steers(self) -> bool:
        return self.session.has_steers()

    def emit(self, event: Event) -> None:
        self.turn.emit(event)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

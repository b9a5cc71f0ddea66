"""The turn driver: a session's input queue and the task that runs its turns one at a time.

A :class:`TurnDriver` belongs to one :class:`~threads.session.Session` and
holds what the stored conversation does not: the input accepted and not yet
run, the turn in flight and the task driving them. It writes only through the
session's write path, under the session's lock.

Turns follow seed 003: ``send`` makes the prompt durable before the run
starts (or, while a turn runs, writes a receipt under the busy policy), the
run's step messages are appended as they join it, and a ``turn`` entry closes
the ledger whatever the outcome. The driver task runs the queue: one turn at
a time, through the gate the session's owner gives it (the manager's cap on
concurrent turns). When input waits, the next turn's prompt is written in the
same append as the end of the turn before it: one durable write, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from threads.errors import BusyError, ClosedError, NotRunError
from threads.ids import new_entry_id
from threads.messages import JSON, Message
from threads.store.entries import Entry, LeafEntry, MessageEntry, ReceiptEntry, TurnEntry
from threads.tree import (
    EntryTree,
    interruption_results,
    still_open,
    unfinished_runs,
    unsettled_receipts,
)
from threads.turns import Outcome, Policy, Run, RunFinish, RunResult, Turn

if TYPE_CHECKING:
    from threads.session import Injected, Session, SessionOptions, SessionState

log = logging.getLogger(__name__)
_POLICIES = frozenset(p.value for p in Policy)
CRASHED = "interrupted: the gateway stopped during this turn"

Write = Callable[[Sequence[Entry]], Awaitable[None]]


class Chain(Protocol):
    """Links entries onto the session's leaf in order (see ``Session._chain``)."""

    def __call__(self, *entries: Entry) -> list[Entry]: ...


@dataclass(slots=True, kw_only=True)
class _Pending:
    """One accepted input waiting for a turn of its own (or, a steer, for a drain).

    ``started`` marks a send whose prompt is already written: its turn has
    begun as far as the record goes, and only the driver has yet to pick it up.
    """

    turn: Turn
    message: Message
    policy: Policy
    payload: Any = None
    wake: Mapping[str, JSON] = field(default_factory=dict)
    injected: Message | None = None
    receipt_id: str = ""
    prompt_id: str = ""
    started: bool = False
    arrived: float = field(default_factory=time.monotonic)
    cancel_reason: str = ""
    rollback: bool = False


@dataclass(slots=True, kw_only=True)
class _Active:
    """The turn in flight: its run, the inputs it answers, and how it is to end."""

    run: Run
    pendings: list[_Pending]
    prompt_id: str
    task: asyncio.Task[RunResult] | None = None
    begun: bool = False
    cancel_reason: str = ""
    rollback: bool = False


class TurnDriver:
    """A session's turns: what waits, what runs, and the task that runs it.

    ``tree`` is the session's entry tree (read here, never changed but by
    ``write``); ``lock`` is the session's lock, held around every write;
    ``chain`` and ``write`` are the session's write path.
    """

    def __init__(
        self,
        session: Session,
        *,
        tree: EntryTree,
        lock: asyncio.Lock,
        chain: Chain,
        write: Write,
        options: SessionOptions,
    ) -> None:
        self._session = session
        self._tree = tree
        self._lock = lock
        self._chain = chain
        self._write = write
        self._options = options
        self._closing = False
        self._stop_queue = False
        self._counter = tree.highest_turn()
        self._running: _Active | None = None
        self._queue: deque[_Pending] = deque()
        self._steers: deque[_Pending] = deque()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._arrival = asyncio.Event()
        self._unfinished = unfinished_runs(tree.entries)
        self._restore()

    def _restore(self) -> None:
        load = self._options.load_payload
        for receipt in unsettled_receipts(self._tree.entries):
            if receipt.msg is None:
                continue
            payload = load(receipt.wake) if (load and receipt.wake) else None
            if receipt.status == "queued":
                self._steers.append(
                    _Pending(
                        turn=Turn(receipt.id, receipt.run_id, Policy.STEER),
                        message=receipt.msg,
                        policy=Policy.STEER,
                        payload=payload,
                        wake=receipt.wake,
                        receipt_id=receipt.id,
                    )
                )
                continue
            policy = Policy(receipt.policy) if receipt.policy in _POLICIES else Policy.QUEUE
            self._queue.append(
                _Pending(
                    turn=Turn(receipt.turn, receipt.run_id, policy),
                    message=receipt.msg,
                    policy=policy,
                    payload=payload,
                    wake=receipt.wake,
                    receipt_id=receipt.id,
                    prompt_id=receipt.turn,
                )
            )

    # -- what the session reports

    @property
    def running(self) -> Run | None:
        """The turn in flight (also while it waits for the turn gate), or None."""
        return self._running.run if self._running else None

    @property
    def state(self) -> SessionState:
        """``running`` while a run executes; ``pending`` while input waits; else ``idle``."""
        active = self._running
        if active is not None and active.begun:
            return "running"
        if active is not None or self._queue or self._steers:
            return "pending"
        return "idle"

    def queue(self) -> list[tuple[str, Message, Policy]]:
        """What is accepted and not yet given to a model: steers first, then sends."""
        return [(p.turn.id, p.message, Policy.STEER) for p in self._steers] + [
            (p.turn.id, p.message, p.policy) for p in self._queue if not p.started
        ]

    def has_steers(self) -> bool:
        return bool(self._steers)

    def pending_count(self) -> int:
        """How many accepted inputs wait (what :meth:`queue` lists)."""
        waiting = len(self._queue)
        if waiting and self._queue[0].started:
            waiting -= 1
        return len(self._steers) + waiting

    @property
    def closing(self) -> bool:
        """True once :meth:`close` began: no new input is accepted."""
        return self._closing

    @property
    def busy(self) -> bool:
        return self._running is not None or self._task is not None

    # -- accepting input

    def _mint_run_id(self) -> str:
        self._counter += 1
        return f"{self._session.id}-t{self._counter}"

    async def send(
        self,
        message: Message,
        *,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON] | None,
        injected: Injected | None,
    ) -> Turn:
        """Accept one message under the busy policy (:meth:`Session.send` says how)."""
        async with self._lock:
            if self._closing:
                raise ClosedError(self._session.id)
            await self._settle_unfinished()
            wake = dict(wake or {})
            if self._running is None and not self._queue and policy is not Policy.COLLECT:
                return await self._start_now(message, policy, payload, wake, injected)
            if policy is Policy.REJECT:
                raise BusyError(self._session.id)
            if self.pending_count() >= self._options.max_queue:
                raise BusyError(
                    self._session.id,
                    f"send refused: the inbox is full ({self._options.max_queue} waiting)",
                )
            target = self._steer_target()
            if policy is Policy.STEER and target is not None:
                return await self._accept_steer(message, payload, wake, injected, target)
            return await self._accept_send(message, policy, payload, wake, injected)

    async def _start_now(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON],
        injected: Injected | None,
    ) -> Turn:
        """An idle session: the prompt is written now and the driver runs it."""
        turn = Turn(new_entry_id(), self._mint_run_id(), policy)
        prompt = MessageEntry(
            id=turn.id, parent=self._tree.leaf, message=message, run_id=turn.run_id, wake=wake
        )
        await self._write([prompt])
        self._queue.appendleft(
            _Pending(
                turn=turn,
                message=message,
                policy=policy,
                payload=payload,
                wake=wake,
                prompt_id=turn.id,
                started=True,
            )
        )
        self._kick()
        return turn

    def _steer_target(self) -> str | None:
        """The run id a steer would be delivered into: the running turn or the one starting."""
        if self._running is not None:
            return self._running.run.run_id
        if self._queue and self._queue[0].started:
            return self._queue[0].turn.run_id
        return None

    async def _accept_steer(
        self,
        message: Message,
        payload: Any,
        wake: Mapping[str, JSON],
        injected: Injected | None,
        run_id: str,
    ) -> Turn:
        receipt = ReceiptEntry(
            id=new_entry_id(),
            parent=self._tree.leaf,
            status="queued",
            msg=message,
            run_id=run_id,
            policy=Policy.STEER.value,
            wake=wake,
        )
        await self._write([receipt])
        turn = Turn(receipt.id, run_id, Policy.STEER)
        self._steers.append(
            _Pending(
                turn=turn,
                message=message,
                policy=Policy.STEER,
                payload=payload,
                wake=wake,
                injected=injected() if callable(injected) else injected,
                receipt_id=receipt.id,
            )
        )
        return turn

    async def _accept_send(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON],
        injected: Injected | None,
    ) -> Turn:
        prompt_id = new_entry_id()
        run_id = self._mint_run_id()
        receipt = ReceiptEntry(
            id=new_entry_id(),
            parent=self._tree.leaf,
            status="accepted",
            msg=message,
            run_id=run_id,
            turn=prompt_id,
            policy=policy.value,
            wake=wake,
        )
        await self._write([receipt])
        turn = Turn(prompt_id, run_id, policy)
        pending = _Pending(
            turn=turn,
            message=message,
            policy=policy,
            payload=payload,
            wake=wake,
            receipt_id=receipt.id,
            prompt_id=prompt_id,
        )
        if policy in (Policy.INTERRUPT, Policy.ROLLBACK) and self._steer_target() is not None:
            # Runs next: ahead of the queue, behind the turn it interrupts.
            at = 1 if self._queue and self._queue[0].started else 0
            self._queue.insert(at, pending)
            self._cancel_running(
                "interrupted by a newer message", rollback=policy is Policy.ROLLBACK
            )
        else:
            self._queue.append(pending)
        if policy is Policy.COLLECT:
            self._arrival.set()
        self._kick()
        return turn

    def _cancel_running(self, reason: str, *, rollback: bool = False) -> None:
        """Cancel the turn in flight, or the one whose prompt is written and has yet to run."""
        active = self._running
        if active is None:
            head = self._queue[0] if self._queue else None
            if head is not None and head.started:
                head.cancel_reason = head.cancel_reason or reason
                head.rollback = head.rollback or rollback
            return
        active.cancel_reason = active.cancel_reason or reason
        active.rollback = active.rollback or rollback
        if active.task is not None:
            active.task.cancel(reason)

    def interrupt(self, reason: str) -> bool:
        """Cancel the running turn now; it is recorded as canceled. False when none runs."""
        if self._steer_target() is None:
            return False
        self._cancel_running(reason)
        return True

    def request_stop(self) -> bool:
        """Ask the running turn to end at its next step boundary (a soft stop)."""
        if self._running is None:
            return False
        self._running.run.stop_requested = True
        return True

    async def continue_(self) -> Turn | None:
        """Run what waits and is not running (:meth:`Session.continue_` says in what order)."""
        async with self._lock:
            if self._closing:
                raise ClosedError(self._session.id)
            # Steers first, so a resume settled next runs ahead of their follow-ups.
            if self._steers and self._steer_target() is None:
                await self._defer_steers()
            await self._settle_unfinished()
            self._kick()
            return self._queue[0].turn if self._queue else None

    async def clear_queue(self) -> int:
        """Drop every input not yet given to a model; each gets a ``dropped`` receipt."""
        async with self._lock:
            kept = [p for p in self._queue if p.started]
            dropped = list(self._steers) + [p for p in self._queue if not p.started]
            if not dropped:
                return 0
            receipts = [
                ReceiptEntry(id=new_entry_id(), status="dropped", receipt=p.receipt_id)
                for p in dropped
                if p.receipt_id
            ]
            await self._write(self._chain(*receipts))
            self._steers.clear()
            self._queue = deque(kept)
        for pending in dropped:
            pending.turn.drop()
        return len(dropped)

    async def wait_idle(self) -> None:
        """Wait until no turn runs and nothing runnable is queued."""
        while True:
            await self._idle.wait()
            if self._task is None:
                return

    async def close(self, timeout: float | None, *, drain: bool) -> None:
        """Stop new work; let the running turn (and, with ``drain``, the queue) finish.

        When ``timeout`` passes first the running turn is canceled. Input still
        queued ends with :class:`ClosedError` and stays durable for the next open.
        """
        self._closing = True
        if not drain:
            self._stop_queue = True
        self._arrival.set()
        task = self._task
        if task is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(task)
            except TimeoutError:
                self._cancel_running("the session is closing")
                self._stop_queue = True
                await asyncio.shield(task)
        for pending in [*self._steers, *self._queue]:
            pending.turn.close(self._session.id)
        self._steers.clear()
        self._queue.clear()

    def adopt_copy(self) -> None:
        """The tree now holds a copied path (a fork): none of it waits, and run ids go past it."""
        self._queue.clear()
        self._steers.clear()
        self._counter = max(self._counter, self._tree.highest_turn())

    # -- the driver task: runs queued turns one at a time

    def _kick(self) -> None:
        if self._task is None and self._queue and not self._stop_queue:
            self._idle.clear()
            self._task = asyncio.create_task(self._drive(), name=f"session {self._session.id}")

    async def _drive(self) -> None:
        try:
            while True:
                active = await self._next_active()
                if active is None:
                    return
                await self._execute(active)
        finally:
            if self._task is asyncio.current_task():
                self._task = None
                self._idle.set()

    async def _next_active(self) -> _Active | None:
        while True:
            async with self._lock:
                head = self._queue[0] if self._queue else None
                if head is None or (self._stop_queue and not head.started):
                    self._task = None
                    self._idle.set()
                    return None
                wait = 0.0
                if head.policy is Policy.COLLECT and not self._closing:
                    wait = self._collect_deadline() - time.monotonic()
                if wait <= 0:
                    active = await self._start_active()
                    if active is not None:
                        return active
                    continue
                self._arrival.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._arrival.wait()

    def _collect_deadline(self) -> float:
        """When the collected messages at the head start: one window after the latest."""
        last = 0.0
        for pending in self._queue:
            if pending.policy is not Policy.COLLECT:
                break
            last = max(last, pending.arrived)
        return last + self._options.collect_window

    async def _start_active(self) -> _Active | None:
        """Take the next turn's input off the queue and write its prompt entries (lock held)."""
        batch = [self._queue.popleft()]
        if batch[0].policy is Policy.COLLECT:
            while self._queue and self._queue[0].policy is Policy.COLLECT:
                batch.append(self._queue.popleft())
        head = batch[0]
        for pending in batch[1:]:
            pending.turn.run_id = head.turn.run_id
        prompts: list[Entry] = []
        leaf = self._tree.leaf
        for pending in batch:
            if pending.started:
                continue
            prompt = MessageEntry(
                id=pending.prompt_id,
                parent=leaf,
                message=pending.message,
                run_id=head.turn.run_id if pending is head else "",
                wake=pending.wake,
            )
            prompts.append(prompt)
            leaf = prompt.id
        try:
            await self._write(prompts)
        except Exception as exc:
            log.exception(
                "session %s: the prompt of %s was not written", self._session.id, head.turn.run_id
            )
            for pending in batch:
                pending.turn.finish(
                    Outcome.FAILED,
                    error=NotRunError(
                        f"turn {head.turn.run_id} of session {self._session.id} did not start: its "
                        f"prompt was not written ({exc}); it stays queued for the next open"
                    ),
                )
            return None
        run = Run(
            session=self._session,
            run_id=head.turn.run_id,
            turn=head.turn,
            messages=self._tree.context(),
            payload=head.payload,
            policy=head.policy,
        )
        run.bind(self._flush_run, self._drain_run)
        active = _Active(
            run=run,
            pendings=batch,
            prompt_id=head.prompt_id,
            cancel_reason=head.cancel_reason,
            rollback=head.rollback,
        )
        self._running = active
        return active

    async def _execute(self, active: _Active) -> None:
        run = active.run
        result: RunResult | None = None
        try:
            async with self._options.gate():
                if not active.cancel_reason:
                    active.begun = True
                    run.started = time.monotonic()
                    active.task = asyncio.create_task(self._session.agent.run(run), name=run.run_id)
                    await asyncio.wait([active.task])
                    result = _result_of(active.task)
        except asyncio.CancelledError:
            if active.task is not None and not active.task.done():
                active.task.cancel("the session is shutting down")
                await asyncio.wait([active.task])
            active.cancel_reason = active.cancel_reason or "the gateway is shutting down"
            await asyncio.shield(self._finish(active, None))
            raise
        await asyncio.shield(self._finish(active, result))

    async def _finish(self, active: _Active, result: RunResult | None) -> None:
        """Write the run's unwritten messages and its turn entry; decide its turns."""
        run = active.run
        if result is None:
            result = RunResult(
                stop_reason="canceled", error=active.cancel_reason or "canceled", steps=run.steps
            )
        canceled = result.stop_reason == "canceled"
        outcome = Outcome.CANCELED if canceled else Outcome.ANSWERED
        if result.stop_reason == "error":
            outcome = Outcome.FAILED
        async with self._lock:
            messages, run.staged = run.staged, []
            messages += interruption_results(still_open(self._tree.open_calls(), messages))
            entries, leaf = _linked(self._tree.leaf, messages)
            turn_entry = TurnEntry(
                id=new_entry_id(),
                parent=leaf,
                run_id=run.run_id,
                stop_reason=result.stop_reason,
                usage=result.usage,
                steps=result.steps,
                err=result.error,
                canceled=canceled,
                policy=run.policy.value,
                last_input=result.last_input,
            )
            entries.append(turn_entry)
            if active.rollback:
                prompt = self._tree.by_id.get(active.prompt_id)
                entries.append(LeafEntry(id=new_entry_id(), entry=prompt.parent if prompt else ""))
            steers = list(self._steers)
            deferred = self._plan_deferrals()
            entries.extend(_deferral_receipts(deferred))
            linked = self._chain(*entries)
            upcoming = self._upcoming(deferred)
            if upcoming is not None:
                # The next turn's prompt rides in the same append: one write, not two.
                last = linked[-1]
                upcoming_prompt = MessageEntry(
                    id=upcoming.prompt_id,
                    parent=last.entry if isinstance(last, LeafEntry) else last.id,
                    message=upcoming.message,
                    run_id=upcoming.turn.run_id,
                    wake=upcoming.wake,
                )
                linked.append(upcoming_prompt)
            try:
                await self._write(linked)
                if upcoming is not None:
                    upcoming.started = True
            except Exception as exc:
                log.exception(
                    "session %s: the end of turn %s was not written", self._session.id, run.run_id
                )
                outcome = Outcome.FAILED
                result = dataclasses.replace(
                    result, stop_reason="error", error=f"turn end not persisted: {exc}"
                )
                self._steers.extendleft(reversed(steers))
                deferred = []
            for _old, new in reversed(deferred):
                self._queue.appendleft(new)
            self._running = None
        run.emit(RunFinish(result=result))
        for pending in active.pendings:
            pending.turn.finish(outcome, result)
        for old, new in deferred:
            old.turn.next = new.turn
            old.turn.finish(Outcome.DEFERRED)

    def _upcoming(self, deferred: list[tuple[_Pending, _Pending]]) -> _Pending | None:
        """The input that will run next, when its prompt can be written now (lock held)."""
        if self._stop_queue:
            return None
        head = deferred[0][1] if deferred else (self._queue[0] if self._queue else None)
        if head is None or head.started or head.policy is Policy.COLLECT:
            return None
        return head

    def _plan_deferrals(self) -> list[tuple[_Pending, _Pending]]:
        """Steers no run drained become follow-up turns (lock held)."""
        out = []
        while self._steers:
            old = self._steers.popleft()
            prompt_id = new_entry_id()
            follow = _Pending(
                turn=Turn(prompt_id, self._mint_run_id(), Policy.STEER),
                message=old.message,
                policy=Policy.STEER,
                payload=old.payload,
                wake=old.wake,
                receipt_id=new_entry_id(),
                prompt_id=prompt_id,
            )
            out.append((old, follow))
        return out

    async def _defer_steers(self) -> None:
        deferred = self._plan_deferrals()
        await self._write(self._chain(*_deferral_receipts(deferred)))
        for old, new in reversed(deferred):
            self._queue.appendleft(new)
            old.turn.next = new.turn
            old.turn.finish(Outcome.DEFERRED)

    async def _settle_unfinished(self) -> None:
        """Record turns a dead writer left running as canceled, and queue their resumes (lock held)."""
        if not self._unfinished:
            return
        unfinished, self._unfinished = self._unfinished, []
        entries: list[Entry] = [
            MessageEntry(id=new_entry_id(), message=m)
            for m in interruption_results(self._tree.open_calls())
        ]
        resumes: list[_Pending] = []
        for prompt in unfinished:
            entries.append(
                TurnEntry(
                    id=new_entry_id(),
                    run_id=prompt.run_id,
                    stop_reason="canceled",
                    canceled=True,
                    err=CRASHED,
                )
            )
            made = self._options.resume(self._session, prompt) if self._options.resume else None
            if made is None:
                continue
            message, payload, wake = made
            pending = _Pending(
                turn=Turn(new_entry_id(), self._mint_run_id(), Policy.QUEUE),
                message=message,
                policy=Policy.QUEUE,
                payload=payload,
                wake=wake,
                receipt_id=new_entry_id(),
            )
            pending.prompt_id = pending.turn.id
            entries.append(
                ReceiptEntry(
                    id=pending.receipt_id,
                    status="accepted",
                    msg=message,
                    run_id=pending.turn.run_id,
                    turn=pending.prompt_id,
                    policy=Policy.QUEUE.value,
                    wake=wake,
                )
            )
            resumes.append(pending)
        await self._write(self._chain(*entries))
        self._queue.extendleft(reversed(resumes))

    async def _flush_run(self, run: Run) -> None:
        async with self._lock:
            messages, run.staged = run.staged, []
            await self._write(_linked(self._tree.leaf, messages)[0])

    async def _drain_run(self, run: Run) -> list[Message]:
        async with self._lock:
            messages, run.staged = run.staged, []
            steers = list(self._steers)
            self._steers.clear()
            entries, _ = _linked(self._tree.leaf, messages)
            delivered: list[Message] = []
            for steer in steers:
                entries.append(
                    ReceiptEntry(
                        id=new_entry_id(),
                        status="delivered",
                        receipt=steer.receipt_id,
                        run_id=run.run_id,
                    )
                )
                message = steer.injected or steer.message
                entries.append(MessageEntry(id=new_entry_id(), message=message))
                delivered.append(message)
            try:
                await self._write(self._chain(*entries))
            except BaseException:
                self._steers.extendleft(reversed(steers))
                raise
        for steer in steers:
            steer.turn.run_id = run.run_id
            steer.turn.finish(Outcome.DELIVERED)
        return delivered


def _linked(leaf: str, messages: Sequence[Message]) -> tuple[list[Entry], str]:
    """Message entries for ``messages``, each linked to the one before from ``leaf``; the new leaf."""
    entries: list[Entry] = []
    for message in messages:
        entry = MessageEntry(id=new_entry_id(), parent=leaf, message=message)
        entries.append(entry)
        leaf = entry.id
    return entries, leaf


def _deferral_receipts(deferred: list[tuple[_Pending, _Pending]]) -> list[Entry]:
    """Per deferred steer: its ``deferred`` fate, then the follow-up's ``accepted`` receipt."""
    out: list[Entry] = []
    for old, new in deferred:
        out.append(
            ReceiptEntry(
                id=new_entry_id(),
                status="deferred",
                receipt=old.receipt_id,
                turn=new.prompt_id,
                run_id=new.turn.run_id,
            )
        )
        out.append(
            ReceiptEntry(
                id=new.receipt_id,
                status="accepted",
                msg=new.message,
                run_id=new.turn.run_id,
                turn=new.prompt_id,
                policy=Policy.STEER.value,
                wake=new.wake,
            )
        )
    return out


def _result_of(task: asyncio.Task[RunResult]) -> RunResult | None:
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is not None:
        log.error("run %s failed", task.get_name(), exc_info=exc)
        return RunResult(stop_reason="error", error=f"{type(exc).__name__}: {exc}")
    return task.result()

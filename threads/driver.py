"""The turn driver: the task that runs a session's turns one at a time.

A :class:`TurnDriver` belongs to one :class:`~threads.session.Session` and
holds what the stored conversation does not: the turn in flight, the task
driving the turns, and the session's :class:`~threads.inbox.Inbox` of input
accepted and not yet run. It writes only through the session's write path,
under the session's lock.

Turns follow seed 003: ``send`` makes the prompt durable before it returns
(an idle session's run may start first, perf-16; while a turn runs, it
writes a receipt under the busy policy instead, which may share the flush of
the running turn's next write, perf-22), the run's step messages
are appended as they join it, and a ``turn`` entry closes the ledger
whatever the outcome. The driver task runs the queue: one turn at
a time, through the gate the session's owner gives it (the manager's cap on
concurrent turns). When input waits, the next turn's prompt is written in the
same append as the end of the turn before it: one durable write, not two.
A queued input's prompt refers to its receipt, durable since acceptance, so
it takes no flush of its own: the turn's next durable write carries it.

A run that stops at calls waiting for a person ends ``parked``: the turn
entry, the approval requests and their audit land in one append, and input
waits behind the boundary until its resume has run (:mod:`threads.approvals`).

A write of accepted work the store cannot take (:class:`UnavailableError`) is
not given up: a prompt stays at the head of the queue, a step or a turn end
stays with its run, and each is tried again with the outage's backoff until
the store takes it — the run is never run twice. Only a close past its
deadline gives up; what was accepted is durable and runs at the next start.

What a turn sends at its end — the final answer, a closing notice, the
hand-offs its owner names (``child_completed``, an exchange's next step) —
is recorded in the outbound ledger in that same append, and handed to its
sinks only once the append is durable; each send's mark follows in one more
append (:mod:`threads.outbound`, :mod:`threads.deliveries`). Sends a stopped
writer recorded and never marked are completed when the session is next
continued or sent to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from threads.approvals.boundary import park_entries, resume_ended
from threads.approvals.door import ApprovalDoor
from threads.context import interruption_results, still_open
from threads.deliveries import Deliveries
from threads.errors import (
    BusyError,
    ClosedError,
    NotPersistedError,
    NotRunError,
    UnavailableError,
)
from threads.faults import fault
from threads.ids import new_entry_id
from threads.inbox import Chain, Deferral, Inbox, Pending, Sync, Write
from threads.messages import JSON, Message, Usage
from threads.outbound import Outgoing
from threads.steers import deferral_receipts, delivery_entries
from threads.store.entries import (
    Entry,
    LeafEntry,
    MessageEntry,
    OutboundEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.tree import EntryTree
from threads.turns import Outcome, Policy, Run, RunFinish, RunResult, RunStart, Turn

if TYPE_CHECKING:
    from threads.session import Injected, Session, SessionOptions, SessionState

log = logging.getLogger(__name__)

T = TypeVar("T")

END_FLUSH_WITHIN = 0.004
"""How long a turn's end may wait to share a flush while other turns run (perf-23)."""

END_SIBLINGS = 4
"""How many other turns must be running for a turn's end to wait for company (perf-23)."""


class FlushSoon(Protocol):
    """Makes what the session wrote without a flush durable, sharing a flush that comes
    within ``within`` seconds (a prompt's window by default)."""

    def __call__(self, within: float | None = None) -> Awaitable[None]: ...


@dataclass(slots=True, kw_only=True)
class _End:
    """A turn's end as it is written: its entries, and what its landing settles in memory."""

    entries: list[Entry]
    steers: list[Pending]
    deferred: list[Deferral]
    upcoming: Pending | None


@dataclass(slots=True, kw_only=True)
class _Active:
    """The turn in flight: its run, the inputs it answers, and how it is to end."""

    run: Run
    pendings: list[Pending]
    prompt_id: str
    task: asyncio.Task[RunResult] | None = None
    begun: bool = False
    cancel_reason: str = ""
    rollback: bool = False
    # Steers drained into the run: (their queued receipt, the run's steps when drained).
    delivered: list[tuple[str, int]] = field(default_factory=list)


class TurnDriver:
    """A session's turns: what waits, what runs, and the task that runs it.

    ``tree`` is the session's entry tree (read here, never changed but by
    ``write``); ``lock`` is the session's lock, held around every write;
    ``chain`` and ``write`` are the session's write path, and ``sync`` makes
    what it wrote durable (a no-op unless the store flushes on demand).
    ``flush_soon``, when the store has one, makes what was written without
    a flush durable, sharing the flush of a durable write that comes soon: an
    idle session's prompt is written without one, its turn starts, and the
    send returns once that flush is done — with a quick turn's end, one flush
    for both (decision perf-16). While many turns run beside this session's,
    a turn's end is written without a flush too, and its replies leave once
    a flush shared with the other turns' ends makes it durable (perf-23).
    """

    def __init__(
        self,
        session: Session,
        *,
        tree: EntryTree,
        lock: asyncio.Lock,
        chain: Chain,
        write: Write,
        sync: Sync,
        options: SessionOptions,
        flush_soon: FlushSoon | None = None,
    ) -> None:
        self._session = session
        self._tree = tree
        self._lock = lock
        self._chain = chain
        self._write = write
        self._sync = sync
        self._flush_soon = flush_soon
        self._options = options
        self._closing = False
        self._stop_queue = False
        self._inbox = Inbox(
            session, tree=tree, chain=chain, write=write, sync=sync, options=options
        )
        self._deliveries = Deliveries(
            session, tree=tree, lock=lock, chain=chain, write=write, sync=sync, options=options
        )
        self.approvals = ApprovalDoor(
            session,
            tree=tree,
            lock=lock,
            chain=chain,
            write=write,
            kick=self._kick,
            mint_run_id=self._inbox.mint_run_id,
        )
        self._running: _Active | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._arrival = asyncio.Event()
        self._give_up = asyncio.Event()  # set by a close past its deadline: stop retrying writes
        self.end_unwritten = False

    # -- what the session reports

    @property
    def running(self) -> Run | None:
        """The turn in flight (also while it waits for the turn gate), or None."""
        return self._running.run if self._running else None

    @property
    def state(self) -> SessionState:
        """``running`` while a run executes; ``pending`` while input or a decision waits."""
        active = self._running
        if active is not None and active.begun:
            return "running"
        if active is not None or self._inbox.has_input() or self.approvals.awaiting:
            return "pending"
        if self._deliveries.completing:
            return "pending"
        return "idle"

    def queue(self) -> list[tuple[str, Message, Policy]]:
        """What is accepted and not yet given to a model: steers first, then sends."""
        return self._inbox.listing()

    def has_steers(self) -> bool:
        return self._inbox.has_steers()

    def pending_count(self) -> int:
        """How many accepted inputs wait (what :meth:`queue` lists)."""
        return self._inbox.pending_count()

    @property
    def closing(self) -> bool:
        """True once :meth:`close` began: no new input is accepted."""
        return self._closing

    @property
    def busy(self) -> bool:
        return self._running is not None or self._task is not None

    # -- accepting input

    async def send(
        self,
        message: Message,
        *,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON] | None,
        injected: Injected | None,
    ) -> Turn:
        """Accept one message under the busy policy (:meth:`Session.send` says how).

        A wake whose ``origin`` (the sending session's outbound record) this
        session already accepted is not taken again: its turn is decided at
        once as dropped, naming the run the first copy became.
        """
        await self.complete_unsent()
        async with self._lock:
            if self._closing:
                raise ClosedError(self._session.id)
            self._deliveries.leave_for_later(await self._inbox.settle_unfinished())
            wake = dict(wake or {})
            repeated = self._inbox.repeated(wake, policy)
            if repeated is not None:
                return repeated
            parked = self.approvals.awaiting
            idle = self._running is None and self._inbox.head is None and not parked
            # A held turn cannot end soon: its prompt takes its own flush.
            flush_soon = self._flush_soon if self._hold() is None else None
            if not idle or policy is Policy.COLLECT:
                if policy in (Policy.INTERRUPT, Policy.ROLLBACK):
                    flush_soon = None  # what cancels the turn in flight is durable first
                turn = await self._accept_busy(
                    message, policy, payload, wake, injected, parked, durable=flush_soon is None
                )
            else:
                turn = await self._inbox.start_now(
                    message, policy, payload, wake, durable=flush_soon is None
                )
                self._kick()
        if flush_soon is not None:
            try:
                await flush_soon()  # the prompt or receipt, durable before the send returns
            except Exception:
                await asyncio.shield(self._withdraw(turn))
                raise
        return turn

    async def _withdraw(self, turn: Turn) -> None:
        """Take back input whose flush was refused: the send raises, so it must not run.

        Still waiting, it leaves the inbox with a ``dropped`` fate; already
        running (an idle session's prompt, a steer drained, a queued send
        started), its turn ends canceled.
        """
        async with self._lock:
            if await self._inbox.withdraw(turn):
                return
            if self._steer_target() == turn.run_id:
                self._cancel_running("its message could not be stored")

    async def _accept_busy(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: dict[str, JSON],
        injected: Injected | None,
        parked: bool,
        *,
        durable: bool,
    ) -> Turn:
        """Accept input while a turn runs, waits or is parked, or under ``collect`` (lock held).

        ``durable=False`` writes its receipt without a flush: the caller makes
        it durable before the send returns (``flush_soon``), sharing the flush
        of the running turn's next write or another session's (perf-22).
        """
        if policy is Policy.REJECT:
            raise BusyError(self._session.id, "send (an approval is pending)" if parked else "send")
        if self._inbox.pending_count() >= self._options.max_queue:
            raise BusyError(
                self._session.id,
                f"send refused: the inbox is full ({self._options.max_queue} waiting)",
            )
        target = self._steer_target()
        if policy is Policy.STEER and target is not None:
            return await self._inbox.accept_steer(
                message, payload, wake, injected, target, durable=durable
            )
        interrupting = policy in (Policy.INTERRUPT, Policy.ROLLBACK)
        interrupts = interrupting and target is not None
        turn = await self._inbox.accept_send(
            message, policy, payload, wake, ahead=interrupts, durable=durable
        )
        if interrupts:
            self._cancel_running(
                "interrupted by a newer message", rollback=policy is Policy.ROLLBACK
            )
        elif interrupting and parked:
            await self.approvals.close_locked("interrupted by a newer message", via="interrupt")
        if policy is Policy.COLLECT:
            self._arrival.set()
        self._kick()
        return turn

    def _steer_target(self) -> str | None:
        """The run id a steer would be delivered into: the running turn or the one starting."""
        if self._running is not None:
            return self._running.run.run_id
        head = self._inbox.head
        if head is not None and head.started:
            return head.turn.run_id
        return None

    def _cancel_running(self, reason: str, *, rollback: bool = False) -> None:
        """Cancel the turn in flight, or the one whose prompt is written and has yet to run."""
        active = self._running
        if active is None:
            head = self._inbox.head
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
            if self._inbox.has_steers() and self._steer_target() is None:
                await self._inbox.defer_steers()
            self._deliveries.leave_for_later(await self._inbox.settle_unfinished())
            self._kick()
            head = self._inbox.head
        await self.complete_unsent()
        return head.turn if head else None

    async def complete_unsent(self) -> None:
        """Complete the sends a stopped writer recorded and never marked (see ``Deliveries``)."""
        await self._deliveries.complete_unsent()

    async def send_out(self, out: Outgoing) -> OutboundEntry | None:
        """A send outside any turn (see :meth:`Session.send_out`)."""
        return await self._deliveries.send_out(out)

    async def clear_queue(self) -> int:
        """Drop every input not yet given to a model; each gets a ``dropped`` receipt."""
        return await self.drop_queued(lambda payload: True)

    async def drop_queued(self, matches: Callable[[Any], bool]) -> int:
        """Drop the inputs not yet given to a model whose payload ``matches``; how many."""
        async with self._lock:
            dropped = await self._inbox.drop_where(lambda pending: matches(pending.payload))
        for pending in dropped:
            pending.turn.drop()
        return len(dropped)

    def active_payload(self) -> Any:
        """The payload of the turn in flight, or of the one whose prompt is written; else None."""
        if self._running is not None:
            return self._running.run.payload
        head = self._inbox.head
        return head.payload if head is not None and head.started else None

    def waiting_payloads(self) -> list[Any]:
        """The payloads of the inputs not yet given to a model."""
        return [pending.payload for pending in self._inbox.waiting()]

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
                self._give_up.set()
                await asyncio.shield(task)
        self._inbox.close(self._session.id)

    def adopt_copy(self) -> None:
        """The tree now holds a copied path (a fork): none of it waits, and run ids go past it."""
        self._inbox.adopt_copy()

    # -- the driver task: runs queued turns one at a time

    def _kick(self) -> None:
        waiting = self._inbox.head is not None or self.approvals.resume_owed()
        if self._task is None and waiting and not self._stop_queue:
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

    def _hold(self) -> asyncio.Event | None:
        """What the session's turns wait for before they are taken up (a batch of wakes), if any."""
        return self._options.turn_hold() if self._options.turn_hold is not None else None

    async def _next_active(self) -> _Active | None:
        hold = self._hold()
        if hold is not None:
            await hold.wait()
        tries = 0
        while True:
            held = False
            async with self._lock:
                if self.approvals.awaiting:
                    # A boundary holds the session: its resume runs first, once decided.
                    if self.approvals.resume_owed() and not self._stop_queue:
                        active = await self._start_resume()
                        if active is not None:
                            return active
                    self._task = None
                    self._idle.set()
                    return None
                head = self._inbox.head
                if head is None or (self._stop_queue and not head.started):
                    self._task = None
                    self._idle.set()
                    return None
                wait = 0.0
                if head.policy is Policy.COLLECT and not self._closing:
                    wait = self._inbox.collect_deadline() - self._options.clock.monotonic()
                if wait <= 0:
                    try:
                        active = await self._start_active()
                    except UnavailableError:
                        tries += 1
                        held = True
                    else:
                        if active is not None:
                            return active
                        continue
                self._arrival.clear()
            if held:
                # The prompt waits at the head for the store; a close (arrival) ends the wait.
                await self._options.outage.pause(tries, self._arrival, self._give_up)
                continue
            # The window's end or an arrival (which moves it), whichever comes first.
            timer = self._options.clock.call_later(wait, self._arrival.set)
            try:
                await self._arrival.wait()
            finally:
                timer.cancel()

    async def _start_active(self) -> _Active | None:
        """Take the next turn's input off the queue and write its prompt entries (lock held)."""
        batch = self._inbox.take_next()
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
                receipt=pending.receipt_id,  # stored once: the receipt holds message and wake
            )
            prompts.append(prompt)
            leaf = prompt.id
        try:
            # Each prompt refers to its receipt, made durable when it was accepted:
            # the prompt rides with the turn's next durable write (perf-22).
            await self._write(prompts, durable=False)
        except UnavailableError as exc:
            self._inbox.hold_back(batch, exc)
            raise
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
            messages=self._tree.run_context(),
            payload=head.payload,
            policy=head.policy,
        )
        run.bind(self._flush_run, self._drain_run, self._rerun_run)
        active = _Active(
            run=run,
            pendings=batch,
            prompt_id=head.prompt_id,
            cancel_reason=head.cancel_reason,
            rollback=head.rollback,
        )
        self._running = active
        return active

    async def _start_resume(self) -> _Active | None:
        """The armed resume's run, its ``started`` audit written (lock held); None if not."""
        run = await self.approvals.start_resume(self._options.load_payload)
        if run is None:
            return None
        run.bind(self._flush_run, self._drain_run, self._rerun_run)
        self._running = active = _Active(run=run, pendings=[], prompt_id="")
        if self._options.on_resume is not None:
            self._options.on_resume(self._session, run.payload, run.turn)
        return active

    async def _execute(self, active: _Active) -> None:
        run = active.run
        result: RunResult | None = None
        try:
            async with self._options.gate():
                if not active.cancel_reason:
                    fault("after_prompt_write")
                    active.begun = True
                    run.started = time.monotonic()
                    run.emit(RunStart(run_id=run.run_id))
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
        """Write the run's unwritten messages, its sends and its turn entry; send; decide its turns.

        While the store cannot take the end it is tried again (the run is done
        and is not run again); a close past its deadline gives up on it, and
        the next start records the turn as interrupted. The sends of the turn's
        end are recorded in the append that ends the turn and handed to their
        sinks once it is durable, before the turn is decided (a waiter sees
        what was delivered); their marks follow.
        """
        run = active.run
        if result is None:
            result = RunResult(
                stop_reason="canceled", error=active.cancel_reason or "canceled", steps=run.steps
            )
        canceled = result.stop_reason == "canceled"
        outcome = Outcome.CANCELED if canceled else Outcome.ANSWERED
        if result.stop_reason == "error":
            outcome = Outcome.FAILED
        parked = result.parked if not canceled else ()
        if parked:
            outcome = Outcome.PARKED
        async with self._lock:
            sends = [*run.outbox, *self._hand_offs(run.run_id, run.payload, result)]
            run.outbox = []
            end = self._end(active, result, canceled=canceled, sends=sends)
        error: BaseException | None = None
        # With many turns running, the end shares their flush (perf-23).
        soon = self._flush_soon if self._options.siblings() >= END_SIBLINGS else None
        try:
            await self._until_written(
                partial(
                    self._write_linked,
                    end.entries,
                    then=partial(self._ended, end),
                    durable=soon is None,
                ),
                f"the end of turn {run.run_id}",
            )
        except Exception as exc:
            log.exception(
                "session %s: the end of turn %s was not written", self._session.id, run.run_id
            )
            outcome = Outcome.NOT_PERSISTED
            error = NotPersistedError(
                f"turn {run.run_id} of session {self._session.id} ran, but its end was not "
                f"written ({exc}): the session holds no record of how it ended",
                result,
            )
            error.__cause__ = exc  # a lapsed lease (FencedError): the key's new owner answers
            self._inbox.return_steers(end.steers)
            if end.upcoming is not None:
                end.upcoming.started = False
            end.deferred = []
            self.end_unwritten = True
            self._running = None
            sends = []  # not recorded, so not sent: the turn runs again once it can be
        else:
            if soon is not None:
                sends = await self._shared_flush(soon, run.run_id, sends)
            sends = await self._deliveries.synced(sends)
        await self._deliveries.send(sends)
        run.emit(RunFinish(result=result))
        if outcome is Outcome.PARKED:
            self.approvals.parked(run.payload, end.entries, self._options.on_park)
        if not active.pendings:
            run.turn.finish(outcome, result, error)  # a resume's turn
        for pending in active.pendings:
            pending.turn.finish(outcome, result, error)
        for old, new in end.deferred:
            old.turn.next = new.turn
            old.turn.finish(Outcome.DEFERRED)

    def _end(
        self, active: _Active, result: RunResult, *, canceled: bool, sends: Sequence[Outgoing]
    ) -> _End:
        """The turn's end, built once (lock held) and written until it lands.

        The run's last messages, ledger and sends, and its turn entry; the
        steers no run drained, as deferrals; and, when input waits, the next
        turn's prompt, riding in the same append: one write, not two. Its
        prompt counts as written from here (nothing drops it meanwhile); a
        write given up puts it all back. A parked run's waiting calls stay
        without a result; its approval requests and their audit ride with the
        turn entry, and nothing starts after it until its boundary resolves.
        """
        run = active.run
        parked = result.parked if not canceled else ()
        messages, run.staged = run.staged, []
        unanswered = still_open(self._tree.open_calls(), messages)
        for p in parked:
            unanswered.pop(p.call.id, None)
        messages += interruption_results(unanswered)
        entries, leaf = _linked(self._tree.leaf, messages)
        entries += run.ledger
        run.ledger = []
        entries += [out.record for out in sends]
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
            pending=tuple(p.call for p in parked),
            late_steps=run.late_steps,
        )
        entries.append(turn_entry)
        if not result.ok:
            entries.extend(_unanswered_steers(active, run))
        entries.extend(park_entries(parked, run.run_id))
        if run.resumption:
            entries.append(resume_ended(turn_entry))
        if active.rollback:
            prompt = self._tree.by_id.get(active.prompt_id)
            entries.append(LeafEntry(id=new_entry_id(), entry=prompt.parent if prompt else ""))
        steers = self._inbox.take_steers()
        deferred = self._inbox.plan_deferrals(steers)
        linked = self._chain(*entries, *deferral_receipts(deferred))
        upcoming = None if parked else self._upcoming(deferred)
        if upcoming is not None:
            last = linked[-1]
            linked.append(
                MessageEntry(
                    id=upcoming.prompt_id,
                    parent=last.entry if isinstance(last, LeafEntry) else last.id,
                    message=upcoming.message,
                    run_id=upcoming.turn.run_id,
                    wake=upcoming.wake,
                    receipt=upcoming.receipt_id,
                )
            )
            upcoming.started = True
        return _End(entries=linked, steers=steers, deferred=deferred, upcoming=upcoming)

    def _ended(self, end: _End) -> None:
        """The turn's end landed (lock held): its deferrals queue, and no turn runs."""
        fault("after_turn_end")
        self._inbox.queue_deferred(end.deferred)
        self._running = None

    def _upcoming(self, deferred: list[Deferral]) -> Pending | None:
        """The input that will run next, when its prompt can be written now (lock held)."""
        if self._stop_queue:
            return None
        head = deferred[0][1] if deferred else self._inbox.head
        if head is None or head.started or head.policy is Policy.COLLECT:
            return None
        return head

    def _hand_offs(self, run_id: str, payload: Any, result: RunResult) -> list[Outgoing]:
        make = self._options.hand_offs
        return make(self._session, run_id, payload, result) if make is not None else []

    async def _flush_run(self, run: Run, records: Sequence[Entry]) -> None:
        """Append the run's staged messages and ledger entries, and ``records``.

        With ``records`` (sends about to leave) the append is made durable
        before this returns, whatever the store's fsync policy.
        """
        async with self._lock:
            messages, run.staged = run.staged, []
            ledger, run.ledger = run.ledger, []
            entries = [*_linked(self._tree.leaf, messages)[0], *ledger, *records]
        try:
            await self._step_written(run, partial(self._write_linked, entries))
        except BaseException:
            if entries and entries[0].id not in self._tree.by_id:
                run.staged = messages + run.staged  # the turn end writes them
                run.ledger = ledger + run.ledger
            raise
        if records:
            await self._sync()

    async def _write_linked(
        self,
        entries: list[Entry],
        then: Callable[[], None] | None = None,
        *,
        durable: bool = True,
    ) -> None:
        """Write ``entries`` linked onto the leaf; ``then`` runs under the same lock once they landed."""
        async with self._lock:
            await self._write(self._chain(*entries), durable=durable)
            if then is not None:
                then()

    async def _shared_flush(
        self, flush_soon: FlushSoon, run_id: str, sends: list[Outgoing]
    ) -> list[Outgoing]:
        """Make a turn's end, written without a flush, durable with the other turns' ends.

        The end is in the session (the next turn may start on it), so a refused
        flush is tried again, not the write. Given up (a close past its
        deadline), its sends stay recorded and unmarked, and leave when the
        session is next continued or sent to, as a stopped writer's do.
        """
        try:
            await self._until_written(
                partial(flush_soon, END_FLUSH_WITHIN), f"the flush of turn {run_id}'s end"
            )
        except Exception:
            log.exception("session %s: the end of turn %s is not flushed", self._session.id, run_id)
            return []
        return sends

    async def _drain_run(self, run: Run) -> list[Message]:
        async with self._lock:
            messages, run.staged = run.staged, []
            steers = self._inbox.take_steers()
            entries = _linked(self._tree.leaf, messages)[0] + delivery_entries(steers, run.run_id)
        try:
            await self._step_written(run, partial(self._write_linked, entries))
        except BaseException:
            if entries and entries[0].id not in self._tree.by_id:
                run.staged = messages + run.staged
                self._inbox.return_steers(steers)
            raise
        active = self._running
        for steer in steers:
            steer.turn.run_id = run.run_id
            steer.turn.finish(Outcome.DELIVERED)
            if active is not None and active.run is run:
                active.delivered.append((steer.receipt_id, run.steps))
        return [steer.injected or steer.message for steer in steers]

    async def _step_written(self, run: Run, write: Callable[[], Awaitable[None]]) -> None:
        """A step's write, until it lands; one that needed more than one try is a late step."""
        tries = 0

        async def counted() -> None:
            nonlocal tries
            tries += 1
            await write()

        await self._until_written(counted, f"a step of {run.run_id}")
        if tries > 1:
            run.late_steps += 1

    async def _rerun_run(self, run: Run, error: str, usage: Usage) -> None:
        """Close the attempt's ledger (its turn entry names the re-run) and go on as the re-run."""
        async with self._lock:
            rerun_id = self._inbox.mint_run_id()
            messages, run.staged = run.staged, []
            ledger, run.ledger = run.ledger, []
            attempt = TurnEntry(
                id=new_entry_id(),
                run_id=run.run_id,
                stop_reason="error",
                usage=usage,
                steps=run.steps,
                err=error,
                policy=run.policy.value,
                rerun=rerun_id,
                late_steps=run.late_steps,
            )
            entries = [*_linked(self._tree.leaf, messages)[0], *ledger, attempt]
        await self._until_written(
            partial(self._write_linked, entries), f"the overflow of {run.run_id}"
        )
        active = self._running
        for pending in active.pendings if active is not None else ():
            pending.turn.run_id = rerun_id
        if active is not None and not active.pendings:
            run.turn.run_id = rerun_id
        run.run_id = rerun_id
        run.late_steps = 0

    async def _until_written(self, write: Callable[[], Awaitable[T]], what: str) -> T:
        """``write()``, again while the store cannot take it, until a close gives up."""
        return await self._options.outage.retry(
            write, what=f"session {self._session.id}: {what}", give_up=self._give_up
        )


def _unanswered_steers(active: _Active, run: Run) -> list[Entry]:
    """Marks for the steers a failed run took and never answered (no model step after them).

    The ``delivered`` receipt was written with the message; the mark is a
    second ``delivered`` receipt for the same steer, carrying ``unanswered``.
    """
    return [
        ReceiptEntry(
            id=new_entry_id(),
            status="delivered",
            receipt=receipt,
            run_id=run.run_id,
            unanswered=True,
        )
        for receipt, steps in active.delivered
        if run.steps <= steps
    ]


def _linked(leaf: str, messages: Sequence[Message]) -> tuple[list[Entry], str]:
    """Message entries for ``messages``, each linked to the one before from ``leaf``; the new leaf."""
    entries: list[Entry] = []
    for message in messages:
        entry = MessageEntry(id=new_entry_id(), parent=leaf, message=message)
        entries.append(entry)
        leaf = entry.id
    return entries, leaf


def _result_of(task: asyncio.Task[RunResult]) -> RunResult | None:
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is not None:
        log.error("run %s failed", task.get_name(), exc_info=exc)
        return RunResult(stop_reason="error", error=f"{type(exc).__name__}: {exc}")
    return task.result()

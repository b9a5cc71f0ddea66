"""A session's inbox: the input it accepted and has not yet run, made durable as receipts.

An :class:`Inbox` belongs to one session's :class:`~threads.driver.TurnDriver`
and holds the input side of its turns: the sends waiting for a turn of their
own and the steers waiting for a run to drain them, each a :class:`Pending`
record. It writes what acceptance makes durable (an idle session's prompt, a
``queued`` steer receipt, an ``accepted`` send receipt, the ``dropped`` fates
of a cleared queue, the ``deferred`` fates of steers no run took) and mints
the run ids. On open it restores what a stopped writer accepted and never
settled, and records the turns a dead writer left running: as canceled (to
be resumed), or, for a turn that died applying its ``dispatch``, as ended.

It never takes the session's lock: the driver holds it around every call that
writes, and decides when a turn runs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from threads.context import interruption_results
from threads.dispatched import died_dispatching, settle_dispatched
from threads.errors import DroppedError, UnavailableError
from threads.ids import new_entry_id
from threads.messages import JSON, Message
from threads.steers import deferral_receipts
from threads.store.entries import (
    Entry,
    MessageEntry,
    OutboundEntry,
    ReceiptEntry,
    TurnEntry,
    accepted_id,
)
from threads.tree import EntryTree, unfinished_runs, unsettled_receipts
from threads.turns import Outcome, Policy, Turn
from threads.wake import injected_message

if TYPE_CHECKING:
    from threads.session import Injected, Session, SessionOptions

log = logging.getLogger(__name__)

_POLICIES = frozenset(p.value for p in Policy)
CRASHED = "interrupted: the gateway stopped during this turn"

Sync = Callable[[], Awaitable[None]]


class Write(Protocol):
    """Appends a batch through the session's write path (see ``Session._write``).

    ``durable=False`` writes without a flush: a send's mark, which need not
    outlive a power loss, or what a later shared flush makes durable before
    anyone is told (see :meth:`~threads.store.base.Storage.append`).
    """

    def __call__(self, entries: Sequence[Entry], *, durable: bool = True) -> Awaitable[None]: ...


class Chain(Protocol):
    """Links entries onto the session's leaf in order (see ``Session._chain``)."""

    def __call__(self, *entries: Entry) -> list[Entry]: ...


@dataclass(slots=True, kw_only=True)
class Pending:
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
    held: bool = False


Deferral = tuple[Pending, Pending]
"""A steer no run drained, and the follow-up turn it becomes."""


class Inbox:
    """A session's waiting input: sends in turn order, steers in arrival order.

    ``tree`` is the session's entry tree (read here, never changed but by
    ``write``); ``chain`` and ``write`` are the session's write path. Every
    method that writes is called with the session's lock held.
    """

    def __init__(
        self,
        session: Session,
        *,
        tree: EntryTree,
        chain: Chain,
        write: Write,
        sync: Sync,
        options: SessionOptions,
    ) -> None:
        self._session = session
        self._tree = tree
        self._chain = chain
        self._write = write
        self._sync = sync
        self._options = options
        self._counter = tree.highest_turn()
        self._queue: deque[Pending] = deque()
        self._steers: deque[Pending] = deque()
        self._unfinished = unfinished_runs(tree.open_view())
        self._restore()

    def _restore(self) -> None:
        if not self._tree.entries.has_kind(ReceiptEntry.TYPE):
            return  # nothing was ever queued: no walk over the whole history to find so
        load = self._options.load_payload
        for receipt in unsettled_receipts(self._tree.open_view()):
            if receipt.msg is None:
                continue
            payload = load(receipt.wake) if (load and receipt.wake) else None
            if receipt.status == "queued":
                self._steers.append(
                    Pending(
                        turn=Turn(receipt.id, receipt.run_id, Policy.STEER),
                        message=receipt.msg,
                        policy=Policy.STEER,
                        payload=payload,
                        wake=receipt.wake,
                        injected=injected_message(receipt.msg),
                        receipt_id=receipt.id,
                    )
                )
                continue
            policy = Policy(receipt.policy) if receipt.policy in _POLICIES else Policy.QUEUE
            self._queue.append(
                Pending(
                    turn=Turn(receipt.turn, receipt.run_id, policy),
                    message=receipt.msg,
                    policy=policy,
                    payload=payload,
                    wake=receipt.wake,
                    receipt_id=receipt.id,
                    prompt_id=receipt.turn,
                    arrived=self._options.clock.monotonic(),
                )
            )

    # -- what waits

    @property
    def head(self) -> Pending | None:
        """The send that runs next, or None when no send waits."""
        return self._queue[0] if self._queue else None

    def has_input(self) -> bool:
        """True while any send or steer waits (a started head included)."""
        return bool(self._queue or self._steers)

    def listing(self) -> list[tuple[str, Message, Policy]]:
        """What is accepted and not yet given to a model: steers first, then sends."""
        return [(p.turn.id, p.message, Policy.STEER) for p in self._steers] + [
            (p.turn.id, p.message, p.policy) for p in self._queue if not p.started
        ]

    def has_steers(self) -> bool:
        return bool(self._steers)

    def pending_count(self) -> int:
        """How many accepted inputs wait (what :meth:`listing` lists)."""
        waiting = len(self._queue)
        if waiting and self._queue[0].started:
            waiting -= 1
        return len(self._steers) + waiting

    def collect_deadline(self) -> float:
        """When the collected messages at the head start: one window after the latest."""
        last = 0.0
        for pending in self._queue:
            if pending.policy is not Policy.COLLECT:
                break
            last = max(last, pending.arrived)
        return last + self._options.collect_window

    # -- accepting input

    def mint_run_id(self) -> str:
        self._counter += 1
        return f"{self._session.id}-t{self._counter}"

    def repeated(self, wake: Mapping[str, JSON], policy: Policy) -> Turn | None:
        """The turn of a wake whose ``origin`` this session took already, decided as dropped.

        A hand-off completed twice (before and after a crash) carries the same
        origin, the sending session's outbound record: it is taken once. None
        for a wake not seen before.
        """
        origin = wake.get("origin")
        if not isinstance(origin, str) or origin not in self._tree.origins:
            return None
        run_id = self._tree.origins[origin]
        turn = Turn(new_entry_id(), run_id, policy)
        turn.finish(
            Outcome.DROPPED,
            error=DroppedError(
                f"wake {origin} was already accepted (as run {run_id or 'a steer'}); "
                "a repeated delivery is not taken twice"
            ),
        )
        return turn

    async def start_now(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON],
        *,
        durable: bool = True,
    ) -> Turn:
        """An idle session: the prompt is written now and waits, started, for the driver.

        ``durable=False`` writes it without a flush: the caller makes it
        durable before the send returns (``flush_soon``).
        """
        turn = Turn(new_entry_id(), self.mint_run_id(), policy)
        prompt = MessageEntry(
            id=turn.id, parent=self._tree.leaf, message=message, run_id=turn.run_id, wake=wake
        )
        await self._write([prompt], durable=durable)
        self._queue.appendleft(
            Pending(
                turn=turn,
                message=message,
                policy=policy,
                payload=payload,
                wake=wake,
                prompt_id=turn.id,
                started=True,
                arrived=self._options.clock.monotonic(),
            )
        )
        return turn

    async def accept_steer(
        self,
        message: Message,
        payload: Any,
        wake: Mapping[str, JSON],
        injected: Injected | None,
        run_id: str,
        *,
        durable: bool = True,
    ) -> Turn:
        """A steer for run ``run_id``: a ``queued`` receipt, delivered when the run drains.

        ``durable=False`` as for :meth:`start_now`.
        """
        receipt = ReceiptEntry(
            id=new_entry_id(),
            parent=self._tree.leaf,
            status="queued",
            msg=message,
            run_id=run_id,
            policy=Policy.STEER.value,
            wake=wake,
        )
        await self._write([receipt], durable=durable)
        turn = Turn(receipt.id, run_id, Policy.STEER)
        self._steers.append(
            Pending(
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

    async def accept_send(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON],
        *,
        ahead: bool,
        durable: bool = True,
    ) -> Turn:
        """A send for a turn of its own: an ``accepted`` receipt, then a place in the queue.

        ``ahead`` puts it next in line (behind a started head), for a send that
        interrupts the turn in flight; ``durable=False`` as for :meth:`start_now`.
        """
        prompt_id = new_entry_id()
        run_id = self.mint_run_id()
        receipt = ReceiptEntry(
            id=accepted_id(prompt_id),
            parent=self._tree.leaf,
            status="accepted",
            msg=message,
            run_id=run_id,
            turn=prompt_id,
            policy=policy.value,
            wake=wake,
        )
        await self._write([receipt], durable=durable)
        turn = Turn(prompt_id, run_id, policy)
        pending = Pending(
            turn=turn,
            message=message,
            policy=policy,
            payload=payload,
            wake=wake,
            receipt_id=receipt.id,
            prompt_id=prompt_id,
            arrived=self._options.clock.monotonic(),
        )
        if ahead:
            # Runs next: ahead of the queue, behind the turn it interrupts.
            at = 1 if self._queue and self._queue[0].started else 0
            self._queue.insert(at, pending)
        else:
            self._queue.append(pending)
        return turn

    async def withdraw(self, turn: Turn) -> bool:
        """Drop a waiting input whose receipt never became durable; False if none waits.

        The send that made it raised, so it must not run, now or after a
        restart: its ``dropped`` fate is written without a flush (the store
        has just refused one), for the next flush to make durable. Should that
        write fail too, the input is still dropped here.
        """
        pending = next((p for p in self.waiting() if p.turn is turn), None)
        if pending is None:
            return False
        self._steers = deque(p for p in self._steers if p is not pending)
        self._queue = deque(p for p in self._queue if p is not pending)
        if pending.receipt_id:
            fate = ReceiptEntry(id=new_entry_id(), status="dropped", receipt=pending.receipt_id)
            try:
                await self._write(self._chain(fate), durable=False)
            except Exception as exc:
                log.warning(
                    "session %s: the refused input %s was dropped, its fate not written: %s",
                    self._session.id,
                    pending.receipt_id,
                    exc,
                )
        return True

    def waiting(self) -> list[Pending]:
        """Every input not yet given to a model: steers, then sends whose prompt is unwritten."""
        return [*self._steers, *(p for p in self._queue if not p.started)]

    async def clear(self) -> list[Pending]:
        """Drop every input not yet given to a model, each with a ``dropped`` receipt.

        Returns what was dropped; the caller settles their turns once the lock is released.
        """
        return await self.drop_where(lambda pending: True)

    async def drop_where(self, matches: Callable[[Pending], bool]) -> list[Pending]:
        """Drop the inputs not yet given to a model that ``matches``, each with a ``dropped`` receipt.

        Returns what was dropped; the caller settles their turns once the lock is released.
        """
        dropped = [p for p in self.waiting() if matches(p)]
        if not dropped:
            return []
        receipts = [
            ReceiptEntry(id=new_entry_id(), status="dropped", receipt=p.receipt_id)
            for p in dropped
            if p.receipt_id
        ]
        await self._write(self._chain(*receipts))
        gone = {id(p) for p in dropped}
        self._steers = deque(p for p in self._steers if id(p) not in gone)
        self._queue = deque(p for p in self._queue if id(p) not in gone)
        return dropped

    # -- handing input to the running side

    def take_next(self) -> list[Pending]:
        """Take the next turn's input off the queue: the head, or the collected run of heads."""
        batch = [self._queue.popleft()]
        if batch[0].policy is Policy.COLLECT:
            while self._queue and self._queue[0].policy is Policy.COLLECT:
                batch.append(self._queue.popleft())
        return batch

    def hold_back(self, batch: Sequence[Pending], error: UnavailableError) -> None:
        """Put a taken batch back at the head: the store could not take its prompts.

        Its turns wait for the store; the owner's ``on_held`` hears of each
        input once, the first time it is held back.
        """
        self._queue.extendleft(reversed(batch))
        fresh = [pending for pending in batch if not pending.held]
        if not fresh:
            return
        for pending in fresh:
            pending.held = True
        log.warning(
            "session %s: the prompt of %s waits for the store: %s",
            self._session.id,
            batch[0].turn.run_id,
            error,
        )
        if self._options.on_held is not None:
            self._options.on_held(self._session, [pending.payload for pending in fresh])

    def take_steers(self) -> list[Pending]:
        """Take every waiting steer, for a run to drain."""
        steers = list(self._steers)
        self._steers.clear()
        return steers

    def return_steers(self, steers: Sequence[Pending]) -> None:
        """Put taken steers back, ahead of any that came since (their write failed)."""
        self._steers.extendleft(reversed(steers))

    # -- deferrals: steers no run drained become turns of their own

    def plan_deferrals(self, steers: Sequence[Pending]) -> list[Deferral]:
        """Make each taken steer a follow-up turn of its own (not yet written or queued)."""
        out = []
        for old in steers:
            prompt_id = new_entry_id()
            follow = Pending(
                turn=Turn(prompt_id, self.mint_run_id(), Policy.STEER),
                message=old.message,
                policy=Policy.STEER,
                payload=old.payload,
                wake=old.wake,
                receipt_id=accepted_id(prompt_id),
                prompt_id=prompt_id,
            )
            out.append((old, follow))
        return out

    def queue_deferred(self, deferred: Sequence[Deferral]) -> None:
        """Queue the follow-ups of written deferrals at the head, in order."""
        for _old, new in reversed(deferred):
            self._queue.appendleft(new)

    async def defer_steers(self) -> None:
        """With no run to drain them, write every waiting steer off to a follow-up turn."""
        deferred = self.plan_deferrals(self.take_steers())
        await self._write(self._chain(*deferral_receipts(deferred)))
        for old, new in reversed(deferred):
            self._queue.appendleft(new)
            old.turn.next = new.turn
            old.turn.finish(Outcome.DEFERRED)

    # -- restoring after a crash

    async def settle_unfinished(self) -> list[OutboundEntry]:
        """Record turns a dead writer left running, queue their resumes; the hand-offs made.

        A turn whose ``dispatch`` was recorded (its sends are in the outbound
        ledger) had ended when the writer died: it gets its dispatch result and
        a ``dispatch`` turn entry, no resume, and the hand-offs its end makes
        (a ``child_completed``) are recorded with it and returned, to be sent.
        Any other is recorded as canceled and resumed (decision 0003).
        """
        if not self._unfinished:
            return []
        unfinished = self._unfinished
        open_calls = self._tree.open_calls()
        dispatched = died_dispatching(self._tree.entries, unfinished, open_calls)
        entries: list[Entry] = [
            MessageEntry(id=new_entry_id(), message=m)
            for m in interruption_results(
                {c: n for c, n in open_calls.items() if dispatched is None or c != dispatched[1]}
            )
        ]
        handed: list[OutboundEntry] = []
        resumes: list[Pending] = []
        for prompt in unfinished:
            if dispatched is not None and prompt is dispatched[0]:
                settled, records = settle_dispatched(
                    self._tree.entries, prompt, dispatched[1], self._session, self._options
                )
                entries += settled
                handed += records
                continue
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
            prompt_id = new_entry_id()
            pending = Pending(
                turn=Turn(prompt_id, self.mint_run_id(), Policy.QUEUE),
                message=message,
                policy=Policy.QUEUE,
                payload=payload,
                wake=wake,
                receipt_id=accepted_id(prompt_id),
                prompt_id=prompt_id,
            )
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
        entries += handed
        await self._write(self._chain(*entries))
        self._unfinished = []
        self._queue.extendleft(reversed(resumes))
        if handed:
            await self._sync()
        return handed

    # -- ending

    def close(self, session_id: str) -> None:
        """End every waiting input's turn with :class:`ClosedError`; they stay durable."""
        for pending in [*self._steers, *self._queue]:
            pending.turn.close(session_id)
        self._steers.clear()
        self._queue.clear()

    def adopt_copy(self) -> None:
        """The tree now holds a copied path (a fork): none of it waits, and run ids go past it."""
        self._queue.clear()
        self._steers.clear()
        self._counter = max(self._counter, self._tree.highest_turn())

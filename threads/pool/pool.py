"""The pool: bounded concurrent delegations per parent session, each a journey of receipts.

Every delegation — ``sessions_spawn``, ``delegate_task`` and a ``dispatch``
subagent or fork send — runs its child through here. The parent session
records it as pool receipts: ``accepted`` (the child and the task) before
anything starts, ``running`` once a slot is held and the child's wake is
durable, then exactly one settlement — ``done``, ``failed``, ``canceled`` or
``capped`` — carrying the child's cost, which the parent's usage sums in its
``delegated`` bucket. A child whose run ends at an approval boundary is
``parked`` in between: it holds no slot, nothing settles, and the run that
resumes it once a person decided (the manager's resume listeners tell the
pool) is ``running`` again and followed like the first. A parent runs at most
``agent_defaults.subagents.max_concurrent`` children at once; the rest wait
in a first-in-first-out queue, visible as receipts ``accepted`` and not yet
``running``.

A synchronous delegation (``delegate_task``) waits in its parent's turn for
the child's answer; while it waits the child's turns *borrow* the parent's
turn slot (:meth:`Pool.lends`), so a gateway capped at one concurrent turn
still runs a delegating turn and its child. A synchronous child that parks
stops the wait: the call returns, and from then the delegation is followed
like an asynchronous one. :meth:`Pool.cancel` stops a delegation, queued,
running or parked, and records ``canceled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from threads.errors import NoDelegationError, NotPersistedError, TurnError
from threads.ids import new_entry_id
from threads.keys import SessionKey
from threads.messages import Usage
from threads.pool.outcomes import Outcome, outcome_of
from threads.pool.slots import Slots
from threads.session import Session
from threads.sessions.agent_to_agent import settle
from threads.store.entries import (
    POOL_ACCEPTED,
    POOL_CANCELED,
    POOL_DONE,
    POOL_FAILED,
    POOL_PARKED,
    POOL_RUNNING,
    Lineage,
    PoolReceiptEntry,
)
from threads.turns import Outcome as TurnOutcome
from threads.turns import Policy, RunResult, Turn
from threads.wake import Wake

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

DELEGATION = "delegation"
"""The wake meta key naming the delegation (its accepted receipt) a child's run works for."""

STOP_MAX = 4000
"""A settlement keeps at most this much of the answer: the child's transcript has it whole."""

Start = Callable[[], Awaitable[Turn]]
"""Wakes the child (the slot is held) and returns the turn its wake became."""

Then = Callable[[Turn], Awaitable[None]]
"""Follows a started child's turn to the delegation's settlement."""

VIA_PARENT = "parent"
"""The ``via`` of the denials a parked child's cancel records."""


@dataclass(slots=True, kw_only=True, eq=False)
class Delegation:
    """One delegation in flight: the parent's receipt and the child that does the work.

    ``call`` is the delegating tool call of a synchronous delegation ("" for
    an asynchronous one); ``run`` the parent's run that delegated.
    """

    receipt: str
    parent_key: SessionKey
    parent_session: str
    child: SessionKey
    prompt: str
    call: str = ""
    run: str = ""
    turn: Turn | None = None
    follow: bool = False  # a dispatch child's: followed from its wake's acceptance
    holding: bool = False
    canceled: str = ""
    waiter: asyncio.Task[None] | None = None
    ticket: asyncio.Future[None] | None = None
    parked: bool = False
    spent: Usage = field(default_factory=Usage)  # the runs that ended parked
    then: Then | None = None  # how a resumed run is followed, while parked
    early: Turn | None = None  # a resume that started before the park was recorded

    @property
    def sync(self) -> bool:
        return bool(self.call)

    @property
    def lineage(self) -> Lineage:
        """What the child's header names as its origin."""
        return Lineage(
            parent_session=self.parent_session,
            parent_call_id=self.call,
            parent_entry=self.receipt,
            parent_run=self.run,
        )

    @property
    def state(self) -> str:
        if self.parked:
            return POOL_PARKED
        return POOL_RUNNING if self.turn is not None else POOL_ACCEPTED


class Pool:
    """Every delegation of one manager's sessions: slots, live journeys, receipts."""

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager
        self._slots: dict[str, Slots] = {}
        self._live: dict[str, Delegation] = {}
        self._lent: set[str] = set()
        manager.observe(self._observe)
        manager.resume_listeners.append(self._resumed)

    @property
    def size(self) -> int:
        """Children one parent session may run at once."""
        return self.manager.config.agent_defaults.subagents.max_concurrent

    def lends(self, key: str) -> bool:
        """Whether ``key``'s turns run on a waiting parent's turn slot (a sync child's do)."""
        return key in self._lent

    @contextlib.contextmanager
    def lending(self, child: str) -> Iterator[None]:
        """While the block runs, ``child``'s turns borrow the turn slot of the parent waiting."""
        self._lent.add(child)
        try:
            yield
        finally:
            self._lent.discard(child)

    # -- reading

    def delegations(self, parent_session: str | None = None) -> list[Delegation]:
        """The delegations not yet settled, oldest first (of one parent, when named)."""
        return [
            d
            for d in self._live.values()
            if parent_session is None or d.parent_session == parent_session
        ]

    def find(self, child: str) -> Delegation | None:
        """The newest unsettled delegation to ``child``."""
        found = [d for d in self._live.values() if d.child == child]
        return found[-1] if found else None

    # -- the journey

    async def accept(
        self,
        parent: Session,
        parent_key: SessionKey,
        child: SessionKey,
        *,
        prompt: str,
        call: str = "",
        run: str = "",
    ) -> Delegation:
        """Record the delegation (``accepted``) on the parent; nothing runs yet."""
        entry = await parent.pool_receipt(POOL_ACCEPTED, child=str(child), prompt=prompt, call=call)
        return self.adopt(
            Delegation(
                receipt=entry.id,
                parent_key=parent_key,
                parent_session=parent.id,
                child=child,
                prompt=prompt,
                call=call,
                run=run,
            )
        )

    def adopt(self, delegation: Delegation) -> Delegation:
        """Follow a delegation recorded earlier (a restart's recovery takes them back)."""
        self._live[delegation.receipt] = delegation
        return delegation

    def try_take(self, delegation: Delegation) -> bool:
        """Take a slot for the delegation now, if its parent has one free and nobody waits."""
        if self._slots_of(delegation).try_take():
            delegation.holding = True
        return delegation.holding

    async def take(self, delegation: Delegation) -> None:
        """Wait, first come first served, for a slot of the delegation's parent."""
        await self._slots_of(delegation).take()
        delegation.holding = True

    async def start(self, delegation: Delegation, start: Start) -> Turn:
        """With a slot held: wake the child, then record ``running``.

        A child that cannot be woken settles ``failed`` (its slot freed) and
        the error is raised.
        """
        try:
            turn = await start()
        except Exception as exc:
            failed = Outcome(status=POOL_FAILED, words=f"failed: {exc}", answer="")
            await self.settle(delegation, failed, Usage())
            raise
        except BaseException:
            self.release(delegation)
            raise
        delegation.turn = turn
        await self.record(delegation, POOL_RUNNING)
        return turn

    async def begin(self, delegation: Delegation, start: Start, then: Then) -> Turn | None:
        """Run the delegation: now, when its parent has a slot free, or once one frees.

        Started now, the child's turn is returned and ``then(turn)`` runs in the
        background; queued, None is returned and the wait, the start and
        ``then`` all run in the background.
        """
        if self.try_take(delegation):
            turn = await self.start(delegation, start)
            self.manager.spawn(then(turn), name=f"delegation {delegation.child}")
            return turn

        slots = self._slots_of(delegation)
        # In the queue now, so a caller sees it counted.
        ticket = delegation.ticket = slots.ticket()

        async def queued() -> None:
            delegation.ticket = None  # from here the wait withdraws itself if cancelled
            await slots.wait(ticket)
            delegation.holding = True
            await then(await self.start(delegation, start))

        delegation.waiter = self.manager.spawn(queued(), name=f"delegation {delegation.child}")
        return None

    def waiting(self, delegation: Delegation) -> int:
        """How many delegations of the same parent wait for a slot."""
        slots = self._slots.get(delegation.parent_session)
        return slots.waiting if slots is not None else 0

    async def follow(
        self, delegation: Delegation, turn: Turn, timeout: float | None = None, *, cap: str = ""
    ) -> tuple[RunResult | None, str]:
        """Wait for the child's run to end; past ``timeout`` it is stopped (a cap, named).

        Returns the run's result (None when it never ran) and the cap's words
        (``cap``, or what the timeout was).
        """
        capped = ""
        try:
            try:
                result = await settle(turn, timeout)
            except TimeoutError:
                capped = cap or f"timed out: aborted after {timeout:g} s"
                self._interrupt(delegation.child, capped)
                result = await settle(turn, None)
        except NotPersistedError as exc:
            log.info("delegation to %s: the child's turn end was not written", delegation.child)
            result = exc.result
        except TurnError as exc:
            log.info("delegation to %s: the child's run did not run: %s", delegation.child, exc)
            result = None
        return result, capped

    def outcome(
        self,
        delegation: Delegation,
        result: RunResult | None,
        *,
        answer: str,
        runtime: float,
        capped: str = "",
    ) -> Outcome:
        """The delegation's outcome: the run's, unless the pool canceled it."""
        return outcome_of(
            result, answer=answer, runtime=runtime, capped=capped, canceled=delegation.canceled
        )

    async def settle(self, delegation: Delegation, outcome: Outcome, usage: Usage) -> None:
        """Record the one settlement (with the child's whole cost) and free the slot."""
        try:
            await self.record(
                delegation, outcome.status, stop=settlement_stop(outcome), usage=usage
            )
        finally:
            self.release(delegation)
            self._live.pop(delegation.receipt, None)

    def release(self, delegation: Delegation) -> None:
        if delegation.holding:
            delegation.holding = False
            slots = self._slots.get(delegation.parent_session)
            if slots is not None:
                slots.give()
                if slots.unused:
                    del self._slots[delegation.parent_session]

    # -- a dispatch send to a child

    def expect(
        self, parent: Session, parent_key: SessionKey, child: SessionKey, *, prompt: str, run: str
    ) -> tuple[Delegation, PoolReceiptEntry]:
        """A ``dispatch`` subagent or fork send: its delegation, and the ``accepted`` receipt.

        The caller writes the receipt in the append that records the send (the
        outbound ledger), so the two land together; the delegation is followed
        from the moment its child accepts the wake (tagged with the receipt).
        """
        accepted = PoolReceiptEntry(
            id=new_entry_id(), status=POOL_ACCEPTED, child=str(child), prompt=prompt
        )
        delegation = Delegation(
            receipt=accepted.id,
            parent_key=parent_key,
            parent_session=parent.id,
            child=child,
            prompt=prompt,
            run=run,
            follow=True,
        )
        return self.adopt(delegation), accepted

    async def create_child(self, delegation: Delegation, *, agent: str | None) -> None:
        """Create a ``dispatch`` subagent's session before its first wake: its header's lineage."""
        manager = self.manager
        session = await Session.create(
            manager.store,
            manager.agent,
            meta={"key": str(delegation.child), "agent": agent or manager.config.default_agent},
            lineage=delegation.lineage,
            options=manager.session_options(),
        )
        await manager.store.point(delegation.child, session.id)
        await session.close()

    def _observe(self, thread: object, wake: Wake, turn: Turn) -> None:
        """A child accepted a delegation's wake: record ``running``, settle with its turn."""
        delegation = self._live.get(wake.meta.get(DELEGATION, ""))
        if delegation is None or not delegation.follow or delegation.turn is not None:
            return
        delegation.turn = turn
        self.manager.spawn(
            self._running_then_watch(delegation, turn), name=f"delegation {delegation.child}"
        )

    async def _running_then_watch(self, delegation: Delegation, turn: Turn) -> None:
        await self.record(delegation, POOL_RUNNING)
        await self.watch(delegation, turn)

    async def watch(self, delegation: Delegation, turn: Turn) -> None:
        """Follow a child's turn to the delegation's settlement (its cost: that run's).

        A run that parks is followed on through its resume; the settlement's
        cost is then every run of the delegation's.
        """
        started = time.monotonic()
        result, _ = await self.follow(delegation, turn)
        if result is not None and parked_on(result):
            await self.park(delegation, result, partial(self.watch, delegation))
            return
        outcome = self.outcome(
            delegation,
            result,
            answer=result.text if result is not None else "",
            runtime=time.monotonic() - started,
        )
        spent = delegation.spent + (result.usage if result is not None else Usage())
        await self.settle(delegation, outcome, spent)

    # -- an approval boundary

    async def park(self, delegation: Delegation, result: RunResult, then: Then) -> None:
        """The child's run ended parked: record ``parked``, free the slot, await the resume.

        Nothing settles: once a person decided, the run that resumes the
        child is ``running`` again and ``then(turn)`` follows it (it may park
        again, and come back here).
        """
        delegation.parked = True
        delegation.turn = None
        delegation.spent = delegation.spent + result.usage
        try:
            await self.record(
                delegation, POOL_PARKED, stop=waits_for(p.tool for p in result.parked)
            )
        finally:
            self.release(delegation)
        self.wait_for_resume(delegation, then)

    def wait_for_resume(self, delegation: Delegation, then: Then) -> None:
        """Follow the parked delegation's resume with ``then`` once it starts (or now, if it has)."""
        delegation.parked = True
        early, delegation.early = delegation.early, None
        if early is not None:
            self._follow_resume(delegation, early, then)
        else:
            delegation.then = then

    def _resumed(self, session: Session, payload: object, turn: Turn) -> None:
        """A child's decided boundary resumes: the delegation its run works for follows it."""
        receipt = payload.meta.get(DELEGATION, "") if isinstance(payload, Wake) else ""
        delegation = self._live.get(receipt)
        if delegation is None or str(delegation.child) != session.header.meta.get("key"):
            return
        then, delegation.then = delegation.then, None
        if then is None:
            delegation.early = turn  # its park is still being recorded
            return
        self._follow_resume(delegation, turn, then)

    def _follow_resume(self, delegation: Delegation, turn: Turn, then: Then) -> None:
        """The resumed run holds the delegation again: ``running``, then ``then(turn)``."""
        delegation.parked = False
        delegation.turn = turn
        self.try_take(delegation)

        async def resumed() -> None:
            await self.record(delegation, POOL_RUNNING)
            await then(turn)

        self.manager.spawn(resumed(), name=f"delegation {delegation.child} resumed")

    # -- stopping

    async def cancel(self, child: str, reason: str = "canceled by an operator") -> Delegation:
        """Cancel the newest unsettled delegation to ``child``: queued, running or parked.

        A queued one settles ``canceled`` straight from ``accepted``; a running
        one has its child's turn interrupted and queue cleared, and settles
        ``canceled`` when that turn has ended; a parked one has the calls it
        waits on denied, and settles ``canceled`` without running again.
        Raises :class:`NoDelegationError`.
        """
        delegation = self.find(child)
        if delegation is None:
            raise NoDelegationError(child)
        delegation.canceled = delegation.canceled or reason
        if delegation.parked:
            await self._cancel_parked(delegation, reason)
            return delegation
        if delegation.turn is None:
            waiter = delegation.waiter
            if waiter is not None and not waiter.done():
                waiter.cancel(reason)
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
            if delegation.ticket is not None:
                # A waiter cancelled before it ran never joined its wait: withdraw for it.
                self._slots_of(delegation).withdraw(delegation.ticket)
                delegation.ticket = None
            if delegation.receipt in self._live:
                await self.settle(
                    delegation, self.outcome(delegation, None, answer="", runtime=0), Usage()
                )
            return delegation
        self._interrupt(delegation.child, reason)
        thread = self.manager.thread(delegation.child)
        if thread is not None:
            await thread.session.clear_queue()
        return delegation

    async def _cancel_parked(self, delegation: Delegation, reason: str) -> None:
        """Deny what the parked child waits for, resume nothing, and settle ``canceled``.

        The denials keep the parked calls from running on a later approval;
        whoever opens the child later finds the boundary closed. The
        delegation is settled the way its resumed run would have been (an
        announce, a parent told), from a turn that ended canceled unrun.
        """
        then, delegation.then = delegation.then, None
        thread = await self.manager.open_thread(delegation.child)
        if thread is not None:
            await thread.session.approvals.close(f"canceled: {reason}", via=VIA_PARENT)
        delegation.parked = False
        if then is None:
            canceled = Outcome(status=POOL_CANCELED, words=f"canceled ({reason})", answer="")
            await self.settle(delegation, canceled, delegation.spent)
            return
        unrun = Turn(new_entry_id(), "", Policy.QUEUE)
        unrun.finish(
            TurnOutcome.CANCELED, RunResult(stop_reason="canceled", error=f"canceled: {reason}")
        )
        self.manager.spawn(then(unrun), name=f"delegation {delegation.child} canceled")

    def _interrupt(self, child: str, reason: str) -> None:
        thread = self.manager.thread(child)
        if thread is not None:
            thread.session.interrupt(reason)

    # -- the parent's session

    async def record(
        self, delegation: Delegation, status: str, *, stop: str = "", usage: Usage | None = None
    ) -> None:
        """Write one step of the delegation's journey on its parent (receipt, child and call)."""
        await self.on_parent(
            delegation,
            lambda s: s.pool_receipt(
                status,
                receipt=delegation.receipt,
                child=str(delegation.child),
                call=delegation.call,
                stop=stop,
                usage=usage,
            ),
        )

    async def on_parent(
        self,
        delegation: Delegation,
        write: Callable[[Session], Awaitable[PoolReceiptEntry | object]],
    ) -> None:
        """Write on the parent session: its live thread's, or the session reopened."""
        await write_on(self.manager, delegation.parent_key, delegation.parent_session, write)

    def _slots_of(self, delegation: Delegation) -> Slots:
        slots = self._slots.get(delegation.parent_session)
        if slots is None:
            slots = self._slots[delegation.parent_session] = Slots(self.size)
        return slots


async def write_on(
    manager: ThreadManager,
    key: str,
    session_id: str,
    write: Callable[[Session], Awaitable[object]],
) -> None:
    """Write on session ``session_id`` of ``key``: through its live thread, or reopened."""
    thread = manager.thread(key) or await manager.open_thread(key)
    if thread is not None and thread.session.id == session_id:
        await write(thread.session)
        return
    session = await Session.open(
        manager.store, session_id, manager.agent, options=manager.session_options()
    )
    try:
        await write(session)
    finally:
        await session.close()


def parked_on(result: RunResult) -> bool:
    """Whether a child's run ended at an approval boundary (it waits for a person)."""
    return result.stop_reason == "parked" and bool(result.parked)


def waits_for(tools: Iterable[str]) -> str:
    """What a ``parked`` receipt says: the tools whose calls the child waits on."""
    names = ", ".join(dict.fromkeys(tools)) or "a call"
    return f"waits for a person's approval of {names}"


def settlement_stop(outcome: Outcome) -> str:
    """What a settlement's ``stop`` says: the child's answer when done, else why it ended."""
    text = outcome.answer if outcome.status == POOL_DONE else outcome.words
    return text if len(text) <= STOP_MAX else text[: STOP_MAX - 1] + "…"

"""A session: one stored conversation, loaded, with its turns run one at a time.

Open reads and nothing else: it validates the tree, restores input a stopped
writer accepted and never settled to the queue, and runs nothing. Every write
is one storage append under the session's lock, after the writer lease is
taken; a session whose view fell behind refuses to write (``StaleError``).

Turns follow seed 003: ``send`` makes the prompt durable before the run
starts (or, while a turn runs, writes a receipt under the busy policy), the
run's step messages are appended as they join it, and a ``turn`` entry closes
the ledger whatever the outcome. The session's driver task runs the queue:
one turn at a time, through the gate its owner gives it (the manager's cap on
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
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from threads.errors import (
    BusyError,
    ClosedError,
    NoEntryError,
    NotRunError,
    ReservedKeyError,
    StaleError,
)
from threads.ids import new_entry_id, new_session_id
from threads.messages import JSON, Message, Usage
from threads.store.base import Leaser, Loaded, LoadReport, Releaser, SessionStore
from threads.store.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    Entry,
    Header,
    InfoEntry,
    LabelEntry,
    LeafEntry,
    Lineage,
    MessageEntry,
    ParentRef,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.tree import (
    EntryTree,
    interruption_results,
    still_open,
    unfinished_runs,
    unsettled_receipts,
)
from threads.turns import Agent, Outcome, Policy, Run, RunFinish, RunResult, Turn

log = logging.getLogger(__name__)
_POLICIES = frozenset(p.value for p in Policy)
CRASHED = "interrupted: the gateway stopped during this turn"

Gate = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
PayloadLoader = Callable[[Mapping[str, JSON]], Any]
Resumer = Callable[["Session", MessageEntry], "tuple[Message, Any, Mapping[str, JSON]] | None"]
SessionState = Literal["running", "pending", "idle"]
Injected = Message | Callable[[], Message]


@contextlib.asynccontextmanager
async def _no_gate() -> AsyncIterator[None]:
    yield


@dataclass(slots=True, kw_only=True)
class SessionOptions:
    """How a session runs.

    ``gate`` is entered around every run (the manager's cap on concurrent
    turns); ``max_queue`` bounds what may wait (steers and queued sends);
    ``collect_window`` is the debounce of the ``collect`` policy in seconds:
    collected messages start their turn once none has arrived for that long.
    ``load_payload`` rebuilds a restored input's payload from its stored wake;
    ``resume`` makes the follow-up of a turn a dead writer left running.
    """

    gate: Gate = _no_gate
    max_queue: int = 256
    collect_window: float = 1.5
    load_payload: PayloadLoader | None = None
    resume: Resumer | None = None


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
    run: Run
    pendings: list[_Pending]
    prompt_id: str
    task: asyncio.Task[RunResult] | None = None
    begun: bool = False
    cancel_reason: str = ""
    rollback: bool = False


class Session:
    """A loaded session: the entry tree in memory and its only writer."""

    def __init__(
        self,
        store: SessionStore,
        header: Header,
        agent: Agent,
        tree: EntryTree,
        *,
        view: int,
        report: LoadReport | None = None,
        options: SessionOptions | None = None,
    ) -> None:
        self._store = store
        self.header = header
        self.agent = agent
        self._tree = tree
        self._view = view
        self._report = report
        self._options = options or SessionOptions()
        self._lock = asyncio.Lock()
        self._holder = object()
        self._leaser = store if isinstance(store, Leaser) else None
        self._leased = False
        self._closing = False
        self._stop_queue = False
        self._sealed = False
        self._counter = tree.highest_turn()
        self._running: _Active | None = None
        self._queue: deque[_Pending] = deque()
        self._steers: deque[_Pending] = deque()
        self._driver: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._arrival = asyncio.Event()
        self._unfinished = unfinished_runs(tree.entries)
        self._restore()

    # -- creating and opening

    @classmethod
    async def create(
        cls,
        store: SessionStore,
        agent: Agent,
        *,
        session_id: str | None = None,
        meta: Mapping[str, str] | None = None,
        parent: ParentRef | None = None,
        lineage: Lineage | None = None,
        options: SessionOptions | None = None,
    ) -> Session:
        """Create a new session; it holds its writer lease from the start."""
        header = Header(
            id=session_id or new_session_id(),
            created=datetime.now(UTC),
            parent=parent,
            lineage=lineage,
            meta=dict(meta or {}),
        )
        await store.create(header)
        session = cls(store, header, agent, EntryTree(header.id), view=0, options=options)
        await session._take_lease()
        return session

    @classmethod
    async def open(
        cls,
        store: SessionStore,
        session_id: str,
        agent: Agent,
        *,
        options: SessionOptions | None = None,
    ) -> Session:
        """Load a session: validate its tree and restore its queue. Writes nothing, runs nothing."""
        return cls.from_loaded(store, await store.load(session_id), agent, options=options)

    @classmethod
    def from_loaded(
        cls,
        store: SessionStore,
        loaded: Loaded,
        agent: Agent,
        *,
        options: SessionOptions | None = None,
    ) -> Session:
        """A session over what ``store.load`` returned (validated here: ``CorruptError``)."""
        tree = EntryTree(loaded.header.id)
        skipped = loaded.report.skipped if loaded.report else ()
        tree.load(loaded.entries, salvaged=bool(skipped))
        return cls(
            store,
            loaded.header,
            agent,
            tree,
            view=len(loaded.entries) + len(skipped),
            report=loaded.report,
            options=options,
        )

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

    # -- reads

    @property
    def id(self) -> str:
        return self.header.id

    @property
    def store(self) -> SessionStore:
        return self._store

    @property
    def leaf(self) -> str:
        return self._tree.leaf

    @property
    def load_report(self) -> LoadReport | None:
        return self._report

    @property
    def orphaned(self) -> list[str]:
        return list(self._tree.orphaned)

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

    @property
    def closed(self) -> bool:
        return self._closing

    def entries(self) -> list[Entry]:
        return list(self._tree.entries)

    @property
    def entry_count(self) -> int:
        return len(self._tree.entries)

    def path(self, entry_id: str | None = None) -> list[Entry]:
        return self._tree.path(entry_id)

    def path_reversed(self) -> Iterator[Entry]:
        """The leaf's path, newest first, without a copy (do not write while iterating)."""
        return self._tree.path_reversed()

    def context(self) -> list[Message]:
        return self._tree.context()

    def title(self) -> str:
        return self._tree.title()

    def meta(self) -> dict[str, str]:
        return self._tree.meta(dict(self.header.meta))

    def usage(self) -> Usage:
        total = Usage()
        for entry in self._tree.entries:
            if isinstance(entry, TurnEntry):
                total = total + entry.usage
        return total

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
    def busy(self) -> bool:
        return self._running is not None or self._driver is not None

    # -- writing

    def _chain(self, *entries: Entry) -> list[Entry]:
        """Link ``entries`` onto the leaf in order (parents set, leaf entries followed)."""
        out: list[Entry] = []
        leaf = self._tree.leaf
        for entry in entries:
            linked = entry if entry.parent == leaf else dataclasses.replace(entry, parent=leaf)
            out.append(linked)
            leaf = linked.entry if isinstance(linked, LeafEntry) else linked.id
        return out

    async def _write(self, entries: Sequence[Entry]) -> None:
        """Append a batch; the lock is held by the caller."""
        if self._sealed:
            raise ClosedError(self.id)
        if not entries:
            return
        await self._take_lease()
        await self._store.append(self.id, entries)
        for entry in entries:
            self._tree.add(entry)
        self._view += len(entries)

    async def _take_lease(self) -> None:
        if self._leaser is None or self._leased:
            return
        count, created = await self._leaser.acquire(self.id, self._holder)
        if count != self._view or created != self.header.created:
            await self._leaser.yield_lease(self.id, self._holder)
            raise StaleError(self.id, f"it holds {count} entries, this view loaded {self._view}")
        self._leased = True

    async def _append(self, *entries: Entry) -> list[Entry]:
        async with self._lock:
            linked = self._chain(*entries)
            await self._write(linked)
            return linked

    async def label(self, entry_id: str, name: str) -> None:
        if not name:
            raise ValueError(f"a label of entry {entry_id} needs a name")
        self._tree.require(entry_id)
        await self._append(LabelEntry(id=new_entry_id(), entry=entry_id, name=name))

    async def set_info(self, title: str = "", meta: Mapping[str, str] | None = None) -> None:
        """Append an info entry; ``weft.`` keys are refused; nothing to record writes nothing."""
        meta = dict(meta or {})
        for key in meta:
            if key.startswith("weft."):
                raise ReservedKeyError(key)
        if not title and not meta:
            return
        await self._append(InfoEntry(id=new_entry_id(), title=title, meta=meta))

    async def pool_receipt(
        self,
        status: str,
        *,
        receipt: str = "",
        child: str = "",
        prompt: str = "",
        stop: str = "",
        usage: Usage | None = None,
    ) -> PoolReceiptEntry:
        """Record one step of a delegation's journey (accepted → running → settled).

        The first entry (``accepted``) names the child and the task; later ones
        link back to it by ``receipt``. Never in the model's context.
        """
        entry = PoolReceiptEntry(
            id=new_entry_id(),
            status=status,
            receipt=receipt,
            child=child,
            prompt=prompt,
            stop=stop,
            usage=usage or Usage(),
        )
        (written,) = await self._append(entry)
        assert isinstance(written, PoolReceiptEntry)
        return written

    async def custom(self, kind: str, data: JSON = None) -> None:
        """Append application state that never enters the model's context."""
        if not kind:
            raise ValueError(f"a custom entry in session {self.id} needs a kind")
        await self._append(CustomEntry(id=new_entry_id(), kind=kind, data=data))

    async def custom_message(self, kind: str, message: Message) -> None:
        """Append a message the model sees, not attributed to the user; between turns only."""
        if not kind:
            raise ValueError(f"a custom message in session {self.id} needs a kind")
        if self._running is not None:
            raise BusyError(self.id, "custom_message")
        await self._append(CustomMessageEntry(id=new_entry_id(), kind=kind, message=message))

    async def append_messages(self, messages: Sequence[Message]) -> None:
        """Append conversation messages between turns (a fork's inherited history)."""
        if self._running is not None:
            raise BusyError(self.id, "append_messages")
        await self._append(*[MessageEntry(id=new_entry_id(), message=m) for m in messages])

    async def apply_compaction(self, entry: CompactionEntry, *, run: Run | None = None) -> None:
        """Append a compaction entry; its summary then stands in for what precedes ``first_kept``.

        A between-turns write, except for the running turn itself (``run``), which
        compacts before its next model call; staged step messages land first.
        """
        self._tree.require(entry.first_kept)
        if entry.first_kept not in {e.id for e in self._tree.path()}:
            raise ValueError(f"first_kept {entry.first_kept} is not on the leaf's path")
        active = self._running
        if active is not None and (run is None or active.run is not run):
            raise BusyError(self.id, "compaction")
        async with self._lock:
            staged: list[Message] = []
            if run is not None:
                staged, run.staged = run.staged, []
            batch = [MessageEntry(id=new_entry_id(), message=m) for m in staged]
            await self._write(self._chain(*batch, entry))

    def latest_compaction(self) -> CompactionEntry | None:
        """The latest compaction on the leaf's path, if any."""
        for entry in reversed(self._tree.path()):
            if isinstance(entry, CompactionEntry):
                return entry
        return None

    async def uncompact(self) -> None:
        """Undo the latest compaction on the path: branch back to the entry before it."""
        latest = self.latest_compaction()
        if latest is None:
            raise NoEntryError(self.id, "(no compaction on the path)")
        await self.branch(latest.parent)

    async def branch(self, entry_id: str, summary: str = "") -> None:
        """Move the leaf to ``entry_id`` ("" for the root) by appending a leaf entry."""
        if self._running is not None:
            raise BusyError(self.id, "branch")
        if entry_id:
            self._tree.require(entry_id)
        abandoned = self._tree.leaf
        entries: list[Entry] = [LeafEntry(id=new_entry_id(), entry=entry_id)]
        if summary:
            entries.append(
                BranchSummaryEntry(id=new_entry_id(), summary=summary, from_entry=abandoned)
            )
        await self._append(*entries)

    async def fork(
        self,
        entry_id: str,
        *,
        session_id: str | None = None,
        meta: Mapping[str, str] | None = None,
        agent: Agent | None = None,
        options: SessionOptions | None = None,
    ) -> Session:
        """Copy the path root → ``entry_id`` into a new session whose header names its origin.

        Nothing that would start a run is carried over: input still waiting on
        the path is recorded as dropped in the fork, and a turn still running
        on it as canceled there.
        """
        async with self._lock:
            if entry_id:
                target = self._tree.require(entry_id)
                if isinstance(target, LeafEntry):
                    raise ValueError(f"entry {entry_id} is a leaf entry; fork the entry it names")
            path = self._tree.path(entry_id) if entry_id else []
        fork = await Session.create(
            self._store,
            agent or self.agent,
            session_id=session_id,
            meta=meta,
            parent=ParentRef(session=self.id, entry=entry_id),
            options=options or self._options,
        )
        copied = _reparent(path)
        settle: list[Entry] = [
            ReceiptEntry(id=new_entry_id(), status="dropped", receipt=r.id)
            for r in unsettled_receipts(copied)
        ]
        settle += [
            TurnEntry(
                id=new_entry_id(),
                run_id=p.run_id,
                stop_reason="canceled",
                canceled=True,
                err=f"forked from session {self.id} while this turn ran",
            )
            for p in unfinished_runs(copied)
        ]
        async with fork._lock:
            batch = copied + _chain_after(copied, settle)
            await fork._write(batch)
            fork._queue.clear()
            fork._steers.clear()
            fork._counter = max(fork._counter, fork._tree.highest_turn())
        return fork

    # -- turns

    def _mint_run_id(self) -> str:
        self._counter += 1
        return f"{self.id}-t{self._counter}"

    async def send(
        self,
        message: Message,
        *,
        policy: Policy = Policy.QUEUE,
        payload: Any = None,
        wake: Mapping[str, JSON] | None = None,
        injected: Injected | None = None,
    ) -> Turn:
        """Accept one message: durable before this returns, run under the busy policy.

        ``payload`` rides with the run (the wake, for the agent); ``wake`` is its
        wire form, stored on the prompt or receipt entry; ``injected`` is the
        message to deliver instead when it is steered into a running turn (or
        a function making it, called only then). Raises :class:`BusyError` (nothing written) under ``reject`` while a turn
        runs, and for any policy when ``max_queue`` inputs already wait.
        """
        async with self._lock:
            if self._closing:
                raise ClosedError(self.id)
            await self._settle_unfinished()
            wake = dict(wake or {})
            if self._running is None and not self._queue and policy is not Policy.COLLECT:
                return await self._start_now(message, policy, payload, wake, injected)
            if policy is Policy.REJECT:
                raise BusyError(self.id)
            if self.pending_count() >= self._options.max_queue:
                raise BusyError(
                    self.id, f"send refused: the inbox is full ({self._options.max_queue} waiting)"
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

    def interrupt(self, reason: str = "stopped by the user") -> bool:
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
        """Run what the session holds but is not running; the first turn that will run.

        A turn a dead writer left running is recorded as canceled and its
        resume (when the owner makes one) runs first; restored steers become
        follow-up turns next, then the restored sends in acceptance order.
        None when nothing waits.
        """
        async with self._lock:
            if self._closing:
                raise ClosedError(self.id)
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
            if self._driver is None:
                return

    async def close(self, timeout: float | None = None, *, drain: bool = True) -> None:
        """Stop new work, let the running turn (and, with ``drain``, the queue) finish, release.

        When ``timeout`` passes first the running turn is canceled (recorded as
        such). Input still queued stays durable for the next open; its turns
        end with :class:`ClosedError`.
        """
        self._closing = True
        if not drain:
            self._stop_queue = True
        self._arrival.set()
        driver = self._driver
        if driver is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(driver)
            except TimeoutError:
                self._cancel_running("the session is closing")
                self._stop_queue = True
                await asyncio.shield(driver)
        for pending in [*self._steers, *self._queue]:
            pending.turn.close(self.id)
        self._steers.clear()
        self._queue.clear()
        if not self._sealed:
            self._sealed = True
            await self._release()

    async def _release(self) -> None:
        if self._leaser is not None:
            if self._leased:
                self._leased = False
                await self._leaser.yield_lease(self.id, self._holder)
        elif isinstance(self._store, Releaser):
            await self._store.release(self.id)

    # -- the driver: runs queued turns one at a time

    def _kick(self) -> None:
        if self._driver is None and self._queue and not self._stop_queue:
            self._idle.clear()
            self._driver = asyncio.create_task(self._drive(), name=f"session {self.id}")

    async def _drive(self) -> None:
        try:
            while True:
                active = await self._next_active()
                if active is None:
                    return
                await self._execute(active)
        finally:
            if self._driver is asyncio.current_task():
                self._driver = None
                self._idle.set()

    async def _next_active(self) -> _Active | None:
        while True:
            async with self._lock:
                head = self._queue[0] if self._queue else None
                if head is None or (self._stop_queue and not head.started):
                    self._driver = None
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
            log.exception("session %s: the prompt of %s was not written", self.id, head.turn.run_id)
            for pending in batch:
                pending.turn.finish(
                    Outcome.FAILED,
                    error=NotRunError(
                        f"turn {head.turn.run_id} of session {self.id} did not start: its "
                        f"prompt was not written ({exc}); it stays queued for the next open"
                    ),
                )
            return None
        run = Run(
            session=self,
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
                    active.task = asyncio.create_task(self.agent.run(run), name=run.run_id)
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
                log.exception("session %s: the end of turn %s was not written", self.id, run.run_id)
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
            made = self._options.resume(self, prompt) if self._options.resume else None
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


def _chain_after(base: Sequence[Entry], entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` linked one after another onto the last of ``base``."""
    leaf = base[-1].id if base else ""
    out: list[Entry] = []
    for entry in entries:
        out.append(dataclasses.replace(entry, parent=leaf))
        leaf = entry.id
    return out


def _reparent(path: list[Entry]) -> list[Entry]:
    """The copied path of a fork: the same ids, each linked to the one before."""
    out: list[Entry] = []
    parent = ""
    for entry in path:
        out.append(entry if entry.parent == parent else dataclasses.replace(entry, parent=parent))
        parent = entry.id
    return out

"""A session: one stored conversation, loaded, with its turns run one at a time.

Open reads and nothing else: it validates the tree, restores input a stopped
writer accepted and never settled to the queue, and runs nothing. Every write
is one storage append under the session's lock, after the writer lease is
taken; a session whose view fell behind refuses to write (``StaleError``).

Turns follow seed 003: ``send`` makes the prompt durable before the run
starts (or, while a turn runs, writes a receipt under the busy policy), the
run's step messages are appended as they join it, and a ``turn`` entry closes
the ledger whatever the outcome.
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
from typing import Any

from threads.errors import BusyError, ClosedError, NoEntryError, ReservedKeyError, StaleError
from threads.ids import new_entry_id, new_session_id
from threads.messages import JSON, Message, ToolResultPart, Usage
from threads.store.base import Leaser, LoadReport, Releaser, SessionStore
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
    ReceiptEntry,
    TurnEntry,
)
from threads.tree import INTERRUPTED, EntryTree, unfinished_runs, unsettled_receipts
from threads.turns import Agent, Outcome, Policy, Run, RunFinish, RunResult, Turn

log = logging.getLogger(__name__)
_POLICIES = frozenset(p.value for p in Policy)

Gate = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
PayloadLoader = Callable[[Mapping[str, JSON]], Any]
Resumer = Callable[["Session", MessageEntry], "tuple[Message, Any, Mapping[str, JSON]] | None"]


@contextlib.asynccontextmanager
async def _no_gate() -> AsyncIterator[None]:
    yield


@dataclass(slots=True, kw_only=True)
class SessionOptions:
    """How a session runs: its turn gate, queue bound, collect window and restore hooks."""

    gate: Gate = _no_gate
    max_queue: int = 256
    collect_window: float = 1.5
    load_payload: PayloadLoader | None = None
    resume: Resumer | None = None


@dataclass(slots=True, kw_only=True)
class _Pending:
    """One accepted input waiting for a turn of its own (or, a steer, for a drain)."""

    turn: Turn
    message: Message
    policy: Policy
    payload: Any = None
    wake: Mapping[str, JSON] = field(default_factory=dict)
    injected: Message | None = None
    receipt_id: str = ""
    prompt_id: str = ""
    prompt_written: bool = False
    arrived: float = field(default_factory=time.monotonic)


@dataclass(slots=True, kw_only=True)
class _Active:
    run: Run
    pendings: list[_Pending]
    prompt_id: str
    task: asyncio.Task[RunResult] | None = None
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
        return cls(store, header, agent, EntryTree(header.id), view=0, options=options)

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
        loaded = await store.load(session_id)
        tree = EntryTree(loaded.header.id)
        salvaged = bool(loaded.report and loaded.report.skipped)
        tree.load(loaded.entries, salvaged=salvaged)
        view = len(loaded.entries) + (len(loaded.report.skipped) if loaded.report else 0)
        return cls(
            store, loaded.header, agent, tree, view=view, report=loaded.report, options=options
        )

    def _restore(self) -> None:
        load = self._options.load_payload
        for receipt in unsettled_receipts(self._tree.entries):
            if receipt.msg is None:
                continue
            payload = load(receipt.wake) if (load and receipt.wake) else None
            policy = Policy(receipt.policy) if receipt.policy in _POLICIES else Policy.QUEUE
            if receipt.status == "queued":
                turn = Turn(receipt.id, receipt.run_id, Policy.STEER)
                self._steers.append(
                    _Pending(
                        turn=turn,
                        message=receipt.msg,
                        policy=Policy.STEER,
                        payload=payload,
                        wake=receipt.wake,
                        receipt_id=receipt.id,
                    )
                )
            else:
                turn = Turn(receipt.turn, receipt.run_id, policy)
                self._queue.append(
                    _Pending(
                        turn=turn,
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
        return self._running.run if self._running else None

    @property
    def closed(self) -> bool:
        return self._closing

    def entries(self) -> list[Entry]:
        return list(self._tree.entries)

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
            (p.turn.id, p.message, p.policy) for p in self._queue
        ]

    def has_steers(self) -> bool:
        return bool(self._steers)

    def pending_count(self) -> int:
        return len(self._steers) + len(self._queue)

    @property
    def busy(self) -> bool:
        return self._running is not None or self._driver is not None

    # -- writing

    def _chain(self, *entries: Entry) -> list[Entry]:
        """Link ``entries`` onto the leaf in order (parents set, leaf entries followed)."""
        out: list[Entry] = []
        leaf = self._tree.leaf
        for entry in entries:
            linked = _relink(entry, leaf)
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
            raise ValueError("a label needs a name")
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

    async def custom(self, kind: str, data: JSON = None) -> None:
        if not kind:
            raise ValueError("a custom entry needs a kind")
        await self._append(CustomEntry(id=new_entry_id(), kind=kind, data=data))

    async def custom_message(self, kind: str, message: Message) -> None:
        if not kind:
            raise ValueError("a custom message needs a kind")
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
        """Copy the path root → ``entry_id`` into a new session whose header names its origin."""
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
        settle = [
            ReceiptEntry(id=new_entry_id(), status="dropped", receipt=r.id)
            for r in unsettled_receipts(copied)
        ]
        async with fork._lock:
            batch = copied + fork._chain_after(copied, settle)
            await fork._write(batch)
            fork._queue.clear()
            fork._steers.clear()
        return fork

    def _chain_after(self, base: Sequence[Entry], entries: Sequence[Entry]) -> list[Entry]:
        leaf = base[-1].id if base else self._tree.leaf
        out: list[Entry] = []
        for entry in entries:
            linked = _relink(entry, leaf)
            out.append(linked)
            leaf = linked.id
        return out

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
        injected: Message | None = None,
    ) -> Turn:
        """Accept one message: durable before this returns, run under the busy policy.

        ``payload`` rides with the run (the wake, for the agent); ``wake`` is its
        wire form, stored on the prompt or receipt entry; ``injected`` is the
        message to deliver instead when it is steered into a running turn.
        """
        async with self._lock:
            if self._closing:
                raise ClosedError(self.id)
            await self._settle_unfinished()
            busy = self._running is not None or bool(self._queue)
            wake = dict(wake or {})
            if not busy and policy is not Policy.COLLECT:
                turn = Turn(new_entry_id(), self._mint_run_id(), policy)
                pending = _Pending(
                    turn=turn,
                    message=message,
                    policy=policy,
                    payload=payload,
                    wake=wake,
                    injected=injected,
                    prompt_id=turn.id,
                )
                (prompt,) = self._chain(
                    MessageEntry(id=turn.id, message=message, run_id=turn.run_id, wake=wake)
                )
                await self._write([prompt])
                pending.prompt_written = True
                self._queue.appendleft(pending)
                self._kick()
                return turn
            if self.pending_count() >= self._options.max_queue:
                raise BusyError(self.id, f"inbox full ({self._options.max_queue} waiting)")
            if policy is Policy.REJECT:
                raise BusyError(self.id)
            if policy is Policy.STEER and self._running is not None:
                return await self._accept_steer(message, payload, wake, injected)
            return await self._accept_send(message, policy, payload, wake, injected)

    async def _accept_steer(
        self, message: Message, payload: Any, wake: Mapping[str, JSON], injected: Message | None
    ) -> Turn:
        receipt_id = new_entry_id()
        running = self._running
        run_id = running.run.run_id if running else ""
        (receipt,) = self._chain(
            ReceiptEntry(
                id=receipt_id,
                status="queued",
                msg=message,
                run_id=run_id,
                policy=Policy.STEER.value,
                wake=wake,
            )
        )
        await self._write([receipt])
        turn = Turn(receipt_id, run_id, Policy.STEER)
        self._steers.append(
            _Pending(
                turn=turn,
                message=message,
                policy=Policy.STEER,
                payload=payload,
                wake=wake,
                injected=injected,
                receipt_id=receipt_id,
            )
        )
        return turn

    async def _accept_send(
        self,
        message: Message,
        policy: Policy,
        payload: Any,
        wake: Mapping[str, JSON],
        injected: Message | None,
    ) -> Turn:
        prompt_id = new_entry_id()
        run_id = self._mint_run_id()
        (receipt,) = self._chain(
            ReceiptEntry(
                id=new_entry_id(),
                status="accepted",
                msg=message,
                run_id=run_id,
                turn=prompt_id,
                policy=policy.value,
                wake=wake,
            )
        )
        await self._write([receipt])
        turn = Turn(prompt_id, run_id, policy)
        pending = _Pending(
            turn=turn,
            message=message,
            policy=policy,
            payload=payload,
            wake=wake,
            injected=injected,
            receipt_id=receipt.id,
            prompt_id=prompt_id,
        )
        if policy in (Policy.INTERRUPT, Policy.ROLLBACK) and self._running is not None:
            self._queue.appendleft(pending)
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
        active = self._running
        if active is None:
            return
        active.cancel_reason = reason
        active.rollback = active.rollback or rollback
        if active.task is not None:
            active.task.cancel(reason)

    def interrupt(self, reason: str = "stopped by the user") -> bool:
        """Cancel the running turn now; it is recorded as canceled. False when none runs."""
        if self._running is None:
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
        """Run what the session holds but is not running; the first turn that will run."""
        async with self._lock:
            if self._closing:
                raise ClosedError(self.id)
            await self._settle_unfinished()
            if self._steers and self._running is None:
                await self._defer_steers()
            self._kick()
            return self._queue[0].turn if self._queue else None

    async def clear_queue(self) -> int:
        """Drop every input not yet given to a model; each gets a ``dropped`` receipt."""
        async with self._lock:
            dropped = list(self._steers) + list(self._queue)
            if not dropped:
                return 0
            receipts = [
                ReceiptEntry(id=new_entry_id(), status="dropped", receipt=p.receipt_id)
                for p in dropped
                if p.receipt_id
            ]
            await self._write(self._chain(*receipts))
            self._steers.clear()
            self._queue.clear()
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
        such). Input still queued stays durable for the next open.
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
                await self._leaser.yield_lease(self.id, self._holder)
                self._leased = False
        elif isinstance(self._store, Releaser):
            await self._store.release(self.id)

    # -- the driver: runs queued turns one at a time

    def _kick(self) -> None:
        if self._driver is None and self._queue and not self._stop_queue:
            self._idle.clear()
            self._driver = asyncio.create_task(self._drive(), name=f"session {self.id}")

    async def _drive(self) -> None:
        while True:
            active = await self._next_active()
            if active is None:
                return
            await self._execute(active)

    async def _next_active(self) -> _Active | None:
        while True:
            async with self._lock:
                if not self._queue or self._stop_queue:
                    self._driver = None
                    self._idle.set()
                    return None
                head = self._queue[0]
                wait = 0.0
                if head.policy is Policy.COLLECT and not self._closing:
                    last = max(p.arrived for p in self._queue if p.policy is Policy.COLLECT)
                    wait = last + self._options.collect_window - time.monotonic()
                if wait <= 0:
                    return await self._start_active()
                self._arrival.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._arrival.wait()

    async def _start_active(self) -> _Active:
        """Take the next turn's input off the queue and write its prompt entries."""
        batch = [self._queue.popleft()]
        if batch[0].policy is Policy.COLLECT:
            while self._queue and self._queue[0].policy is Policy.COLLECT:
                batch.append(self._queue.popleft())
        head = batch[0]
        prompts = [
            MessageEntry(
                id=p.prompt_id,
                message=p.message,
                run_id=head.turn.run_id if p is head else "",
                wake=p.wake,
            )
            for p in batch
            if not p.prompt_written
        ]
        if prompts:
            await self._write(self._chain(*prompts))
        run = Run(
            session=self,
            run_id=head.turn.run_id,
            turn=head.turn,
            messages=self._tree.context(),
            payload=head.payload,
            policy=head.policy,
        )
        run.bind(self._flush_run, self._drain_run)
        active = _Active(run=run, pendings=batch, prompt_id=head.prompt_id)
        self._running = active
        return active

    async def _execute(self, active: _Active) -> None:
        run = active.run
        result: RunResult | None = None
        try:
            async with self._options.gate():
                if not active.cancel_reason:
                    active.task = asyncio.create_task(self.agent.run(run), name=run.run_id)
                    await asyncio.wait([active.task])
                    result = _result_of(active.task, active.cancel_reason)
        except asyncio.CancelledError:
            if active.task is not None and not active.task.done():
                active.task.cancel("the session is shutting down")
                await asyncio.wait([active.task])
            active.cancel_reason = active.cancel_reason or "the gateway is shutting down"
            await asyncio.shield(self._finish(active, None))
            raise
        await asyncio.shield(self._finish(active, result))

    async def _finish(self, active: _Active, result: RunResult | None) -> None:
        run = active.run
        if result is None:
            result = RunResult(
                stop_reason="canceled", error=active.cancel_reason or "canceled", steps=run.steps
            )
        canceled = result.stop_reason == "canceled"
        turn_entry = TurnEntry(
            id=new_entry_id(),
            run_id=run.run_id,
            stop_reason=result.stop_reason,
            usage=result.usage,
            steps=result.steps,
            err=result.error,
            canceled=canceled,
            policy=run.policy.value,
            last_input=result.last_input,
        )
        messages = list(run.staged)
        if canceled:
            messages.extend(_interruption_results(run.messages + messages))
        run.staged.clear()
        deferred: list[tuple[_Pending, _Pending]] = []
        async with self._lock:
            entries: list[Entry] = [MessageEntry(id=new_entry_id(), message=m) for m in messages]
            entries.append(turn_entry)
            if active.rollback:
                prompt = self._tree.by_id.get(active.prompt_id)
                entries.append(LeafEntry(id=new_entry_id(), entry=prompt.parent if prompt else ""))
            deferred = self._plan_deferrals()
            entries.extend(_deferral_receipts(deferred))
            outcome = Outcome.CANCELED if canceled else Outcome.ANSWERED
            if result.stop_reason == "error":
                outcome = Outcome.FAILED
            try:
                await self._write(self._chain(*entries))
            except Exception as exc:
                log.exception("session %s: turn %s end not persisted", self.id, run.run_id)
                outcome = Outcome.FAILED
                result = RunResult(
                    stop_reason="error", error=f"turn end not persisted: {exc}", steps=result.steps
                )
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

    def _plan_deferrals(self) -> list[tuple[_Pending, _Pending]]:
        """Steers the run never drained become follow-up turns (lock held)."""
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
        entries: list[Entry] = []
        resumes: list[_Pending] = []
        for prompt in unfinished:
            entries.append(
                TurnEntry(
                    id=new_entry_id(),
                    run_id=prompt.run_id,
                    stop_reason="canceled",
                    canceled=True,
                    err="interrupted: the gateway stopped during this turn",
                )
            )
            made = self._options.resume(self, prompt) if self._options.resume else None
            if made is not None:
                message, payload, wake = made
                prompt_id = new_entry_id()
                run_id = self._mint_run_id()
                entries.append(
                    ReceiptEntry(
                        id=new_entry_id(),
                        status="accepted",
                        msg=message,
                        run_id=run_id,
                        turn=prompt_id,
                        policy=Policy.QUEUE.value,
                        wake=wake,
                    )
                )
                resumes.append(
                    _Pending(
                        turn=Turn(prompt_id, run_id, Policy.QUEUE),
                        message=message,
                        policy=Policy.QUEUE,
                        payload=payload,
                        wake=wake,
                        prompt_id=prompt_id,
                        receipt_id=entries[-1].id,
                    )
                )
        context = self._tree.context()
        interrupted = _interruption_results(context)
        linked = self._chain(
            *[MessageEntry(id=new_entry_id(), message=m) for m in interrupted], *entries
        )
        await self._write(linked)
        for pending in reversed(resumes):
            self._queue.appendleft(pending)

    async def _flush_run(self, run: Run) -> None:
        async with self._lock:
            messages, run.staged = run.staged, []
            await self._write(
                self._chain(*[MessageEntry(id=new_entry_id(), message=m) for m in messages])
            )

    async def _drain_run(self, run: Run) -> list[Message]:
        async with self._lock:
            messages, run.staged = run.staged, []
            steers = list(self._steers)
            self._steers.clear()
            entries: list[Entry] = [MessageEntry(id=new_entry_id(), message=m) for m in messages]
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
            await self._write(self._chain(*entries))
        for steer in steers:
            steer.turn.run_id = run.run_id
            steer.turn.finish(Outcome.DELIVERED)
        return delivered


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


def _result_of(task: asyncio.Task[RunResult], cancel_reason: str) -> RunResult | None:
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is not None:
        log.error("run %s failed", task.get_name(), exc_info=exc)
        return RunResult(stop_reason="error", error=f"{type(exc).__name__}: {exc}")
    return task.result()


def _interruption_results(messages: Sequence[Message]) -> list[Message]:
    """Tool results for calls that have none: what an interrupted turn leaves open."""
    answered = {p.call_id for m in messages for p in m.tool_results()}
    open_calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls()]
    missing = tuple(
        ToolResultPart(call_id=c.id, name=c.name, content=INTERRUPTED, is_error=True)
        for c in open_calls
        if c.id not in answered
    )
    return [Message(role="tool", content=missing)] if missing else []


def _relink(entry: Entry, parent: str) -> Entry:
    """A copy of ``entry`` whose parent is ``parent`` (entries are frozen)."""
    if entry.parent == parent:
        return entry
    return dataclasses.replace(entry, parent=parent)


def _reparent(path: list[Entry]) -> list[Entry]:
    """The copied path of a fork: the same ids, each linked to the one before."""
    out: list[Entry] = []
    parent = ""
    for entry in path:
        out.append(_relink(entry, parent))
        parent = entry.id
    return out

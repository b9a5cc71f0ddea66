"""A session: one stored conversation, loaded, and its only writer.

Open reads and nothing else: it validates the tree, restores input a stopped
writer accepted and never settled to the queue, and runs nothing. Every write
is one storage append under the session's lock, after the writer lease is
taken; a session whose view fell behind refuses to write (``StaleError``).

The session's turns (``send`` under the busy policies, the queue, the task
that runs one turn at a time) are its :class:`~threads.driver.TurnDriver`'s;
the session's turn methods hand over to it, and it writes through the
session's write path.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from threads.approvals.door import ApprovalDoor
from threads.clock import Clock, MonotonicClock
from threads.driver import TurnDriver
from threads.errors import (
    BusyError,
    ClosedError,
    NoEntryError,
    ReservedKeyError,
    StaleError,
    UnavailableError,
)
from threads.identity import PUBLIC_ID, is_reserved, new_public_id
from threads.ids import new_entry_id, new_session_id
from threads.messages import JSON, Message, Usage
from threads.outage import StoreOutage
from threads.outbound import Outgoing
from threads.pool.ledger import resolution
from threads.store.base import (
    AtOnce,
    Flusher,
    Leaser,
    Loaded,
    LoadReport,
    Queued,
    Releaser,
    SessionStore,
    SoonFlusher,
)
from threads.store.entries import (
    ApprovalRequestEntry,
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
    OutboundEntry,
    ParentRef,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
    relinked,
)
from threads.tree import (
    EntryTree,
    SessionUsage,
    TurnTail,
    chain_after,
    reparent,
    unfinished_runs,
    unsettled_receipts,
    usage_of,
)
from threads.turns import Agent, Policy, Run, RunResult, Turn

Gate = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
PayloadLoader = Callable[[Mapping[str, JSON]], Any]
Resumer = Callable[["Session", MessageEntry], "tuple[Message, Any, Mapping[str, JSON]] | None"]
HandOffs = Callable[["Session", str, Any, RunResult], list[Outgoing]]
Redeliver = Callable[["Session", OutboundEntry], "Outgoing | None"]
ParkListener = Callable[["Session", Sequence[ApprovalRequestEntry]], None]
ResumeListener = Callable[["Session", Any, Turn], None]
SessionState = Literal["running", "pending", "idle"]
Injected = Message | Callable[[], Message]
HeldNotice = Callable[["Session", list[Any]], None]

log = logging.getLogger(__name__)

PROMPT_FLUSH_WITHIN = 0.01
"""How long an idle session's prompt may wait to share its turn's end's flush (perf-16)."""


def _no_siblings() -> int:
    return 0


@contextlib.asynccontextmanager
async def _no_gate() -> AsyncIterator[None]:
    yield


@dataclass(slots=True, kw_only=True)
class SessionOptions:
    """How a session runs.

    ``gate`` is entered around every run (the manager's cap on concurrent
    turns); ``turn_hold`` gives the event a turn waits for before it is taken up
    (a batch of wakes still being accepted, :mod:`threads.wake_batch`), or
    None; ``max_queue`` bounds what may wait (steers and queued sends);
    ``collect_window`` is the debounce of the ``collect`` policy in seconds:
    collected messages start their turn once none has arrived for that long,
    on ``clock`` (the real monotonic time unless a test brings its own).
    ``load_payload`` rebuilds a restored input's payload from its stored wake;
    ``resume`` makes the follow-up of a turn a dead writer left running.
    ``hand_offs`` names what the end of a turn (given its run id, payload and
    result) hands to other sessions — a ``child_completed``, the next step of
    an exchange — recorded in the append that ends the turn and sent after
    it; ``redeliver`` rebuilds a send a stopped writer recorded and never
    marked, or returns None when it may not be repeated (see
    :mod:`threads.outbound`). ``flush_store`` says the store makes appends
    durable only when flushed (``fsync = "on_flush"``): the session flushes
    at every turn end and before anything it recorded leaves.
    ``siblings`` counts the turns running beside this session's (the
    manager's): while many run, a turn's end shares their flush (perf-23).
    ``outage`` paces the retries of writes the store could not take (shared
    by a manager's sessions); ``on_held`` is told the payloads of accepted
    input whose turn waits for the store, once per input; ``on_park`` hears
    of the approval requests a turn parked on, once durable; ``on_resume`` of
    the run that resumes a decided boundary (given the parked run's payload
    and the resume's turn) as it starts.
    """

    gate: Gate = _no_gate
    turn_hold: Callable[[], asyncio.Event | None] | None = None
    max_queue: int = 256
    collect_window: float = 1.5
    clock: Clock = field(default_factory=MonotonicClock)
    load_payload: PayloadLoader | None = None
    resume: Resumer | None = None
    hand_offs: HandOffs | None = None
    redeliver: Redeliver | None = None
    flush_store: bool = False
    outage: StoreOutage = field(default_factory=StoreOutage)
    on_held: HeldNotice | None = None
    on_park: ParkListener | None = None
    on_resume: ResumeListener | None = None
    siblings: Callable[[], int] = _no_siblings


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
        # Under every_append a store that can share a flush makes an idle session's prompt
        # durable with its turn's end when that comes soon (decision perf-16).
        self._soon = (
            store if isinstance(store, SoonFlusher) and not self._options.flush_store else None
        )
        # A store that can append without waiting (memory) spares each write a task.
        self._at_once = store if isinstance(store, AtOnce) else None
        # One with a writer thread (JSONL) hands back a future of the write instead.
        self._queued = store if isinstance(store, Queued) else None
        self._leased = False
        self._sealed = False
        self._unsure: list[Entry] | None = None  # a write the store failed, that may have landed
        self._driver = TurnDriver(
            self,
            tree=tree,
            lock=self._lock,
            chain=self._chain,
            write=self._write,
            sync=self._sync,
            options=self._options,
            flush_soon=self._flush_soon if self._soon is not None else None,
        )

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
        public_id: str | None = None,
        durable: bool = True,
    ) -> Session:
        """Create a new session; it holds its writer lease from the start.

        ``public_id`` is its public handle (``weft.public_id`` in the header):
        a fresh one when not given, none when "". ``durable=False`` asks the
        store for less, as :meth:`Storage.create` says.
        """
        header_meta = dict(meta or {})
        public = new_public_id() if public_id is None else public_id
        if public:
            header_meta[PUBLIC_ID] = public
        header = Header(
            id=session_id or new_session_id(),
            created=datetime.now(UTC),
            parent=parent,
            lineage=lineage,
            meta=header_meta,
        )
        await store.create(header, durable=durable)
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
        return cls.from_tree(store, loaded, tree, agent, options=options)

    @classmethod
    def from_tree(
        cls,
        store: SessionStore,
        loaded: Loaded,
        tree: EntryTree,
        agent: Agent,
        *,
        options: SessionOptions | None = None,
    ) -> Session:
        """A session over ``tree``, which has loaded ``loaded``'s entries last (after those
        it was restored with from a checkpoint, :mod:`threads.checkpoint`)."""
        skipped = loaded.report.skipped if loaded.report else ()
        session = cls(
            store,
            loaded.header,
            agent,
            tree,
            view=len(tree.entries) + len(skipped),
            report=loaded.report,
            options=options,
        )
        if len(loaded.lines) == len(loaded.entries):
            # The queue is restored and the context built: the history costs its bytes now.
            tree.keep_lines(loaded.lines, len(tree.entries) - len(loaded.entries))
        return session

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
        return self._driver.running

    @property
    def state(self) -> SessionState:
        """``running`` while a run executes; ``pending`` while input waits; else ``idle``."""
        return self._driver.state

    @property
    def closed(self) -> bool:
        return self._driver.closing

    @property
    def held(self) -> bool:
        """Its first write needs nothing first: no writer lease to take (:meth:`hold`)."""
        return self._leaser is None or self._leased

    @property
    def unsettled(self) -> bool:
        """Input waits or runs, or the store holds a turn whose end could not be written."""
        return self.state != "idle" or self._driver.end_unwritten

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

    def turn_tail(self) -> TurnTail | None:
        return self._tree.turn_tail()

    def title(self) -> str:
        return self._tree.title()

    def meta(self) -> dict[str, str]:
        return self._tree.meta(dict(self.header.meta))

    def usage(self) -> SessionUsage:
        """The cost ledger: turns, summaries and delegated children, each in its bucket.

        Only the entries of those kinds are decoded (a live session keeps its lines).
        """
        entries = self._tree.entries
        return usage_of(
            itertools.chain.from_iterable(
                entries.of_kind(kind)
                for kind in (TurnEntry.TYPE, CompactionEntry.TYPE, PoolReceiptEntry.TYPE)
            )
        )

    def queue(self) -> list[tuple[str, Message, Policy]]:
        """What is accepted and not yet given to a model: steers first, then sends."""
        return self._driver.queue()

    @property
    def has_unsent(self) -> bool:
        """True while a send this session recorded has no mark (see :mod:`threads.outbound`)."""
        return bool(self._tree.unmarked)

    def has_steers(self) -> bool:
        return self._driver.has_steers()

    def pending_count(self) -> int:
        """How many accepted inputs wait (what :meth:`queue` lists)."""
        return self._driver.pending_count()

    @property
    def busy(self) -> bool:
        return self._driver.busy

    @property
    def approvals(self) -> ApprovalDoor:
        """The open approval boundary, its pending requests and the door decisions come through."""
        return self._driver.approvals

    # -- writing

    def _chain(self, *entries: Entry) -> list[Entry]:
        """Link ``entries`` onto the leaf in order (parents set, leaf entries followed)."""
        out: list[Entry] = []
        leaf = self._tree.leaf
        for entry in entries:
            linked = entry if entry.parent == leaf else relinked(entry, leaf)
            out.append(linked)
            leaf = linked.entry if isinstance(linked, LeafEntry) else linked.id
        return out

    async def _write(self, entries: Sequence[Entry], *, durable: bool = True) -> None:
        """Append a batch; the lock is held by the caller.

        ``durable=False`` writes without a flush (see
        :meth:`~threads.store.base.Storage.append`): a send's mark, or what a
        later shared flush makes durable (a prompt, a receipt, a turn's end).
        :class:`UnavailableError` when the store cannot take it now; the next
        write first checks whether this one landed after all.
        """
        if self._sealed:
            raise ClosedError(self.id)
        if not entries:
            return
        if self._unsure is not None and await self._reconcile(entries):
            return
        await self._take_lease()
        if self._at_once is not None:
            try:
                landed = self._at_once.append_at_once(self.id, entries, durable=durable)
            except UnavailableError as exc:
                self._failed(entries, exc)
                raise
            if landed is not None:  # with nothing to wait for
                self._options.outage.succeeded()
                self._record(entries, landed)
                return
        # Once submitted, the write finishes even if the caller is cancelled (an
        # interrupt mid-step): the tree must stay equal to what the store holds.
        append: asyncio.Future[Sequence[bytes] | None] | None = None
        if self._queued is not None:
            append = self._queued.append_queued(self.id, entries, durable=durable)
        if append is None:
            append = asyncio.ensure_future(self._store.append(self.id, entries, durable=durable))
            waited = asyncio.shield(append)
        else:
            waited = append  # a queued append's waiter cannot cancel it
        try:
            lines = await waited
        except UnavailableError as exc:
            self._failed(entries, exc)
            raise
        except asyncio.CancelledError:
            if not append.done():
                await asyncio.wait([append])
            if append.cancelled():
                raise
            failure = append.exception()
            if failure is None:
                self._record(entries, append.result())
            else:
                # Nobody is left to see it: the caller was cancelled meanwhile.
                log.warning(
                    "session %s: a write whose caller was cancelled failed: %s", self.id, failure
                )
            raise
        self._options.outage.succeeded()
        self._record(entries, lines)

    def _failed(self, entries: Sequence[Entry], error: UnavailableError) -> None:
        """A write the store refused: the next one first checks whether it landed after all."""
        self._unsure = list(entries)
        self._options.outage.failed(error)

    async def _sync(self) -> None:
        """Make what was appended durable, when the store only does so on a flush."""
        if self._options.flush_store and isinstance(self._store, Flusher):
            await self._store.flush(self.id)

    async def _flush_soon(self, within: float | None = None) -> None:
        """Make what was written without a flush durable, with a write that comes soon
        (within ``within`` seconds; a prompt's window by default)."""
        assert self._soon is not None
        await self._soon.flush_soon(self.id, PROMPT_FLUSH_WITHIN if within is None else within)

    async def _reconcile(self, entries: Sequence[Entry]) -> bool:
        """After a failed write: keep it if it landed after all; True when ``entries`` is it.

        A store can fail a write it made (the connection lost after the server
        ran it, an fsync error after the bytes reached the file). Writing the
        same entries again would store their ids twice, so the first write
        after a failure compares the stored line count with this view, and
        when the failed batch is there, records it instead of writing it again.
        """
        unsure = self._unsure
        assert unsure is not None
        if self._leaser is None:
            self._unsure = None
            return False
        count, _ = await self._leaser.acquire(self.id, self._holder)
        self._leased = True
        if count == self._view:
            self._unsure = None
            return False
        stored = (await self._store.load(self.id)).entries[-len(unsure) :]
        if count != self._view + len(unsure) or [e.id for e in stored] != [e.id for e in unsure]:
            raise StaleError(self.id, f"it holds {count} entries, this view {self._view}")
        log.warning(
            "session %s: a write the store reported as failed had landed; it is kept", self.id
        )
        self._unsure = None
        self._record(unsure)
        self._options.outage.succeeded()
        return [e.id for e in entries] == [e.id for e in unsure]

    def _record(self, entries: Sequence[Entry], lines: Sequence[bytes] | None = None) -> None:
        """Add what landed to the tree: kept as ``lines``, the store's, when it handed them back."""
        if lines is not None and len(lines) == len(entries):
            for entry, line in zip(entries, lines, strict=True):
                self._tree.add(entry, line)
        else:
            for entry in entries:
                self._tree.add(entry)
        self._view += len(entries)

    async def hold(self) -> None:
        """Take the writer lease now, before the first write needs it.

        :class:`LockedError` when another writer (another process, another
        store) holds the session; nothing is written either way.
        """
        async with self._lock:
            await self._take_lease()

    async def _take_lease(self) -> None:
        if self._leaser is None or self._leased:
            return
        count, created = await self._leaser.acquire(self.id, self._holder)
        if count != self._view or created != self.header.created:
            await self._leaser.yield_lease(self.id, self._holder)
            raise StaleError(self.id, f"it holds {count} entries, this view loaded {self._view}")
        self._leased = True

    async def _release(self) -> None:
        if self._leaser is not None:
            if self._leased:
                self._leased = False
                await self._leaser.yield_lease(self.id, self._holder)
        elif isinstance(self._store, Releaser):
            await self._store.release(self.id)

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
            if is_reserved(key):
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
        call: str = "",
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
            call=call,
            stop=stop,
            usage=usage or Usage(),
        )
        (written,) = await self._append(entry)
        assert isinstance(written, PoolReceiptEntry)
        return written

    async def send_out(self, out: Outgoing) -> OutboundEntry | None:
        """A send outside a turn (a notice, an announce), through the outbound ledger.

        Its record is made durable, then it is sent, then its mark is
        appended; the mark is returned (None when the send waits for the next
        start). A send whose id the session already recorded is not made
        again (None is returned): the ledger completes it if it is pending.
        """
        return await self._driver.send_out(out)

    async def resolve_delegation(
        self, call_id: str, child: str, content: str, *, is_error: bool = False
    ) -> None:
        """Answer delegating call ``call_id`` with its child's outcome (``threads.pool.ledger``).

        For a call whose turn is gone (a restart) and that still has no result;
        :class:`NotDelegatingError` (nothing written) for any other call.
        """
        async with self._lock:
            entries = resolution(
                self._tree, call_id=call_id, child=child, content=content, is_error=is_error
            )
            await self._write(self._chain(*entries))

    async def custom(self, kind: str, data: JSON = None) -> None:
        """Append application state that never enters the model's context."""
        if not kind:
            raise ValueError(f"a custom entry in session {self.id} needs a kind")
        await self._append(CustomEntry(id=new_entry_id(), kind=kind, data=data))

    async def custom_message(self, kind: str, message: Message) -> None:
        """Append a message the model sees, not attributed to the user; between turns only."""
        if not kind:
            raise ValueError(f"a custom message in session {self.id} needs a kind")
        if self._driver.running is not None:
            raise BusyError(self.id, "custom_message")
        await self._append(CustomMessageEntry(id=new_entry_id(), kind=kind, message=message))

    async def append_messages(self, messages: Sequence[Message]) -> None:
        """Append conversation messages between turns (a fork's inherited history)."""
        if self._driver.running is not None:
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
        current = self._driver.running
        if current is not None and (run is None or current is not run):
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
        if self._driver.running is not None:
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
        on it as canceled there. The outbound ledger is not copied: the sends
        on the path are this session's, not the fork's.
        """
        async with self._lock:
            if entry_id:
                target = self._tree.require(entry_id)
                if isinstance(target, LeafEntry):
                    raise ValueError(f"entry {entry_id} is a leaf entry; fork the entry it names")
            path = self._tree.path(entry_id) if entry_id else []
            path = [e for e in path if not isinstance(e, OutboundEntry)]
        fork = await Session.create(
            self._store,
            agent or self.agent,
            session_id=session_id,
            meta=meta,
            parent=ParentRef(session=self.id, entry=entry_id),
            options=options or self._options,
        )
        copied = reparent(path)
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
            batch = copied + chain_after(copied, settle)
            await fork._write(batch)
            fork._driver.adopt_copy()
        return fork

    # -- turns: the driver's

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
        return await self._driver.send(
            message, policy=policy, payload=payload, wake=wake, injected=injected
        )

    def interrupt(self, reason: str = "stopped by the user") -> bool:
        """Cancel the running turn now; it is recorded as canceled. False when none runs."""
        return self._driver.interrupt(reason)

    def request_stop(self) -> bool:
        """Ask the running turn to end at its next step boundary (a soft stop)."""
        return self._driver.request_stop()

    async def continue_(self) -> Turn | None:
        """Run what the session holds but is not running; the first turn that will run.

        A turn a dead writer left running is recorded as canceled and its
        resume (when the owner makes one) runs first; restored steers become
        follow-up turns next, then the restored sends in acceptance order.
        None when nothing waits.
        """
        return await self._driver.continue_()

    async def clear_queue(self) -> int:
        """Drop every input not yet given to a model; each gets a ``dropped`` receipt."""
        return await self._driver.clear_queue()

    async def drop_queued(self, matches: Callable[[Any], bool]) -> int:
        """Drop the inputs not yet given to a model whose payload ``matches``; how many.

        Each gets a ``dropped`` receipt, so a restart does not run it either.
        """
        return await self._driver.drop_queued(matches)

    @property
    def active_payload(self) -> Any:
        """The payload of the turn in flight, or of the one about to start; else None."""
        return self._driver.active_payload()

    def waiting_payloads(self) -> list[Any]:
        """The payloads of the inputs not yet given to a model (what :meth:`queue` lists)."""
        return self._driver.waiting_payloads()

    async def wait_idle(self) -> None:
        """Wait until no turn runs and nothing runnable is queued."""
        await self._driver.wait_idle()

    async def close(self, timeout: float | None = None, *, drain: bool = True) -> None:
        """Stop new work, let the running turn (and, with ``drain``, the queue) finish, release.

        When ``timeout`` passes first the running turn is canceled (recorded as
        such). Input still queued stays durable for the next open; its turns
        end with :class:`ClosedError`.
        """
        await self._driver.close(timeout, drain=drain)
        if not self._sealed:
            self._sealed = True
            await self._release()

"""The entry tree in memory: validation, the leaf, the path, and the context it keeps.

Pure data: no I/O, no locks. :class:`threads.session.Session` owns one and feeds
it every entry it loads or writes.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from threads.approvals.boundary import unfinished_resumes
from threads.context import ContextBuilder, RunContext, context_at, message_of
from threads.entry_log import EntryIndex, EntryLog, LogParts
from threads.errors import CorruptError, NoEntryError
from threads.identity import merged_meta
from threads.ids import valid_id
from threads.messages import JSON, Message, Usage, stored_size
from threads.store.entries import (
    POOL_SETTLED,
    ApprovalAuditEntry,
    CompactionEntry,
    Entry,
    InfoEntry,
    LeafEntry,
    MessageEntry,
    OutboundEntry,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
)


class EntryTree:
    """Every entry of a session in append order, indexed, with the current leaf.

    The entries a session loaded may be kept as their stored lines
    (:meth:`keep_lines`, :mod:`threads.entry_log`), and so may those it wrote
    (:meth:`add` with the store's line): reading one decodes it.
    The leaf's path is kept as positions, and the context as the messages it
    holds, so a turn decodes nothing it did not write.
    """

    def __init__(self, session: str) -> None:
        self.session = session
        self.entries = EntryLog()
        self.by_id = EntryIndex(self.entries)
        self.leaf = ""
        self.orphaned: list[str] = []
        # Wake origin (an outbound record of another session) -> the run it became.
        self.origins: dict[str, str] = {}
        # Outbound records no mark has settled yet, by id (see threads.outbound).
        self.unmarked: dict[str, OutboundEntry] = {}
        # The leaf's path as positions in ``entries``: four bytes each, no object apiece.
        self._path_cache: array[int] | None = array("I")
        self._highest_turn = 0
        self._context: ContextBuilder | None = ContextBuilder()
        # The leaf line's latest turn and what followed it (see turn_tail), as entries land;
        # ``_tail_known`` is False once the leaf moves, until a walk finds it again.
        self._tail: TurnTail | None = None
        self._tail_known = True
        # Restored from a checkpoint (decision perf-19): the entries before ``restored_from``
        # are known by what an open derived of them; ``carried`` are those of them an
        # open still reads (unsettled receipts, unfinished prompts), until the lines are kept.
        self.restored_from = 0
        self.carried: list[Entry] = []

    def load(
        self, entries: Iterable[Entry], *, salvaged: bool = False, first_line: int = 2
    ) -> None:
        """Add stored entries, validating the tree; :class:`CorruptError` names the entry.

        Under salvage an entry whose parent is missing is kept as an orphan (the
        root of what survives of its line) instead of failing.
        """
        # A fresh tree's checks read the newest ids' dict itself; a restored one asks the index.
        known: Container[str] = self.entries.positions if not self.entries else self.by_id
        for offset, entry in enumerate(entries):
            line = first_line + offset
            if not valid_id(entry.id):
                raise CorruptError(self.session, line, entry.id, "entry id is not a valid id")
            if entry.id in known:
                raise CorruptError(self.session, line, entry.id, "duplicate entry id")
            if entry.parent and entry.parent not in known:
                if not salvaged:
                    raise CorruptError(
                        self.session,
                        line,
                        entry.id,
                        f"parent {entry.parent} is not an earlier entry",
                    )
                self.orphaned.append(entry.id)
            if isinstance(entry, LeafEntry) and entry.entry and entry.entry not in known:
                if not salvaged:
                    raise CorruptError(
                        self.session,
                        line,
                        entry.id,
                        f"leaf target {entry.entry} is not an earlier entry",
                    )
                self.orphaned.append(entry.id)
                self._add(entry, move_leaf=False)
                continue
            self._add(entry)
        self.entries.settle_ids()

    def add(self, entry: Entry, line: bytes | None = None) -> None:
        """Add an entry this session just wrote (already validated by construction).

        Given ``line``, the line the store wrote it as, the entry is kept as
        that line, like a loaded one; else as the value.
        """
        self._add(entry, line=line)
        self.entries.settle_ids()

    def keep_lines(self, lines: Sequence[bytes], start: int = 0) -> None:
        """Keep the loaded entries from ``start`` on as ``lines``, the lines they were read
        from, one each.

        Called once what the open needed of every entry was read (the queue
        restored, the context built): from then on they cost their bytes.
        """
        self.entries.keep_lines(lines, start)
        self.carried = []

    def open_view(self) -> Sequence[Entry]:
        """What an open reads for unsettled input and unfinished runs: every entry, or, for a
        tree restored from a checkpoint, the entries it carried and those loaded after it."""
        if not self.restored_from:
            return self.entries
        return [*self.carried, *self.entries.at(range(self.restored_from, len(self.entries)))]

    def dump(self) -> TreeParts | None:
        """What an open derived of every entry, as plain values (a checkpoint's, decision
        perf-19); None when some of it is not held that way (an entry kept as a value, an
        orphan, a path not known as positions)."""
        log = self.entries.dump()
        if log is None or self.orphaned or self._path_cache is None:
            return None
        unmarked = [self.entries.position(record) for record in self.unmarked]
        return TreeParts(
            log=log,
            leaf=self.leaf,
            path=array("I", self._path_cache),
            highest_turn=self._highest_turn,
            origins=list(self.origins.items()),
            unmarked=[at for at in unmarked if at is not None],
        )

    @classmethod
    def restored(cls, session: str, parts: TreeParts, carried: list[Entry]) -> EntryTree:
        """The tree :meth:`dump` described; its context is built when first asked for."""
        tree = cls(session)
        tree.entries = EntryLog.restored(parts.log)
        tree.by_id = EntryIndex(tree.entries)
        tree.leaf = parts.leaf
        tree.origins = dict(parts.origins)
        read = tree.entries.reader()
        for at in parts.unmarked:
            record = read(at)
            assert isinstance(record, OutboundEntry)
            tree.unmarked[record.id] = record
        tree._path_cache = parts.path
        tree._highest_turn = parts.highest_turn
        tree._context = None
        tree._tail_known = False
        tree.restored_from = len(tree.entries)
        tree.carried = carried
        return tree

    def _add(self, entry: Entry, *, move_leaf: bool = True, line: bytes | None = None) -> None:
        at = self.entries.append(entry, line)
        self._count_turn(entry)
        if isinstance(entry, MessageEntry | ReceiptEntry):
            origin = entry.wake.get("origin") if entry.wake else None
            if isinstance(origin, str) and origin:
                self.origins[origin] = entry.run_id
        elif isinstance(entry, OutboundEntry):
            if entry.record:
                self.unmarked.pop(entry.record, None)
            else:
                self.unmarked[entry.id] = entry
        if not move_leaf:
            return
        if isinstance(entry, LeafEntry):
            self.leaf = entry.entry
            self._forget_path()
            return
        if entry.parent != self.leaf:
            self._forget_path()
        else:
            if self._path_cache is not None:
                self._path_cache.append(at)
            if isinstance(entry, CompactionEntry):
                self._context = None
                self._tail, self._tail_known = None, True
            elif isinstance(entry, TurnEntry):
                self._tail, self._tail_known = TurnTail(entry.last_input), True
            elif (message := message_of(entry)) is not None:
                if self._context is not None:
                    self._context.add(message)
                if self._tail is not None:
                    self._tail.since.append(message)
        self.leaf = entry.id

    def _forget_path(self) -> None:
        """The leaf moved off its line: what was kept of that line is found again when asked."""
        self._path_cache = None
        self._context = None
        self._tail, self._tail_known = None, False

    def require(self, entry_id: str) -> Entry:
        entry = self.by_id.get(entry_id)
        if entry is None:
            raise NoEntryError(self.session, entry_id)
        return entry

    def path(self, entry_id: str | None = None) -> list[Entry]:
        """The entries from a root to ``entry_id`` (default: the leaf), leaf entries skipped."""
        target = self.leaf if entry_id is None else entry_id
        entries = self.entries
        if entry_id is None and self._path_cache is not None:
            return list(entries.at(self._path_cache))
        out: list[Entry] = []
        positions: list[int] = []
        at = entries.position(target) if target else None
        if target and at is None:
            raise NoEntryError(self.session, target)
        read = entries.reader()
        while at is not None:
            current = read(at)
            if not isinstance(current, LeafEntry):
                out.append(current)
                positions.append(at)
            at = entries.position(current.parent) if current.parent else None
        out.reverse()
        if entry_id is None:
            positions.reverse()
            self._path_cache = array("I", positions)
        return out

    def path_reversed(self) -> Iterator[Entry]:
        """The leaf's path from the leaf back to the root, each entry read as it is reached."""
        if self._path_cache is None:
            self.path()
        assert self._path_cache is not None
        return self.entries.at(reversed(self._path_cache))

    def turn_tail(self) -> TurnTail | None:
        """The latest turn entry on the leaf's line and the messages after it; None when no
        turn follows the latest compaction (or the root). Kept as entries land, so a turn's
        check of its context's size reads nothing (do not mutate it)."""
        if not self._tail_known:
            self._tail = turn_tail_of(self.path_reversed())
            self._tail_known = True
        return self._tail

    def title(self) -> str:
        for entry in self.entries.of_kind(InfoEntry.TYPE, newest_first=True):
            if isinstance(entry, InfoEntry) and entry.title:
                return entry.title
        return ""

    def meta(self, header_meta: dict[str, str]) -> dict[str, str]:
        """The header's metadata overlaid by the info entries' (reserved keys stand)."""
        return merged_meta(header_meta, self.entries.of_kind(InfoEntry.TYPE))

    def highest_turn(self) -> int:
        """The highest ``-t<n>`` recorded in any run id (the run-id counter's recovery).

        A re-run's id counts from the moment the attempt's turn entry names it.
        Counted as entries land, so reading it walks nothing.
        """
        return self._highest_turn

    def _count_turn(self, entry: Entry) -> None:
        for run_id in (getattr(entry, "run_id", ""), getattr(entry, "rerun", "")):
            if run_id:
                _, _, n = run_id.rpartition("-t")
                if n.isdigit() and int(n) > self._highest_turn:
                    self._highest_turn = int(n)

    def context(self, *, close_open: bool = True) -> list[Message]:
        """The model's context at the leaf (kept up to date as entries land).

        ``close_open=False`` leaves the calls still waiting for a result open
        (a resume about to answer them) instead of closing them as interrupted.
        """
        return self._builder().messages(close_open=close_open)

    def run_context(self, *, close_open: bool = True) -> RunContext:
        """:meth:`context` for a run to extend: the session's list shared, not copied."""
        return self._builder().run_context(close_open=close_open)

    def open_calls(self) -> dict[str, str]:
        """Tool calls on the leaf's line that have no result yet (call id → tool name)."""
        return dict(self._builder().open)

    def _builder(self) -> ContextBuilder:
        if self._context is None:
            if self._path_cache is None:
                self.path()
            assert self._path_cache is not None
            self._context = context_at(self.entries, self._path_cache)
        return self._context


class TurnTail:
    """A line's latest turn: the input tokens its model reported, and the messages since.

    :meth:`estimate` adds about a quarter of the stored bytes of those messages
    to the report, measuring each message once, when first asked (the sum is
    kept here, not on the messages: a live session's context keeps no number
    per message for it).
    """

    __slots__ = ("_measured", "_stored", "reported", "since")

    def __init__(self, reported: int, since: list[Message] | None = None) -> None:
        self.reported = reported
        self.since: list[Message] = [] if since is None else since
        self._measured = 0  # how many of ``since`` are in ``_stored``
        self._stored = 0

    def estimate(self) -> int:
        """The tokens reported, plus the estimate of the messages since (see estimate_tokens)."""
        since = self.since
        if self._measured < len(since):
            self._stored += sum(map(stored_size, since[self._measured :]))
            self._measured = len(since)
        return self.reported + self._stored // 4


def turn_tail_of(path_reversed: Iterable[Entry]) -> TurnTail | None:
    """:meth:`EntryTree.turn_tail` found by a walk from the leaf back."""
    since: list[Message] = []
    for entry in path_reversed:
        if isinstance(entry, CompactionEntry):
            return None
        if isinstance(entry, TurnEntry):
            since.reverse()
            return TurnTail(entry.last_input, since)
        if (message := message_of(entry)) is not None:
            since.append(message)
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeParts:
    """An :class:`EntryTree` as plain values: its log, leaf and path, and what its entries
    told as they landed (the run-id counter, wake origins, unmarked sends by position)."""

    log: LogParts
    leaf: str
    path: array[int]
    highest_turn: int
    origins: list[tuple[str, str]]
    unmarked: list[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionUsage:
    """A session's cost ledger, one bucket per kind of spending, never mixed (seed 003 Usage).

    ``turns`` sums every turn entry (abandoned branches too: the tokens were
    spent); ``summaries`` every compaction's summarizer; ``delegated`` every
    settled pool receipt: the whole cost of the children this session
    delegated to.
    """

    turns: Usage = field(default_factory=Usage)
    summaries: Usage = field(default_factory=Usage)
    delegated: Usage = field(default_factory=Usage)

    @property
    def total(self) -> Usage:
        return self.turns + self.summaries + self.delegated


def usage_of(entries: Iterable[Entry]) -> SessionUsage:
    """The cost ledger over ``entries`` (a whole session, not only the leaf's path)."""
    turns = summaries = delegated = Usage()
    for entry in entries:
        if isinstance(entry, TurnEntry):
            turns = turns + entry.usage
        elif isinstance(entry, CompactionEntry):
            summaries = summaries + entry.summarizer_usage
        elif isinstance(entry, PoolReceiptEntry) and entry.status in POOL_SETTLED:
            delegated = delegated + entry.usage
    return SessionUsage(turns=turns, summaries=summaries, delegated=delegated)


def unsettled_receipts(entries: Sequence[Entry]) -> list[ReceiptEntry]:
    """Accepted or queued receipts never settled: what a reopen restores to the queue.

    A queued steer is settled by a later receipt linking to it; an accepted send
    by its prompt entry landing (id ``turn``) or a ``dropped`` receipt.
    """
    settled: set[str] = set()
    landed: set[str] = set()
    for entry in entries:
        if isinstance(entry, ReceiptEntry) and entry.receipt:
            settled.add(entry.receipt)
        elif isinstance(entry, MessageEntry):
            landed.add(entry.id)
    out = []
    for entry in entries:
        if not isinstance(entry, ReceiptEntry) or entry.receipt or entry.id in settled:
            continue
        if entry.status == "queued" or (entry.status == "accepted" and entry.turn not in landed):
            out.append(entry)
    return out


_ACCEPTING = frozenset({"accepted", "queued"})


def accepted_wake(entry: Entry) -> tuple[str, Mapping[str, JSON]] | None:
    """The run id and wake of an entry that accepted a wake (a prompt or its receipt).

    The receipts that settle an earlier one (delivered, deferred, dropped) carry no wake.
    """
    if isinstance(entry, MessageEntry) or (
        isinstance(entry, ReceiptEntry) and entry.status in _ACCEPTING
    ):
        return (entry.run_id, entry.wake) if entry.run_id and entry.wake else None
    return None


def holds_wake(entries: Sequence[Entry], name: str, value: str) -> bool:
    """Whether a wake whose meta has ``name`` = ``value`` was accepted among ``entries``."""
    for entry in entries:
        found = accepted_wake(entry)
        if found is None:
            continue
        meta = found[1].get("meta")
        if isinstance(meta, Mapping) and meta.get(name) == value:
            return True
    return False


def unfinished_runs(entries: Sequence[Entry]) -> list[MessageEntry]:
    """Prompt entries whose turn has no turn entry: a writer died mid-turn.

    A turn that re-ran (an overflow) is unfinished when its re-run has no
    turn entry: its prompt is returned under the re-run's id. A resume of an
    approval boundary that died mid-run is one too: it reads as the prompt it
    answers, under the resume's run id.
    """
    # One walk over what may be a whole session's history (an open reads every entry once).
    finished: set[str] = set()
    reruns: dict[str, str] = {}
    runs: list[MessageEntry] = []
    resumed = False
    for entry in entries:
        if isinstance(entry, TurnEntry):
            finished.add(entry.run_id)
            if entry.rerun:
                reruns[entry.run_id] = entry.rerun
        elif isinstance(entry, MessageEntry):
            if entry.run_id:
                runs.append(entry)
        elif isinstance(entry, ApprovalAuditEntry):
            resumed = True
    prompts = []
    for entry in runs:
        run_id = entry.run_id
        while run_id in reruns and run_id in finished:
            run_id = reruns[run_id]
        if run_id not in finished:
            prompts.append(
                entry if run_id == entry.run_id else dataclasses.replace(entry, run_id=run_id)
            )
    if resumed:
        prompts += unfinished_resumes(entries, finished)
    return prompts


def chain_after(base: Sequence[Entry], entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` linked one after another onto the last of ``base``."""
    leaf = base[-1].id if base else ""
    out: list[Entry] = []
    for entry in entries:
        out.append(dataclasses.replace(entry, parent=leaf))
        leaf = entry.id
    return out


def reparent(path: list[Entry]) -> list[Entry]:
    """The copied path of a fork: the same ids, each linked to the one before."""
    out: list[Entry] = []
    parent = ""
    for entry in path:
        out.append(entry if entry.parent == parent else dataclasses.replace(entry, parent=parent))
        parent = entry.id
    return out

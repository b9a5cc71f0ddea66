"""A live session's entries, kept compact: the lines it loaded stay lines until read.

A session holds every entry it has, but a turn reads only its context — the
messages after the latest compaction, which the tree's context builder keeps
decoded — and the last few entries of its path. As decoded values a stored
entry is a dozen Python objects the garbage collector walks on every full
pass (a prompt's wake alone is four dictionaries); as the line it was read
from it is one ``bytes`` object the collector never looks at, about the size
it has on disk. So once a session has read its history, the entries it
loaded are kept as their lines (:meth:`EntryLog.keep_lines`) and decoded
again, on demand, by whatever reads them: an equal value, never the same
object. Entries the session writes are kept the same way, as the lines the
store wrote (``Storage.append`` hands them back), so a session that grew
live weighs what one loaded does.

:class:`EntryLog` is the sequence (append order) and :class:`EntryIndex` the
mapping by id over it; :meth:`EntryLog.of_kind` reads the entries of one kind
without decoding the others.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

from threads.store.codec import UNRESOLVED, decode_entry, referred, whole
from threads.store.entries import Entry, MessageEntry, ReceiptEntry


class EntryLog(Sequence[Entry]):
    """A session's entries in append order, some kept as their stored lines."""

    __slots__ = ("_index", "_items", "_kinds")

    def __init__(self) -> None:
        self._items: list[Entry | bytes] = []
        self._kinds: list[str] = []
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, at: int) -> Entry: ...

    @overload
    def __getitem__(self, at: slice) -> list[Entry]: ...

    def __getitem__(self, at: int | slice) -> Entry | list[Entry]:
        if isinstance(at, slice):
            return [self._read(item) for item in self._items[at]]
        return self._read(self._items[at])

    def __iter__(self) -> Iterator[Entry]:
        for item in self._items:
            yield self._read(item)

    def __reversed__(self) -> Iterator[Entry]:
        for item in reversed(self._items):
            yield self._read(item)

    def append(self, entry: Entry, line: bytes | None = None) -> int:
        """Add an entry, kept as ``line`` (the line it was stored as) when given; its position."""
        at = len(self._items)
        self._index[entry.id] = at
        self._items.append(entry if line is None else line)
        self._kinds.append(entry.TYPE)
        return at

    def _read(self, item: Entry | bytes) -> Entry:
        """An entry, decoded from its line when kept as one (a prompt made whole from its receipt)."""
        if not isinstance(item, bytes):
            return item
        entry = decode_entry(item)
        if isinstance(entry, MessageEntry) and entry.message is UNRESOLVED:
            at = self._index.get(referred(entry))
            receipt = self._read(self._items[at]) if at is not None else None
            if isinstance(receipt, ReceiptEntry):
                return whole(entry, receipt)
        return entry

    def ids(self) -> Iterator[str]:
        """Every entry's id, in append order, decoding nothing."""
        return iter(self._index)

    @property
    def positions(self) -> Mapping[str, int]:
        """Every entry's position by id (a view: a load's checks read it without a call each)."""
        return self._index

    def position(self, entry_id: str) -> int | None:
        """Where the entry sits in append order, or None when there is none."""
        return self._index.get(entry_id)

    def has_kind(self, kind: str) -> bool:
        """Whether any entry is of this ``type``, decoding nothing."""
        return kind in self._kinds

    def of_kind(self, kind: str, *, newest_first: bool = False) -> Iterator[Entry]:
        """The entries of one ``type``, decoding only them."""
        kinds = self._kinds
        order = range(len(kinds) - 1, -1, -1) if newest_first else range(len(kinds))
        for at in order:
            if kinds[at] == kind:
                yield self._read(self._items[at])

    @property
    def lines_kept(self) -> int:
        """How many entries are kept as their stored lines (the rest as values)."""
        return sum(1 for item in self._items if isinstance(item, bytes))

    def keep_lines(self, lines: Sequence[bytes]) -> None:
        """Keep the first ``len(lines)`` entries as these, the lines they were loaded from."""
        if len(lines) > len(self._items):
            raise ValueError(f"{len(lines)} lines for {len(self._items)} entries")
        self._items[: len(lines)] = lines


class EntryIndex(Mapping[str, Entry]):
    """The entries of an :class:`EntryLog` by id."""

    __slots__ = ("_log",)

    def __init__(self, log: EntryLog) -> None:
        self._log = log

    def __getitem__(self, entry_id: str) -> Entry:
        at = self._log.position(entry_id)
        if at is None:
            raise KeyError(entry_id)
        return self._log[at]

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self._log.position(entry_id) is not None

    def __iter__(self) -> Iterator[str]:
        return self._log.ids()

    def __len__(self) -> int:
        return len(self._log)

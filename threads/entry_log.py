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
object. The lines are kept joined, as one ``bytes`` with an array of where
each ends, which costs their bytes and eight more each, not a Python object
apiece (decision perf-08). Entries the session writes afterwards are kept
as written.

:class:`EntryLog` is the sequence (append order) and :class:`EntryIndex` the
mapping by id over it; :meth:`EntryLog.of_kind` reads the entries of one kind
without decoding the others.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from typing import overload

from threads.store.codec import decode_entry, whole
from threads.store.entries import Entry, MessageEntry, ReceiptEntry


class EntryLog(Sequence[Entry]):
    """A session's entries in append order, the first ones kept as their stored lines."""

    __slots__ = ("_bounds", "_index", "_kinds", "_lines", "_values")

    def __init__(self) -> None:
        # The first len(_bounds) - 1 entries are lines, line ``at`` being
        # _lines[_bounds[at]:_bounds[at + 1]]; the rest are _values, in order.
        self._lines = b""
        self._bounds = array("q", (0,))
        self._values: list[Entry] = []
        self._kinds: list[str] = []
        self._index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._kinds)

    @overload
    def __getitem__(self, at: int) -> Entry: ...

    @overload
    def __getitem__(self, at: slice) -> list[Entry]: ...

    def __getitem__(self, at: int | slice) -> Entry | list[Entry]:
        if isinstance(at, slice):
            return [self._read(position) for position in range(len(self))[at]]
        return self._read(range(len(self))[at])

    def __iter__(self) -> Iterator[Entry]:
        for at in range(len(self)):
            yield self._read(at)

    def __reversed__(self) -> Iterator[Entry]:
        for at in range(len(self) - 1, -1, -1):
            yield self._read(at)

    def append(self, entry: Entry) -> None:
        self._index[entry.id] = len(self._kinds)
        self._values.append(entry)
        self._kinds.append(entry.TYPE)

    def _read(self, at: int) -> Entry:
        """The entry at ``at``, decoded from its line when kept as one (a prompt made whole)."""
        kept = len(self._bounds) - 1
        if at >= kept:
            return self._values[at - kept]
        entry = decode_entry(self._lines[self._bounds[at] : self._bounds[at + 1]])
        if isinstance(entry, MessageEntry) and entry.receipt:
            found = self._index.get(entry.receipt)
            receipt = self._read(found) if found is not None else None
            if isinstance(receipt, ReceiptEntry):
                return whole(entry, receipt)
        return entry

    def ids(self) -> Iterator[str]:
        """Every entry's id, in append order, decoding nothing."""
        return iter(self._index)

    def position(self, entry_id: str) -> int | None:
        """Where the entry sits in append order, or None when there is none."""
        return self._index.get(entry_id)

    def of_kind(self, kind: str, *, newest_first: bool = False) -> Iterator[Entry]:
        """The entries of one ``type``, decoding only them."""
        kinds = self._kinds
        order = range(len(kinds) - 1, -1, -1) if newest_first else range(len(kinds))
        for at in order:
            if kinds[at] == kind:
                yield self._read(at)

    @property
    def lines_kept(self) -> int:
        """How many entries are kept as their stored lines (the rest as values)."""
        return len(self._bounds) - 1

    def keep_lines(self, lines: Sequence[bytes]) -> None:
        """Keep the first ``len(lines)`` entries as these, the lines they were loaded from.

        Once, before any entry is kept as a line.
        """
        if len(lines) > len(self._kinds):
            raise ValueError(f"{len(lines)} lines for {len(self._kinds)} entries")
        if self.lines_kept:
            raise ValueError(f"{self.lines_kept} entries are kept as lines already")
        self._lines = b"".join(lines)
        self._bounds = array("q", accumulate(map(len, lines), initial=0))
        del self._values[: len(lines)]


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

"""A live session's entries, kept compact: the lines it loaded stay lines until read.

A session holds every entry it has, but a turn reads only its context — the
messages after the latest compaction, which the tree's context builder keeps
decoded — and the last few entries of its path. As decoded values a stored
entry is a dozen Python objects the garbage collector walks on every full
pass (a prompt's wake alone is four dictionaries); as the line it was read
from it is bytes the collector never looks at. So once a session has read
its history, the entries it loaded are kept as their lines
(:meth:`EntryLog.keep_lines`) and decoded again, on demand, by whatever
reads them: an equal value, never the same object. Entries the session
writes are kept the same way, as the lines the store wrote
(``Storage.append`` hands them back), so a session that grew live weighs
what one loaded does. The lines are held packed
(:class:`~threads.store.packed.PackedLines`): all but the newest few
compressed by the block, about a ninth of their size on disk.

:class:`EntryLog` is the sequence (append order) and :class:`EntryIndex` the
mapping by id over it; :meth:`EntryLog.of_kind` reads the entries of one kind
without decoding the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from threads.id_index import IdIndex, IndexDump
from threads.store.codec import decode_entry
from threads.store.entries import Entry, MessageEntry, ReceiptEntry
from threads.store.packed import PackedLines
from threads.store.referrals import UNRESOLVED, referred, whole


class EntryLog(Sequence[Entry]):
    """A session's entries in append order, kept as their stored lines where known.

    An entry whose line is not known (a load before :meth:`keep_lines`, a
    store that does not hand its lines back) is kept as its value, with an
    empty line in its place.
    """

    __slots__ = ("_index", "_kinds", "_lines", "_values")

    def __init__(self) -> None:
        self._lines = PackedLines()
        self._values: dict[int, Entry] = {}
        self._kinds = Kinds()
        self._index = IdIndex()

    def __len__(self) -> int:
        return len(self._kinds)

    @overload
    def __getitem__(self, at: int) -> Entry: ...

    @overload
    def __getitem__(self, at: slice) -> list[Entry]: ...

    def __getitem__(self, at: int | slice) -> Entry | list[Entry]:
        if isinstance(at, slice):
            return list(self.at(range(*at.indices(len(self)))))
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(f"entry {at} of {len(self)}")
        return next(self.at((at,)))

    def __iter__(self) -> Iterator[Entry]:
        values = self._values
        for at, line in enumerate(self._lines):
            value = values.get(at)
            yield self._read(line) if value is None else value

    def __reversed__(self) -> Iterator[Entry]:
        values = self._values
        for at, line in zip(range(len(self) - 1, -1, -1), reversed(self._lines), strict=True):
            value = values.get(at)
            yield self._read(line) if value is None else value

    def at(self, positions: Iterable[int]) -> Iterator[Entry]:
        """The entries at ``positions`` (each in range), in their order, read as they are reached."""
        return map(self.reader(), positions)

    def reader(self) -> Callable[[int], Entry]:
        """A reader of the entry at a position, for a walk: each block of lines is unpacked
        once for a run of positions in it (see :meth:`PackedLines.reader`)."""
        values = self._values
        line_at = self._lines.reader()

        def read(at: int) -> Entry:
            value = values.get(at)
            return self._read(line_at(at)) if value is None else value

        return read

    def append(self, entry: Entry, line: bytes | None = None) -> int:
        """Add an entry, kept as ``line`` (the line it was stored as) when given; its position."""
        at = self._kinds.append(entry.TYPE)
        self._index.add(entry.id, at)
        if line is None:
            self._values[at] = entry
            self._lines.append(b"")
        else:
            self._lines.append(line)
        return at

    def _read(self, line: bytes) -> Entry:
        """An entry decoded from its line (a prompt made whole from its receipt)."""
        entry = decode_entry(line)
        if isinstance(entry, MessageEntry) and entry.message is UNRESOLVED:
            at = self._index.get(referred(entry))
            receipt = self[at] if at is not None else None
            if isinstance(receipt, ReceiptEntry):
                return whole(entry, receipt)
        return entry

    def ids(self) -> Iterator[str]:
        """Every entry's id, in append order, decoding nothing."""
        return self._index.ids()

    @property
    def positions(self) -> Mapping[str, int]:
        """Every entry's position by id, until the first :meth:`settle_ids` (a load's checks
        read it without a call each; a load runs on a fresh log)."""
        return self._index.recent

    def settle_ids(self) -> None:
        """Let the index move older ids to its compact part (see :mod:`threads.id_index`)."""
        self._index.settle_if_grown(len(self) - 1)

    def position(self, entry_id: str) -> int | None:
        """Where the entry sits in append order, or None when there is none."""
        return self._index.get(entry_id)

    def kind(self, at: int) -> str:
        """The ``type`` of the entry at position ``at``, decoding nothing."""
        return self._kinds[at]

    def kinds(self) -> Sequence[str]:
        """Every entry's ``type``, in append order (do not mutate)."""
        return self._kinds

    def line(self, at: int) -> bytes:
        """The stored line of the entry at ``at`` (b"" for one kept as its value)."""
        return self._lines[at]

    def has_kind(self, kind: str) -> bool:
        """Whether any entry is of this ``type``, decoding nothing."""
        return kind in self._kinds

    def of_kind(self, kind: str, *, newest_first: bool = False) -> Iterator[Entry]:
        """The entries of one ``type``, decoding only them."""
        return self.at(self._kinds.positions(kind, newest_first=newest_first))

    @property
    def lines_kept(self) -> int:
        """How many entries are kept as their stored lines (the rest as values)."""
        return len(self) - len(self._values)

    @property
    def packed_bytes(self) -> int:
        """The bytes of the compressed blocks of lines (for figures and tests)."""
        return self._lines.packed_bytes

    def keep_lines(self, lines: Sequence[bytes], start: int = 0) -> None:
        """Keep the entries from position ``start`` on as ``lines``, the lines they were
        loaded from, one each (the ones before ``start`` are kept as they are)."""
        end = start + len(lines)
        if end > len(self):
            raise ValueError(f"{len(lines)} lines from {start} for {len(self)} entries")
        if start:
            kept = self._lines.prefix(start)
            kept.extend(lines)
        else:
            kept = lines if isinstance(lines, PackedLines) else PackedLines(lines)
        if len(self._lines) > end:
            if kept is lines:
                kept = PackedLines(kept)
            kept.extend(self._lines[end:])
        self._lines = kept
        self._values = {at: v for at, v in self._values.items() if not start <= at < end}

    def dump(self) -> LogParts | None:
        """What the log holds, as plain values, when every entry is kept as its line
        (a checkpoint's, decision perf-19); None while any is kept as a value."""
        if self._values:
            return None
        blocks, tail = self._lines.parts()
        return LogParts(blocks=blocks, tail=tail, kinds=list(self._kinds), index=self._index.dump())

    @classmethod
    def restored(cls, dump: LogParts) -> EntryLog:
        """The log :meth:`dump` described."""
        log = cls()
        log._lines = PackedLines.of_parts(dump.blocks, dump.tail)
        log._kinds = Kinds(dump.kinds)
        log._index = IdIndex.restored(dump.index)
        return log


@dataclass(frozen=True, slots=True, kw_only=True)
class LogParts:
    """An :class:`EntryLog` as plain values: its lines' blocks and tail, kinds and ids."""

    blocks: list[bytes]
    tail: list[bytes]
    kinds: list[str]
    index: IndexDump


class Kinds(Sequence[str]):
    """Every entry's ``type`` in append order, a byte each: a code into the session's few
    kinds, not a pointer (8 bytes) an entry."""

    __slots__ = ("_code_of", "_codes", "_table")

    def __init__(self, kinds: Iterable[str] = ()) -> None:
        self._codes = bytearray()
        self._table: list[str] = []
        self._code_of: dict[str, int] = {}
        for kind in kinds:
            self.append(kind)

    def append(self, kind: str) -> int:
        """Add the next entry's kind; its position."""
        code = self._code_of.get(kind)
        if code is None:
            code = self._code_of[kind] = len(self._table)
            if code > 255:
                raise ValueError(f"more than 256 kinds of entry in one session: {kind!r}")
            self._table.append(kind)
        codes = self._codes
        codes.append(code)
        return len(codes) - 1

    def __len__(self) -> int:
        return len(self._codes)

    @overload
    def __getitem__(self, at: int) -> str: ...

    @overload
    def __getitem__(self, at: slice) -> list[str]: ...

    def __getitem__(self, at: int | slice) -> str | list[str]:
        if isinstance(at, slice):
            return [self._table[code] for code in self._codes[at]]
        return self._table[self._codes[at]]

    def __iter__(self) -> Iterator[str]:
        return map(self._table.__getitem__, self._codes)

    def __contains__(self, kind: object) -> bool:
        code = self._code_of.get(kind) if isinstance(kind, str) else None
        return code is not None and code in self._codes

    def positions(self, kind: str, *, newest_first: bool = False) -> Iterator[int]:
        """Where the entries of ``kind`` sit, oldest first (or newest first)."""
        code = self._code_of.get(kind)
        if code is None:
            return iter(())
        codes = self._codes
        order = range(len(codes) - 1, -1, -1) if newest_first else range(len(codes))
        return (at for at in order if codes[at] == code)


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

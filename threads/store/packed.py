"""A session's stored lines held compactly: full blocks of lines compressed, the rest as they are.

A live session keeps its entries as the lines they were stored as
(:mod:`threads.entry_log`), and most of them are only ever read again by a
rare walk (a title, a usage total, a compaction). The lines of one session
repeat themselves — every key, the wake's header and sink, ids that share
their time prefix — so zlib at its fastest level keeps about a ninth of a
block of :data:`BLOCK` of them, for some 2 µs a line to pack and a fraction
of that to unpack a whole block. The newest lines, fewer than a block, stay
as they are: the ones a turn may read back.

:class:`PackedLines` is a sequence of lines (no newline at their end) that
grows at its end; :meth:`PackedLines.reader` reads many positions,
unpacking each block once per run of positions in it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

BLOCK = 64
"""Lines per compressed block: where the ratio levels off (about 9:1 on a gateway's sessions)."""


def _pack(lines: Sequence[bytes]) -> bytes:
    return zlib.compress(b"\n".join(line.rstrip(b"\n") for line in lines), 1)


def _unpack(block: bytes) -> list[bytes]:
    return zlib.decompress(block).split(b"\n")


class PackedLines(Sequence[bytes]):
    """Lines in order: every full block of :data:`BLOCK` compressed, the last ones as given.

    A line is handed back without its newline, whether it was given one or not.
    """

    __slots__ = ("_blocks", "_tail")

    def __init__(self, lines: Iterable[bytes] = ()) -> None:
        self._blocks: list[bytes] = []
        self._tail: list[bytes] = []
        self.extend(lines)

    def __len__(self) -> int:
        return len(self._blocks) * BLOCK + len(self._tail)

    @overload
    def __getitem__(self, at: int) -> bytes: ...

    @overload
    def __getitem__(self, at: slice) -> list[bytes]: ...

    def __getitem__(self, at: int | slice) -> bytes | list[bytes]:
        if isinstance(at, slice):
            return list(self.at(range(*at.indices(len(self)))))
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(f"line {at} of {len(self)}")
        return next(self.at((at,)))

    def __iter__(self) -> Iterator[bytes]:
        for block in self._blocks:
            yield from _unpack(block)
        for line in self._tail:
            yield line.rstrip(b"\n")

    def __reversed__(self) -> Iterator[bytes]:
        for line in reversed(self._tail):
            yield line.rstrip(b"\n")
        for block in reversed(self._blocks):
            yield from reversed(_unpack(block))

    def append(self, line: bytes) -> None:
        """Add a line at the end; a tail grown to a whole block is packed."""
        self._tail.append(line)
        if len(self._tail) == BLOCK:
            self._blocks.append(_pack(self._tail))
            self._tail = []

    def extend(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            self.append(line)

    def at(self, positions: Iterable[int]) -> Iterator[bytes]:
        """The lines at ``positions`` (each in range), in their order, read as they are reached."""
        return map(self.reader(), positions)

    def reader(self) -> Callable[[int], bytes]:
        """A reader of the line at a position that keeps the block it last unpacked.

        A walk (along a path, back from its leaf, up a line of parents) unpacks
        each block once for each run of positions that fall in it; the block
        goes with the reader.
        """
        current = -1
        unpacked: list[bytes] = []

        def read(at: int) -> bytes:
            nonlocal current, unpacked
            number, within = divmod(at, BLOCK)
            if number >= len(self._blocks):
                return self._tail[at - len(self._blocks) * BLOCK].rstrip(b"\n")
            if number != current:
                current, unpacked = number, _unpack(self._blocks[number])
            return unpacked[within]

        return read

    @classmethod
    def of_parts(cls, blocks: list[bytes], tail: list[bytes]) -> PackedLines:
        """Lines held as :meth:`parts` handed them out (a checkpoint's, decision perf-19)."""
        lines = cls()
        lines._blocks = blocks
        lines.extend(tail)
        return lines

    def parts(self) -> tuple[list[bytes], list[bytes]]:
        """The compressed blocks as they are, and the lines after them (copies of the lists)."""
        return list(self._blocks), [line.rstrip(b"\n") for line in self._tail]

    def prefix(self, count: int) -> PackedLines:
        """The first ``count`` lines: whole blocks shared, at most one block unpacked."""
        whole, rest = divmod(count, BLOCK)
        if whole < len(self._blocks):
            tail = _unpack(self._blocks[whole])[:rest]
        else:
            tail = self._tail[: count - len(self._blocks) * BLOCK]
        return PackedLines.of_parts(self._blocks[: min(whole, len(self._blocks))], tail)

    @property
    def packed_bytes(self) -> int:
        """The bytes of the compressed blocks (for figures and tests)."""
        return sum(len(block) for block in self._blocks)

"""A session's stored lines held compactly: full blocks of lines compressed, the rest as they are.

A live session keeps its entries as the lines they were stored as
(:mod:`threads.entry_log`), and most of them are only ever read again by a
rare walk (a title, a usage total, a compaction). The lines of one session
repeat themselves — every key, the wake's header and sink, ids that share
their time prefix — so zlib keeps about a sixteenth of a block of
:data:`BLOCK` of them, for under 1 µs a line to pack and a fraction of that
to unpack a whole block. A block starts from :data:`DICTIONARY`, the
skeletons of the lines a gateway writes most, so even its first line finds
its keys already said (decision perf-38). The newest lines, fewer than a
block, stay as they are: the ones a turn may read back.

:class:`PackedLines` is a sequence of lines (no newline at their end) that
grows at its end; :meth:`PackedLines.reader` reads many positions,
unpacking each block once per run of positions in it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

BLOCK = 64
"""Lines per compressed block: where the ratio levels off (about 16:1 on a gateway's sessions)."""

LEVEL = 3
"""zlib's level: with the dictionary, smaller and quicker than level 1 without it."""

DICTIONARY = b"\n".join(
    (
        b'{"type":"compaction","id":"e_01","parent":"e_01","created":"20","summary":"",'
        b'"first_kept":"e_01","tokens_before":1,"reason":"threshold","summarizer_usage":'
        b'{"input_tokens":1,"output_tokens":1},"summarizer_model":{"model":""},"range_hash":""}',
        b'{"type":"receipt","v":3,"id":"e_01","parent":"e_01","created":"20","status":"queued",'
        b'"receipt":"e_01","msg":{"role":"user","content":[{"type":"text","text":""}]},'
        b'"run_id":"s_01-t1","turn":"e_01","unanswered":true,"policy":"steer"}',
        b'{"type":"message","id":"e_01","parent":"e_01","created":"20","message":{"role":'
        b'"assistant","content":[{"type":"text","text":""},{"type":"tool_call","id":"call_",'
        b'"name":"","args":{}}]},"run_id":"s_01-t1"}',
        b'{"type":"message","id":"e_01","parent":"e_01","created":"20","message":{"role":"tool",'
        b'"content":[{"type":"tool_result","call_id":"call_","name":"","content":""}]}}',
        b'{"type":"outbound","v":6,"id":"s_01-t1-s1-1","parent":"e_01","created":"20",'
        b'"status":"pending","run_id":"s_01-t1","kind":"reply","to":{"kind":"channel",'
        b'"channel":"","chat":"","key":""},"text":"","expects_reply":false}',
        b'{"type":"turn","id":"e_01","parent":"s_01-t1-s1-1","created":"20","run_id":"s_01-t1",'
        b'"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1},"steps":1,'
        b'"policy":"queue","last_input":1}',
        b'{"type":"outbound","v":6,"id":"e_01","parent":"e_01","created":"20",'
        b'"status":"delivered","record":"s_01-t1-s1-1","delivered_to":""}',
        b'{"type":"message","id":"e_01","parent":"e_01","created":"20","message":{"role":"user","content":'
        b'[{"type":"text","text":"---\\nsource: \\nthread: \\"\\"\\nsession: s_01\\ntime: 20 UTC'
        b'\\nsender: user\\ndelivery: \\"Caller is the  user - reply with dispatch(to=caller:user)'
        b'\\"\\n---\\n"}]},"run_id":"s_01-t1","wake":{"source":"","caller":{"kind":"user",'
        b'"channel":"","user_id":""},"sink":{"kind":"channel","channel":"","chat":"","key":""},'
        b'"created":"20","meta":{"message_id":""},"chain":"c_01"}}',
        b'{"type":"message","id":"e_01","parent":"e_01","created":"20","message":{"role":'
        b'"assistant","content":[{"type":"text","text":""}]}}',
    )
)
"""What every block is compressed against: the skeletons of the lines a gateway writes, the
commonest last (zlib reaches the end of a dictionary cheapest). Checkpoints keep packed
blocks on disk (decision perf-19) and name this by its Adler-32: changing it makes every
checkpoint read as none, never a block unpacked against the wrong one."""

DICTIONARY_ID = zlib.adler32(DICTIONARY)


def _pack(lines: Sequence[bytes]) -> bytes:
    packer = zlib.compressobj(LEVEL, zdict=DICTIONARY)
    return packer.compress(b"\n".join(line.rstrip(b"\n") for line in lines)) + packer.flush()


def _unpack(block: bytes) -> list[bytes]:
    return zlib.decompressobj(zdict=DICTIONARY).decompress(block).split(b"\n")


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

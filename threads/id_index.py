"""Where each entry of a live session sits, by id, in some 6 to 9 bytes an entry rather than 150.

An entry id this build mints is ``e_`` and a ULID: 26 Crockford base-32
characters, 128 bits. As a dict key an id costs some 150 bytes (the string,
its slot, the position's ``int``); as a number in a sorted run, where each
id is told by its difference from the one before (:class:`_Run`, decision
perf-46), a few. So the ids of the newest entries — the ones a turn names —
stay in a dict; once :data:`SETTLE_AT` of them gather, the older ones move
into sorted runs (:meth:`IdIndex.settle`), and older ids of no numbered
shape (a test's, a loose send's) into a second dict. Ids are minted in
order, so a settle's run usually follows the last one and is appended to
it; runs out of order merge by size, each kept larger than the next. A
lookup that misses the dicts reads one block of a run, or of a handful.

Three shapes of id are numbered (:func:`numbered`), each in runs of its own
family: a minted ULID (family ``""``); a ULID with a one-letter suffix, as
an accepted receipt's (``e_…-r``, family ``"-r"``) or an injected input's
(``-i``); and a turn's send, ``{run}-s{step}-{index}`` with a run id of
``{session}-t{n}`` (family ``"{session}-t"``, the number packing ``n``,
``step`` and ``index``; decision perf-28). The mapping is exact: an id and
its family and number are one-to-one (a number's id is written back the
one way it can be), and nothing else is numbered.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate, pairwise

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Crockford's digits to int()'s base-32 ones; every other ASCII character to one
# int() refuses (it would take a sign, spaces, an underscore or a lower-case digit).
_DIGITS = bytes(
    ord("0123456789abcdefghijklmnopqrstuv"[CROCKFORD.index(chr(code))])
    if chr(code) in CROCKFORD
    else ord("!")
    for code in range(256)
)
_LOW = (1 << 64) - 1

SETTLE_AT = 128
"""Newest ids the dict holds before the older ones move out."""

KEEP = 64
"""Ids of the newest entries a settle leaves in the dict."""


def number_of(entry_id: str) -> int | None:
    """The 128-bit number of an ``e_`` ULID id; None for any other id."""
    if len(entry_id) != 28 or not entry_id.startswith("e_") or not entry_id.isascii():
        return None
    try:
        number = int(entry_id[2:].encode().translate(_DIGITS), 32)
    except ValueError:
        return None
    return number if number >> 128 == 0 else None


def id_of(number: int) -> str:
    """The ``e_`` ULID id whose number is ``number`` (:func:`number_of` undone)."""
    chars = []
    for _ in range(26):
        number, digit = divmod(number, 32)
        chars.append(CROCKFORD[digit])
    return "e_" + "".join(reversed(chars))


_SUFFIXES = ("-r", "-i")
# A send's id: its run's session and ``-t``, then the turn, step and index, each written the
# one way ``str`` writes a number (the last ``-t`` of the id: what follows it holds none).
_SEND = re.compile(r"(.+-t)(0|[1-9][0-9]*)-s(0|[1-9][0-9]*)-(0|[1-9][0-9]*)", re.ASCII | re.DOTALL)
_STEP = 1 << 32
_TURN = 1 << 64


def numbered(entry_id: str) -> tuple[str, int] | None:
    """The family and number of an id of a numbered shape (see the module); None otherwise."""
    number = number_of(entry_id)
    if number is not None:
        return "", number
    suffix = entry_id[-2:]
    if suffix in _SUFFIXES:
        number = number_of(entry_id[:-2])
        return None if number is None else (suffix, number)
    send = _SEND.fullmatch(entry_id)
    if send is None:
        return None
    head, turn, step, index = send.groups()
    n, s, i = int(turn), int(step), int(index)
    if n >= _TURN or s >= _STEP or i >= _STEP:
        return None
    return head, n * _TURN + s * _STEP + i


def id_in(family: str, number: int) -> str:
    """The id of ``number`` in ``family`` (:func:`numbered` undone)."""
    if not family:
        return id_of(number)
    if family in _SUFFIXES:
        return id_of(number) + family
    turn, rest = divmod(number, _TURN)
    step, index = divmod(rest, _STEP)
    return f"{family}{turn}-s{step}-{index}"


RUN_BLOCK = 64
"""Ids a block of a run holds: the first whole, the others as differences."""

_UNSIGNED = "BHIQ"
_SIGNED = "bhiq"
_LIMITS = (1 << 8, 1 << 16, 1 << 32, 1 << 64)
_SIZES = {code: array(code).itemsize for code in _UNSIGNED + _SIGNED}


def _narrowest(values: list[int], signed: bool) -> str | None:
    """The narrowest array type code that holds every one of ``values``; None when none does."""
    if not values:
        return "B"
    low, high = min(values), max(values)
    for code, limit in zip(_SIGNED if signed else _UNSIGNED, _LIMITS, strict=True):
        if (-(limit >> 1) <= low and high < limit >> 1) if signed else high < limit:
            return code
    return None


class _Run:
    """Ids of one family as numbers, sorted, in blocks of up to :data:`RUN_BLOCK`.

    A number is taken as two parts, split at bit ``split``: for a minted id
    its millisecond and its 80-bit count, for a send its turn and the rest.
    Each block keeps its first number whole (``heads``) with its position;
    the others are differences from the one before — of each part and of
    the position — each stream in the narrowest array that holds it. Ids of
    one session minted in order differ by a few milliseconds and a few
    hundred counts, so an id costs some 5 to 9 bytes rather than 20; a
    lookup reads one block.
    """

    __slots__ = ("blocks", "codes", "count", "counts", "firsts", "heads", "last", "split")

    def __init__(self, pairs: Iterable[tuple[int, int]], split: int) -> None:
        """``pairs`` of (number, position), sorted by number."""
        self.split = split
        self.heads: list[int] = []
        self.firsts = array("I")
        self.counts = array("B")
        self.codes = bytearray()
        self.blocks: list[bytes] = []
        self.count = 0
        self.last = -1
        self.extend(list(pairs))

    @classmethod
    def of_parts(cls, family: str, parts: RunParts) -> _Run:
        """The run :meth:`parts` described."""
        run = cls((), split_of(family))
        run.heads = [(high << 64) | low for high, low in zip(parts.highs, parts.lows, strict=True)]
        run.firsts, run.counts, run.codes = parts.firsts, parts.counts, bytearray(parts.codes)
        start = 0
        for block, count in enumerate(parts.counts):
            if not count:
                raise ValueError("a run's block holds no id")
            codes = parts.codes[3 * block : 3 * block + 3].decode()
            end = start + sum(_SIZES[code] for code in codes) * (count - 1)
            run.blocks.append(parts.data[start:end])
            start = end
        if start != len(parts.data) or len(run.blocks) != len(run.heads):
            raise ValueError("a run's blocks do not match its heads")
        run.count = sum(parts.counts)
        if run.heads:
            run.last = run._block(len(run.heads) - 1)[0][-1]
        return run

    def parts(self) -> RunParts:
        """The run as plain values (a checkpoint's)."""
        return RunParts(
            highs=array("Q", [head >> 64 for head in self.heads]),
            lows=array("Q", [head & _LOW for head in self.heads]),
            firsts=array("I", self.firsts),
            counts=array("B", self.counts),
            codes=bytes(self.codes),
            data=b"".join(self.blocks),
        )

    def __len__(self) -> int:
        return self.count

    def find(self, number: int) -> int | None:
        if number > self.last:
            return None  # past every id here: a new one, most often
        block = bisect_right(self.heads, number) - 1
        if block < 0:
            return None
        numbers, places = self._block(block)
        at = bisect_left(numbers, number)
        return places[at] if at < len(numbers) and numbers[at] == number else None

    def pairs(self) -> Iterator[tuple[int, int]]:
        for block in range(len(self.heads)):
            yield from zip(*self._block(block), strict=True)

    def merged(self, newer: _Run) -> _Run:
        """This run and ``newer`` as one: ``newer`` appended to this one when all its numbers
        are above this one's (ids minted later, the common case), else a sorted merge."""
        if not self.precedes(newer):
            return _Run(sorted([*self.pairs(), *newer.pairs()]), self.split)
        self.extend(list(newer.pairs()))
        return self

    def precedes(self, newer: _Run) -> bool:
        """Whether every number of this run is below every number of ``newer``."""
        return not self.count or not newer.count or self.last < newer.heads[0]

    def extend(self, pairs: list[tuple[int, int]]) -> None:
        """Add ``pairs``, sorted and all above this run's numbers: a last block of fewer than
        a quarter of :data:`RUN_BLOCK` (a settle's few sends, say) is made again with them."""
        if not pairs:
            return
        if self.counts and self.counts[-1] < RUN_BLOCK // 4:
            pairs = [*zip(*self._block(len(self.heads) - 1), strict=True), *pairs]
            self.count -= self.counts.pop()
            self.heads.pop()
            self.firsts.pop()
            self.blocks.pop()
            del self.codes[-3:]
        mask = (1 << self.split) - 1
        start = 0
        while start < len(pairs):
            chunk = pairs[start : start + RUN_BLOCK]
            encoded = None
            while encoded is None:  # differences too wide for 64 bits: a shorter block
                encoded = self._encoded(chunk, mask)
                if encoded is None:
                    chunk = chunk[: len(chunk) // 2]
            codes, data = encoded
            self.heads.append(chunk[0][0])
            self.firsts.append(chunk[0][1])
            self.counts.append(len(chunk))
            self.codes += codes
            self.blocks.append(data)
            self.count += len(chunk)
            start += len(chunk)
        self.last = pairs[-1][0]

    def _encoded(self, chunk: list[tuple[int, int]], mask: int) -> tuple[bytes, bytes] | None:
        """A block's type codes and differences; None when one does not fit in 64 bits."""
        split = self.split
        numbers, places = zip(*chunk, strict=True)
        highs = [number >> split for number in numbers]
        lows = [number & mask for number in numbers]
        codes = b""
        data = b""
        for values, signed in ((highs, False), (lows, True), (places, True)):
            steps = [b - a for a, b in pairwise(values)]
            code = _narrowest(steps, signed)
            if code is None:
                return None
            codes += code.encode()
            data += array(code, steps).tobytes()
        return codes, data

    def _block(self, block: int) -> tuple[list[int], list[int]]:
        """The numbers and positions of one block."""
        head, split = self.heads[block], self.split
        steps = self.counts[block] - 1
        data = self.blocks[block]
        codes = self.codes[3 * block : 3 * block + 3].decode()
        streams = []
        start = 0
        for code in codes:
            values = array(code)
            end = start + values.itemsize * steps
            values.frombytes(data[start:end])
            streams.append(values)
            start = end
        highs = accumulate(streams[0], initial=head >> split)
        lows = accumulate(streams[1], initial=head & ((1 << split) - 1))
        numbers = [(high << split) | low for high, low in zip(highs, lows, strict=True)]
        return numbers, list(accumulate(streams[2], initial=self.firsts[block]))


def split_of(family: str) -> int:
    """Where a family's numbers are taken apart (see :class:`_Run`)."""
    return 80 if not family or family in _SUFFIXES else 64


@dataclass(frozen=True, slots=True, kw_only=True)
class RunParts:
    """A run as plain values: its blocks' first numbers (high and low halves) and positions,
    their sizes and type codes (three a block), and their differences back to back."""

    highs: array[int]
    lows: array[int]
    firsts: array[int]
    counts: array[int]
    codes: bytes
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexDump:
    """An :class:`IdIndex` as plain values: its newest ids, its other ids, its runs' arrays."""

    recent: list[tuple[str, int]]
    others: list[tuple[str, int]]
    runs: list[tuple[str, RunParts]]
    """Each run's family and parts."""


class IdIndex:
    """Entry id → position in append order, for every entry of a session.

    Three parts: the newest ids (any kind) in a dict, older ids of no
    numbered shape in another, the other older ids in sorted runs, by family. :meth:`add` only adds;
    the owner calls :meth:`settle_if_grown` where a settle may run (never in
    the middle of a load that reads :attr:`recent`).
    """

    __slots__ = ("_others", "_recent", "_runs")

    def __init__(self) -> None:
        self._recent: dict[str, int] = {}
        self._others: dict[str, int] = {}
        self._runs: dict[str, list[_Run]] = {}

    @property
    def recent(self) -> dict[str, int]:
        """The newest ids: every id until the first settle (a load's checks read it directly)."""
        return self._recent

    def __len__(self) -> int:
        runs = self._runs.values()
        return len(self._recent) + len(self._others) + sum(len(r) for rs in runs for r in rs)

    def add(self, entry_id: str, at: int) -> None:
        """Record the entry at position ``at``, the newest."""
        self._recent[entry_id] = at

    def get(self, entry_id: str) -> int | None:
        at = self._recent.get(entry_id)
        if at is not None:
            return at
        at = self._others.get(entry_id)
        if at is not None or not self._runs:
            return at
        found = numbered(entry_id)
        if found is None:
            return None
        family, number = found
        for run in self._runs.get(family, ()):
            at = run.find(number)
            if at is not None:
                return at
        return None

    def ids(self) -> Iterator[str]:
        """Every id, in append order."""
        placed = [
            (at, id_in(family, number))
            for family, runs in self._runs.items()
            for run in runs
            for number, at in run.pairs()
        ]
        for part in (self._others, self._recent):
            placed += [(at, entry_id) for entry_id, at in part.items()]
        placed.sort()
        return (entry_id for _, entry_id in placed)

    def dump(self) -> IndexDump:
        """Every part as plain values (a checkpoint's, decision perf-19)."""
        return IndexDump(
            recent=list(self._recent.items()),
            others=list(self._others.items()),
            runs=[(family, run.parts()) for family, runs in self._runs.items() for run in runs],
        )

    @classmethod
    def restored(cls, dump: IndexDump) -> IdIndex:
        """The index :meth:`dump` described."""
        index = cls()
        index._recent = dict(dump.recent)
        index._others = dict(dump.others)
        for family, parts in dump.runs:
            index._runs.setdefault(family, []).append(_Run.of_parts(family, parts))
        return index

    def settle_if_grown(self, newest: int) -> None:
        """Settle all but the :data:`KEEP` newest ids once the dict holds :data:`SETTLE_AT`."""
        if len(self._recent) >= SETTLE_AT:
            self.settle(newest + 1 - KEEP)

    def settle(self, below: int) -> None:
        """Move the ids of the entries before position ``below`` out of the newest ones."""
        moved: dict[str, list[tuple[int, int]]] = {}
        kept: dict[str, int] = {}
        for entry_id, at in self._recent.items():
            if at >= below:
                kept[entry_id] = at
            elif (found := numbered(entry_id)) is not None:
                moved.setdefault(found[0], []).append((found[1], at))
            else:
                self._others[entry_id] = at
        self._recent = kept  # a new dict: a dict never gives back the room of deleted keys
        for family, pairs in moved.items():
            pairs.sort()  # minted ids grow with time: nearly in order already
            runs = self._runs.setdefault(family, [])
            if runs and runs[-1].last < pairs[0][0]:
                runs[-1].extend(pairs)  # the common case: encoded once, at the run's end
                continue
            runs.append(_Run(pairs, split_of(family)))
            # Ids minted in order make one run that grows at its end; others merge by size.
            while len(runs) > 1 and (runs[-2].precedes(runs[-1]) or len(runs[-2]) <= len(runs[-1])):
                newer = runs.pop()
                runs[-1] = runs[-1].merged(newer)

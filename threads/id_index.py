"""Where each entry of a live session sits, by id, in some 20 bytes an entry rather than 150.

An entry id this build mints is ``e_`` and a ULID: 26 Crockford base-32
characters, 128 bits. As a dict key an id costs some 150 bytes (the string,
its slot, the position's ``int``); as two 64-bit halves and a 32-bit
position in sorted arrays, 20. So the ids of the newest entries — the ones
a turn names — stay in a dict; once :data:`SETTLE_AT` of them gather, the
older ones move into sorted runs (:meth:`IdIndex.settle`), and older ids
of no numbered shape (a test's, a loose send's) into a second dict. Ids are
minted in order, so a settle's run usually follows the last one and is
appended to it; runs out of order merge by size, each kept larger than the
next. A lookup that misses the dicts bisects one array, or a handful.

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
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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


class _Run:
    """Ids as numbers in sorted arrays: high halves, low halves and positions."""

    __slots__ = ("highs", "lows", "places")

    def __init__(self, pairs: Iterable[tuple[int, int]]) -> None:
        """``pairs`` of (number, position), sorted by number."""
        pairs = list(pairs)
        self.highs = array("Q", [number >> 64 for number, _ in pairs])
        self.lows = array("Q", [number & _LOW for number, _ in pairs])
        self.places = array("I", [at for _, at in pairs])

    @classmethod
    def of_arrays(cls, highs: array[int], lows: array[int], places: array[int]) -> _Run:
        run = cls(())
        run.highs, run.lows, run.places = highs, lows, places
        return run

    def __len__(self) -> int:
        return len(self.places)

    def find(self, number: int) -> int | None:
        high, low = number >> 64, number & _LOW
        highs = self.highs
        at = bisect_left(highs, high)
        while at < len(highs) and highs[at] == high:
            if self.lows[at] == low:
                return self.places[at]
            at += 1
        return None

    def pairs(self) -> Iterator[tuple[int, int]]:
        for high, low, at in zip(self.highs, self.lows, self.places, strict=True):
            yield (high << 64) | low, at

    def merged(self, newer: _Run) -> _Run:
        """This run and ``newer`` as one: ``newer`` appended to this one when all its numbers
        are above this one's (ids minted later, the common case), else a sorted merge."""
        if not self.precedes(newer):
            return _Run(sorted([*self.pairs(), *newer.pairs()]))
        self.highs.extend(newer.highs)
        self.lows.extend(newer.lows)
        self.places.extend(newer.places)
        return self

    def precedes(self, newer: _Run) -> bool:
        """Whether every number of this run is below every number of ``newer``."""
        return (
            not self.highs
            or not newer.highs
            or ((self.highs[-1], self.lows[-1]) < (newer.highs[0], newer.lows[0]))
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexDump:
    """An :class:`IdIndex` as plain values: its newest ids, its other ids, its runs' arrays."""

    recent: list[tuple[str, int]]
    others: list[tuple[str, int]]
    runs: list[tuple[str, array[int], array[int], array[int]]]
    """Each run's family, then its arrays (high halves, low halves, positions)."""


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
        """Every part as plain values (a checkpoint's, decision perf-19); the runs' arrays
        are the index's own, which a later settle extends: encode them before it."""
        return IndexDump(
            recent=list(self._recent.items()),
            others=list(self._others.items()),
            runs=[
                (family, run.highs, run.lows, run.places)
                for family, runs in self._runs.items()
                for run in runs
            ],
        )

    @classmethod
    def restored(cls, dump: IndexDump) -> IdIndex:
        """The index :meth:`dump` described."""
        index = cls()
        index._recent = dict(dump.recent)
        index._others = dict(dump.others)
        for family, *arrays in dump.runs:
            index._runs.setdefault(family, []).append(_Run.of_arrays(*arrays))
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
            runs.append(_Run(pairs))
            # Ids minted in order make one run that grows at its end; others merge by size.
            while len(runs) > 1 and (runs[-2].precedes(runs[-1]) or len(runs[-2]) <= len(runs[-1])):
                newer = runs.pop()
                runs[-1] = runs[-1].merged(newer)

"""Cutting a document into chunks that each fit a platform's limit.

A chunk is itself a :class:`Document` (a slice of the runs), so each output
form closes the marks open at its end and reopens them at the start of the
next: every chunk of HTML is well-formed on its own, and a code block cut in
two is two closed blocks that both name the language.

Where a cut goes, best first:

1. between blocks (a blank line), then between lines, then between words,
   preferring the latest such place in the last three quarters of the room
   (so a chunk is not a lone heading), then the latest anywhere;
2. never inside a link or a code block that would fit in one chunk: the cut
   moves before it and it opens the next chunk;
3. only a word, link or block longer than a whole chunk is cut mid-way, at a
   code point that does not start or glue a grapheme (no surrogate pair,
   emoji sequence or combining mark is torn).

Whitespace at a cut is dropped, except inside code, whose indentation is
meaning; nothing else is lost, so the chunks read in order are the whole text.

Cost is measured in UTF-16 code units (see
docs/decisions/render-03-the-length-unit.md), plus, when given, each opened
mark's markup cost (Discord counts its code fences) and a cap on the number of
marks a chunk opens (Telegram formats only the first 100 entities).
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

from channels.render.document import ATOMIC, PRE, Document, Mark, Run

#: The smallest limit accepted: room for a code fence's markup and some text.
MIN_LIMIT = 64

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_ZWJ = "\u200d"
_SEPARATORS = ("\n\n", "\n", " ")


def chunk(
    document: Document,
    limit: int,
    *,
    max_marks: int | None = None,
    markup_cost: Callable[[Mark], int] | None = None,
) -> list[Document]:
    """``document`` cut into chunks, in order, each costing at most ``limit``.

    A chunk's cost is its text's length in UTF-16 code units plus
    ``markup_cost`` of every mark it opens (its open and close markup
    together, counted once per opening, reopened marks included). With
    ``max_marks``, no chunk opens more marks than that. An empty or
    whitespace-only document has no chunks.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"a chunk limit must be at least {MIN_LIMIT} units, got {limit}")
    return _Cutter(document.runs, limit, max_marks, markup_cost).cut()


class _Cutter:
    """The text of the runs as one string, with what a cut needs to know about it.

    Positions are indices into that string. ``_atoms`` are the ranges of
    links and code blocks small enough to keep whole; ``_pres`` are all code
    blocks, whose whitespace is kept at a cut.
    """

    def __init__(
        self,
        runs: Sequence[Run],
        limit: int,
        max_marks: int | None,
        markup_cost: Callable[[Mark], int] | None,
    ) -> None:
        self._runs = runs
        self._limit = limit
        self._max_marks = max_marks
        self._text = "".join(run.text for run in runs)
        self._starts = list(accumulate((len(run.text) for run in runs), initial=0))
        text = self._text
        self._astral = [] if text.isascii() else [m.start() for m in _ASTRAL.finditer(text)]

        opened: list[int] = []
        opened_cost: list[int] = []
        previous: tuple[Mark, ...] = ()
        for run in runs:
            shared = 0
            for before, after in zip(previous, run.marks, strict=False):
                if before != after:
                    break
                shared += 1
            opened.append(len(run.marks) - shared)
            opened_cost.append(sum(map(markup_cost, run.marks[shared:])) if markup_cost else 0)
            previous = run.marks
        self._opened = list(accumulate(opened, initial=0))
        self._opened_cost = list(accumulate(opened_cost, initial=0))
        self._reopen = [len(run.marks) for run in runs]
        self._reopen_cost = [sum(map(markup_cost, run.marks)) if markup_cost else 0 for run in runs]

        groups = _groups(runs, self._starts)
        self._pres = [(start, end) for start, end, mark in groups if mark.tag == PRE]
        self._atoms = [(start, end) for start, end, _mark in groups if self._fits(start, end)]
        self._atom_starts = [start for start, _end in self._atoms]
        self._pre_starts = [start for start, _end in self._pres]

    def cut(self) -> list[Document]:
        text, chunks = self._text, []
        start = self._skip_space(0)
        while start < len(text):
            if self._fits(start, len(text)):
                end = self._trim(start, len(text))
                if end > start:
                    chunks.append(self._slice(start, end))
                break
            room = self._room(start)
            end, after = self._place(start, room)
            end = self._trim(start, end)
            if end > start:
                chunks.append(self._slice(start, end))
            start = self._skip_space(after)
        return chunks

    # -- measuring

    def _fits(self, start: int, end: int) -> bool:
        units = end - start
        if self._astral:
            units += bisect_right(self._astral, end - 1) - bisect_right(self._astral, start - 1)
        first = bisect_right(self._starts, start) - 1
        last = bisect_right(self._starts, end - 1) - 1
        markup = (
            self._reopen_cost[first] + self._opened_cost[last + 1] - self._opened_cost[first + 1]
        )
        if units + markup > self._limit:
            return False
        if self._max_marks is None:
            return True
        marks = self._reopen[first] + self._opened[last + 1] - self._opened[first + 1]
        return marks <= self._max_marks

    def _room(self, start: int) -> int:
        """The furthest end a chunk starting at ``start`` can have."""
        low, high = start, min(len(self._text), start + self._limit)
        while low < high:
            middle = (low + high + 1) // 2
            if self._fits(start, middle):
                low = middle
            else:
                high = middle - 1
        if low == start:
            raise ValueError(f"a chunk limit of {self._limit} has no room for any text here")
        return low

    # -- placing a cut

    def _place(self, start: int, room: int) -> tuple[int, int]:
        """Where the chunk from ``start`` ends and the next begins (a separator between is dropped)."""
        for low in (max(start + 1, start + (room - start) // 4), start + 1):
            for separator in _SEPARATORS:
                at = self._find(separator, low, room)
                if at is None:
                    continue
                if separator == " " and self._in_pre(at):
                    # Code keeps its spaces: the space ends this chunk if it fits, else opens the next.
                    kept = at + 1 if at < room else at
                    return kept, kept
                return at, at + len(separator)
        return self._hard_cut(start, room)

    def _find(self, separator: str, low: int, room: int) -> int | None:
        """The latest ``separator`` in ``[low, room]`` whose characters no kept-whole range holds."""
        high = room + len(separator)
        while True:
            at = self._text.rfind(separator, low, high)
            if at < 0:
                return None
            held = [self._atom_of(q) for q in range(at, at + len(separator))]
            holders = [atom for atom in held if atom >= 0]
            if not holders:
                return at
            high = self._atoms[holders[0]][0]

    def _hard_cut(self, start: int, room: int) -> tuple[int, int]:
        """A cut mid-word: before a kept-whole range that would straddle it, else at the
        last code point boundary that does not tear a grapheme."""
        text, at = self._text, room
        held = self._atom_of(at) if at < len(text) else -1
        if held >= 0 and self._atoms[held][0] > start:
            return self._atoms[held][0], self._atoms[held][0]
        while at - 1 > start and at < len(text) and _glued(text, at):
            at -= 1
        return at, at

    def _atom_of(self, position: int) -> int:
        index = bisect_right(self._atom_starts, position) - 1
        if index >= 0 and position < self._atoms[index][1]:
            return index
        return -1

    def _in_pre(self, position: int) -> bool:
        index = bisect_right(self._pre_starts, position) - 1
        return index >= 0 and position < self._pres[index][1]

    def _trim(self, start: int, end: int) -> int:
        text = self._text
        while end > start and text[end - 1].isspace() and not self._in_pre(end - 1):
            end -= 1
        return end

    def _skip_space(self, position: int) -> int:
        text = self._text
        while position < len(text) and text[position].isspace() and not self._in_pre(position):
            position += 1
        return position

    def _slice(self, start: int, end: int) -> Document:
        runs: list[Run] = []
        index = bisect_right(self._starts, start) - 1
        while index < len(self._runs) and self._starts[index] < end:
            run, offset = self._runs[index], self._starts[index]
            low, high = max(start, offset) - offset, min(end, self._starts[index + 1]) - offset
            if low == 0 and high == len(run.text):
                runs.append(run)
            elif high > low:
                runs.append(Run(run.text[low:high], run.marks, plain_only=run.plain_only))
            index += 1
        return Document(tuple(runs))


def _groups(runs: Sequence[Run], starts: Sequence[int]) -> list[tuple[int, int, Mark]]:
    """The ranges of consecutive runs under the same link or code-block mark."""
    groups: list[tuple[int, int, Mark]] = []
    for index, run in enumerate(runs):
        mark = next((mark for mark in run.marks if mark.tag in ATOMIC), None)
        if mark is None:
            continue
        if groups and groups[-1][2] == mark and groups[-1][1] == starts[index]:
            groups[-1] = (groups[-1][0], starts[index + 1], mark)
        else:
            groups.append((starts[index], starts[index + 1], mark))
    return groups


def _glued(text: str, at: int) -> bool:
    """Whether a cut before ``text[at]`` would tear a grapheme: a combining mark,
    variation selector, skin tone or tag after it, a zero-width joiner on either
    side, or the second half of a flag."""
    char, code = text[at], ord(text[at])
    if (
        char == _ZWJ
        or text[at - 1] == _ZWJ
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
        or unicodedata.category(char) in ("Mn", "Me", "Mc")
    ):
        return True
    if not _is_regional(char):
        return False
    before = at
    while before > 0 and _is_regional(text[before - 1]):
        before -= 1
    return (at - before) % 2 == 1


def _is_regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF

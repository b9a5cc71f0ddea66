"""The rendered document: styled runs of text, the one form every output is made from.

A :class:`Document` is what a markdown answer becomes after one parse: a flat
sequence of :class:`Run` values, each a piece of text with the stack of
:class:`Mark` values that style it (outermost first). The Telegram HTML, the
plain text and the Discord markdown are each a straight walk over the runs,
and chunking cuts the sequence without ever looking at markup, so no cut can
land inside a tag or an entity.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

#: Mark tags, named for Telegram's tags. Discord uses only ``pre`` (and
#: ``keep``); plain text ignores them all.
BOLD = "b"
ITALIC = "i"
STRIKE = "s"
CODE = "code"
PRE = "pre"
LINK = "a"
QUOTE = "blockquote"
#: Styles nothing; keeps its text in one chunk when it fits (Discord's links).
KEEP = "keep"

#: Marks whose text stays in one chunk whenever it fits in one.
ATOMIC = frozenset({LINK, PRE, KEEP})


@dataclass(frozen=True, slots=True)
class Mark:
    """One style over a stretch of text: a tag and its attribute.

    ``attr`` is the target of a link and the language of a code block; other
    marks leave it empty. Two marks are the same style when they are equal.
    """

    tag: str
    attr: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """A piece of text under one stack of marks, outermost first.

    A ``plain_only`` run is shown only where markup cannot carry it: the
    `` (https://…)`` after a link's text, which HTML keeps in the ``href``.
    It is measured like any other text, so one cut serves both forms.
    """

    text: str
    marks: tuple[Mark, ...] = ()
    plain_only: bool = False


@dataclass(frozen=True, slots=True)
class Document:
    """A rendered answer (or one chunk of it) as runs, in reading order."""

    runs: tuple[Run, ...] = ()

    @property
    def text(self) -> str:
        """Every character of the document, as plain text shows it."""
        return "".join(run.text for run in self.runs)


def utf16_len(text: str) -> int:
    """The length of ``text`` in UTF-16 code units, the unit Telegram counts in."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospace font: wide East Asian characters
    and most emoji take two, combining and format characters none."""
    if text.isascii():
        return len(text)
    width = 0
    for char in text:
        if unicodedata.combining(char) or unicodedata.category(char) in ("Cf", "Mn", "Me"):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width

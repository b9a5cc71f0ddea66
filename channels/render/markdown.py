"""Markdown to a :class:`Document`: one parse with markdown-it-py, one walk over its tokens.

The parser is CommonMark with raw HTML off (a ``<script>`` in a model's answer
is text, shown escaped) plus GitHub's tables and strikethrough. The walk keeps
what a chat can show and degrades the rest into text that reads well on a
phone (docs/decisions/render-02-headings-lists-and-links.md):

- emphasis, strong, strikethrough, code spans, code blocks with their
  language, blockquotes and links to ``http``, ``https``, ``tg`` and ``mailto``
  become marks;
- headings are bold lines; list items are ``•`` or ``1.`` lines, nested ones
  indented under their parent's text; a horizontal rule is a line;
- an image is a link to it; a link to any other scheme is its text alone;
- a table is an aligned monospace block when it fits a phone and holds no
  links, otherwise a few lines per row (docs/decisions/render-01-tables.md);
- a line break inside a paragraph stays a line break, as the model wrote it.

The result serves both Telegram HTML and plain text: a link's target follows
its text in a ``plain_only`` run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

from channels.render.document import (
    BOLD,
    CODE,
    ITALIC,
    LINK,
    PRE,
    QUOTE,
    STRIKE,
    Document,
    Mark,
    Run,
)
from channels.render.tables import Table, cell_text, layout, read_table, table_width

#: Link schemes a chat may open; any other link is shown as its text.
SAFE_SCHEMES = frozenset({"http", "https", "tg", "mailto"})
#: The widest table (in monospace columns) drawn as a block on Telegram;
#: a phone's message bubble shows about this many before wrapping.
PHONE_COLUMNS = 36
BULLET = "• "
RULE = "──────────"
IMAGE = "🖼 "

_INLINE_MARKS = {"em_open": ITALIC, "strong_open": BOLD, "s_open": STRIKE}
_INLINE_CLOSES = {"em_close": ITALIC, "strong_close": BOLD, "s_close": STRIKE}
_LANGUAGE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+#.-")


def parse(markdown: str) -> list[Token]:
    """The token stream of ``markdown`` (CommonMark, raw HTML off, tables and strikethrough on).

    Building the parser costs about 0.1 ms, so each call builds its own and
    nothing is shared between calls.
    """
    parser = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    return parser.parse(markdown)


def is_safe_link(href: str) -> bool:
    """Whether a chat may open ``href``: an absolute ``http(s)`` URL with a host,
    a ``tg:`` link or a ``mailto:`` address."""
    scheme, colon, rest = href.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in SAFE_SCHEMES or not rest:
        return False
    if scheme in ("http", "https"):
        try:
            return bool(urlsplit(href).hostname)
        except ValueError:
            return False
    return True


def code_language(info: str) -> str:
    """The language a fence names (its first word), or ``""`` when it names none usable."""
    words = info.split(maxsplit=1)
    if not words or len(words[0]) > 32 or not set(words[0]) <= _LANGUAGE_CHARS:
        return ""
    return words[0]


def chat_document(markdown: str) -> Document:
    """``markdown`` as a document for Telegram HTML and plain text."""
    return build_document(parse(markdown))


def build_document(tokens: Sequence[Token]) -> Document:
    """The document of a parsed answer (see :func:`parse`)."""
    builder = _Builder()
    builder.blocks(tokens)
    return builder.finish()


@dataclass(slots=True)
class _List:
    ordered: bool
    number: int
    tight: bool


class _Builder:
    """Walks block and inline tokens, appending runs.

    Blocks are separated lazily: closing a block records the gap it owes
    (a blank line, or one newline inside a tight list) and the next block pays
    it, under the marks in force then, so a gap never lands inside a quote it
    is not part of.
    """

    def __init__(self) -> None:
        self._runs: list[Run] = []
        self._pieces: list[str] = []
        self._piece_marks: tuple[Mark, ...] = ()
        self._stack: list[Mark] = []
        self._gap = ""
        self._indents: list[int] = []
        self._marker = ""
        self._lists: list[_List] = []
        self._quotes = 0
        self._link_text: list[str] | None = None

    def finish(self) -> Document:
        self._flush()
        return Document(tuple(self._runs))

    # -- blocks

    def blocks(self, tokens: Sequence[Token]) -> None:
        index = 0
        while index < len(tokens):
            token = tokens[index]
            kind = token.type
            if kind == "table_open":
                table, index = read_table(tokens, index)
                self._table(table)
                continue
            if kind in ("paragraph_open", "heading_open"):
                self._open_block()
                if kind == "heading_open":
                    self._stack.append(Mark(BOLD))
            elif kind == "heading_close":
                self._stack.pop()
                self._end_block()
            elif kind == "paragraph_close":
                self._end_block()
            elif kind == "inline":
                self._inline(token.children or ())
            elif kind in ("fence", "code_block"):
                self._open_block(indent=False)
                language = code_language(token.info) if kind == "fence" else ""
                self._put(token.content.removesuffix("\n"), (*self._stack, Mark(PRE, language)))
                self._end_block()
            elif kind == "hr":
                self._open_block()
                self._put(RULE)
                self._end_block()
            elif kind in ("bullet_list_open", "ordered_list_open"):
                start = int(token.attrs.get("start", 1)) if kind == "ordered_list_open" else 1
                self._lists.append(
                    _List(
                        ordered=kind == "ordered_list_open",
                        number=start,
                        tight=_is_tight(tokens, index),
                    )
                )
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self._lists.pop()
                self._end_block()
            elif kind == "list_item_open":
                self._open_item()
            elif kind == "list_item_close":
                if self._marker:
                    self._open_block()
                    self._end_block()
                self._indents.pop()
            elif kind == "blockquote_open":
                self._pay_gap()
                self._quotes += 1
                if self._quotes == 1:
                    self._stack.append(Mark(QUOTE))
            elif kind == "blockquote_close":
                self._quotes -= 1
                if self._quotes == 0:
                    self._stack.pop()
                self._end_block()
            elif kind == "html_block":
                self._open_block()
                self._put(token.content.rstrip("\n"))
                self._end_block()
            index += 1

    def _open_item(self) -> None:
        current = self._lists[-1]
        if current.ordered:
            self._marker = f"{current.number}. "
            current.number += 1
        else:
            self._marker = BULLET
        self._indents.append(len(self._marker))

    def _open_block(self, *, indent: bool = True) -> None:
        """Before a block's first character: the gap owed, then the line's indent or item marker."""
        self._pay_gap()
        if self._marker:
            self._put(" " * sum(self._indents[:-1]) + self._marker)
            self._marker = ""
        elif indent:
            self._put(" " * sum(self._indents))

    def _pay_gap(self) -> None:
        if self._gap and (self._runs or self._pieces):
            self._put(self._gap)
        self._gap = ""

    def _end_block(self) -> None:
        self._gap = "\n" if self._lists and self._lists[-1].tight else "\n\n"

    def _table(self, table: Table) -> None:
        header = [cell_text(cell) for cell in table.header]
        rows = [[cell_text(cell) for cell in row] for row in table.rows]
        if not table.has_links() and table_width([header, *rows]) <= PHONE_COLUMNS:
            self._open_block(indent=False)
            self._put(layout([header, *rows], table.aligns), (*self._stack, Mark(PRE)))
            self._end_block()
            return
        if not table.rows:
            self._open_block()
            self._stack.append(Mark(BOLD))
            for number, cell in enumerate(table.header):
                if number:
                    self._put(" · ")
                self._inline(cell.children or ())
            self._stack.pop()
            self._end_block()
            return
        for row in table.rows:
            self._open_block()
            self._row(table, row)
            self._end_block()
            self._gap = "\n\n"

    def _row(self, table: Table, row: tuple[Token, ...]) -> None:
        """One row as lines: its first cell in bold, then ``header: value`` for the others."""
        first = True
        if row and row[0].content.strip():
            self._stack.append(Mark(BOLD))
            self._inline(row[0].children or ())
            self._stack.pop()
            first = False
        for label, cell in zip(table.header[1:], row[1:], strict=False):
            if not cell.content.strip():
                continue
            if not first:
                self._put("\n" + " " * sum(self._indents))
            first = False
            if label.content.strip():
                self._inline(label.children or ())
                self._put(": ")
            self._inline(cell.children or ())

    # -- inline

    def _inline(self, children: Sequence[Token]) -> None:
        for child in children:
            kind = child.type
            if kind in _INLINE_MARKS:
                self._stack.append(Mark(_INLINE_MARKS[kind]))
            elif kind in _INLINE_CLOSES:
                self._pop(_INLINE_CLOSES[kind])
            elif kind in ("softbreak", "hardbreak"):
                self._put("\n" + " " * sum(self._indents))
            elif kind == "code_inline":
                self._code(child.content)
            elif kind == "link_open":
                self._open_link(str(child.attrs.get("href", "")))
            elif kind == "link_close":
                self._close_link()
            elif kind == "image":
                self._image(child)
            else:
                self._put(child.content)

    def _pop(self, tag: str) -> None:
        for position in range(len(self._stack) - 1, -1, -1):
            if self._stack[position].tag == tag:
                del self._stack[position]
                return

    def _code(self, content: str) -> None:
        """A code span: Telegram's code can sit in no style and hold none, and a link
        cannot hold it, so inside a link it is the link's text."""
        if any(mark.tag == LINK for mark in self._stack):
            self._put(content)
            return
        quote = tuple(mark for mark in self._stack if mark.tag == QUOTE)
        self._put(content, (*quote, Mark(CODE)))

    def _open_link(self, href: str) -> None:
        # An unsafe link pushes a placeholder mark that styles nothing, so the close pops it.
        self._stack.append(Mark(LINK, href) if is_safe_link(href) else Mark("", href))
        self._link_text = []

    def _close_link(self) -> None:
        link = self._stack[-1]
        text = "".join(self._link_text or ())
        self._link_text = None
        if link.tag == LINK:
            if not text.strip():
                self._put(link.attr)
            elif text.strip() not in (link.attr, link.attr.removeprefix("mailto:")):
                self._put(f" ({link.attr})", plain_only=True)
        self._pop(link.tag)

    def _image(self, image: Token) -> None:
        src = str(image.attrs.get("src", ""))
        label = IMAGE + (cell_text(image) or "image")
        if not is_safe_link(src):
            self._put(label)
            return
        self._stack.append(Mark(LINK, src))
        self._put(label)
        self._put(f" ({src})", plain_only=True)
        self._stack.pop()

    # -- runs

    def _put(
        self, text: str, marks: tuple[Mark, ...] | None = None, *, plain_only: bool = False
    ) -> None:
        if not text:
            return
        if marks is None:
            marks = tuple(mark for mark in self._stack if mark.tag)
        if self._link_text is not None and not plain_only:
            self._link_text.append(text)
        if plain_only:
            self._flush()
            self._runs.append(Run(text, marks, plain_only=True))
            return
        if marks != self._piece_marks:
            self._flush()
            self._piece_marks = marks
        self._pieces.append(text)

    def _flush(self) -> None:
        if self._pieces:
            self._runs.append(Run("".join(self._pieces), self._piece_marks))
            self._pieces.clear()


def _is_tight(tokens: Sequence[Token], start: int) -> bool:
    """Whether the list opened at ``tokens[start]`` is tight: markdown-it hides its paragraphs."""
    level = tokens[start].level + 2
    for token in tokens[start + 1 :]:
        if token.level < level - 1 and token.nesting == -1:
            return True
        if token.type == "paragraph_open" and token.level == level:
            return token.hidden
    return True

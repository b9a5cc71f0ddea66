"""Markdown tables: reading them from the token stream and laying them out in columns.

Neither Telegram nor Discord draws a table. A table becomes either an aligned
monospace block (Discord always; Telegram when it fits a phone's width, see
docs/decisions/render-01-tables.md) or, in the Telegram document, one short
group of lines per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from channels.render.document import display_width

#: Spaces between two columns of a laid-out table.
GUTTER = "  "


@dataclass(frozen=True, slots=True)
class Table:
    """A table's cells as inline tokens: the header row, then the body rows.

    ``aligns`` holds ``"left"``, ``"right"``, ``"center"`` or ``""`` per column.
    Every row has as many cells as the header (markdown-it pads short rows).
    """

    header: tuple[Token, ...]
    rows: tuple[tuple[Token, ...], ...]
    aligns: tuple[str, ...]

    def has_links(self) -> bool:
        """Whether any cell holds a link or an image, which a monospace block would flatten."""
        return any(
            child.type in ("link_open", "image")
            for row in (self.header, *self.rows)
            for cell in row
            for child in cell.children or ()
        )


def read_table(tokens: Sequence[Token], start: int) -> tuple[Table, int]:
    """The table whose ``table_open`` is ``tokens[start]``, and the index after its close."""
    header: list[Token] = []
    rows: list[tuple[Token, ...]] = []
    aligns: list[str] = []
    row: list[Token] = []
    in_head = False
    index = start + 1
    while tokens[index].type != "table_close":
        token = tokens[index]
        if token.type == "thead_open":
            in_head = True
        elif token.type == "thead_close":
            in_head = False
        elif token.type == "tr_open":
            row = []
        elif token.type == "th_open":
            style = str(token.attrs.get("style", ""))
            aligns.append(style.removeprefix("text-align:"))
        elif token.type == "inline":
            row.append(token)
        elif token.type == "tr_close":
            if in_head:
                header = row
            else:
                rows.append(tuple(row))
        index += 1
    return Table(header=tuple(header), rows=tuple(rows), aligns=tuple(aligns)), index + 1


def cell_text(cell: Token, *, urls: bool = False) -> str:
    """A cell's inline content as one line of plain text; with ``urls``, a link
    keeps its target in parentheses after its text."""
    parts: list[str] = []
    link_start = 0
    href = ""
    for child in cell.children or ():
        if child.type in ("text", "code_inline", "text_special"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(cell_text(child) or "image")
            if urls:
                parts.append(f" ({child.attrs.get('src', '')})")
        elif child.type == "link_open":
            link_start = len(parts)
            href = str(child.attrs.get("href", ""))
        elif child.type == "link_close" and urls and "".join(parts[link_start:]) != href:
            parts.append(f" ({href})")
    return " ".join("".join(parts).split())


def table_width(cells: Sequence[Sequence[str]]) -> int:
    """Columns the laid-out table takes (its widest line)."""
    widths = _column_widths(cells)
    return sum(widths) + len(GUTTER) * (len(widths) - 1)


def layout(cells: Sequence[Sequence[str]], aligns: Sequence[str]) -> str:
    """The rows of plain cell texts (header first) as aligned monospace lines,
    with a rule under the header."""
    widths = _column_widths(cells)
    lines: list[str] = []
    for number, given in enumerate(cells):
        row = [*given, *[""] * (len(widths) - len(given))]
        padded = (
            _pad(text, width, aligns[column] if column < len(aligns) else "")
            for column, (text, width) in enumerate(zip(row, widths, strict=True))
        )
        lines.append(GUTTER.join(padded).rstrip())
        if number == 0:
            lines.append(GUTTER.join("─" * width for width in widths))
    return "\n".join(lines)


def _column_widths(cells: Sequence[Sequence[str]]) -> list[int]:
    columns = max(len(row) for row in cells)
    return [
        max(display_width(row[column]) if column < len(row) else 0 for row in cells)
        for column in range(columns)
    ]


def _pad(text: str, width: int, align: str) -> str:
    room = width - display_width(text)
    if align == "right":
        return " " * room + text
    if align == "center":
        return " " * (room // 2) + text + " " * (room - room // 2)
    return text + " " * room

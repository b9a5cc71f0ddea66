"""Discord: an answer as the markdown Discord draws, in chunks of at most 2000 characters.

Discord renders markdown itself, so each block of the answer passes through
as the model wrote it, with only what Discord would get wrong changed:

- ``@everyone`` and ``@here`` get a zero-width space after the ``@``, so an
  answer never pings a whole server (the adapter should still send
  ``allowed_mentions`` that allow none);
- a table, which Discord does not draw, becomes an aligned code block;
- an indented code block becomes a fenced one, and a run of three backticks
  inside code is broken with zero-width spaces (Discord ends a code block at
  the first one, whatever the fence);
- headings use ``#`` to ``###`` (Discord has no deeper ones and no setext
  form), and a horizontal rule is a line of ``─``.

Chunks come from the same cutter as Telegram's: a code block that must be cut
is closed and reopened with its language, the fences counting against the
limit, and a link is kept whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it.token import Token

from channels.render.chunking import chunk
from channels.render.document import KEEP, PRE, Document, Mark, Run
from channels.render.markdown import RULE, code_language, parse
from channels.render.tables import cell_text, layout, read_table

#: A message's content, in characters (measured in UTF-16 code units, never fewer).
DISCORD_LIMIT = 2000
FENCE = "```"

_MASS_MENTION = re.compile(r"@(everyone|here)", re.IGNORECASE)
_BACKTICKS = re.compile("`{3,}")
# Finds the links and autolinks of a source line so a cut keeps them whole;
# markdown-it gives blocks their lines but inline tokens no positions.
_LINK = re.compile(
    r"!?\[[^\[\]\n]*\]\([^()\s]*(?:\([^()\s]*\)[^()\s]*)*\)|<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*>"
)


def render_discord(markdown: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """``markdown`` as Discord messages in order, each at most ``limit``
    characters. An answer with nothing to show has no chunks."""
    chunks = chunk(discord_document(markdown), limit, markup_cost=fence_cost)
    return [to_discord(part) for part in chunks]


def neutralize_mentions(text: str) -> str:
    """``text`` with every ``@everyone`` and ``@here`` made inert by a zero-width space."""
    return _MASS_MENTION.sub("@\u200b\\1", text)


def fence_cost(mark: Mark) -> int:
    """The characters a code block's fences add to a message."""
    if mark.tag != PRE:
        return 0
    return len(FENCE) + len(mark.attr) + 1 + 1 + len(FENCE)


def to_discord(document: Document) -> str:
    """The document as Discord markdown: code blocks fenced, everything else as it is."""
    out: list[str] = []
    fenced: Mark | None = None
    for run in document.runs:
        pre = next((mark for mark in run.marks if mark.tag == PRE), None)
        if pre != fenced:
            if fenced is not None:
                out.append("\n" + FENCE)
            if pre is not None:
                out.append(f"{FENCE}{pre.attr}\n")
            fenced = pre
        out.append(run.text)
    if fenced is not None:
        out.append("\n" + FENCE)
    return "".join(out)


def discord_document(markdown: str) -> Document:
    """``markdown`` as a document of its blocks' source text and its code blocks."""
    source = neutralize_mentions(markdown.replace("\r\n", "\n").replace("\r", "\n"))
    lines = source.split("\n")
    tokens = parse(source)
    runs: list[Run] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.type == "table_open":
            table, index = read_table(tokens, index)
            cells = [
                [cell_text(cell, urls=True) for cell in row] for row in (table.header, *table.rows)
            ]
            block = [Run(layout(cells, table.aligns), (Mark(PRE),))]
        else:
            block = _block(token, tokens, index, lines)
            index = _after(tokens, index)
        if block and runs:
            runs.append(Run("\n\n"))
        runs.extend(block)
    return Document(tuple(runs))


def _block(token: Token, tokens: Sequence[Token], index: int, lines: Sequence[str]) -> list[Run]:
    if token.type in ("fence", "code_block"):
        code = _BACKTICKS.sub(lambda found: "\u200b".join(found.group()), token.content)
        language = code_language(token.info) if token.type == "fence" else ""
        code = code.removesuffix("\n")
        return [Run(code, (Mark(PRE, language),))] if code else []
    if token.type == "hr":
        return [Run(RULE)]
    if token.type == "heading_open":
        text = " ".join(tokens[index + 1].content.split("\n"))
        level = int(token.tag[1:])
        return _with_links("#" * level + " " + text if level <= 3 else f"**{text}**")
    if token.map is None:
        return []
    start, end = token.map
    while end > start and not lines[end - 1].strip():
        end -= 1
    # A code block inside a list or quote stays as written; it is kept whole when it fits.
    nested = [
        inner.map
        for inner in tokens[index + 1 : _after(tokens, index)]
        if inner.type in ("fence", "code_block") and inner.map is not None
    ]
    runs: list[Run] = []
    line = start
    for fence_start, fence_end in nested:
        if fence_start > line:
            runs.extend(_with_links("\n".join(lines[line:fence_start]) + "\n"))
        fence = "\n".join(lines[fence_start:fence_end])
        runs.append(Run(fence + ("\n" if fence_end < end else ""), (Mark(KEEP),)))
        line = fence_end
    if line < end:
        runs.extend(_with_links("\n".join(lines[line:end])))
    return runs


def _with_links(text: str) -> list[Run]:
    """``text`` as runs, each markdown link or autolink in a run of its own kept whole."""
    runs: list[Run] = []
    position = 0
    for found in _LINK.finditer(text):
        if found.start() > position:
            runs.append(Run(text[position : found.start()]))
        runs.append(Run(found.group(), (Mark(KEEP, found.group()),)))
        position = found.end()
    if position < len(text):
        runs.append(Run(text[position:]))
    return runs


def _after(tokens: Sequence[Token], index: int) -> int:
    """The index after the block that starts at ``tokens[index]`` (after its close, if it opens)."""
    token = tokens[index]
    if token.nesting != 1:
        return index + 1
    for after in range(index + 1, len(tokens)):
        if tokens[after].level == token.level and tokens[after].nesting == -1:
            return after + 1
    return len(tokens)

"""Telegram: an answer as the HTML that ``parse_mode=HTML`` accepts, in chunks under its limit.

Only the tags Telegram knows are ever written (:data:`ALLOWED_TAGS`); every
``<``, ``>`` and ``&`` of the text is escaped, and ``"`` too inside an
attribute. Chunks are cut on the document, before any markup exists, so each
chunk's HTML is well-formed on its own.

The limit is 4096 UTF-16 code units of the text Telegram shows after parsing
the entities; a chunk is measured on that text plus the targets of its links
(so the plain-text form of the same chunk fits too), and opens at most 100
entities, past which Telegram drops formatting
(docs/decisions/render-03-the-length-unit.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.render.chunking import chunk
from channels.render.document import LINK, PRE, Document, Mark
from channels.render.markdown import chat_document

#: A message's text, in UTF-16 code units after entity parsing.
TELEGRAM_LIMIT = 4096
#: Entities Telegram formats in one message; later ones are shown as plain text.
TELEGRAM_MAX_ENTITIES = 100
#: Every tag :func:`to_html` can write.
ALLOWED_TAGS = frozenset({"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramChunk:
    """One message of an answer: its HTML, and the same text plain for when
    Telegram refuses the HTML (links followed by their targets)."""

    html: str
    text: str


def telegram_chunks(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[TelegramChunk]:
    """``markdown`` as Telegram messages in order, each under ``limit`` in both forms.

    An answer with nothing to show has no chunks.
    """
    chunks = chunk(chat_document(markdown), limit, max_marks=TELEGRAM_MAX_ENTITIES)
    return [
        TelegramChunk(html=to_html(part), text=part.text)
        for part in chunks
        if any(not run.plain_only and not run.text.isspace() for run in part.runs)
    ]


def render_telegram(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """``markdown`` as Telegram HTML messages in order (see :func:`telegram_chunks`)."""
    return [part.html for part in telegram_chunks(markdown, limit)]


def to_html(document: Document) -> str:
    """The document as Telegram HTML: every mark opened is closed by the end."""
    out: list[str] = []
    open_marks: tuple[Mark, ...] = ()
    for run in document.runs:
        if run.plain_only:
            continue
        shared = 0
        for before, after in zip(open_marks, run.marks, strict=False):
            if before != after:
                break
            shared += 1
        out.extend(_close(mark) for mark in reversed(open_marks[shared:]))
        out.extend(_open(mark) for mark in run.marks[shared:])
        out.append(escape_text(run.text))
        open_marks = run.marks
    out.extend(_close(mark) for mark in reversed(open_marks))
    return "".join(out)


def escape_text(text: str) -> str:
    """Text safe between Telegram HTML tags."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attribute(text: str) -> str:
    """Text safe inside a double-quoted Telegram HTML attribute."""
    return escape_text(text).replace('"', "&quot;")


def _open(mark: Mark) -> str:
    if mark.tag == LINK:
        return f'<a href="{escape_attribute(mark.attr)}">'
    if mark.tag == PRE and mark.attr:
        return f'<pre><code class="language-{escape_attribute(mark.attr)}">'
    return f"<{mark.tag}>"


def _close(mark: Mark) -> str:
    if mark.tag == PRE and mark.attr:
        return "</code></pre>"
    return f"</{mark.tag}>"

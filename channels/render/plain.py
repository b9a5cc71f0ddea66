"""Plain text: an answer as readable text with no markup, for chats that show none.

The text is the Telegram document's, character for character, with each
link's target after its text: lists keep their ``•`` and numbers, headings
and code keep their lines, and no ``*``, ``_`` or backtick is left over.
"""

from __future__ import annotations

from channels.render.chunking import chunk
from channels.render.document import Document
from channels.render.markdown import chat_document


def render_plain(markdown: str, limit: int) -> list[str]:
    """``markdown`` as plain-text messages in order, each at most ``limit``
    UTF-16 code units. An answer with nothing to show has no chunks."""
    return [to_plain(part) for part in chunk(chat_document(markdown), limit)]


def to_plain(document: Document) -> str:
    """The document's text, links followed by their targets."""
    return document.text

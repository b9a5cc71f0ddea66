"""Outbound rendering: a model's markdown answer as each chat platform's markup, in chunks.

Every chat channel renders the same way: one markdown-it-py parse, one walk of
its tokens into a :class:`Document` (styled runs of text), one cut into
chunks under the platform's limit, then a straight walk of each chunk into
the platform's markup. Everything here is a pure function of its arguments.

- :func:`render_telegram` — Telegram ``parse_mode=HTML`` messages (4096 UTF-16
  units of visible text); :func:`telegram_chunks` pairs each with its plain
  text for when Telegram refuses the HTML;
- :func:`render_plain` — readable text without markup, for any limit;
- :func:`render_discord` — Discord markdown messages (2000 characters).

No chunk splits a link, a code block that fits in one message, a tag, an
entity or a surrogate pair; a longer code block becomes several closed
blocks, each naming its language.
"""

from channels.render.chunking import MIN_LIMIT, chunk
from channels.render.discord import DISCORD_LIMIT, discord_document, render_discord, to_discord
from channels.render.document import Document, Mark, Run, display_width, utf16_len
from channels.render.markdown import build_document, chat_document, is_safe_link, parse
from channels.render.plain import render_plain, to_plain
from channels.render.telegram import (
    ALLOWED_TAGS,
    TELEGRAM_LIMIT,
    TELEGRAM_MAX_ENTITIES,
    TelegramChunk,
    render_telegram,
    telegram_chunks,
    to_html,
)

__all__ = [
    "ALLOWED_TAGS",
    "DISCORD_LIMIT",
    "MIN_LIMIT",
    "TELEGRAM_LIMIT",
    "TELEGRAM_MAX_ENTITIES",
    "Document",
    "Mark",
    "Run",
    "TelegramChunk",
    "build_document",
    "chat_document",
    "chunk",
    "discord_document",
    "display_width",
    "is_safe_link",
    "parse",
    "render_discord",
    "render_plain",
    "render_telegram",
    "telegram_chunks",
    "to_discord",
    "to_html",
    "to_plain",
    "utf16_len",
]

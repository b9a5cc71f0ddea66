"""A Discord message, as the gateway's :class:`~channels.base.Inbound`.

Who wrote what where (a direct message, a guild channel, a thread), whether it
addresses the bot (a mention, a reply to it; always in a direct message), the
message it answers (shortened), and its attachments by reference
(``discord://<account>/<channel id>/<message id>/<attachment id>``), fetched
only when a model is to see one.
"""

from __future__ import annotations

import discord

from channels.base import Inbound, MediaRef
from channels.discord.address import Address

REPLY_QUOTE_CHARS = 300
EDITED = "[edited] "


def address_of(channel: object, author_id: int) -> Address:
    """The conversation a message (or an interaction) in ``channel`` belongs to."""
    if isinstance(channel, discord.Thread):
        return Address(channel=channel.parent_id, thread=channel.id)
    if isinstance(channel, discord.DMChannel | discord.GroupChannel) or channel is None:
        return Address(user=author_id)
    channel_id = getattr(channel, "id", None)
    if not isinstance(channel_id, int):
        return Address(user=author_id)
    return Address(channel=channel_id)


def inbound_of(
    message: discord.Message, *, channel: str, bot: discord.abc.User, edited: bool = False
) -> Inbound:
    """The inbound message ``channel`` hands the router for a Discord message."""
    address = address_of(message.channel, message.author.id)
    reply_text = ""
    reply_to_bot = False
    reply_to = ""
    reference = message.reference
    if reference is not None and reference.message_id is not None:
        reply_to = str(reference.message_id)
        resolved = reference.resolved
        if isinstance(resolved, discord.Message):
            reply_text = resolved.content[:REPLY_QUOTE_CHARS]
            reply_to_bot = resolved.author.id == bot.id
    mentioned = (
        address.user is not None
        or reply_to_bot
        or any(user.id == bot.id for user in message.mentions)
    )
    return Inbound(
        channel=channel,
        chat_id=str(address),
        user_id=str(message.author.id),
        text=f"{EDITED}{message.content}" if edited else message.content,
        user_name=message.author.display_name,
        message_id=str(message.id),
        reply_to=reply_to,
        reply_to_text=reply_text,
        reply_to_bot=reply_to_bot,
        chat_type=address.chat_type,
        mentioned=mentioned,
        space=str(message.guild.id) if message.guild is not None else "",
        media=tuple(
            MediaRef(
                kind="image"
                if (attachment.content_type or "").startswith("image/")
                else "attachment",
                ref=f"discord://{channel}/{message.channel.id}/{message.id}/{attachment.id}",
                media_type=attachment.content_type or "application/octet-stream",
                name=attachment.filename,
                size=attachment.size,
            )
            for attachment in message.attachments
        ),
    )

"""A Telegram message, as the gateway's :class:`~channels.base.Inbound`.

What a model needs from an update: who wrote what where, whether it was
addressed to the bot (a mention, a reply to it, a command), the message it
answers (shortened), and the files it carries by reference — the largest
photo size, a document, a voice note, a sticker — never their bytes. A file
becomes a ``telegram://<account>/<file id>`` reference that the adapter
fetches with ``getFile`` only when a model is to see it.
"""

from __future__ import annotations

from telegram import Message, MessageEntity, User

from channels.base import ChatType, Inbound, MediaRef
from channels.telegram.address import Address

REPLY_QUOTE_CHARS = 300
EDITED = "[edited] "


def address_of(message: Message) -> Address:
    """The conversation a message belongs to (its forum topic included)."""
    chat = message.chat
    if chat.type == "private":
        return Address(chat_id=chat.id)
    chat_type: ChatType = "channel" if chat.type == "channel" else "group"
    topic = message.message_thread_id if message.is_topic_message else None
    return Address(chat_id=chat.id, topic=topic, chat_type=chat_type)


def inbound_of(message: Message, *, channel: str, bot: User, edited: bool = False) -> Inbound:
    """The inbound message ``channel`` hands the router for a Telegram message."""
    address = address_of(message)
    sender = message.from_user or message.sender_chat
    user_id = str(sender.id) if sender is not None else str(message.chat.id)
    name = ""
    if message.from_user is not None:
        name = message.from_user.full_name
    elif message.sender_chat is not None:
        name = message.sender_chat.title or ""
    text = message.text or message.caption or ""
    reply = message.reply_to_message
    reply_text = ""
    reply_to_bot = False
    if reply is not None:
        reply_text = (reply.text or reply.caption or "")[:REPLY_QUOTE_CHARS]
        reply_to_bot = reply.from_user is not None and reply.from_user.id == bot.id
    return Inbound(
        channel=channel,
        chat_id=str(address),
        user_id=user_id,
        text=f"{EDITED}{text}" if edited else text,
        user_name=name,
        message_id=str(message.message_id),
        reply_to=str(reply.message_id) if reply is not None else "",
        reply_to_text=reply_text,
        reply_to_bot=reply_to_bot,
        chat_type=address.chat_type,
        mentioned=address.chat_type == "direct" or reply_to_bot or mentions(message, bot),
        media=media_of(message, channel),
    )


def mentions(message: Message, bot: User) -> bool:
    """Whether the message names the bot: ``@username``, a text mention, or ``/cmd@username``."""
    username = (bot.username or "").lower()
    entities = message.parse_entities() if message.text else message.parse_caption_entities()
    for entity, text in entities.items():
        if entity.type == MessageEntity.MENTION and text[1:].lower() == username:
            return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot.id:
            return True
        if entity.type == MessageEntity.BOT_COMMAND and text.lower().endswith(f"@{username}"):
            return True
    return False


def media_of(message: Message, channel: str) -> tuple[MediaRef, ...]:
    """The files of a message, by reference: ``telegram://<channel>/<file id>``."""
    refs: list[MediaRef] = []
    if message.photo:
        largest = message.photo[-1]
        refs.append(_ref(channel, "photo", largest.file_id, "image/jpeg", "photo.jpg", largest))
    if message.document is not None:
        doc = message.document
        refs.append(
            _ref(
                channel,
                "document",
                doc.file_id,
                doc.mime_type or "application/octet-stream",
                doc.file_name or "document",
                doc,
            )
        )
    if message.voice is not None:
        voice = message.voice
        refs.append(
            _ref(
                channel, "voice", voice.file_id, voice.mime_type or "audio/ogg", "voice.ogg", voice
            )
        )
    if message.sticker is not None:
        sticker = message.sticker
        kind = "video/webm" if sticker.is_video else "application/x-tgsticker"
        media_type = "image/webp" if not (sticker.is_video or sticker.is_animated) else kind
        name = f"sticker {sticker.emoji}" if sticker.emoji else "sticker"
        refs.append(_ref(channel, "sticker", sticker.file_id, media_type, name, sticker))
    return tuple(refs)


def _ref(
    channel: str, kind: str, file_id: str, media_type: str, name: str, file: object
) -> MediaRef:
    size = getattr(file, "file_size", None) or 0
    return MediaRef(
        kind=kind,
        ref=f"telegram://{channel}/{file_id}",
        media_type=media_type,
        name=name,
        size=int(size),
    )

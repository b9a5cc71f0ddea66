"""What users do on the fake Telegram, turned into the updates a bot receives.

``Injector`` is the half of ``FakeTelegram`` a test uses to act as people:
make users, groups and forum topics, and send text, photos, documents, voice
notes and stickers, edit them, press inline buttons. Each message is stored in
its chat with the next message id of that chat and becomes an update with the
next update id, shaped as Telegram shapes it: entities Telegram detects
(mentions, bot commands, links), ``reply_to_message``, and in forum topics
``message_thread_id`` and ``is_topic_message``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from channels.testing.errors import FakeUsageError
from channels.testing.telegram_html import Entity, find_entities, finish_text
from channels.testing.telegram_methods import media_object
from channels.testing.telegram_world import (
    JSON,
    Injected,
    SentMessage,
    TgChat,
    TgUser,
    World,
)

MessageRef = Injected | SentMessage
ChatOrUser = TgChat | TgUser


class Injector:
    """The activity of users in chats; see ``FakeTelegram``."""

    def __init__(self, world: World, *, privacy_mode: bool) -> None:
        self.world = world
        self.privacy_mode = privacy_mode

    # -- people and places

    def user(
        self,
        first_name: str = "Ann",
        *,
        last_name: str | None = None,
        username: str | None = None,
        language_code: str | None = "en",
        id: int | None = None,
    ) -> TgUser:
        """A new user (ids count up from 1001 unless given)."""
        return self.world.add_user(
            first_name,
            id=id,
            last_name=last_name,
            username=username,
            language_code=language_code,
        )

    def group(
        self,
        title: str = "Test group",
        *,
        supergroup: bool = False,
        forum: bool = False,
        username: str | None = None,
        id: int | None = None,
    ) -> TgChat:
        """A new group; ``supergroup=True`` for a supergroup, with ``forum=True`` for topics."""
        return self.world.add_group(
            title, supergroup=supergroup or forum, forum=forum, username=username, chat_id=id
        )

    def open_topic(self, chat: TgChat, name: str, *, by: TgUser | None = None) -> int:
        """Create a topic in a forum, by a user (or by the bot); its ``message_thread_id``.

        As in Telegram, the topic's id is the id of its ``forum_topic_created``
        service message, which the bot receives as an update when a user
        opened the topic.
        """
        chat = self.world.known_chat(chat)
        if not chat.is_forum:
            raise FakeUsageError(f"chat {chat.id} is not a forum; make it with group(forum=True)")
        message = self.world.open_topic(chat, name, by or self.world.bot)
        if by is not None:
            self.world.users.setdefault(by.id, by)
            self.world.enqueue("message", message)
        return int(message["message_id"])

    def add_file(self, data: bytes, *, kind: str = "document", file_name: str | None = None) -> str:
        """Register bytes as a Telegram file; its ``file_id`` (getFile and downloads serve it)."""
        return self.world.add_file(data, kind, file_name).file_id

    # -- messages

    def send_dm(
        self,
        user: TgUser,
        text: str,
        *,
        reply_to: MessageRef | int | None = None,
        entities: Sequence[Entity] | None = None,
    ) -> Injected:
        """``user`` writes ``text`` to the bot in their private chat."""
        return self._post(user, None, {}, text=text, reply_to=reply_to, entities=entities)

    def send_group(
        self,
        chat: TgChat,
        user: TgUser,
        text: str,
        *,
        mention: bool = False,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
        entities: Sequence[Entity] | None = None,
    ) -> Injected:
        """``user`` writes ``text`` in a group; ``mention`` puts ``@<bot> `` in front."""
        if chat.type == "private":
            raise FakeUsageError("send_group takes a group; use send_dm for a private chat")
        return self._post(
            user,
            chat,
            {},
            text=text,
            mention=mention,
            reply_to=reply_to,
            topic=topic,
            entities=entities,
        )

    def send_photo(
        self,
        user: TgUser,
        data: bytes,
        *,
        chat: TgChat | None = None,
        caption: str | None = None,
        mention: bool = False,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
    ) -> Injected:
        """``user`` sends a photo (its bytes) to the bot, or in ``chat``."""
        stored = self.world.add_file(data, "photo")
        body = {"photo": media_object(self.world, "photo", stored, None, None, 1)}
        return self._media(user, chat, body, caption, mention, reply_to, topic)

    def send_document(
        self,
        user: TgUser,
        data: bytes,
        *,
        file_name: str = "file.bin",
        mime_type: str = "application/octet-stream",
        chat: TgChat | None = None,
        caption: str | None = None,
        mention: bool = False,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
    ) -> Injected:
        """``user`` sends a file as a document."""
        stored = self.world.add_file(data, "document", file_name)
        document = media_object(self.world, "document", stored, file_name, mime_type, 1)
        return self._media(user, chat, {"document": document}, caption, mention, reply_to, topic)

    def send_voice(
        self,
        user: TgUser,
        data: bytes,
        *,
        duration: int = 1,
        chat: TgChat | None = None,
        caption: str | None = None,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
    ) -> Injected:
        """``user`` sends a voice note (OGG/Opus bytes, ``duration`` seconds)."""
        stored = self.world.add_file(data, "voice")
        voice = media_object(self.world, "voice", stored, None, "audio/ogg", duration)
        return self._media(user, chat, {"voice": voice}, caption, False, reply_to, topic)

    def send_sticker(
        self,
        user: TgUser,
        *,
        emoji: str = "👍",
        data: bytes = b"RIFF\x00\x00\x00\x00WEBP",
        chat: TgChat | None = None,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
    ) -> Injected:
        """``user`` sends a sticker."""
        stored = self.world.add_file(data, "sticker")
        sticker = media_object(self.world, "sticker", stored, None, None, 1) | {"emoji": emoji}
        return self._media(user, chat, {"sticker": sticker}, None, False, reply_to, topic)

    def edit_message(self, message: Injected, text: str) -> Injected:
        """The user edits a message they sent; the bot gets an ``edited_message`` update."""
        stored = self.world.message(message.chat_id, message.message_id)
        if stored is None or stored["from"]["id"] == self.world.bot.id:
            raise FakeUsageError(f"message {message.message_id} is not a user's message here")
        key = "text" if "text" in stored else "caption"
        text, entities = finish_text(text, find_entities(text))
        stored[key] = text
        entities_key = "entities" if key == "text" else "caption_entities"
        if entities:
            stored[entities_key] = entities
        else:
            stored.pop(entities_key, None)
        stored["edit_date"] = self.world.now()
        update_id = self.world.enqueue("edited_message", stored)
        return Injected(
            update_id=update_id,
            chat_id=message.chat_id,
            message_id=message.message_id,
            message_thread_id=stored.get("message_thread_id"),
        )

    def press_button(self, message: MessageRef, user: TgUser, data: str) -> Injected:
        """``user`` presses an inline button with callback ``data`` under ``message``."""
        stored = self.world.message(message.chat_id, message.message_id)
        if stored is None:
            raise FakeUsageError(f"message {message.message_id} is not in chat {message.chat_id}")
        query_id = self.world.callback_id()
        self.world.open_callbacks.add(query_id)
        query: JSON = {
            "id": query_id,
            "from": user.api(),
            "message": copy.deepcopy(stored),
            "chat_instance": str(abs(message.chat_id)),
            "data": data,
        }
        update_id = self.world.enqueue("callback_query", query)
        return Injected(update_id=update_id, chat_id=message.chat_id, message_id=message.message_id)

    def inject(self, kind: str, payload: JSON) -> int:
        """Queue a raw update of ``kind`` (``"message"``, ``"my_chat_member"``, …); its id."""
        return self.world.enqueue(kind, payload)

    # -- shared

    def _media(
        self,
        user: TgUser,
        chat: TgChat | None,
        body: JSON,
        caption: str | None,
        mention: bool,
        reply_to: MessageRef | int | None,
        topic: int | None,
    ) -> Injected:
        return self._post(
            user,
            chat,
            body,
            text=caption,
            text_key="caption",
            mention=mention,
            reply_to=reply_to,
            topic=topic,
        )

    def _post(
        self,
        user: TgUser,
        chat: TgChat | None,
        body: JSON,
        *,
        text: str | None,
        text_key: str = "text",
        mention: bool = False,
        reply_to: MessageRef | int | None = None,
        topic: int | None = None,
        entities: Sequence[Entity] | None = None,
    ) -> Injected:
        world = self.world
        world.users.setdefault(user.id, user)
        where = world.private_chat(user) if chat is None else world.known_chat(chat)
        if mention:
            text = f"@{world.bot.username} {text or ''}".rstrip()
        if text is not None:
            given = list(entities or [])
            text, found = finish_text(text, given + find_entities(text, given))
            body[text_key] = text
            if found:
                body["entities" if text_key == "text" else "caption_entities"] = found
        if topic is not None and topic not in world.topics.get(where.id, {}):
            raise FakeUsageError(f"chat {where.id} has no topic {topic}; open it with open_topic")
        target = None
        if reply_to is not None:
            reply_id = reply_to if isinstance(reply_to, int) else reply_to.message_id
            target = world.message(where.id, reply_id)
            if target is None:
                raise FakeUsageError(f"message {reply_id} is not in chat {where.id}")
        message = world.store_message(where, user, body, thread_id=topic, reply_to=target)
        update_id = world.enqueue("message", message) if self._reaches_bot(message) else None
        return Injected(
            update_id=update_id,
            chat_id=where.id,
            message_id=message["message_id"],
            message_thread_id=message.get("message_thread_id"),
        )

    def _reaches_bot(self, message: JSON) -> bool:
        """Whether the bot gets ``message``: always, except in groups under privacy mode.

        A bot in privacy mode sees in groups only commands (for it or for no
        bot in particular), mentions of it, and replies to its own messages.
        """
        if not self.privacy_mode or message["chat"]["type"] == "private":
            return True
        bot = self.world.bot
        reply = message.get("reply_to_message")
        if reply is not None and reply["from"]["id"] == bot.id:
            return True
        text: str = message.get("text") or message.get("caption") or ""
        units = text.encode("utf-16-le")
        entities: list[Entity] = message.get("entities") or message.get("caption_entities") or []
        for entity in entities:
            start, end = 2 * entity["offset"], 2 * (entity["offset"] + entity["length"])
            value = units[start:end].decode("utf-16-le").lower()
            name = (bot.username or "").lower()
            if entity["type"] == "mention" and value == f"@{name}":
                return True
            if entity["type"] == "bot_command" and ("@" not in value or value.endswith(f"@{name}")):
                return True
        return False

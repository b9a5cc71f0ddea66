"""What the fake Telegram knows: users, chats, messages, files, updates, and what the bot did.

``World`` is the state behind the fake server. Users and chats are frozen
values a test creates through the fake; messages are stored as the Bot API's
JSON objects, per chat, with message ids counted per chat as Telegram counts
them; files keep the bytes a test registered or the bot uploaded. Updates wait
in order until the bot confirms them (``getUpdates`` with a higher offset) or
a webhook takes them. Every change wakes whoever waits on ``changed()``.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from channels.testing.errors import FakeUsageError, bad_request
from channels.testing.telegram_html import Entity

ChatType = Literal["private", "group", "supergroup", "channel"]
JSON = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class TgUser:
    """A Telegram user (or the bot itself) as the Bot API describes one."""

    id: int
    first_name: str
    last_name: str | None = None
    username: str | None = None
    is_bot: bool = False
    language_code: str | None = None

    def api(self) -> JSON:
        data: JSON = {"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name}
        for key in ("last_name", "username", "language_code"):
            if (value := getattr(self, key)) is not None:
                data[key] = value
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class TgChat:
    """A chat: a private chat with a user, a group, a supergroup (a forum when ``is_forum``)."""

    id: int
    type: ChatType
    title: str | None = None
    username: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    is_forum: bool = False

    def api(self) -> JSON:
        data: JSON = {"id": self.id, "type": self.type}
        for key in ("title", "username", "first_name", "last_name"):
            if (value := getattr(self, key)) is not None:
                data[key] = value
        if self.is_forum:
            data["is_forum"] = True
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Injected:
    """What a test's injected activity became: its update and its message.

    ``update_id`` is None for a group message a bot in privacy mode does not get.
    """

    update_id: int | None
    chat_id: int
    message_id: int
    message_thread_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """One edit the bot applied to one of its messages."""

    text: str
    markup: str
    parse_mode: str | None
    entities: tuple[Entity, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SentMessage:
    """A message the bot sent, as it stands now.

    ``text`` is what the chat shows (the text, or a media message's caption)
    after Telegram parsed the markup and after every edit; ``markup`` is the
    text parameter exactly as the bot last sent it, with ``parse_mode``.
    ``reply_to_message_id`` is an explicit reply, never a forum topic's root.
    """

    method: str
    chat_id: int
    message_id: int
    text: str | None
    markup: str | None
    parse_mode: str | None
    entities: tuple[Entity, ...]
    reply_to_message_id: int | None
    message_thread_id: int | None
    reply_markup: JSON | None
    file: bytes | None
    file_name: str | None
    original_text: str | None
    edits: tuple[Edit, ...]
    deleted: bool

    @property
    def versions(self) -> tuple[str | None, ...]:
        """Every text the message showed, the first as sent, then after each edit."""
        return (self.original_text, *(edit.text for edit in self.edits))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiCall:
    """One call the bot made, with its parameters as sent and how the fake answered."""

    method: str
    params: JSON
    status: int
    description: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatAction:
    """A ``sendChatAction`` the bot made (``typing``, ``upload_photo``, …)."""

    chat_id: int
    action: str
    message_thread_id: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reaction:
    """A ``setMessageReaction`` the bot made; ``emoji`` is empty when it took its reaction back."""

    chat_id: int
    message_id: int
    emoji: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Webhook:
    """The webhook the bot set, and how the last delivery to it went."""

    url: str
    secret_token: str | None
    allowed_updates: tuple[str, ...] | None
    max_connections: int
    last_error_date: int | None = None
    last_error_message: str | None = None


@dataclass(slots=True)
class StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes


# Telegram leaves these out of getUpdates unless asked for them by name.
NOT_BY_DEFAULT = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
_FILE_DIRS = {
    "photo": ("photos", "jpg"),
    "document": ("documents", ""),
    "voice": ("voice", "oga"),
    "audio": ("music", "mp3"),
    "video": ("videos", "mp4"),
    "animation": ("animations", "mp4"),
    "sticker": ("stickers", "webp"),
}


def commands_key(scope: JSON | None, language_code: str) -> tuple[str, str]:
    """Where a command list is kept: its scope (default unless given) and language."""
    scope = scope or {"type": "default"}
    return ",".join(f"{k}={scope[k]}" for k in sorted(scope)), language_code


@dataclass(slots=True)
class _Sent:
    method: str
    chat_id: int
    message_id: int
    text: str | None
    markup: str | None
    parse_mode: str | None
    entities: tuple[Entity, ...]
    reply_to_message_id: int | None
    message_thread_id: int | None
    reply_markup: JSON | None
    file: bytes | None
    file_name: str | None
    edits: list[Edit] = field(default_factory=list)
    deleted: bool = False

    def snapshot(self) -> SentMessage:
        latest = self.edits[-1] if self.edits else None
        return SentMessage(
            method=self.method,
            chat_id=self.chat_id,
            message_id=self.message_id,
            text=latest.text if latest else self.text,
            markup=latest.markup if latest else self.markup,
            parse_mode=latest.parse_mode if latest else self.parse_mode,
            entities=latest.entities if latest else self.entities,
            reply_to_message_id=self.reply_to_message_id,
            message_thread_id=self.message_thread_id,
            reply_markup=self.reply_markup,
            file=self.file,
            file_name=self.file_name,
            original_text=self.text,
            edits=tuple(self.edits),
            deleted=self.deleted,
        )


class World:
    """The fake's state; one per ``FakeTelegram``."""

    def __init__(self, bot: TgUser, clock: Callable[[], float]) -> None:
        self.bot = bot
        self.clock = clock
        self.users: dict[int, TgUser] = {bot.id: bot}
        self.chats: dict[int, TgChat] = {}
        self.messages: dict[int, dict[int, JSON]] = {}
        self.topics: dict[int, dict[int, str]] = {}
        self.files: dict[str, StoredFile] = {}
        self.paths: dict[str, StoredFile] = {}
        self.pending: list[JSON] = []
        self.sent: list[_Sent] = []
        self.sent_by_chat: dict[int, list[_Sent]] = {}
        self.sent_by_id: dict[tuple[int, int], _Sent] = {}
        self.calls: list[ApiCall] = []
        self.actions: list[ChatAction] = []
        self.reactions: list[Reaction] = []
        self.commands: dict[tuple[str, str], list[JSON]] = {}
        self.callback_answers: list[JSON] = []
        self.open_callbacks: set[str] = set()
        self.webhook: Webhook | None = None
        self.allowed_updates: tuple[str, ...] | None = None
        self._next_update = itertools.count(1)
        self._next_user = itertools.count(1001)
        self._next_group = itertools.count(1)
        self._next_file = itertools.count(1)
        self._next_callback = itertools.count(1)
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._change = asyncio.Event()

    # -- waking waiters

    def changed(self) -> asyncio.Event:
        """An event set at the next change; take it before checking, then wait on it."""
        return self._change

    def notify(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    def now(self) -> int:
        return int(self.clock())

    # -- users and chats

    def add_user(self, first_name: str, **fields: Any) -> TgUser:
        user_id = fields.pop("id", None) or next(self._next_user)
        user = TgUser(id=user_id, first_name=first_name, **fields)
        self.users[user.id] = user
        return user

    def private_chat(self, user: TgUser) -> TgChat:
        chat = TgChat(
            id=user.id,
            type="private",
            first_name=user.first_name,
            last_name=user.last_name,
            username=user.username,
        )
        return self.add_chat(chat)

    def add_group(
        self,
        title: str,
        *,
        supergroup: bool,
        forum: bool,
        username: str | None,
        chat_id: int | None,
    ) -> TgChat:
        if forum and not supergroup:
            raise FakeUsageError("a forum is a supergroup: pass supergroup=True with forum=True")
        n = next(self._next_group)
        default_id = -1_001_000_000_000 - n if supergroup else -4_000_000_000 - n
        chat = TgChat(
            id=chat_id if chat_id is not None else default_id,
            type="supergroup" if supergroup else "group",
            title=title,
            username=username,
            is_forum=forum,
        )
        return self.add_chat(chat)

    def add_chat(self, chat: TgChat) -> TgChat:
        self.chats[chat.id] = chat
        self.messages.setdefault(chat.id, {})
        self._message_ids.setdefault(chat.id, itertools.count(1))
        return chat

    def chat(self, chat_id: int | str) -> TgChat:
        """The chat a Bot API call names by id or ``@username``; 400 ``chat not found`` else."""
        if isinstance(chat_id, str):
            for chat in self.chats.values():
                if chat.username and f"@{chat.username}".lower() == chat_id.lower():
                    return chat
            if not chat_id.lstrip("-").isdigit():
                raise bad_request("chat not found")
            chat_id = int(chat_id)
        found = self.chats.get(chat_id)
        if found is None:
            raise bad_request("chat not found")
        return found

    def known_chat(self, chat: TgChat | int) -> TgChat:
        """The chat a test names; a chat the fake never made is a usage error."""
        chat_id = chat if isinstance(chat, int) else chat.id
        if chat_id not in self.chats:
            raise FakeUsageError(f"chat {chat_id} is unknown to the fake; make it with the fake")
        return self.chats[chat_id]

    # -- messages

    def message(self, chat_id: int, message_id: int) -> JSON | None:
        return self.messages.get(chat_id, {}).get(message_id)

    def store_message(
        self,
        chat: TgChat,
        sender: TgUser,
        body: JSON,
        *,
        thread_id: int | None = None,
        reply_to: JSON | None = None,
    ) -> JSON:
        """Store a new message in ``chat`` and return its Bot API object.

        In a forum topic a message that replies to nothing replies, as in
        Telegram, to the topic's creation message; a reply to a message in a
        topic lands in that topic.
        """
        if reply_to is not None and thread_id is None and reply_to.get("is_topic_message"):
            thread_id = reply_to.get("message_thread_id")
        message_id = next(self._message_ids[chat.id])
        message: JSON = {
            "message_id": message_id,
            "from": sender.api(),
            "chat": chat.api(),
            "date": self.now(),
        }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
            reply_to = reply_to or self.message(chat.id, thread_id)
        if reply_to is not None:
            message["reply_to_message"] = {
                k: v for k, v in reply_to.items() if k != "reply_to_message"
            }
        message.update(body)
        self.messages[chat.id][message_id] = message
        return message

    def thread_of(self, chat: TgChat, thread_id: int | None) -> int | None:
        """The topic a message goes to; 400 when a forum has no such topic."""
        if thread_id is None or not chat.is_forum:
            return None
        if thread_id not in self.topics.get(chat.id, {}):
            raise bad_request("message thread not found")
        return thread_id

    def open_topic(self, chat: TgChat, name: str, by: TgUser) -> JSON:
        body = {"forum_topic_created": {"name": name, "icon_color": 0x6FB9F0}}
        message = self.store_message(chat, by, body)
        message["message_thread_id"] = message["message_id"]
        message["is_topic_message"] = True
        self.topics.setdefault(chat.id, {})[message["message_id"]] = name
        return message

    def record_sent(self, method: str, message: JSON, **fields: Any) -> None:
        sent = _Sent(
            method=method,
            chat_id=message["chat"]["id"],
            message_id=message["message_id"],
            message_thread_id=message.get("message_thread_id"),
            **fields,
        )
        self.sent.append(sent)
        self.sent_by_chat.setdefault(sent.chat_id, []).append(sent)
        self.sent_by_id[sent.chat_id, sent.message_id] = sent
        self.notify()

    def sent_messages(self, chat_id: int | None = None) -> list[SentMessage]:
        sent = self.sent if chat_id is None else self.sent_by_chat.get(chat_id, [])
        return [s.snapshot() for s in sent]

    # -- files

    def add_file(self, data: bytes, kind: str, file_name: str | None = None) -> StoredFile:
        n = next(self._next_file)
        folder, extension = _FILE_DIRS.get(kind, ("documents", ""))
        if kind == "document" and file_name and "." in file_name:
            extension = file_name.rsplit(".", 1)[1]
        path = f"{folder}/file_{n}" + (f".{extension}" if extension else "")
        stored = StoredFile(
            file_id=f"FAKE{kind[:3].upper()}{n:06d}",
            file_unique_id=f"U{n:06d}",
            file_path=path,
            data=data,
        )
        self.files[stored.file_id] = stored
        self.paths[path] = stored
        return stored

    def file_object(self, stored: StoredFile, **extra: Any) -> JSON:
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": len(stored.data),
            **extra,
        }

    # -- updates

    def enqueue(self, kind: str, payload: JSON) -> int:
        update_id = next(self._next_update)
        # A snapshot: later edits of the stored message must not change a pending update.
        self.pending.append({"update_id": update_id, kind: copy.deepcopy(payload)})
        self.notify()
        return update_id

    def confirm(self, offset: int) -> None:
        """Forget what the bot confirmed: updates below ``offset``, or all but the last ``-offset``."""
        if offset < 0:
            del self.pending[: max(0, len(self.pending) + offset)]
        else:
            self.pending = [u for u in self.pending if u["update_id"] >= offset]

    def drop_pending(self) -> None:
        self.pending.clear()
        self.notify()

    def deliverable(self, allowed: tuple[str, ...] | None, limit: int) -> list[JSON]:
        """Pending updates of the allowed types, oldest first; others are dropped as Telegram does."""
        allowed_set = frozenset(allowed) if allowed else None

        def wanted(update: JSON) -> bool:
            kind = next(k for k in update if k != "update_id")
            return kind in allowed_set if allowed_set else kind not in NOT_BY_DEFAULT

        self.pending = [u for u in self.pending if wanted(u)]
        return self.pending[:limit]

    def callback_id(self) -> str:
        return f"{next(self._next_callback)}"

    def set_webhook(self, webhook: Webhook | None) -> None:
        self.webhook = webhook
        self.notify()

    def webhook_failed(self, message: str) -> None:
        if self.webhook is not None:
            self.webhook = replace(
                self.webhook, last_error_date=self.now(), last_error_message=message
            )
            self.notify()

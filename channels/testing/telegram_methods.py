"""The Bot API methods the fake answers, with Telegram's semantics and error texts.

Each method reads its ``Params``, changes the ``World`` and returns the
``result`` of the answer, or raises ``ApiError`` with the status and
description Telegram gives (``Bad Request: message is too long``, ``Conflict:
terminated by other getUpdates request; …``). Method names are matched
case-insensitively, as Telegram matches them.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from channels.testing.errors import ApiError, bad_request
from channels.testing.telegram_html import (
    Entity,
    HtmlParseError,
    find_entities,
    finish_text,
    parse_html,
    utf16_len,
)
from channels.testing.telegram_params import Params, UploadedFile
from channels.testing.telegram_world import (
    JSON,
    ChatAction,
    Edit,
    Reaction,
    StoredFile,
    TgChat,
    Webhook,
    World,
    commands_key,
)

Method = Callable[[Params], Awaitable[Any]]

TERMINATED = (
    "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running"
)
WEBHOOK_ACTIVE = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)
MEDIA_KINDS = ("photo", "document", "voice", "audio", "video", "animation", "sticker")
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class BotApi:
    """The methods of one bot, over one ``World``."""

    def __init__(self, world: World, *, privacy_mode: bool = False) -> None:
        self.world = world
        self.privacy_mode = privacy_mode
        self.conflict_polling = False
        self.closing = False
        self.polls_waiting = 0
        self.poll_waiting = asyncio.Event()
        self._poll = 0
        methods: dict[str, Method] = {
            "getMe": self.get_me,
            "getUpdates": self.get_updates,
            "setWebhook": self.set_webhook,
            "deleteWebhook": self.delete_webhook,
            "getWebhookInfo": self.get_webhook_info,
            "sendMessage": self.send_message,
            "editMessageText": self.edit_message_text,
            "editMessageCaption": self.edit_message_caption,
            "deleteMessage": self.delete_message,
            "sendChatAction": self.send_chat_action,
            "setMessageReaction": self.set_message_reaction,
            "setMyCommands": self.set_my_commands,
            "getMyCommands": self.get_my_commands,
            "deleteMyCommands": self.delete_my_commands,
            "getFile": self.get_file,
            "answerCallbackQuery": self.answer_callback_query,
        }
        for kind in MEDIA_KINDS:
            methods[f"send{kind.capitalize()}"] = self._media_sender(kind)
        self._methods = {name.lower(): (name, method) for name, method in methods.items()}

    def resolve(self, name: str) -> tuple[str, Method] | None:
        """The canonical name and implementation of a method, in any letter case."""
        return self._methods.get(name.lower())

    @property
    def names(self) -> list[str]:
        return sorted(name for name, _ in self._methods.values())

    # -- the bot and its updates

    async def get_me(self, p: Params) -> Any:
        return {
            **self.world.bot.api(),
            "can_join_groups": True,
            "can_read_all_group_messages": not self.privacy_mode,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def get_updates(self, p: Params) -> Any:
        """Long polling: answer at once when updates wait, else when one comes or time is up.

        A newer ``getUpdates`` ends a waiting one with 409, as Telegram ends
        the older of two competing pollers.
        """
        world = self.world
        if world.webhook is not None:
            raise ApiError(409, WEBHOOK_ACTIVE)
        if self.conflict_polling:
            raise ApiError(409, TERMINATED)
        offset = p.integer("offset")
        if offset:
            world.confirm(offset)
        limit = min(max(p.integer("limit") or 100, 1), 100)
        allowed = p.nested("allowed_updates")
        if allowed is not None:
            world.allowed_updates = tuple(allowed) or None
        self._poll += 1
        mine = self._poll
        world.notify()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(p.number("timeout", 0.0), 0.0)
        while True:
            changed = world.changed()
            if mine != self._poll or self.conflict_polling:
                raise ApiError(409, TERMINATED)
            updates = world.deliverable(world.allowed_updates, limit)
            remaining = deadline - loop.time()
            if updates or self.closing or world.webhook is not None or remaining <= 0:
                return updates
            self.polls_waiting += 1
            self.poll_waiting.set()
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                pass
            finally:
                self.polls_waiting -= 1
                if not self.polls_waiting:
                    self.poll_waiting.clear()

    async def set_webhook(self, p: Params) -> Any:
        url = p.string("url") or ""
        if not url:
            return await self.delete_webhook(p)
        if not re.match(r"https?://[^/\s]+", url):
            raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        secret = p.string("secret_token")
        if secret is not None and not _SECRET_TOKEN.fullmatch(secret):
            raise bad_request("secret token contains unallowed characters")
        allowed = p.nested("allowed_updates")
        if allowed is not None:
            self.world.allowed_updates = tuple(allowed) or None
        if p.flag("drop_pending_updates"):
            self.world.drop_pending()
        self.world.set_webhook(
            Webhook(
                url=url,
                secret_token=secret,
                allowed_updates=self.world.allowed_updates,
                max_connections=p.integer("max_connections") or 40,
            )
        )
        return True

    async def delete_webhook(self, p: Params) -> Any:
        if p.flag("drop_pending_updates"):
            self.world.drop_pending()
        self.world.set_webhook(None)
        return True

    async def get_webhook_info(self, p: Params) -> Any:
        hook = self.world.webhook
        info: JSON = {
            "url": hook.url if hook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self.world.pending),
        }
        if hook is not None:
            info["max_connections"] = hook.max_connections
            if hook.allowed_updates:
                info["allowed_updates"] = list(hook.allowed_updates)
            if hook.last_error_date is not None:
                info["last_error_date"] = hook.last_error_date
                info["last_error_message"] = hook.last_error_message
        return info

    # -- messages

    def format(
        self, markup: str, p: Params, *, entities_param: str, limit: int, too_long: str
    ) -> tuple[str, list[Entity]]:
        """Telegram's text and entities for ``markup``, per ``parse_mode`` or given entities."""
        mode = (p.string("parse_mode") or "").lower()
        users = {uid: user.api() for uid, user in self.world.users.items()}
        if mode == "html":
            try:
                text, entities = parse_html(markup, users=users)
            except HtmlParseError as exc:
                raise bad_request(f"can't parse entities: {exc}") from None
        elif mode in ("markdown", "markdownv2"):
            text, entities = markup, []  # not parsed by the fake; see the module docs
        elif mode:
            raise bad_request("unsupported parse_mode")
        else:
            given = p.nested(entities_param)
            text, entities = markup, list(given or [])
        text, entities = finish_text(text, entities + find_entities(text, entities))
        if utf16_len(text) > limit:
            raise bad_request(too_long)
        return text, entities

    def _chat(self, p: Params) -> TgChat:
        chat_id = p.string("chat_id")
        if chat_id is None:
            raise bad_request("chat_id is empty")
        return self.world.chat(chat_id)

    def reply_target(self, chat: TgChat, p: Params) -> JSON | None:
        wanted = p.nested("reply_parameters")
        if wanted is None and p.has("reply_to_message_id"):
            wanted = {
                "message_id": p.integer("reply_to_message_id"),
                "allow_sending_without_reply": p.flag("allow_sending_without_reply"),
            }
        if not wanted:
            return None
        target = self.world.chat(wanted["chat_id"]) if wanted.get("chat_id") else chat
        message = self.world.message(target.id, int(wanted.get("message_id") or 0))
        if message is None:
            if wanted.get("allow_sending_without_reply"):
                return None
            raise bad_request("message to be replied not found")
        return message

    async def send_message(self, p: Params) -> Any:
        chat = self._chat(p)
        markup = p.string("text")
        if markup is None:
            raise bad_request("message text is empty")
        text, entities = self.format(
            markup, p, entities_param="entities", limit=TEXT_LIMIT, too_long="message is too long"
        )
        if not text:
            raise bad_request("message text is empty")
        body: JSON = {"text": text}
        return self._send(p, chat, "sendMessage", body, entities, markup)

    def _send(
        self,
        p: Params,
        chat: TgChat,
        method: str,
        body: JSON,
        entities: list[Entity],
        markup: str | None,
        upload: tuple[bytes | None, str | None] = (None, None),
    ) -> JSON:
        thread_id = self.world.thread_of(chat, p.integer("message_thread_id"))
        reply = self.reply_target(chat, p)
        if entities:
            body["caption_entities" if "caption" in body else "entities"] = entities
        keyboard = p.nested("reply_markup")
        if isinstance(keyboard, dict) and "inline_keyboard" in keyboard:
            body["reply_markup"] = keyboard
        message = self.world.store_message(
            chat, self.world.bot, body, thread_id=thread_id, reply_to=reply
        )
        self.world.record_sent(
            method,
            message,
            text=body.get("text", body.get("caption")),
            markup=markup,
            parse_mode=p.string("parse_mode"),
            entities=tuple(entities),
            reply_to_message_id=reply["message_id"] if reply else None,
            reply_markup=keyboard if isinstance(keyboard, dict) else None,
            file=upload[0],
            file_name=upload[1],
        )
        return message

    def _media_sender(self, kind: str) -> Method:
        async def send(p: Params) -> Any:
            return self.send_media(kind, p)

        return send

    def send_media(self, kind: str, p: Params) -> JSON:
        chat = self._chat(p)
        source = p.file(kind)
        if source is None:
            raise bad_request(f"there is no {kind} in the request")
        if isinstance(source, UploadedFile):
            name = source.filename
            stored = self.world.add_file(source.data, kind, name)
            upload: tuple[bytes | None, str | None] = (source.data, name)
            mime = source.content_type
        elif source in self.world.files:
            stored, upload, name, mime = self.world.files[source], (None, None), None, None
        elif re.match(r"https?://", source):
            name = source.rsplit("/", 1)[-1] or None
            stored, upload, mime = self.world.add_file(b"", kind, name), (None, name), None
        else:
            raise bad_request("wrong file identifier/HTTP URL specified")
        duration = p.integer("duration") or 1
        body: JSON = {kind: media_object(self.world, kind, stored, name, mime, duration)}
        caption_markup = p.string("caption")
        entities: list[Entity] = []
        if caption_markup and kind != "sticker":
            caption, entities = self.format(
                caption_markup,
                p,
                entities_param="caption_entities",
                limit=CAPTION_LIMIT,
                too_long="message caption is too long",
            )
            if caption:
                body["caption"] = caption
        return self._send(
            p, chat, f"send{kind.capitalize()}", body, entities, caption_markup, upload
        )

    async def edit_message_text(self, p: Params) -> Any:
        return self._edit(p, "text")

    async def edit_message_caption(self, p: Params) -> Any:
        return self._edit(p, "caption")

    def _edit(self, p: Params, field: str) -> JSON:
        if p.has("inline_message_id"):
            raise bad_request("inline messages are not supported by the fake Telegram")
        chat = self._chat(p)
        message = self.world.message(chat.id, p.integer("message_id", required=True) or 0)
        if message is None:
            raise bad_request("message to edit not found")
        if message["from"]["id"] != self.world.bot.id:
            raise bad_request("message can't be edited")
        if field == "text" and "text" not in message:
            raise bad_request("there is no text in the message to edit")
        if field == "caption" and "text" in message:
            raise bad_request("there is no caption in the message to edit")
        markup = p.string(field) or ""
        limit = TEXT_LIMIT if field == "text" else CAPTION_LIMIT
        too_long = "message is too long" if field == "text" else "message caption is too long"
        entities_key = "entities" if field == "text" else "caption_entities"
        text, entities = self.format(
            markup, p, entities_param=entities_key, limit=limit, too_long=too_long
        )
        if field == "text" and not text:
            raise bad_request("message text is empty")
        keyboard = p.nested("reply_markup")
        keyboard = (
            keyboard if isinstance(keyboard, dict) and "inline_keyboard" in keyboard else None
        )
        if (text, entities, keyboard) == (
            message.get(field, ""),
            message.get(entities_key, []),
            message.get("reply_markup"),
        ):
            raise bad_request(NOT_MODIFIED)
        for key, value in ((field, text), (entities_key, entities), ("reply_markup", keyboard)):
            if value:
                message[key] = value
            else:
                message.pop(key, None)
        message["edit_date"] = self.world.now()
        sent = self.world.sent_by_id.get((chat.id, message["message_id"]))
        if sent is not None:
            edit = Edit(
                text=text,
                markup=markup,
                parse_mode=p.string("parse_mode"),
                entities=tuple(entities),
            )
            sent.edits.append(edit)
            sent.reply_markup = keyboard  # an edit without a keyboard removes it, as Telegram does
        self.world.notify()
        return message

    async def delete_message(self, p: Params) -> Any:
        chat = self._chat(p)
        message_id = p.integer("message_id", required=True) or 0
        if self.world.messages.get(chat.id, {}).pop(message_id, None) is None:
            raise bad_request("message to delete not found")
        sent = self.world.sent_by_id.get((chat.id, message_id))
        if sent is not None:
            sent.deleted = True
        self.world.notify()
        return True

    async def send_chat_action(self, p: Params) -> Any:
        chat = self._chat(p)
        action = p.string("action", required=True) or ""
        if action not in CHAT_ACTIONS:
            raise bad_request("wrong parameter action in request")
        thread_id = self.world.thread_of(chat, p.integer("message_thread_id"))
        self.world.actions.append(
            ChatAction(chat_id=chat.id, action=action, message_thread_id=thread_id)
        )
        self.world.notify()
        return True

    async def set_message_reaction(self, p: Params) -> Any:
        chat = self._chat(p)
        message_id = p.integer("message_id", required=True) or 0
        if self.world.message(chat.id, message_id) is None:
            raise bad_request("message to react not found")
        reaction = p.nested("reaction") or []
        if len(reaction) > 1:
            raise bad_request("REACTIONS_TOO_MANY")
        if any(r.get("type") not in ("emoji", "custom_emoji") for r in reaction):
            raise bad_request("REACTION_INVALID")
        emoji = tuple(r.get("emoji") or r.get("custom_emoji_id", "") for r in reaction)
        self.world.reactions.append(Reaction(chat_id=chat.id, message_id=message_id, emoji=emoji))
        self.world.notify()
        return True

    # -- commands, files, callbacks

    def _commands_key(self, p: Params) -> tuple[str, str]:
        return commands_key(p.nested("scope"), p.string("language_code") or "")

    async def set_my_commands(self, p: Params) -> Any:
        commands = p.nested("commands")
        if not isinstance(commands, list):
            raise bad_request('parameter "commands" is required')
        if len(commands) > 100:
            raise bad_request("too many commands specified")
        for command in commands:
            if not _COMMAND_NAME.fullmatch(str(command.get("command", ""))):
                raise bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
        self.world.commands[self._commands_key(p)] = [
            {"command": c["command"], "description": c["description"]} for c in commands
        ]
        self.world.notify()
        return True

    async def get_my_commands(self, p: Params) -> Any:
        return self.world.commands.get(self._commands_key(p), [])

    async def delete_my_commands(self, p: Params) -> Any:
        self.world.commands.pop(self._commands_key(p), None)
        self.world.notify()
        return True

    async def get_file(self, p: Params) -> Any:
        stored = self.world.files.get(p.string("file_id", required=True) or "")
        if stored is None:
            raise bad_request("invalid file_id")
        return self.world.file_object(stored, file_path=stored.file_path)

    async def answer_callback_query(self, p: Params) -> Any:
        query_id = p.string("callback_query_id", required=True)
        if query_id not in self.world.open_callbacks:
            raise bad_request(
                "query is too old and response timeout expired or query ID is invalid"
            )
        self.world.open_callbacks.discard(query_id)
        self.world.callback_answers.append(
            {
                "callback_query_id": query_id,
                **{k: v for k, v in p.values.items() if k != "callback_query_id"},
            }
        )
        self.world.notify()
        return True


def media_object(
    world: World, kind: str, stored: StoredFile, name: str | None, mime: str | None, duration: int
) -> Any:
    """The Bot API object of a media message's ``kind`` for a stored file."""
    if kind == "photo":
        width, height = image_size(stored.data)
        return [world.file_object(stored, width=width, height=height)]
    extra: JSON = {}
    if kind in ("document", "audio"):
        extra = {"file_name": name or "file", "mime_type": mime or "application/octet-stream"}
    if kind in ("voice", "audio"):
        extra |= {"duration": duration, "mime_type": mime or "audio/ogg"}
    if kind in ("video", "animation"):
        extra = {"width": 640, "height": 360, "duration": duration}
    if kind == "sticker":
        extra = {
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
        }
    return world.file_object(stored, **extra)


def image_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG or JPEG image; 320 × 320 for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 <= len(data) and data[i] == 0xFF:
            marker, length = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(width), int(height)
            i += 2 + length
    return 320, 320

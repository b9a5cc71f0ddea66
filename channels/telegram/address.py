"""Where a Telegram conversation is: a private chat, a group, or a forum topic of a group.

An address is the part of a session key after the channel name, so the key of
a chat and the endpoint a reply goes to are the same text:

    123                       a private chat with user 123   (key ``telegram:123``)
    group:-100456             a group or supergroup           (``telegram:group:-100456``)
    group:-100456:topic:7     topic 7 of a forum supergroup   (``telegram:group:-100456:topic:7``)

In a private chat the chat id is the user's id, so ``dispatch`` to
``channel: telegram, user_id: 123`` reaches the same chat the user writes in.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.base import ChatType
from channels.errors import InboundError


@dataclass(frozen=True, slots=True, kw_only=True)
class Address:
    """A Telegram chat, and the forum topic within it when there is one."""

    chat_id: int
    topic: int | None = None
    chat_type: ChatType = "direct"

    def __str__(self) -> str:
        if self.chat_type == "direct":
            return str(self.chat_id)
        text = f"group:{self.chat_id}"
        return f"{text}:topic:{self.topic}" if self.topic is not None else text

    @classmethod
    def parse(cls, text: str) -> Address:
        """The address written as ``text``; :class:`InboundError` names a malformed one."""
        parts = text.split(":")
        try:
            if len(parts) == 1:
                return cls(chat_id=int(parts[0]))
            if len(parts) == 2 and parts[0] == "group":
                return cls(chat_id=int(parts[1]), chat_type="group")
            if len(parts) == 4 and parts[0] == "group" and parts[2] == "topic":
                return cls(chat_id=int(parts[1]), topic=int(parts[3]), chat_type="group")
        except ValueError:
            pass
        raise InboundError(
            f"{text!r} is not a Telegram chat: use <user id>, group:<chat id> or "
            "group:<chat id>:topic:<thread id>"
        )

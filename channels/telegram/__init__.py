"""The Telegram channel: python-telegram-bot's Application inside the gateway.

``address`` is where a conversation is (private chat, group, forum topic) and
how it is written in a session key; ``inbound`` turns a Telegram message into
an :class:`~channels.base.Inbound`; ``adapter`` is the channel itself.
"""

from channels.telegram.adapter import TelegramChannel, TelegramOptions

__all__ = ["TelegramChannel", "TelegramOptions"]

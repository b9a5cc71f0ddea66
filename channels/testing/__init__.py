"""Fake platform servers for testing bots with the real platform libraries.

``FakeTelegram`` is a Bot API server on loopback that python-telegram-bot runs
against unmodified; see ``channels.testing.telegram`` for how to use it.
"""

from channels.testing.errors import ApiError, FakePlatformError, FakeUsageError
from channels.testing.telegram import FakeTelegram, Hold
from channels.testing.telegram_world import (
    ApiCall,
    ChatAction,
    Edit,
    Injected,
    Reaction,
    SentMessage,
    TgChat,
    TgUser,
    Webhook,
)

__all__ = [
    "ApiCall",
    "ApiError",
    "ChatAction",
    "Edit",
    "FakePlatformError",
    "FakeTelegram",
    "FakeUsageError",
    "Hold",
    "Injected",
    "Reaction",
    "SentMessage",
    "TgChat",
    "TgUser",
    "Webhook",
]

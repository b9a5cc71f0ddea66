"""Fake platform servers for testing bots with the real platform libraries.

``FakeTelegram`` is a Bot API server on loopback that python-telegram-bot runs
against unmodified; see ``channels.testing.telegram`` for how to use it.
``FakeDiscord`` is Discord's REST API and gateway on loopback that discord.py
runs against unmodified; see ``channels.testing.discord_fake``.
"""

from channels.testing.discord_fake import FakeDiscord
from channels.testing.discord_world import (
    DcCall,
    DcCallback,
    DcChannel,
    DcEdit,
    DcFile,
    DcGuild,
    DcHandshake,
    DcInjected,
    DcInteraction,
    DcReaction,
    DcSentMessage,
    DcTyping,
    DcUser,
)
from channels.testing.errors import ApiError, DiscordApiError, FakePlatformError, FakeUsageError
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
    "DcCall",
    "DcCallback",
    "DcChannel",
    "DcEdit",
    "DcFile",
    "DcGuild",
    "DcHandshake",
    "DcInjected",
    "DcInteraction",
    "DcReaction",
    "DcSentMessage",
    "DcTyping",
    "DcUser",
    "DiscordApiError",
    "Edit",
    "FakeDiscord",
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

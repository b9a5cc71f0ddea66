"""Errors of the channels package.

ChannelError
├── ChannelStartError a channel that could not start (bad token, platform unreachable)
├── DeliveryError     a message could not be delivered (after retries)
└── InboundError      a platform update that cannot be turned into a message
"""

from __future__ import annotations


class ChannelError(Exception):
    """Root of the channel errors."""


class ChannelStartError(ChannelError):
    """A channel could not start; the message says why and what to check."""

    def __init__(self, channel: str, reason: str) -> None:
        self.channel = channel
        super().__init__(f"the {channel} channel could not start: {reason}")


class DeliveryError(ChannelError):
    """A message could not be delivered to a chat."""

    def __init__(self, channel: str, chat_id: str, reason: str) -> None:
        self.channel = channel
        self.chat_id = chat_id
        super().__init__(f"{channel}: delivery to chat {chat_id} failed: {reason}")


class InboundError(ChannelError, ValueError):
    """A malformed platform update; the message names what was wrong."""

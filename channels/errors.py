"""Errors of the channels package.

ChannelError
├── ChannelStartError a channel that could not start (bad token, platform unreachable)
├── DeliveryError     a message could not be delivered (after retries)
├── InboundError      a platform update that cannot be turned into a message
└── PairingError      a pairing request, approval or revocation that cannot be done
    ├── UnknownChannelError (LookupError)
    ├── UnknownCodeError (LookupError)
    ├── ExpiredCodeError (LookupError)
    └── NotPairedError (LookupError)
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


class PairingError(ChannelError):
    """A pairing operation that cannot be done; the message says what to do instead."""


class UnknownChannelError(PairingError, LookupError):
    """A channel that has no access control (only those with an access section pair)."""

    def __init__(self, channel: str, known: tuple[str, ...]) -> None:
        self.channel = channel
        super().__init__(
            f"unknown channel {channel!r}: pairing is for {', '.join(known) or 'no channel'}"
        )


class UnknownCodeError(PairingError, LookupError):
    """No pending pairing request on the channel has this code."""

    def __init__(self, channel: str, code: str) -> None:
        self.channel = channel
        self.code = code
        super().__init__(f"unknown pairing code {code!r} on {channel}; see `gateway pairing list`")


class ExpiredCodeError(PairingError, LookupError):
    """The code was issued but its hour is over."""

    def __init__(self, channel: str, code: str) -> None:
        self.channel = channel
        self.code = code
        super().__init__(f"expired pairing code {code} on {channel}: the user must write again")


class NotPairedError(PairingError, LookupError):
    """A revoke of a user who is not paired on the channel."""

    def __init__(self, channel: str, user_id: str) -> None:
        self.channel = channel
        self.user_id = user_id
        super().__init__(f"{channel} user {user_id} is not paired; see `gateway pairing list`")

"""Where a Discord conversation is: a direct message, a guild channel, or a thread in one.

An address is the part of a session key after the channel name, so the key of
a conversation and the endpoint a reply goes to are the same text:

    123                          a direct message with user 123     (key ``discord:123``)
    channel:456                  guild text channel 456             (``discord:channel:456``)
    channel:456:thread:789       thread 789 under channel 456       (``discord:channel:456:thread:789``)

``dispatch`` to ``channel: discord, user_id: 123`` reaches the direct
message with user 123 (opened when there is none yet).
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.base import ChatType
from channels.errors import InboundError


@dataclass(frozen=True, slots=True, kw_only=True)
class Address:
    """A direct message (``user``), a guild channel, or a thread under one."""

    user: int | None = None
    channel: int | None = None
    thread: int | None = None

    @property
    def chat_type(self) -> ChatType:
        return "direct" if self.user is not None else "channel"

    @property
    def target(self) -> int:
        """The id of the Discord channel messages go to (the thread's, in a thread)."""
        target = self.thread or self.channel or self.user
        assert target is not None
        return target

    def __str__(self) -> str:
        if self.user is not None:
            return str(self.user)
        text = f"channel:{self.channel}"
        return f"{text}:thread:{self.thread}" if self.thread is not None else text

    @classmethod
    def parse(cls, text: str) -> Address:
        """The address written as ``text``; :class:`InboundError` names a malformed one."""
        parts = text.split(":")
        try:
            if len(parts) == 1:
                return cls(user=int(parts[0]))
            if len(parts) == 2 and parts[0] == "channel":
                return cls(channel=int(parts[1]))
            if len(parts) == 4 and parts[0] == "channel" and parts[2] == "thread":
                return cls(channel=int(parts[1]), thread=int(parts[3]))
        except ValueError:
            pass
        raise InboundError(
            f"{text!r} is not a Discord conversation: use <user id>, channel:<channel id> or "
            "channel:<channel id>:thread:<thread id>"
        )

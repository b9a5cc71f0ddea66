"""The channel port: what every adapter implements, and the values that cross it.

An adapter turns platform updates into :class:`Inbound` values, hands them to
the handler it was given, and delivers outbound messages to an endpoint (a
chat id on its platform). :class:`ChannelSink` is the sink a wake carries when
a channel user is its caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from threads.sinks import Delivery, OutboundMessage, dedups
from threads.turns import Turn

ChatType = Literal["direct", "group", "channel"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaRef:
    """A file the user sent, by reference (the platform's file id or a URL), and its size."""

    kind: str
    ref: str
    media_type: str = ""
    name: str = ""
    size: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Inbound:
    """One message from a channel user, after dedup.

    ``reply_to`` is the id of the message it answers and ``reply_to_text`` that
    message's text (shortened); ``reply_to_bot`` says it answers the bot.
    ``mentioned`` says the message addresses the bot (always, in a direct chat).
    The router's access check (:mod:`channels.access`) decides from these
    whether a group message starts a turn. ``agent`` names the agent the
    sender asked for (the API's ``model``); empty, the session's own runs.
    ``press`` is the platform's id of a button press (an approval's Approve /
    Always / Deny), which arrives as its command in ``text`` and is answered
    with :meth:`AsksApproval.answer_press`; ``message_id`` is then the
    message the button was under. ``space`` is the larger place a group chat
    belongs to, when the platform has one (a Discord guild's id); access
    ``groups`` may list it to allow every channel in it.
    """

    channel: str
    chat_id: str
    user_id: str
    text: str
    user_name: str = ""
    message_id: str = ""
    reply_to: str = ""
    reply_to_text: str = ""
    reply_to_bot: bool = False
    chat_type: ChatType = "direct"
    mentioned: bool = False
    media: tuple[MediaRef, ...] = ()
    agent: str = ""
    press: str = ""
    space: str = ""


InboundHandler = Callable[[Inbound], Awaitable[None]]


@runtime_checkable
class Channel(Protocol):
    """A channel adapter."""

    name: str

    async def start(self, handler: InboundHandler) -> None:
        """Start receiving; every inbound message goes to ``handler``."""
        ...

    async def stop(self) -> None:
        """Stop receiving and release connections."""
        ...

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        """Send a message to a chat; chunked and retried as the platform needs."""
        ...


@runtime_checkable
class Follows(Protocol):
    """A channel that shows a running turn in its chat (typing, a streamed draft)."""

    def follow(self, chat_id: str, turn: Turn) -> None:
        """Show ``turn`` in ``chat_id`` while it runs."""
        ...


@runtime_checkable
class Answers(Protocol):
    """A channel whose every message waits for its own answer (an HTTP request), not a chat.

    The router addresses the replies of each message's turn to the message
    itself (the sink's ``reply_to`` is its ``message_id``, so ``deliver`` can
    tell requests on one chat apart) and hands the channel the turn it started.
    """

    def answer(self, message_id: str, turn: Turn) -> None:
        """``turn`` is the one the message ``message_id`` started."""
        ...


@runtime_checkable
class Attached(Protocol):
    """A channel whose chats are connections to this process: a browser's socket, a waiting
    HTTP request, a terminal. Only this process can deliver to them; scaled out, another
    process relays its messages for them here (:mod:`threads.cluster.relay`)."""

    attached: bool


@runtime_checkable
class Standby(Protocol):
    """A channel whose updates one process at a time may take: a bot's polling or connection.

    Scaled out, the gateway sets ``standby`` before ``start``: the channel
    then starts able to deliver but takes no updates until its process leads
    ``leader`` (:mod:`threads.cluster.leaders`), which calls
    :meth:`start_receiving`; losing the lead calls :meth:`stop_receiving`.
    ``leader`` names the bot, never its token (two accounts of one token are
    one leader).
    """

    standby: bool

    @property
    def leader(self) -> str: ...

    async def start_receiving(self) -> None: ...

    async def stop_receiving(self) -> None: ...


def leader_name(platform: str, token: str) -> str:
    """A bot's leader lease name: the platform and a digest of its token (never the token)."""
    return f"{platform}:{hashlib.sha256(token.encode()).hexdigest()[:16]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalAsk:
    """A question for a person: may this call run? Shown with Approve / Always / Deny.

    ``text`` says what would run and why it asks (plain text, already
    shortened); each button sends its command for ``request_id`` back
    (:mod:`channels.approvals`).
    """

    request_id: str
    text: str


@runtime_checkable
class AsksApproval(Protocol):
    """A channel that shows approval questions with buttons, and answers their presses."""

    async def ask_approval(self, chat_id: str, ask: ApprovalAsk) -> str:
        """Post the question with its buttons in ``chat_id``; the message's id."""
        ...

    async def settle_approval(self, chat_id: str, message_id: str, text: str) -> None:
        """Replace the question with how it was decided; its buttons go."""
        ...

    async def answer_press(self, inbound: Inbound, text: str) -> None:
        """Answer a button press (``inbound.press``) to the person who pressed it."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSink:
    """Replies to a chat on a channel; in a group, the first one answers ``reply_to``."""

    channel: Channel
    chat_id: str
    reply_to: str = ""
    label: str = field(default="")

    @property
    def drops(self) -> bool:
        return False

    @property
    def dedups(self) -> bool:
        """The channel's: only a channel that drops a repeated outbound id may get one."""
        return dedups(self.channel)

    def describe(self) -> str:
        return f"Caller is the {self.channel.name} user - reply with dispatch(to=caller:user)"

    @property
    def attached(self) -> bool:
        """Whether the chat is a connection to this process (:class:`Attached`)."""
        return isinstance(self.channel, Attached)

    def to_wire(self) -> dict[str, str]:
        wire = {"kind": "channel", "channel": self.channel.name, "chat": self.chat_id}
        if self.reply_to:
            wire["reply_to"] = self.reply_to
        return wire

    async def deliver(self, message: OutboundMessage) -> Delivery:
        if self.reply_to and not message.reply_to:
            message = dataclasses.replace(message, reply_to=self.reply_to)
        return await self.channel.deliver(self.chat_id, message)

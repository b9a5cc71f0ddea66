"""Sinks: where a thread's replies to its caller go.

A sink is a channel endpoint (implemented by the gateway over a channel
adapter), another session (replies wake that session), or a drop sink (the
caller cannot be answered: cron, heartbeat, compression, progress). Every
sink has a wire form so that a wake accepted before a crash still knows
where its reply goes after the restart.

Every message a turn sends carries its outbound id (see
:mod:`threads.outbound`). A sink that :func:`dedups` shows a message once
however often it is delivered with the same id, so a send a crash left
unconfirmed may be repeated to it; to any other sink it is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundMessage:
    """A reply on its way to a sink: markdown text, optionally answering a message.

    ``expects_reply`` is false for a turn's plain-text final answer: a session
    that receives it is told no reply is expected (channels ignore it).
    ``outbound_id`` is the send's id in the outbound ledger ("" for a message
    no session recorded): a receiver that deduplicates drops a second copy.
    """

    text: str
    reply_to: str = ""
    meta: Mapping[str, str] = field(default_factory=dict)
    expects_reply: bool = True
    outbound_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """What became of one outbound message.

    ``delivered_to`` names the receiver (``telegram:123``, ``session cli``,
    ``dropped``); ``message_ids`` are the platform's ids of the chunks sent;
    ``blocked`` is the reason a policy refused it, recorded rather than silent.
    ``held`` says the receiver only keeps it in memory until its reader comes
    (a web chat with no page open): a crash now would lose it, so the
    outbound ledger does not count it delivered.
    """

    delivered_to: str
    message_ids: tuple[str, ...] = ()
    dropped: bool = False
    blocked: str = ""
    held: bool = False


@runtime_checkable
class Sink(Protocol):
    """Where replies to a wake's caller go."""

    @property
    def drops(self) -> bool:
        """True when output to this sink is discarded (no caller can be answered)."""
        ...

    def describe(self) -> str:
        """Plain words for the wake header's ``delivery`` field."""
        ...

    def to_wire(self) -> dict[str, str]:
        """A JSON object from which the gateway's resolver rebuilds this sink."""
        ...

    async def deliver(self, message: OutboundMessage) -> Delivery:
        """Deliver one message; raise on failure (the caller records it)."""
        ...


@runtime_checkable
class Deduplicating(Protocol):
    """A sink (or channel) that can say whether it drops a repeated outbound id."""

    @property
    def dedups(self) -> bool:
        """True when a message delivered twice with one ``outbound_id`` is shown once."""
        ...


def dedups(receiver: object) -> bool:
    """Whether ``receiver`` shows a repeated send once: only then may a restart repeat it."""
    return isinstance(receiver, Deduplicating) and receiver.dedups


@dataclass(frozen=True, slots=True, kw_only=True)
class DropSink:
    """A sink that discards output: the caller is a system source such as cron."""

    reason: str = "system"

    @property
    def drops(self) -> bool:
        return True

    @property
    def dedups(self) -> bool:
        return True  # nothing is shown, however often

    def describe(self) -> str:
        return f"Caller is {self.reason} - output to caller is dropped"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "drop", "reason": self.reason}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        return Delivery(delivered_to="dropped", dropped=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSinkRef:
    """A channel endpoint restored from a stored wake, resolved when it is used.

    A wake restored at start-up may be read before the channels are running;
    resolving at delivery time reaches the channel once it is.
    """

    wire: Mapping[str, str]
    resolve: Callable[[Mapping[str, str]], Sink]

    @property
    def drops(self) -> bool:
        return self.resolve(self.wire).drops

    @property
    def dedups(self) -> bool:
        return dedups(self.resolve(self.wire))

    def describe(self) -> str:
        return self.resolve(self.wire).describe()

    def to_wire(self) -> dict[str, str]:
        return dict(self.wire)

    async def deliver(self, message: OutboundMessage) -> Delivery:
        return await self.resolve(self.wire).deliver(message)


class SinkResolver(Protocol):
    """Rebuilds a sink from its wire form (the gateway knows the channels)."""

    def __call__(self, wire: Mapping[str, str]) -> Sink: ...

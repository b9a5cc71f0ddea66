"""Sinks that reach other sessions: each message they are given wakes one.

It is the "another session" kind of :class:`~threads.sinks.Sink`: a reply
sent to it becomes a wake of ``target`` with source ``session``, whose caller
is ``origin`` and whose own sink leads back to ``origin``, so the two sessions
can answer each other. The sink belongs to one wake and knows its exchange
chain and depth: each reply goes one level deeper, and one the manager
refuses (past ``threads.max_exchange_depth``, or a stopped chain) is reported
as blocked, not delivered. Its wire form (``kind: session``) is resolved back
to one by :meth:`~threads.manager.ThreadManager.resolve_sink`.

A :class:`CaptureSink` keeps a reply for a waiting tool (``sessions_send``,
``sessions_spawn``) instead of waking anyone. A :class:`WakeSink` carries one hand-off: a wake made ready for a target
session (a dispatch send to a child, a ``child_completed``, an exchange's next
step), which the message's text becomes the body of. Both carry the
message's outbound id as the wake's ``origin``, so a target accepts each send
once however often it is delivered: they deduplicate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from threads.errors import ExchangeRefusedError
from threads.keys import SessionKey
from threads.sinks import Delivery, OutboundMessage
from threads.wake import SessionCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager
    from threads.session import Session


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSink:
    """Replies to another session: each message wakes it, as this session."""

    target: SessionKey
    origin: SessionKey
    manager: ThreadManager
    chain: str = ""
    depth: int = 0

    @property
    def drops(self) -> bool:
        return False

    @property
    def dedups(self) -> bool:
        return True  # the target accepts one wake per origin

    def describe(self) -> str:
        return f"Caller is session {self.target} - reply with dispatch(to=caller:session)"

    def to_wire(self) -> dict[str, str]:
        wire = {"kind": "session", "target": str(self.target), "origin": str(self.origin)}
        if self.chain:
            wire["chain"] = self.chain
        if self.depth:
            wire["depth"] = str(self.depth)
        return wire

    async def deliver(self, message: OutboundMessage) -> Delivery:
        depth = self.depth + 1
        wake = Wake(
            source=WakeSource.SESSION,
            body=message.text,
            caller=SessionCaller(session_key=self.origin),
            sink=SessionSink(
                target=self.origin,
                origin=self.target,
                manager=self.manager,
                chain=self.chain,
                depth=depth,
            ),
            chain=self.chain,
            depth=depth,
            expects_reply=message.expects_reply,
            origin=message.outbound_id,
        )
        try:
            accepted = await self.manager.wake(self.target, wake)
        except ExchangeRefusedError as exc:
            return Delivery(delivered_to=f"session {self.target}", blocked=str(exc))
        return Delivery(delivered_to=f"session {self.target}", message_ids=(accepted.run_id,))


@dataclass(slots=True, kw_only=True)
class CaptureSink:
    """Keeps what a run sends its caller, for the gateway to read, waking no one.

    A capture lives only as long as the waiter that reads it; restored after
    a restart (wire ``kind: capture``) it still takes the reply, which the
    transcript keeps (``sessions_history``) and an exchange's next step reads
    from the turn's end.
    """

    caller: SessionKey
    texts: list[str] = field(default_factory=list)

    @property
    def drops(self) -> bool:
        return False

    @property
    def dedups(self) -> bool:
        return True  # it shows nothing to anyone

    def describe(self) -> str:
        return (
            f"Caller is session {self.caller} - reply with dispatch(to=caller:session); "
            "the reply is handed back to that agent"
        )

    def to_wire(self) -> dict[str, str]:
        return {"kind": "capture", "caller": str(self.caller)}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        self.texts.append(message.text)
        return Delivery(delivered_to=f"session {self.caller} (agent-to-agent reply)")

    @property
    def reply(self) -> str:
        return "\n\n".join(t for t in self.texts if t.strip())


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeSink:
    """One hand-off: the message becomes the body of ``wake``, woken in ``target``.

    ``fork_of`` is the session a ``fork`` target grows from, when it does not
    exist yet. The delivery's message id is the run the wake became.
    """

    target: SessionKey
    wake: Wake
    manager: ThreadManager
    fork_of: Session | None = None

    @property
    def drops(self) -> bool:
        return False

    @property
    def dedups(self) -> bool:
        return True  # the target accepts one wake per origin

    def describe(self) -> str:
        return f"session {self.target}"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "wake", "target": str(self.target)}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        manager = self.manager
        if self.fork_of is not None and not await manager.session_exists(self.target):
            await manager.create_fork(self.target, self.fork_of, agent=self.wake.agent)
        wake = dataclasses.replace(self.wake, body=message.text, origin=message.outbound_id)
        try:
            accepted = await manager.wake(self.target, wake)
        except ExchangeRefusedError as exc:
            return Delivery(delivered_to=f"session {self.target}", blocked=str(exc))
        return Delivery(delivered_to=f"session {self.target}", message_ids=(accepted.run_id,))

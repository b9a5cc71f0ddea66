"""The sink that replies to another session: each message it is given wakes that session.

It is the "another session" kind of :class:`~threads.sinks.Sink`: a reply
sent to it becomes a wake of ``target`` with source ``session``, whose caller
is ``origin`` and whose own sink leads back to ``origin``, so the two sessions
can answer each other. The sink belongs to one wake and knows its exchange
chain and depth: each reply goes one level deeper, and one the manager
refuses (past ``threads.max_exchange_depth``, or a stopped chain) is reported
as blocked, not delivered. Its wire form (``kind: session``) is resolved back
to one by :meth:`~threads.manager.ThreadManager.resolve_sink`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from threads.errors import ExchangeRefusedError
from threads.keys import SessionKey
from threads.sinks import Delivery, OutboundMessage
from threads.wake import SessionCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager


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

    def describe(self) -> str:
        return f"Caller is session {self.target} — reply with dispatch(to=caller:session)"

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
        )
        try:
            await self.manager.wake(self.target, wake)
        except ExchangeRefusedError as exc:
            return Delivery(delivered_to=f"session {self.target}", blocked=str(exc))
        return Delivery(delivered_to=f"session {self.target}")

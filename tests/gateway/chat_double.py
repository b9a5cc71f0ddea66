"""A chat channel double at the transport boundary: the test pushes inbound messages
and reads what the gateway delivered, as a Telegram or Discord adapter would see it."""

from __future__ import annotations

import asyncio
from typing import Any

from channels.base import Inbound, InboundHandler
from threads.sinks import Delivery, OutboundMessage


class ChatDouble:
    """Stands where a platform adapter stands: ``push`` an Inbound, read ``sent``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[tuple[str, str]] = []
        self.handler: InboundHandler | None = None
        self._arrived = asyncio.Event()
        self._next_id = 0

    async def start(self, handler: InboundHandler) -> None:
        self.handler = handler

    async def stop(self) -> None:
        self.handler = None

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        self.sent.append((chat_id, message.text))
        self._arrived.set()
        return Delivery(delivered_to=f"{self.name}:{chat_id}", message_ids=(str(len(self.sent)),))

    async def push(self, *, chat_id: str, user_id: str, text: str, **fields: Any) -> None:
        """One message from a platform user, handed to the gateway as the adapter would."""
        assert self.handler is not None, f"the {self.name} double is not started"
        self._next_id += 1
        inbound = Inbound(
            channel=self.name,
            chat_id=chat_id,
            user_id=user_id,
            text=text,
            message_id=str(self._next_id),
            **fields,
        )
        await self.handler(inbound)

    def to(self, chat_id: str) -> list[str]:
        """Every text delivered to ``chat_id``, in order."""
        return [text for chat, text in self.sent if chat == chat_id]

    async def wait(self, count: int, timeout: float = 10) -> list[tuple[str, str]]:
        """Wait (with a deadline) until ``count`` messages were delivered in all."""
        async with asyncio.timeout(timeout):
            while len(self.sent) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.sent

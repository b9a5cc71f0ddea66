"""The terminal channel: one local user typing lines, replies printed as they come.

Its single chat is ``cli`` (session key ``cli``). Lines are submitted by the
terminal REPL (``gateway run`` on a terminal, ``gateway chat``) or by a client
attached over the control socket; replies go to the output stream and to every
listener (attached clients).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from channels.base import Inbound, InboundHandler
from channels.errors import ChannelError
from threads.sinks import Delivery, OutboundMessage

CHAT_ID = "cli"


class CliChannel:
    """The terminal channel."""

    name = "cli"
    attached = True  # its chats are connections to this process (channels.base.Attached)

    def __init__(self, *, user_id: str = "local", output: TextIO | None = None) -> None:
        self.user_id = user_id
        self._output = output
        self.listeners: list[Callable[[str], None]] = []
        self._handler: InboundHandler | None = None
        self._counter = 0
        self.delivered = 0

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler

    async def stop(self) -> None:
        self._handler = None

    async def submit(self, text: str) -> None:
        """Hand one typed line to the gateway, as the local user."""
        if self._handler is None:
            raise ChannelError("the gateway is stopping and took no more lines")
        self._counter += 1
        await self._handler(
            Inbound(
                channel=self.name,
                chat_id=CHAT_ID,
                user_id=self.user_id,
                text=text,
                message_id=str(self._counter),
            )
        )

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        text = message.text.rstrip("\n")
        if self._output is not None:
            self._output.write(f"{text}\n")
            self._output.flush()
        for listener in list(self.listeners):
            listener(text)
        self.delivered += 1
        return Delivery(delivered_to=f"cli:{chat_id}", message_ids=(str(self.delivered),))

"""The terminal channel: one local user typing lines, replies printed as they come.

Its single chat is ``cli`` (session key ``cli``). Lines are submitted by the
terminal REPL (``gateway run`` on a terminal, ``gateway chat``) or by a client
attached over the control socket; replies go to the output stream and to every
listener (attached clients). A line the gateway did not take — the store could
not save it, the session cannot be read — is answered the same way, with one
plain line that says so (:mod:`channels.refusals`), and the chat goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from channels.base import Inbound, InboundHandler
from channels.errors import ChannelError
from channels.refusals import Refusal, refusal_of
from threads.errors import ManagerClosedError
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

    async def submit(self, text: str) -> Refusal | None:
        """Hand one typed line to the gateway, as the local user.

        None when it was taken. A line the gateway did not take is answered
        with one plain line saying why, and its :class:`Refusal` returned; a
        gateway that is stopping raises instead (it takes no more lines).
        """
        handler = self._handler
        if handler is None:
            raise ChannelError("the gateway is stopping and took no more lines")
        self._counter += 1
        inbound = Inbound(
            channel=self.name,
            chat_id=CHAT_ID,
            user_id=self.user_id,
            text=text,
            message_id=str(self._counter),
        )
        try:
            await handler(inbound)
        except ManagerClosedError:
            raise
        except Exception as exc:
            refusal = refusal_of(exc, f"cli:{CHAT_ID}")
            self._say(refusal.line)
            return refusal
        return None

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        self._say(message.text.rstrip("\n"))
        self.delivered += 1
        return Delivery(delivered_to=f"cli:{chat_id}", message_ids=(str(self.delivered),))

    def _say(self, text: str) -> None:
        if self._output is not None:
            self._output.write(f"{text}\n")
            self._output.flush()
        for listener in list(self.listeners):
            listener(text)

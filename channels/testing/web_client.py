"""A web chat client that speaks the page's protocol, for tests and benchmarks.

It does what the page (``channels/web/static/chat.js``) does: loads the page
once for the signed chat cookie, opens the WebSocket, sends each message as
``{"type": "message", "id", "text"}`` and keeps it until the gateway
acknowledges it (``ack``) or refuses it (``failed``), sending it again with
``resend: true`` on every reconnect until then (docs/decisions/web-05). Of
what the gateway pushes it keeps every reply as it came
(:attr:`WebChat.replies`; a reply under an id already shown is dropped, as the
page drops it) and what the page shows now (:attr:`WebChat.view`: the answers
of the last ``history`` frame, then the replies since).

The chat outlives a gateway process: the cookie is signed with the key in the
data directory, so :meth:`WebChat.connect` to a restarted gateway (on
whatever port it has now) continues the same chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

BARRIER_ERROR = "the message has no 'text'"


class WebChat:
    """One browser tab's chat: what it sent, and every frame the gateway sent it, in order."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self._http = http
        self.cookie = ""  # the signed chat id, "<chat>.<mac>"
        self.chat = ""
        self.outbox: dict[str, str] = {}  # sent, neither acknowledged nor refused: id → text
        self.acked: list[str] = []  # ids, in the order the gateway acknowledged them
        self.failed: dict[str, str] = {}  # id → the line the gateway refused it with
        self.replies: list[str] = []
        self.errors: list[str] = []
        self.frames: list[dict[str, Any]] = []
        # What the page shows now: the last history's answers, then replies since.
        self.view: list[str] = []
        self.repeats: list[str] = []  # replies sent again under an id already shown
        self._shown: set[str] = set()
        self._tries: dict[str, int] = {}
        self._hellos = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    async def connect(self, url: str) -> None:
        """Open the socket at ``url`` (the page's address) and send what is not acknowledged.

        The first call takes a chat (the page's cookie); later ones continue it.
        """
        await self.close()
        port = urlsplit(url).port
        name = f"gateway_chat_{port}"
        if not self.cookie:
            async with self._http.get(url) as page:
                page.raise_for_status()
                self.cookie = page.cookies[name].value
        hellos = self._hellos
        self._ws = await self._http.ws_connect(
            f"{url.rstrip('/')}/ws", headers={"Cookie": f"{name}={self.cookie}"}
        )
        self._reader = asyncio.create_task(self._read(self._ws), name=f"web chat {url}")
        await self.wait_for(lambda: self._hellos > hellos, what="the hello frame")
        for ident in list(self.outbox):
            await self._transmit(ident)

    async def send(self, text: str) -> str:
        """Send one message; its id, by which :attr:`acked` or :attr:`failed` will name it."""
        ident = f"m-{secrets.token_hex(12)}"
        self.outbox[ident] = text
        await self._transmit(ident)
        return ident

    async def _transmit(self, ident: str) -> None:
        assert self._ws is not None, "connect first"
        tries = self._tries.get(ident, 0)
        self._tries[ident] = tries + 1
        frame = {"type": "message", "id": ident, "text": self.outbox[ident], "resend": tries > 0}
        await self._ws.send_str(orjson.dumps(frame).decode())

    async def barrier(self, timeout: float = 30.0) -> None:
        """Return once every frame the gateway sent before this call has been read.

        A frame without text (and without an id) is refused on the same
        socket, after whatever the gateway pushed before reading it: its
        ``error`` is the barrier.
        """
        assert self._ws is not None, "connect first"
        before = self.errors.count(BARRIER_ERROR)
        await self._ws.send_str('{"text": ""}')
        await self.wait_for(
            lambda: self.errors.count(BARRIER_ERROR) > before, timeout, what="the barrier"
        )

    async def wait_for(
        self, condition: Callable[[], bool], timeout: float = 30.0, *, what: str = "a frame"
    ) -> None:
        """Wait until ``condition()`` holds, checked at every frame; TimeoutError after ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while not condition():
                    if not self.connected and self._reader is not None and self._reader.done():
                        raise ConnectionError(f"the socket closed while waiting for {what}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"no {what} within {timeout:g} s; replies: {self.replies}") from None

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._ws = self._reader = None

    def _take(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "hello":
            self.chat = str(frame.get("chat", ""))
            self._hellos += 1
        elif kind == "history":
            answers = [i for i in frame.get("items") or () if i.get("role") == "bot"]
            self._shown.update(str(i["id"]) for i in answers if i.get("id"))
            self.view = [str(i.get("text", "")) for i in answers]
        elif kind == "ack" and self.outbox.pop(str(frame.get("id")), None) is not None:
            self.acked.append(str(frame.get("id")))
        elif kind == "failed" and str(frame.get("id")) in self.outbox:
            ident = str(frame.get("id"))
            del self.outbox[ident]
            self.failed[ident] = str(frame.get("error", ""))
        elif kind == "reply":
            self._reply(frame)
        elif kind == "error":
            self.errors.append(str(frame.get("error", "")))

    def _reply(self, frame: dict[str, Any]) -> None:
        """Keep a reply, unless its id was shown already: the page shows an id once."""
        ident = frame.get("id")
        if ident:
            if ident in self._shown:
                self.repeats.append(str(frame.get("text", "")))
                return
            self._shown.add(ident)
        self.replies.append(str(frame.get("text", "")))
        self.view.append(self.replies[-1])

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.TEXT:
                    continue
                frame = orjson.loads(message.data)
                self.frames.append(frame)
                self._take(frame)
                self._changed.set()
        finally:
            self._changed.set()

"""The web chat: a page and a WebSocket per browser tab, over aiohttp.

Each browser keeps a chat id (``web:<id>`` is its session key). The page
sends ``{"text": ...}``; the gateway pushes ``{"type": "reply", "text": ...}``.
Replies for a chat with no open socket wait in a short backlog and are sent
when the chat reconnects.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections import defaultdict, deque
from importlib import resources

import orjson
from aiohttp import WSMsgType, web

from channels.base import Inbound, InboundHandler
from channels.errors import InboundError
from threads.sinks import Delivery, OutboundMessage

log = logging.getLogger(__name__)

MAX_TEXT = 16_000
BACKLOG = 100
_CHAT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class WebChannel:
    """The browser chat channel."""

    name = "web"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 8765) -> None:
        self.host = host
        self.port = port
        self._handler: InboundHandler | None = None
        self._sockets: dict[str, set[web.WebSocketResponse]] = defaultdict(set)
        self._backlog: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=BACKLOG))
        self._runner: web.AppRunner | None = None
        self._counter = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._socket)
        return app

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        for sockets in list(self._sockets.values()):
            for ws in list(sockets):
                await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._handler = None

    async def _page(self, request: web.Request) -> web.Response:
        html = resources.files("channels").joinpath("web_chat.html").read_text(encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        chat_id = request.query.get("chat") or secrets.token_hex(8)
        if not _CHAT_ID.match(chat_id):
            raise web.HTTPBadRequest(text="chat must be 1-64 letters, digits, '_' or '-'")
        ws = web.WebSocketResponse(heartbeat=30)
        await ws.prepare(request)
        self._sockets[chat_id].add(ws)
        await ws.send_json({"type": "hello", "chat": chat_id})
        backlog = self._backlog.pop(chat_id, None)
        for text in backlog or ():
            await ws.send_json({"type": "reply", "text": text})
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    text = _text_of(msg.data)
                except InboundError as exc:
                    await ws.send_json({"type": "error", "error": str(exc)})
                    continue
                await self._receive(chat_id, text)
        finally:
            self._sockets[chat_id].discard(ws)
            if not self._sockets[chat_id]:
                del self._sockets[chat_id]
        return ws

    async def _receive(self, chat_id: str, text: str) -> None:
        if self._handler is None:
            return
        self._counter += 1
        await self._handler(
            Inbound(
                channel=self.name,
                chat_id=chat_id,
                user_id=chat_id,
                text=text,
                message_id=str(self._counter),
            )
        )

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        sockets = list(self._sockets.get(chat_id, ()))
        if not sockets:
            self._backlog[chat_id].append(message.text)
            return Delivery(delivered_to=f"web:{chat_id} (queued until the page reconnects)")
        for ws in sockets:
            await ws.send_json({"type": "reply", "text": message.text})
        return Delivery(delivered_to=f"web:{chat_id}")


def _text_of(data: str) -> str:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InboundError('a web chat message must be JSON like {"text": "hi"}') from None
    text = obj.get("text") if isinstance(obj, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise InboundError("the message has no 'text'")
    if len(text) > MAX_TEXT:
        raise InboundError(f"the message is {len(text)} characters; the limit is {MAX_TEXT}")
    return text

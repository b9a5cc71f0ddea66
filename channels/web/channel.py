"""The web chat channel: a page and a WebSocket per browser tab, over aiohttp.

Each browser holds one chat (``web:<id>`` is its session key; who may open
it is :mod:`channels.web.guard`'s business). Every tab of the chat shares
one conversation. What the socket carries, server to page:

- ``hello`` (the chat and its limits), then ``history``: the conversation so
  far (:mod:`channels.web.history`), which replaces what the page shows — on
  every (re)connect, and for every tab after ``/new``;
- ``ack`` / ``failed`` for each message the page sent (by its id), once the
  gateway holds it durably or has refused it in one line; ``user`` tells
  the chat's other tabs what was said;
- ``reply`` for each answer (markdown and its HTML; its outbound ``id``,
  which the page shows once, so a send the ledger repeats after a restart is
  not shown twice; ``apart`` when it answers a command and so does not
  replace the running turn's draft), and while a turn runs ``typing``,
  ``tool``, ``draft`` and ``end`` (:mod:`channels.web.live`);
- approval questions with their buttons, and how each was decided
  (:mod:`channels.web.questions`).

and page to server, one ``message`` frame per message
(:mod:`channels.web.frames`). A message the page sends again after a
reconnect carries the same id and is accepted once (docs/decisions/web-05).
Replies for a chat with no open tab wait in a short backlog.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, hdrs, web

from channels.base import ApprovalAsk, Inbound, InboundHandler, MediaRef
from channels.errors import ChannelError
from channels.render.web import WebRenderer
from channels.web.files import ChatFiles, served_type
from channels.web.frames import MAX_TEXT, FrameError, Incoming, read_frame, send_frame
from channels.web.guard import SECURITY_HEADERS, Guard, load_key
from channels.web.history import chat_history, file_item, message_ids
from channels.web.live import LiveTurns
from channels.web.questions import Questions
from channels.web.refusals import CLOSING, NOT_SAVED, refusal_of
from channels.web.tabs import Frame, Tabs
from config.channels import HttpConfig, WebConfig
from config.section import is_loopback, read_secret
from threads.ids import new_entry_id
from threads.messages import FilePart
from threads.sessions.catalog import Catalog
from threads.sessions.errors import UnknownSessionError
from threads.sinks import Delivery, OutboundMessage
from threads.turns import Turn

log = logging.getLogger(__name__)

#: Page ids of accepted messages remembered per process, to answer a resend at once.
REMEMBERED = 4096
HISTORY = 50
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Commands that start a fresh conversation: every tab then shows a clean view.
RENEW = frozenset({"/new", "/reset"})
STATIC = "chat"
FILE_HEADERS = {
    **SECURITY_HEADERS,
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
}
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


class WebChannel:
    """The browser chat channel.

    It deduplicates: each reply carries its outbound id and the page shows an
    id once (the history's answers carry theirs too).
    """

    name = "web"
    attached = True  # its chats are connections to this process (channels.base.Attached)
    dedups = True

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        key: bytes | None = None,
        allowed_origins: Iterable[str] = (),
        token: str = "",
        files: ChatFiles | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
        history: int = HISTORY,
    ) -> None:
        """A channel listening on ``host:port``.

        ``key`` signs chat ids (a random one when not given: chats then last as
        long as the process); ``allowed_origins`` are the other origins whose
        pages may open the socket; ``token``, when set, guards every request.
        ``files`` keeps what people attach (none: no attachments), up to
        ``max_file_bytes`` per message; ``history`` is how many items of the
        conversation a page is shown when it connects (read through
        :attr:`catalog`, which the gateway sets). Raises :class:`ChannelError`
        for a bind off loopback with no token.
        """
        if not is_loopback(host) and not token:
            raise ChannelError(
                f"http.host {host!r} is not a loopback address and the web chat has "
                "no token: set channels.web.token (or token_file), or bind 127.0.0.1"
            )
        self.host = host
        self.guard = Guard(
            key=key or secrets.token_bytes(32),
            port=port,
            token=token,
            allowed_origins=allowed_origins,
            is_chat_path=is_chat_path,
        )
        self.files = files
        self.max_file_bytes = max_file_bytes if files is not None else 0
        self.history = history
        self.catalog: Catalog | None = None
        self._renderer = WebRenderer()
        self._tabs = Tabs()
        self._live = LiveTurns(self._tabs, self._renderer.render)
        self._questions = Questions(self._tabs)
        self._handler: InboundHandler | None = None
        self._accepted: OrderedDict[tuple[str, str], asyncio.Future[str]] = OrderedDict()
        self._held: dict[str, list[Frame]] = {}
        self._root: web.Application | None = None
        self._assets = _load_assets()

    @classmethod
    def from_config(
        cls, config: WebConfig, http: HttpConfig, *, state_dir: Path, media_dir: Path
    ) -> WebChannel:
        """The channel ``[channels.web]`` describes on ``[http]``.

        Its key is in ``state_dir/web_secret``, the files people send under
        ``media_dir``. Raises :class:`ChannelError`, naming the setting, when
        the token file cannot be read or is empty, or the key file is not a key.
        """
        try:
            token = read_secret(config.token, config.token_file, "channels.web.token_file")
        except ValueError as exc:
            raise ChannelError(str(exc)) from None
        if token is not None and not token.get_secret_value():
            raise ChannelError(f"channels.web.token_file {config.token_file} is empty")
        return cls(
            host=http.host,
            port=http.port,
            key=load_key(state_dir / "web_secret"),
            allowed_origins=config.allowed_origins,
            token=token.get_secret_value() if token is not None else "",
            files=ChatFiles(media_dir),
            max_file_bytes=config.max_file_bytes,
            history=config.history,
        )

    @property
    def port(self) -> int:
        return self.guard.port

    @port.setter
    def port(self, port: int) -> None:
        self.guard.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    @property
    def chat_cookie(self) -> str:
        return self.guard.chat_cookie

    @property
    def auth_cookie(self) -> str:
        return self.guard.auth_cookie

    def install(self, app: web.Application) -> None:
        """Serve the chat at the root of ``app``, the gateway's one HTTP server.

        Its guard (host, token, origin rules) and its headers apply to the chat's
        own paths only: the other parts under the same server (the API, the
        admin pages, platform webhooks) keep their own rules.
        """
        self._root = app
        app.middlewares.append(self.guard.middleware)
        app.on_response_prepare.append(self._add_headers)
        app.router.add_get("/", self._page)
        app.router.add_get(f"/{STATIC}/{{name}}", self._asset)
        app.router.add_get("/files/{file}", self._file)
        app.router.add_get("/ws", self._socket)

    def app(self) -> web.Application:
        """An application serving only the chat (for tests of the chat alone)."""
        app = web.Application()
        self.install(app)
        return app

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler

    async def stop(self) -> None:
        self._handler = None
        await self._live.close()
        for ws in list(self._tabs.every()):
            await ws.close()

    # -- what is served

    async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        # The chat's responses, and whatever else the root answers (a 404), not the
        # responses of the parts mounted under their own prefixes.
        if request.path.startswith("/files/"):
            response.headers.update(FILE_HEADERS)
        elif is_chat_path(request.path) or request.match_info.current_app is self._root:
            response.headers.update(SECURITY_HEADERS)

    async def _page(self, request: web.Request) -> web.Response:
        body, content_type = self._assets["index.html"]
        response = web.Response(body=body, content_type=content_type)
        if self.guard.chat_of(request) is None:
            self.guard.give_chat(response, request)
        return response

    async def _asset(self, request: web.Request) -> web.Response:
        found = self._assets.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(text="no such file of the web chat")
        body, content_type = found
        return web.Response(body=body, content_type=content_type)

    async def _file(self, request: web.Request) -> web.Response:
        """A file the requesting chat sent; every other chat gets 404."""
        chat = self.guard.chat_of(request)
        name = request.match_info["file"]
        data = None
        if chat is not None and self.files is not None:
            data = await self.files.read(chat, name)
        if data is None:
            raise web.HTTPNotFound(text="this chat sent no such file")
        content_type = served_type(name)
        response = web.Response(body=data, content_type=content_type)
        if not content_type.startswith("image/"):
            response.headers[hdrs.CONTENT_DISPOSITION] = "attachment"
        return response

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        self.guard.check_origin(request)
        # A frame carries a message's files as base64: a third more than their bytes.
        limit = self.max_file_bytes * 4 // 3 + 8 * MAX_TEXT + 65536
        ws = web.WebSocketResponse(heartbeat=30, max_msg_size=limit)
        chat = self.guard.chat_of(request) or self.guard.give_chat(ws, request)
        await ws.prepare(request)
        self._tabs.add(chat, ws)
        try:
            limits = {"text": MAX_TEXT, "file_bytes": self.max_file_bytes}
            await send_frame(ws, {"type": "hello", "chat": chat, "limits": limits})
            await self._catch_up(ws, chat)
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._take(ws, chat, msg.data)
        except ConnectionResetError:
            # The tab went away mid-answer; what it sent stays accepted (or not) as it was.
            log.info("web:%s: a tab left while it was being answered", chat)
        finally:
            self._tabs.remove(chat, ws)
        return ws

    async def _catch_up(self, ws: web.WebSocketResponse, chat: str) -> None:
        """The conversation so far, the replies that waited for a tab (not already in it),
        then the questions still open."""
        history = await self._history(chat)
        shown: set[str] = set()
        if history is not None:
            await send_frame(ws, history)
            answers = [item for item in history["items"] if item["role"] == "bot"]
            shown = {item.get("id") or item["text"] for item in answers}
        for frame in self._tabs.waiting(chat):
            if frame.get("id", frame["text"]) not in shown:
                await send_frame(ws, frame)
        for question in self._questions.open(chat):
            await send_frame(ws, question)

    async def _history(self, chat: str) -> dict[str, Any] | None:
        """The ``history`` frame of the chat's current session; None when it cannot be read."""
        if self.catalog is None:
            return None
        try:
            resolved = await self.catalog.resolve(f"web:{chat}")
            view = await self.catalog.view(resolved.key, resolved.session_id)
        except UnknownSessionError:
            return {"type": "history", "items": [], "more": False}
        except Exception as exc:
            # The page keeps what it shows; the next connect tries again.
            log.warning("web:%s: the conversation could not be read: %s", chat, exc)
            return None
        items, more = chat_history(
            view.path, view.entries, limit=self.history, render=self._renderer.render
        )
        return {"type": "history", "items": items, "more": more}

    # -- messages in

    async def _take(self, ws: web.WebSocketResponse, chat: str, data: str) -> None:
        """One frame from a tab: accepted once, and answered with ``ack`` or ``failed``."""
        try:
            incoming = read_frame(data, max_file_bytes=self.max_file_bytes)
        except FrameError as exc:
            if exc.message_id:
                await send_frame(ws, {"type": "failed", "id": exc.message_id, "error": str(exc)})
            else:
                await send_frame(ws, {"type": "error", "error": str(exc)})
            return
        if not incoming.id:
            # A press (it names its question), or the first page's frame: no acknowledgement;
            # refusals still say why.
            # The 16 digits after a minted id's time (random start plus counter): as unique
            # as 8 random bytes, and no system call per message.
            message_id = incoming.press.rpartition(":")[2] or f"w-{new_entry_id()[12:]}"
            refusal, _ = await self._accept(chat, incoming, message_id)
            if refusal:
                await send_frame(ws, {"type": "error", "error": refusal})
            return
        refusal, parts = await self._once(chat, incoming)
        if refusal:
            await send_frame(ws, {"type": "failed", "id": incoming.id, "error": refusal})
            return
        await send_frame(ws, {"type": "ack", "id": incoming.id})
        if parts is not None:
            said = {
                "type": "user",
                "id": incoming.id,
                "text": incoming.text,
                "files": [file_item(p) for p in parts],
            }
            await self._tabs.send(chat, said, besides=ws)

    async def _once(self, chat: str, incoming: Incoming) -> tuple[str, list[FilePart] | None]:
        """Accept a message unless it was accepted before: (refusal line, its files if new).

        A resend of a message this process took is answered from memory (waiting
        for the first try if it is still in hand); after a restart, from the
        session, which keeps each message's id with its wake.
        """
        key = (chat, incoming.id)
        earlier = self._accepted.get(key)
        if earlier is not None and not await asyncio.shield(earlier):
            return "", None
        if earlier is None and incoming.resend and incoming.id in await self._stored_ids(chat):
            self._remember(key).set_result("")
            return "", None
        future = self._remember(key)
        refusal = CLOSING
        try:
            refusal, parts = await self._accept(chat, incoming, incoming.id)
        finally:
            future.set_result(refusal)
            if refusal:
                self._accepted.pop(key, None)
        return refusal, parts

    def _remember(self, key: tuple[str, str]) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._accepted[key] = future
        self._accepted.move_to_end(key)
        while len(self._accepted) > REMEMBERED:
            self._accepted.popitem(last=False)
        return future

    async def _stored_ids(self, chat: str) -> set[str]:
        if self.catalog is None:
            return set()
        try:
            resolved = await self.catalog.resolve(f"web:{chat}")
            view = await self.catalog.view(resolved.key, resolved.session_id)
        except UnknownSessionError:
            return set()
        return message_ids(view.entries)

    async def _accept(
        self, chat: str, incoming: Incoming, message_id: str
    ) -> tuple[str, list[FilePart]]:
        """Hand the message on: ("", its files) once taken, else (the line that tells why not, [])."""
        handler = self._handler
        if handler is None:
            return CLOSING, []
        parts: list[FilePart] = []
        if incoming.files:
            assert self.files is not None
            try:
                parts = [await self.files.keep(chat, upload) for upload in incoming.files]
            except Exception as exc:
                log.warning("web:%s: a file could not be kept: %s", chat, exc)
                return NOT_SAVED, []
        inbound = Inbound(
            channel=self.name,
            chat_id=chat,
            user_id=chat,
            text=incoming.text,
            message_id=message_id,
            media=tuple(_media_ref(part) for part in parts),
            press=incoming.press,
        )
        renews = _command(incoming.text) in RENEW
        if renews:
            self._held[chat] = []
        refusal = ""
        try:
            await handler(inbound)
        except Exception as exc:
            refusal = refusal_of(exc, f"web:{chat}")
        finally:
            held = self._held.pop(chat, []) if renews else []
        if renews and not refusal:
            await self._tabs.send(chat, {"type": "history", "items": [], "more": False})
        for frame in held:
            await self._tabs.send(chat, frame)
        return refusal, parts

    # -- messages out

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        """Show ``message`` in every tab of the chat (or keep it until one connects).

        The running turn's answer takes the place of its streamed draft; the
        answer to a command (addressed to the message that asked) stands apart.
        """
        frame: Frame = {
            "type": "reply",
            "text": message.text,
            "html": self._renderer.render(message.text),
        }
        if message.outbound_id:
            frame["id"] = message.outbound_id
        if message.reply_to:
            frame["apart"] = True
        else:
            self._live.answered(chat_id)
        held = self._held.get(chat_id)
        if held is not None:
            # A /new in hand: its answer shows after the view is cleared.
            held.append(frame)
            return Delivery(delivered_to=f"web:{chat_id}")
        if not await self._tabs.send(chat_id, frame):
            self._tabs.keep(chat_id, frame)
            # Kept in memory for a page that is not there: not delivered as far as a
            # crash is concerned (the ledger leaves it open; a restart sends it again).
            return Delivery(
                delivered_to=f"web:{chat_id} (queued until the page reconnects)", held=True
            )
        return Delivery(delivered_to=f"web:{chat_id}")

    # -- a running turn, and the questions it asks

    def follow(self, chat_id: str, turn: Turn) -> None:
        """Show typing, tools and the answer as it is written while ``turn`` runs (:mod:`.live`)."""
        self._live.follow(chat_id, turn)

    async def ask_approval(self, chat_id: str, ask: ApprovalAsk) -> str:
        """The question with its buttons, in every tab until decided (:mod:`.questions`)."""
        return await self._questions.ask(chat_id, ask)

    async def settle_approval(self, chat_id: str, message_id: str, text: str) -> None:
        await self._questions.settle(chat_id, message_id, text)

    async def answer_press(self, inbound: Inbound, text: str) -> None:
        """The answer to a press, apart from the turn it resumes."""
        await self.deliver(inbound.chat_id, OutboundMessage(text=text, reply_to=inbound.message_id))


def is_chat_path(path: str) -> bool:
    """The paths the web chat serves (its guard and headers apply to these)."""
    return path in ("/", "/ws") or path.startswith((f"/{STATIC}/", "/files/"))


def _command(text: str) -> str:
    """The command a message starts with (``/new@bot please`` → ``/new``), or ""."""
    words = text.split(maxsplit=1)
    return words[0].split("@", 1)[0].lower() if words and words[0].startswith("/") else ""


def _media_ref(part: FilePart) -> MediaRef:
    kind = "photo" if part.media_type.startswith("image/") else "document"
    return MediaRef(
        kind=kind, ref=part.url, media_type=part.media_type, name=part.name, size=part.size
    )


def _load_assets() -> dict[str, tuple[bytes, str]]:
    """The page and its scripts and styles, read once from the package."""
    assets: dict[str, tuple[bytes, str]] = {}
    for item in resources.files("channels.web").joinpath("static").iterdir():
        suffix = Path(item.name).suffix
        if item.is_file() and suffix in _TYPES:
            assets[item.name] = (item.read_bytes(), _TYPES[suffix])
    return assets

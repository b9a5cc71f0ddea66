"""The web chat: a page and a WebSocket per browser tab, over aiohttp.

Each browser holds one chat (``web:<id>`` is its session key). The page sends
``{"text": ...}``; the gateway pushes ``{"type": "reply", "text": ...}``, and
``{"type": "error", "error": ...}`` for a message it did not take (the socket
stays open). Replies for a chat with no open socket wait in a short backlog
and are sent when the chat reconnects.

An approval question is ``{"type": "approval", "id", "text", "buttons"}``
(each button ``[data, label]``); a press comes back as ``{"press": data}``
and is handled as the command it stands for (:mod:`channels.approvals`).
Once decided, ``{"type": "approval_settled", "id", "text"}`` replaces the
question's buttons. A question for a chat with no open page is sent as text
naming the commands instead.

What keeps other people out (docs/decisions/web-01 to web-03):

- The chat id is bound to a secret: the server signs it with an HMAC key kept
  in ``<data_dir>/state/web_secret`` and hands it to the browser as an
  HttpOnly, SameSite=Strict cookie. A socket without a correctly signed chat
  gets a fresh chat of its own, so knowing an id gives nothing.
- A socket whose ``Origin`` is neither the page's own nor listed in
  ``channels.web.allowed_origins`` is refused (403). A request without
  ``Origin`` is let through: browsers always send it on a WebSocket upgrade,
  so its absence means a client no hostile page can drive.
- With no token, only loopback names (and the hosts of allowed origins) are
  answered in ``Host``, which defeats DNS rebinding. With ``channels.web.token``
  every request needs it: ``/?token=…`` once sets a cookie; a client may send
  ``Authorization: Bearer …`` instead. Off loopback a token is required.
- Every response carries a strict Content-Security-Policy (the page's script
  is a file of its own, its style is allowed by hash) and refuses framing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import orjson
from aiohttp import WSMsgType, hdrs, web

from channels.approvals import BUTTONS, button_data, commands_hint, press_command
from channels.base import ApprovalAsk, Inbound, InboundHandler
from channels.errors import ChannelError, InboundError
from config.channels import HttpConfig, WebConfig
from config.section import is_loopback, normal_origin, read_secret
from threads.errors import (
    BusyError,
    CorruptError,
    InvalidKeyError,
    ManagerClosedError,
    NewerFormatError,
    QuarantinedError,
    StoreError,
)
from threads.sinks import Delivery, OutboundMessage

log = logging.getLogger(__name__)

MAX_TEXT = 16_000
BACKLOG = 100
KEY_BYTES = 32
COOKIE_MAX_AGE = 400 * 24 * 3600  # the longest a browser keeps a cookie
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_STYLE = re.compile(r"<style>(.*?)</style>", re.DOTALL)

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CHAT_PATHS = frozenset({"/", "/web_chat.js", "/ws"})

# What the person at the page reads when a message was not taken: one plain
# line each, naming no internals (no paths, URLs or exception names).
BUSY = "This chat is busy and did not take the message: send it again once the answer arrives."
UNREADABLE = (
    "This conversation's stored history cannot be read, so the message was not taken: "
    "send /new to start a fresh conversation."
)
NOT_SAVED = "The message could not be saved, so it was not taken: try again in a moment."
BAD_CHAT = "This chat cannot take messages: reload the page to start a new chat."
CLOSING = (
    "The gateway is shutting down and did not take the message: send it again once it is back."
)
FAILED = (
    "Something went wrong and the message was not taken: try again, and tell the gateway's "
    "operator if it keeps happening."
)


class WebChannel:
    """The browser chat channel."""

    name = "web"
    attached = True  # its chats are connections to this process (channels.base.Attached)

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        key: bytes | None = None,
        allowed_origins: Iterable[str] = (),
        token: str = "",
    ) -> None:
        """A channel listening on ``host:port``.

        ``key`` signs chat ids (a random one when not given: chats then last as
        long as the process); ``allowed_origins`` are the other origins whose
        pages may open the socket; ``token``, when set, guards every request.
        Raises :class:`ChannelError` for a bind off loopback with no token.
        """
        if not is_loopback(host) and not token:
            raise ChannelError(
                f"http.host {host!r} is not a loopback address and the web chat has "
                "no token: set channels.web.token (or token_file), or bind 127.0.0.1"
            )
        self.host = host
        self.port = port
        self._key = key or secrets.token_bytes(KEY_BYTES)
        self._origins = frozenset(normal_origin(origin) for origin in allowed_origins)
        hosts = (urlsplit(origin).hostname for origin in self._origins)
        self._origin_hosts = frozenset(host for host in hosts if host)
        self._token = token
        self._handler: InboundHandler | None = None
        self._sockets: dict[str, set[web.WebSocketResponse]] = defaultdict(set)
        self._backlog: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=BACKLOG))
        self._counter = 0
        self._root: web.Application | None = None
        assets = resources.files("channels")
        self._page_html = assets.joinpath("web_chat.html").read_text(encoding="utf-8")
        self._script = assets.joinpath("web_chat.js").read_text(encoding="utf-8")
        self._headers = security_headers(self._page_html)

    @classmethod
    def from_config(cls, config: WebConfig, http: HttpConfig, *, state_dir: Path) -> WebChannel:
        """The channel ``[channels.web]`` describes on ``[http]``, its key in ``state_dir/web_secret``.

        Raises :class:`ChannelError`, naming the setting, when the token file
        cannot be read or is empty, or the key file is not a key.
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
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def install(self, app: web.Application) -> None:
        """Serve the chat at the root of ``app``, the gateway's one HTTP server.

        Its guard (host, token, origin rules) and its headers apply to the chat's
        own paths only: the other parts under the same server (the API, the
        admin pages, platform webhooks) keep their own rules.
        """
        self._root = app
        app.middlewares.append(self._guard)
        app.on_response_prepare.append(self._add_headers)
        app.router.add_get("/", self._page)
        app.router.add_get("/web_chat.js", self._script_file)
        app.router.add_get("/ws", self._socket)

    def app(self) -> web.Application:
        """An application serving only the chat (for tests of the chat alone)."""
        app = web.Application()
        self.install(app)
        return app

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler

    async def stop(self) -> None:
        for sockets in list(self._sockets.values()):
            for ws in list(sockets):
                await ws.close()
        self._handler = None

    # -- who may ask

    @property
    def chat_cookie(self) -> str:
        """The cookie holding the browser's signed chat id (cookies ignore ports; names don't)."""
        return f"gateway_chat_{self.port}"

    @property
    def auth_cookie(self) -> str:
        return f"gateway_auth_{self.port}"

    @web.middleware
    async def _guard(self, request: web.Request, handler: RequestHandler) -> web.StreamResponse:
        if request.path not in CHAT_PATHS:
            return await handler(request)
        if not self._token:
            host = _hostname(request.host)
            if not is_loopback(host) and host not in self._origin_hosts:
                raise web.HTTPForbidden(
                    text=f"this web chat answers only on loopback names, not {host[:100]!r}: "
                    "add the page's origin to channels.web.allowed_origins"
                )
            return await handler(request)
        if self._authorized(request):
            return await handler(request)
        given = request.query.get("token")
        if request.path == "/" and given is not None and _equal(given, self._token):
            # The token leaves the address bar; the cookie stands for it from now on.
            response = web.Response(status=303, headers={hdrs.LOCATION: "/"})
            self._set_cookie(response, request, self.auth_cookie, self._sign("auth", self._token))
            return response
        raise web.HTTPUnauthorized(
            text="this web chat needs its token: open the page once as /?token=<token>"
        )

    def _authorized(self, request: web.Request) -> bool:
        cookie = request.cookies.get(self.auth_cookie)
        if cookie is not None and _equal(cookie, self._sign("auth", self._token)):
            return True
        scheme, _, given = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        return scheme.lower() == "bearer" and _equal(given.strip(), self._token)

    def _check_origin(self, request: web.Request) -> None:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is None:
            return
        try:
            listed = normal_origin(origin) in self._origins
        except ValueError:  # "null", from a sandboxed frame or a file
            listed = False
        if listed or _same_origin(origin, request.host):
            return
        raise web.HTTPForbidden(
            text=f"origin {origin[:100]!r} may not open this web chat: "
            "only its own page and channels.web.allowed_origins may"
        )

    def _chat_of(self, request: web.Request) -> str | None:
        """The chat id the request's cookie proves, or None."""
        chat, _, mac = request.cookies.get(self.chat_cookie, "").partition(".")
        if _CHAT_ID.fullmatch(chat) and _equal(mac, self._sign("chat", chat)):
            return chat
        return None

    def _sign(self, purpose: str, value: str) -> str:
        message = f"{purpose}\0{value}".encode()
        mac = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    def _give_chat(self, response: web.StreamResponse, request: web.Request) -> str:
        chat = secrets.token_hex(8)
        self._set_cookie(response, request, self.chat_cookie, f"{chat}.{self._sign('chat', chat)}")
        return chat

    def _set_cookie(
        self, response: web.StreamResponse, request: web.Request, name: str, value: str
    ) -> None:
        response.set_cookie(
            name,
            value,
            max_age=COOKIE_MAX_AGE,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure or None,
        )

    async def _add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        # The chat's responses, and whatever else the root answers (a 404), not the
        # responses of the parts mounted under their own prefixes.
        if request.path in CHAT_PATHS or request.match_info.current_app is self._root:
            response.headers.update(self._headers)

    # -- what is served

    async def _page(self, request: web.Request) -> web.Response:
        response = web.Response(text=self._page_html, content_type="text/html")
        if self._chat_of(request) is None:
            self._give_chat(response, request)
        return response

    async def _script_file(self, request: web.Request) -> web.Response:
        return web.Response(text=self._script, content_type="text/javascript")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        self._check_origin(request)
        ws = web.WebSocketResponse(heartbeat=30)
        chat_id = self._chat_of(request) or self._give_chat(ws, request)
        await ws.prepare(request)
        self._sockets[chat_id].add(ws)
        try:
            await ws.send_json({"type": "hello", "chat": chat_id})
            for text in self._backlog.pop(chat_id, None) or ():
                await ws.send_json({"type": "reply", "text": text})
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    text, press = _text_of(msg.data)
                except InboundError as exc:
                    await ws.send_json({"type": "error", "error": str(exc)})
                    continue
                refusal = await self._receive(chat_id, text, press)
                if refusal:
                    await ws.send_json({"type": "error", "error": refusal})
        finally:
            self._sockets[chat_id].discard(ws)
            if not self._sockets[chat_id]:
                del self._sockets[chat_id]
        return ws

    async def _receive(self, chat_id: str, text: str, press: str = "") -> str:
        """Hand the message on; "" when it was taken, else the line that tells why not."""
        if self._handler is None:
            return CLOSING
        self._counter += 1
        inbound = Inbound(
            channel=self.name,
            chat_id=chat_id,
            user_id=chat_id,
            text=text,
            # A press names its question, which the page knows by its request id.
            message_id=press.rpartition(":")[2] if press else str(self._counter),
            press=press,
        )
        try:
            await self._handler(inbound)
        except Exception as exc:
            return refusal_of(exc, f"web:{chat_id}")
        return ""

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        sockets = list(self._sockets.get(chat_id, ()))
        if not sockets:
            self._backlog[chat_id].append(message.text)
            return Delivery(delivered_to=f"web:{chat_id} (queued until the page reconnects)")
        for ws in sockets:
            await ws.send_json({"type": "reply", "text": message.text})
        return Delivery(delivered_to=f"web:{chat_id}")

    async def ask_approval(self, chat_id: str, ask: ApprovalAsk) -> str:
        """The question with its buttons on the open page; as text naming the commands if none is."""
        sockets = list(self._sockets.get(chat_id, ()))
        if not sockets:
            hint = commands_hint(ask.request_id)
            await self.deliver(chat_id, OutboundMessage(text=f"{ask.text}\n{hint}"))
            return ask.request_id
        buttons = [[button_data(choice, ask.request_id), label] for choice, label in BUTTONS]
        question = {"type": "approval", "id": ask.request_id, "text": ask.text, "buttons": buttons}
        for ws in sockets:
            await ws.send_json(question)
        return ask.request_id

    async def settle_approval(self, chat_id: str, message_id: str, text: str) -> None:
        """The question's buttons give way to how it was decided."""
        for ws in list(self._sockets.get(chat_id, ())):
            await ws.send_json({"type": "approval_settled", "id": message_id, "text": text})

    async def answer_press(self, inbound: Inbound, text: str) -> None:
        """The answer to a press, shown in the chat like any reply."""
        await self.deliver(inbound.chat_id, OutboundMessage(text=text))


def refusal_of(exc: Exception, chat: str) -> str:
    """The line the person reads for a message the gateway did not take; the cause is logged."""
    known: list[tuple[type[Exception] | tuple[type[Exception], ...], str]] = [
        (BusyError, BUSY),
        ((QuarantinedError, CorruptError, NewerFormatError), UNREADABLE),
        (ManagerClosedError, CLOSING),
        (InvalidKeyError, BAD_CHAT),
        ((StoreError, OSError), NOT_SAVED),
    ]
    for kinds, line in known:
        if isinstance(exc, kinds):
            log.warning("%s: message not taken: %s", chat, exc)
            return line
    log.error("%s: message not taken", chat, exc_info=exc)
    return FAILED


def security_headers(page_html: str) -> dict[str, str]:
    """The headers every response carries; the page's one ``<style>`` is allowed by its hash."""
    hashes = [hashlib.sha256(style.encode()).digest() for style in _STYLE.findall(page_html)]
    styles = " ".join(f"'sha256-{base64.b64encode(h).decode()}'" for h in hashes) or "'none'"
    policy = "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            f"style-src {styles}",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


def load_key(path: Path) -> bytes:
    """The HMAC key in ``path``; made from :mod:`secrets` (mode 0600) when there is none.

    A key another process made first wins. Raises :class:`ChannelError` when
    the file is not a key or cannot be read (it is never followed as a symlink).
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ChannelError(f"cannot make the directory of {path}: {exc.strerror}") from None
    existing = _read_key(path)
    if existing is not None:
        return existing
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(draft, flags, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES).hex().encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        # A link never replaces: the file appears whole, or another start's key stays.
        os.link(draft, path)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ChannelError(f"cannot make the web chat key {path}: {exc.strerror}") from None
    finally:
        draft.unlink(missing_ok=True)
    key = _read_key(path)
    if key is None:
        raise ChannelError(f"the web chat key {path} was removed while it was being made")
    return key


def _read_key(path: Path) -> bytes | None:
    """The key in ``path``, or None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ChannelError(f"cannot read the web chat key {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read(4 * KEY_BYTES)
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except ValueError:  # UnicodeDecodeError is one
        key = b""
    if len(key) != KEY_BYTES:
        raise ChannelError(
            f"{path} is not a web chat key: delete it and start again "
            "(a new key is made; open chats then start afresh)"
        )
    return key


def _equal(given: str, expected: str) -> bool:
    """Constant-time comparison of a value from a request with a secret one."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _hostname(host: str) -> str:
    """The name in a ``Host`` header, lower case, without port or brackets ("" if none)."""
    try:
        return urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return ""


def _same_origin(origin: str, host: str) -> bool:
    """Whether ``Origin`` names the host and port the request was sent to (its ``Host``).

    A ``Host`` without a port means the default port of the origin's scheme.
    """
    seen = urlsplit(origin)
    sent = urlsplit(f"//{host}")
    try:
        default = {"http": 80, "https": 443}[seen.scheme]
        return (
            seen.hostname is not None
            and seen.hostname == sent.hostname
            and (seen.port or default) == (sent.port or default)
            and seen.path == ""
        )
    except (KeyError, ValueError):
        return False


def _text_of(data: str) -> tuple[str, str]:
    """A message's text, and the button data when it is a press (its text is the command)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InboundError('a web chat message must be JSON like {"text": "hi"}') from None
    press = obj.get("press") if isinstance(obj, dict) else None
    if isinstance(press, str):
        command = press_command(press)
        if command is None:
            raise InboundError("that button does nothing any more")
        return command, press
    text = obj.get("text") if isinstance(obj, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise InboundError("the message has no 'text'")
    if len(text) > MAX_TEXT:
        raise InboundError(f"the message is {len(text)} characters; the limit is {MAX_TEXT}")
    return text, ""

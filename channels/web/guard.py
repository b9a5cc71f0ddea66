"""Who may use the web chat: the signed chat cookie, Origin, Host, the token, the headers.

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
- Every response carries a strict Content-Security-Policy (scripts and styles
  are the chat's own files) and refuses framing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from channels.errors import ChannelError
from config.section import is_loopback, normal_origin, same_origin

KEY_BYTES = 32
COOKIE_MAX_AGE = 400 * 24 * 3600  # the longest a browser keeps a cookie
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: What every response of the chat carries. Images come from the chat itself
#: (its attachments) or from the page's own memory (a picture being sent).
SECURITY_HEADERS = {
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' blob:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class Guard:
    """The chat's access rules, for the paths it serves (``is_chat_path``)."""

    def __init__(
        self,
        *,
        key: bytes,
        port: int,
        token: str,
        allowed_origins: Iterable[str],
        is_chat_path: Callable[[str], bool],
    ) -> None:
        self.port = port
        self._key = key
        self._token = token
        self._origins = frozenset(normal_origin(origin) for origin in allowed_origins)
        hosts = (urlsplit(origin).hostname for origin in self._origins)
        self._origin_hosts = frozenset(host for host in hosts if host)
        self._is_chat_path = is_chat_path

    @property
    def chat_cookie(self) -> str:
        """The cookie holding the browser's signed chat id (cookies ignore ports; names don't)."""
        return f"gateway_chat_{self.port}"

    @property
    def auth_cookie(self) -> str:
        return f"gateway_auth_{self.port}"

    @web.middleware
    async def middleware(self, request: web.Request, handler: RequestHandler) -> web.StreamResponse:
        if not self._is_chat_path(request.path):
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
            self.set_cookie(response, request, self.auth_cookie, self._sign("auth", self._token))
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

    def check_origin(self, request: web.Request) -> None:
        """Refuse (403) a socket opened by a page of another origin."""
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is None:
            return
        try:
            listed = normal_origin(origin) in self._origins
        except ValueError:  # "null", from a sandboxed frame or a file
            listed = False
        if listed or same_origin(origin, request.host):
            return
        raise web.HTTPForbidden(
            text=f"origin {origin[:100]!r} may not open this web chat: "
            "only its own page and channels.web.allowed_origins may"
        )

    def chat_of(self, request: web.Request) -> str | None:
        """The chat id the request's cookie proves, or None."""
        chat, _, mac = request.cookies.get(self.chat_cookie, "").partition(".")
        if _CHAT_ID.fullmatch(chat) and _equal(mac, self._sign("chat", chat)):
            return chat
        return None

    def give_chat(self, response: web.StreamResponse, request: web.Request) -> str:
        """A fresh chat for this browser, its signed id set as the chat cookie."""
        chat = secrets.token_hex(8)
        self.set_cookie(response, request, self.chat_cookie, f"{chat}.{self._sign('chat', chat)}")
        return chat

    def _sign(self, purpose: str, value: str) -> str:
        message = f"{purpose}\0{value}".encode()
        mac = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")

    def set_cookie(
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

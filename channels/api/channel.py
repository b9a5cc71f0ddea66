"""The OpenAI-compatible API channel: ``/v1/chat/completions`` and ``/v1/models``.

Mounted under ``/v1`` on the gateway's one HTTP server. A request's ``model``
names the agent to run (``GET /v1/models`` lists them); its new user message
becomes a wake in the session the request names (see
:mod:`channels.api.request`), through the router like any channel's message,
so slash commands work here too. The response is what the turn delivers to
its caller — the ``dispatch(to=caller:user)`` body or its final text — whole,
or streamed as OpenAI's server-sent chunks: the model's text as it is written,
then whatever of the delivered answer was not already shown, then
``data: [DONE]``. Requests on one session queue (each is its own turn).

Every refusal is an error in OpenAI's shape with its status (see
:mod:`channels.api.errors`). With keys configured every request needs
``Authorization: Bearer <key>``, compared in constant time; without any, the
API answers only on a loopback address.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import hdrs, web

from channels.api.answers import CLOSING, Exchange, answer_of, refusal_of
from channels.api.errors import ApiError, bad_request
from channels.api.request import ChatRequest, read_chat, session_name, unknown_model
from channels.api.wire import (
    DONE,
    SSE_HEADERS,
    Chunks,
    completion,
    error_event,
    error_response,
    json_response,
    model_entry,
    model_list,
)
from channels.base import Inbound, InboundHandler, MediaRef
from channels.errors import ChannelError
from config.channels import ApiConfig, HttpConfig
from config.section import is_loopback, read_secret
from threads.sinks import Delivery, OutboundMessage
from threads.turns import StepFinish, TextDelta, Turn

log = logging.getLogger(__name__)

RequestHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEFAULT_SESSION = web.RequestKey("api_default_session", str)
RESET_VALUES = frozenset({"1", "true", "yes"})
PATHS = "POST /v1/chat/completions, GET /v1/models and GET /v1/models/<model>"


class ApiChannel:
    """The ``api`` channel: an aiohttp application answering OpenAI's chat-completions calls."""

    name = "api"
    attached = True  # its chats are connections to this process (channels.base.Attached)

    def __init__(
        self,
        *,
        agents: Sequence[str],
        default_agent: str,
        keys: Iterable[str] = (),
        host: str = "127.0.0.1",
        max_request_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        """``agents`` are the models offered; ``keys`` the bearer keys (none: no key asked).

        Raises :class:`ChannelError` for a host off loopback with no key.
        """
        keys = [key for key in keys if key]
        if not keys and not is_loopback(host):
            raise ChannelError(
                f"http.host {host!r} is not a loopback address and the API has no key: set "
                "channels.api.api_key (or api_key_file), or bind 127.0.0.1"
            )
        self.agents = tuple(agents)
        self.default_agent = default_agent
        # Each key's default session is named by a short digest of it, never the key.
        self._keys = tuple(
            (key.encode(), f"key-{hashlib.sha256(key.encode()).hexdigest()[:12]}") for key in keys
        )
        self._max_bytes = max_request_bytes
        self._handler: InboundHandler | None = None
        self._exchanges: dict[str, Exchange] = {}
        self._created = int(time.time())

    @classmethod
    def from_config(
        cls, config: ApiConfig, http: HttpConfig, *, agents: Sequence[str], default_agent: str
    ) -> ApiChannel:
        """The channel ``[channels.api]`` describes on ``[http]``.

        Raises :class:`ChannelError`, naming the setting, when the key file
        cannot be read or holds no key.
        """
        return cls(
            agents=agents,
            default_agent=default_agent,
            keys=read_keys(config),
            host=http.host,
            max_request_bytes=http.max_request_bytes,
        )

    def app(self) -> web.Application:
        """The API's application, to mount at ``/v1`` (its routes and its guard only)."""
        app = web.Application(middlewares=[self._guard])
        app.router.add_post("/chat/completions", self._completions)
        app.router.add_get("/models", self._models)
        app.router.add_get("/models/{model}", self._model)
        return app

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler

    async def stop_receiving(self) -> None:
        """New requests are refused (503); those waiting get their turns' answers."""
        self._handler = None

    async def stop(self) -> None:
        self._handler = None

    def health(self) -> dict[str, Any]:
        return {"requests_waiting": len(self._exchanges), "keys": len(self._keys)}

    # -- the router's side

    def answer(self, message_id: str, turn: Turn) -> None:
        exchange = self._exchanges.get(message_id)
        if exchange is not None:
            exchange.turn = turn

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        """Add ``message`` to the answer of the request it replies to.

        A message addressed to no request (``dispatch(to=user)``) joins the
        answer of the session's running request. With no request waiting (it
        left, or the gateway restarted since) the message stays in the session's
        history only, and the delivery says so.
        """
        if message.reply_to:
            exchange = self._exchanges.get(message.reply_to)
        else:
            exchange = self._running_on(chat_id)
        if exchange is None or exchange.chat != chat_id:
            return Delivery(
                delivered_to=f"api:{chat_id} (no request waits for it: it is in the session only)",
                dropped=True,
            )
        exchange.texts.append(message.text)
        return Delivery(delivered_to=f"api:{chat_id}", message_ids=(exchange.id,))

    def _running_on(self, chat_id: str) -> Exchange | None:
        # Requests on one session run in order: the oldest undecided one runs now.
        for exchange in self._exchanges.values():
            if exchange.chat == chat_id and exchange.turn is not None and not exchange.turn.done():
                return exchange
        return None

    # -- who may ask

    @web.middleware
    async def _guard(self, request: web.Request, handler: RequestHandler) -> web.StreamResponse:
        """Keys first, then the route; every refusal, aiohttp's own too, in OpenAI's shape."""
        try:
            request[DEFAULT_SESSION] = self._authorize(request)
            return await handler(request)
        except ApiError as exc:
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(_from_http(exc, request))

    def _authorize(self, request: web.Request) -> str:
        """The default session name of the request's key; raises :class:`ApiError` (401)."""
        if not self._keys:
            return "default"
        scheme, _, given = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(
                401,
                "You didn't provide an API key: send it as Authorization: Bearer <key>.",
                retry=False,
            )
        presented = given.strip().encode()
        found = ""
        # Every key is compared, each in constant time: which one matched does not show.
        for key, label in self._keys:
            if hmac.compare_digest(presented, key) and not found:
                found = label
        if not found:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key", retry=False)
        return found

    # -- what is served

    async def _models(self, request: web.Request) -> web.Response:
        return json_response(200, model_list(self.agents, self._created))

    async def _model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.agents:
            raise unknown_model(name)
        return json_response(200, model_entry(name, self._created))

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        chat = read_chat(await self._json(request), self.agents, self.default_agent)
        name = session_name(request.headers, chat.user, request[DEFAULT_SESSION])
        headers = {"X-Session-Key": f"api:{name}"}
        if request.headers.get("X-Session-Reset", "").strip().lower() in RESET_VALUES:
            reset = Exchange(_new_id(), name)
            try:
                await self._hand(reset, chat, "/new")
            finally:
                self._forget(reset)
        exchange = Exchange(_new_id(), name)
        try:
            await self._hand(exchange, chat, chat.text, chat.images)
            if chat.stream:
                return await self._stream(request, exchange, chat, headers)
            if exchange.turn is not None:
                with contextlib.suppress(Exception):  # answer_of reads how it ended
                    await exchange.turn.wait()
            try:
                answer = answer_of(exchange)
            except ApiError as exc:
                return error_response(exc, headers)
        finally:
            self._forget(exchange)
        body = completion(
            exchange.id, int(time.time()), chat.model, answer.content, answer.finish, answer.usage
        )
        return json_response(200, body, headers)

    async def _hand(
        self, exchange: Exchange, chat: ChatRequest, text: str, media: tuple[MediaRef, ...] = ()
    ) -> None:
        """Hand one message to the router, ``exchange`` waiting for what it delivers.

        The exchange is in place before the router sees the message: a
        command is answered during the call, a turn may answer soon after.
        """
        handler = self._handler
        if handler is None:
            raise ApiError(503, CLOSING, type="server_error", code="shutting_down")
        inbound = Inbound(
            channel=self.name,
            chat_id=exchange.chat,
            user_id=chat.user or exchange.chat,
            text=text,
            message_id=exchange.id,
            mentioned=True,
            media=media,
            agent=chat.agent,
        )
        self._exchanges[exchange.id] = exchange
        try:
            await handler(inbound)
        except Exception as exc:
            raise refusal_of(exc, f"api:{exchange.chat}") from None

    def _forget(self, exchange: Exchange) -> None:
        self._exchanges.pop(exchange.id, None)

    async def _json(self, request: web.Request) -> Any:
        too_large = ApiError(
            413,
            f"The request is larger than this gateway takes ({self._max_bytes} bytes, "
            "http.max_request_bytes): send smaller images, or fewer.",
            code="request_too_large",
            retry=False,
        )
        if request.content_length is not None and request.content_length > self._max_bytes:
            raise too_large
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large from None
        if len(raw) > self._max_bytes:
            raise too_large
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"The request body is not JSON: {exc}") from None

    async def _stream(
        self, request: web.Request, exchange: Exchange, chat: ChatRequest, headers: dict[str, str]
    ) -> web.StreamResponse:
        """OpenAI's stream: a role chunk, the text as written, the rest of the answer, [DONE]."""
        response = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        try:
            await response.prepare(request)
            chunks = Chunks(exchange.id, int(time.time()), chat.model)
            await response.write(chunks.role())
            shown = Shown()
            if exchange.turn is not None:
                async for event in exchange.turn.events():
                    if isinstance(event, TextDelta) and event.text:
                        await response.write(chunks.text(shown.add(event.text)))
                    elif isinstance(event, StepFinish):
                        shown.step_done()
            try:
                answer = answer_of(exchange)
            except ApiError as exc:
                await response.write(error_event(exc) + DONE)
                return response
            rest = shown.rest_of(answer.content)
            out = (chunks.text(rest) if rest else b"") + chunks.finish(answer.finish)
            if chat.include_usage:
                out += chunks.usage(answer.usage)
            await response.write(out + DONE)
        except ConnectionResetError:
            log.info("api:%s: the client left during the stream; the turn goes on", exchange.chat)
        return response


class Shown:
    """What a stream has shown of the model's text, step by step.

    A step's text is the model's writing before its tool calls, or the final
    answer. A new step's text is set apart from what came before by a blank
    line. At the end, the delivered answer is shown only where it is not the
    last step's text already on screen.
    """

    __slots__ = ("_any", "_last", "_step")

    def __init__(self) -> None:
        self._any = False
        self._step = ""
        self._last = ""

    def add(self, text: str) -> str:
        """The text to send for one delta."""
        apart = not self._step and self._any
        self._step += text
        self._any = True
        return f"\n\n{text}" if apart else text

    def step_done(self) -> None:
        self._last, self._step = self._step, ""

    def rest_of(self, answer: str) -> str:
        last = self._step or self._last
        if last and answer.startswith(last):
            return answer[len(last) :]
        if answer and self._any:
            return f"\n\n{answer}"
        return answer


def _new_id() -> str:
    return f"chatcmpl-{secrets.token_hex(12)}"


def read_keys(config: ApiConfig) -> list[str]:
    """The API's bearer keys: ``api_key`` and each line of ``api_key_file``.

    Raises :class:`ChannelError` naming the setting when the file cannot be
    read or holds no key.
    """
    keys: list[str] = []
    inline = read_secret(config.api_key, None, "channels.api.api_key")
    if inline is not None and inline.get_secret_value():
        keys.append(inline.get_secret_value().strip())
    if config.api_key_file is not None:
        keys.extend(_keys_in(config.api_key_file))
    return keys


def _keys_in(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ChannelError(f"channels.api.api_key_file {path}: cannot read it: {reason}") from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise ChannelError(
            f"channels.api.api_key_file {path} holds no key: put one key on each line"
        )
    return keys


def _from_http(exc: web.HTTPException, request: web.Request) -> ApiError:
    """aiohttp's own refusals (no such path, wrong method, too large) in OpenAI's shape."""
    if exc.status == 404:
        return ApiError(
            404,
            f"Unknown request URL: {request.method} {request.path[:200]}. This gateway "
            f"serves {PATHS}.",
            code="unknown_url",
        )
    if exc.status == 405:
        return ApiError(405, f"{request.method} is not allowed on {request.path[:200]}: {PATHS}.")
    if exc.status == 413:
        return ApiError(413, "The request is too large.", code="request_too_large", retry=False)
    return ApiError(exc.status, exc.reason)

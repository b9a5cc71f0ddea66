"""A fake Telegram Bot API server on loopback, for testing bots with the real library.

``FakeTelegram`` speaks the Bot API's wire protocol — ``/bot<token>/<method>``
with query, form, JSON or multipart parameters, ``{"ok": true, "result": …}``
answers and Telegram's error answers — well enough that python-telegram-bot
runs against it unmodified. Point the library at it and drive it like a chat::

    from telegram.ext import Application, MessageHandler, filters
    from channels.testing import FakeTelegram

    async def echo(update, context):
        await update.message.reply_text(update.message.text)

    async def test_the_bot_echoes() -> None:
        async with FakeTelegram(bot_username="echo_bot") as fake:
            app = (
                Application.builder()
                .token(fake.token)
                .base_url(fake.base_url)            # f"{fake.url}/bot"
                .base_file_url(fake.base_file_url)  # f"{fake.url}/file/bot"
                .build()
            )
            app.add_handler(MessageHandler(filters.TEXT, echo))
            async with app:
                await app.start()
                await app.updater.start_polling()
                ann = fake.user("Ann")
                fake.send_dm(ann, "hello")
                [reply] = await fake.wait_for_sent(ann, 1)
                assert reply.text == "hello"
                await app.updater.stop()
                await app.stop()

Acting as people (each call returns an ``Injected`` with the update and
message ids): ``user()``, ``group(supergroup=…, forum=…)``, ``open_topic()``,
``send_dm()``, ``send_group(mention=…, reply_to=…, topic=…)``,
``send_photo()``, ``send_document()``, ``send_voice()``, ``send_sticker()``,
``edit_message()``, ``press_button()``, ``add_file()``, ``inject()`` for a raw
update. ``FakeTelegram(privacy_mode=True)`` delivers in groups only what a bot
in privacy mode gets.

Reading what the bot did: ``sent(chat)`` (frozen ``SentMessage`` records with
the text as shown, the markup as sent, reply and thread ids, every edit),
``calls(method)``, ``chat_actions()``, ``reactions()``, ``commands()``,
``webhook``, ``callback_answers``, ``history(chat)``, ``pending_updates()``;
waiting with a deadline: ``wait_for_sent(chat, n)``, ``wait_for_calls()``,
``wait_for_poll()``, ``wait_until(check)``.

Making Telegram misbehave: ``fail_next(method, 429, retry_after=…)`` (or 400,
403, 5xx), ``conflict_polling = True`` (a second process polls the token:
every getUpdates answers 409), ``hold_next(method, applied=…)`` (the call
waits until released, before or after it takes effect: "outcome unknown").
``post_update(url, update, secret_token=…)`` posts to a webhook by hand.

The methods it answers, with Telegram's semantics and error texts: getMe;
getUpdates (offsets confirm, ``timeout`` long-polls, ``limit``,
``allowed_updates``; a newer poll ends an older one with 409); setWebhook,
deleteWebhook, getWebhookInfo (while a webhook is set the fake POSTs each
update to it with the ``X-Telegram-Bot-Api-Secret-Token`` header, and
getUpdates answers 409); sendMessage, editMessageText, editMessageCaption
(HTML parse mode checked as Telegram checks it, 4096 / 1024 UTF-16 unit
limits, replies, forum topics, inline keyboards); sendPhoto, sendDocument,
sendVoice, sendAudio, sendVideo, sendAnimation, sendSticker (uploads or file
ids); deleteMessage; sendChatAction; setMessageReaction;
set/get/deleteMyCommands; getFile and downloads; answerCallbackQuery. Any
other method answers 404 as Telegram answers an unknown one, its description
naming the method (python-telegram-bot raises that as ``InvalidToken``).

python-telegram-bot 22 warns when a test reads a duration as a number
(``RetryAfter.retry_after``, ``Voice.duration``); set ``PTB_TIMEDELTA=true``
in tests to get ``timedelta`` values instead.

Where it differs from Telegram, on purpose: Markdown parse modes are accepted
but not parsed; ``setWebhook`` takes ``http://`` URLs (a test's receiver is
on loopback); the fake never fetches a URL the bot sends as a file; a failed
webhook delivery is retried at the next change instead of on a timer.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from channels.testing.errors import ApiError, FakeUsageError
from channels.testing.telegram_inject import Injector
from channels.testing.telegram_methods import TERMINATED, BotApi
from channels.testing.telegram_params import Params
from channels.testing.telegram_webhook import WebhookPusher, post_update
from channels.testing.telegram_world import (
    JSON,
    ApiCall,
    ChatAction,
    Injected,
    Reaction,
    SentMessage,
    TgChat,
    TgUser,
    Webhook,
    World,
    commands_key,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
ChatRef = TgChat | TgUser | int
_TOKEN = re.compile(r"\d+:[A-Za-z0-9_-]+")
_DEFAULT_ERRORS = {
    400: "Bad Request: chat not found",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: TERMINATED,
    500: "Internal Server Error",
    502: "Bad Gateway",
}
_PREFIXES = {400: "Bad Request: ", 403: "Forbidden: "}


class Hold:
    """A call the fake keeps unanswered until the test releases it.

    With ``applied=False`` the call waits before it takes effect (a client
    that gives up meanwhile leaves no trace); with ``applied=True`` it takes
    effect at once and only the answer waits, so a client that times out does
    not know its message was sent.
    """

    def __init__(self, method: str, *, applied: bool) -> None:
        self.method = method
        self.applied = applied
        self.params: JSON | None = None
        self._arrived = asyncio.Event()
        self._released = asyncio.Event()

    async def arrived(self, *, timeout: float = 5.0) -> JSON:
        """Wait until the held call has come in; its parameters as sent."""
        try:
            async with asyncio.timeout(timeout):
                await self._arrived.wait()
        except TimeoutError:
            raise TimeoutError(f"no {self.method} call came in within {timeout} s") from None
        assert self.params is not None
        return self.params

    def release(self) -> None:
        """Let the held call go on and be answered."""
        self._released.set()

    async def keep(self, params: JSON) -> None:
        """Park the call (the server calls this) until the test releases it."""
        self.params = params
        self._arrived.set()
        await self._released.wait()


class FakeTelegram(Injector):
    """A fake Bot API server for one bot; ``async with FakeTelegram() as fake:``."""

    def __init__(
        self,
        *,
        token: str = "123456789:FAKE-telegram-token",
        bot_username: str = "fake_bot",
        bot_name: str = "Fake Bot",
        privacy_mode: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _TOKEN.fullmatch(token):
            raise FakeUsageError(f"token {token!r} is not shaped like a bot token (<id>:<secret>)")
        self.token = token
        self.host = host
        self.port = port
        bot = TgUser(
            id=int(token.split(":", 1)[0]), first_name=bot_name, username=bot_username, is_bot=True
        )
        world = World(bot, clock)
        super().__init__(world, privacy_mode=privacy_mode)
        self.api = BotApi(world, privacy_mode=privacy_mode)
        self._failures: dict[str, deque[ApiError]] = {}
        self._holds: dict[str, deque[Hold]] = {}
        self._every_hold: list[Hold] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pusher: asyncio.Task[None] | None = None

    # -- lifetime

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen on ``host:port`` (a free port when 0) and start webhook delivery."""
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=5.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._pusher = asyncio.create_task(
            WebhookPusher(self.world, self._session).run(), name="FakeTelegram webhook"
        )

    async def close(self) -> None:
        """End waiting polls and held calls, stop delivery, stop listening.

        A failure of webhook delivery, which would otherwise go unseen, is
        raised here once everything is closed.
        """
        self.api.closing = True
        self.world.notify()
        for hold in self._every_hold:
            hold.release()
        pusher, self._pusher = self._pusher, None
        if pusher is not None:
            pusher.cancel()
            await asyncio.wait([pusher])
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if pusher is not None and not pusher.cancelled() and pusher.exception() is not None:
            raise RuntimeError("the fake's webhook delivery failed") from pusher.exception()

    @property
    def url(self) -> str:
        """The server's root, ``http://127.0.0.1:<port>``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What python-telegram-bot's ``base_url`` takes (it appends the token)."""
        return f"{self.url}/bot"

    @property
    def base_file_url(self) -> str:
        """What python-telegram-bot's ``base_file_url`` takes (it appends the token)."""
        return f"{self.url}/file/bot"

    @property
    def bot(self) -> TgUser:
        return self.world.bot

    # -- making Telegram misbehave

    def fail_next(
        self,
        method: str,
        status: int = 429,
        *,
        retry_after: int | None = None,
        description: str | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with an error instead of doing them.

        429 carries ``parameters.retry_after`` (5 s unless given), which
        python-telegram-bot raises as ``RetryAfter``; 400 becomes
        ``BadRequest``, 403 ``Forbidden``, 409 ``Conflict``, 5xx
        ``NetworkError``. ``description`` replaces Telegram's usual text; the
        ``Bad Request: `` / ``Forbidden: `` prefix is added when missing.
        """
        name = self._method_name(method)
        if status == 429:
            retry_after = 5 if retry_after is None else retry_after
            text = description or f"Too Many Requests: retry after {retry_after}"
        else:
            text = description or _DEFAULT_ERRORS.get(status) or HTTPStatus(status).phrase
            prefix = _PREFIXES.get(status, "")
            text = text if text.startswith(prefix) else prefix + text
        queue = self._failures.setdefault(name, deque())
        queue.extend(ApiError(status, text, retry_after=retry_after) for _ in range(times))

    def hold_next(self, method: str, *, applied: bool = False) -> Hold:
        """Keep the next call of ``method`` unanswered until ``Hold.release()``."""
        hold = Hold(self._method_name(method), applied=applied)
        self._holds.setdefault(hold.method, deque()).append(hold)
        self._every_hold.append(hold)
        return hold

    @property
    def conflict_polling(self) -> bool:
        """While true, every getUpdates answers 409 as if another process polled the token."""
        return self.api.conflict_polling

    @conflict_polling.setter
    def conflict_polling(self, value: bool) -> None:
        self.api.conflict_polling = value
        self.world.notify()

    @property
    def polls_waiting(self) -> int:
        """How many getUpdates calls are waiting for updates right now."""
        return self.api.polls_waiting

    async def wait_for_poll(self, *, timeout: float = 5.0) -> None:
        """Wait until a getUpdates call is waiting for updates (the bot is polling)."""
        try:
            async with asyncio.timeout(timeout):
                await self.api.poll_waiting.wait()
        except TimeoutError:
            raise TimeoutError(f"no getUpdates call waited within {timeout} s") from None

    def _method_name(self, method: str) -> str:
        resolved = self.api.resolve(method)
        if resolved is None:
            known = ", ".join(self.api.names)
            raise FakeUsageError(f"the fake does not answer {method!r}; it answers {known}")
        return resolved[0]

    # -- what the bot did

    def sent(self, chat: ChatRef | None = None) -> list[SentMessage]:
        """The messages the bot sent, in order; in one chat (a user means their DM) or in all."""
        return self.world.sent_messages(None if chat is None else _chat_id(chat))

    def calls(self, method: str | None = None) -> list[ApiCall]:
        """Every call the bot made (or those of one method), in order, answered or refused."""
        name = None if method is None else self._method_name(method)
        return [c for c in self.world.calls if name is None or c.method == name]

    def chat_actions(self, chat: ChatRef | None = None) -> list[ChatAction]:
        chat_id = None if chat is None else _chat_id(chat)
        return [a for a in self.world.actions if chat_id is None or a.chat_id == chat_id]

    def reactions(self, chat: ChatRef | None = None) -> list[Reaction]:
        """The reactions the bot set on messages, in order."""
        chat_id = None if chat is None else _chat_id(chat)
        return [r for r in self.world.reactions if chat_id is None or r.chat_id == chat_id]

    def commands(
        self, *, scope: JSON | None = None, language_code: str = ""
    ) -> list[tuple[str, str]]:
        """The bot's command list for a scope (default scope unless given) and language."""
        key = commands_key(scope, language_code)
        return [(c["command"], c["description"]) for c in self.world.commands.get(key, [])]

    @property
    def webhook(self) -> Webhook | None:
        return self.world.webhook

    @property
    def callback_answers(self) -> list[JSON]:
        return list(self.world.callback_answers)

    def pending_updates(self) -> list[JSON]:
        """Updates nobody has confirmed yet, oldest first."""
        return list(self.world.pending)

    def history(self, chat: ChatRef) -> list[JSON]:
        """Every message now in ``chat`` (the users' and the bot's), as Bot API objects."""
        messages = self.world.messages.get(_chat_id(chat), {})
        return [messages[k] for k in sorted(messages)]

    async def wait_until(
        self, check: Callable[[], T], *, timeout: float = 5.0, what: str = "the condition"
    ) -> T:
        """``check()`` once it is truthy, re-checked at every change; TimeoutError after ``timeout``."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self.world.changed()
                    result = check()
                    if result:
                        return result
                    await changed.wait()
        except TimeoutError:
            raise TimeoutError(f"{what} did not happen within {timeout} s") from None

    async def wait_for_sent(
        self, chat: ChatRef, count: int = 1, *, timeout: float = 5.0
    ) -> list[SentMessage]:
        """The first ``count`` messages the bot sent to ``chat``, once there are that many."""

        def enough() -> list[SentMessage]:
            sent = self.sent(chat)
            return sent[:count] if len(sent) >= count else []

        try:
            return await self.wait_until(enough, timeout=timeout)
        except TimeoutError:
            seen = [s.text for s in self.sent(chat)]
            raise TimeoutError(
                f"chat {_chat_id(chat)} got {len(seen)} of {count} messages within {timeout} s: {seen}"
            ) from None

    async def wait_for_calls(
        self, method: str, count: int = 1, *, timeout: float = 5.0
    ) -> list[ApiCall]:
        """The first ``count`` answered calls of ``method``, once there are that many."""

        def enough() -> list[ApiCall]:
            calls = self.calls(method)
            return calls[:count] if len(calls) >= count else []

        return await self.wait_until(enough, timeout=timeout, what=f"{count} {method} calls")

    async def post_update(
        self, url: str, update: JSON | Injected, *, secret_token: str | None = None
    ) -> int:
        """POST an update to ``url`` as Telegram posts to a webhook; the answer's status.

        ``update`` is an update object or what an injection returned (the
        update is taken from the pending ones, and stays pending).
        """
        if self._session is None:
            raise FakeUsageError("the fake is not running; use it inside `async with`")
        if isinstance(update, Injected):
            found = [u for u in self.world.pending if u["update_id"] == update.update_id]
            if not found:
                raise FakeUsageError(f"update {update.update_id} is no longer pending")
            update = found[0]
        return await post_update(self._session, url, update, secret_token=secret_token)

    # -- HTTP

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        resolved = self.api.resolve(method)
        name = resolved[0] if resolved else method
        params: JSON = {}
        try:
            if request.match_info["token"] != self.token:
                raise ApiError(401, "Unauthorized")
            if resolved is None:
                log.warning("the fake Telegram got %s, which it does not answer", method)
                raise ApiError(404, f"Not Found: the fake Telegram does not answer {method}")
            call = await Params.read(request)
            params = call.logged()
            hold = self._take(self._holds, name)
            failure = self._take(self._failures, name)
            if hold is not None and not hold.applied:
                await hold.keep(params)
            if failure is not None:
                raise failure
            result = await resolved[1](call)
            if hold is not None and hold.applied:
                await hold.keep(params)
        except ApiError as error:
            self._record(name, params, error.status, error.description)
            return web.json_response(error.body(), status=error.status)
        except asyncio.CancelledError:
            self._record(name, params, 0, "the client went away before the answer")
            raise
        self._record(name, params, 200, None)
        return web.json_response({"ok": True, "result": result})

    def _record(self, method: str, params: JSON, status: int, description: str | None) -> None:
        self.world.calls.append(
            ApiCall(method=method, params=params, status=status, description=description)
        )
        self.world.notify()

    @staticmethod
    def _take(queues: dict[str, deque[Any]], name: str) -> Any:
        queue = queues.get(name)
        return queue.popleft() if queue else None

    async def _download(self, request: web.Request) -> web.Response:
        stored = self.world.paths.get(request.match_info["path"])
        if request.match_info["token"] != self.token or stored is None:
            return web.json_response(ApiError(404, "Not Found").body(), status=404)
        return web.Response(body=stored.data, content_type="application/octet-stream")


def _chat_id(chat: ChatRef) -> int:
    return chat if isinstance(chat, int) else chat.id

"""One Telegram bot as a gateway channel, on python-telegram-bot's ``Application``.

The Application runs inside the gateway's event loop, as PTB's own docs embed
it: ``initialize`` → ``start`` → ``updater.start_polling`` at start, the
reverse at stop. In webhook mode nothing polls: the gateway's HTTP server
hands each POSTed update (its ``secret_token`` checked) to :meth:`webhook`,
which processes it as the Application would and answers once it is taken. Every update is handled in order:
duplicates dropped, turned into an :class:`~channels.base.Inbound` and given
to the router. Rate limits are PTB's ``AIORateLimiter``'s (``retry_after``
honoured); outbound markdown is rendered to Telegram HTML in chunks by
:mod:`channels.render`, with a plain-text retry when Telegram refuses the
entities. While a turn runs the chat sees the typing indicator and, when the
model streams, the answer so far in one draft message the final answer
replaces (:mod:`channels.feedback`). An approval question is a message with
an inline keyboard (Approve / Always / Deny); a press arrives as a callback
query and reaches the router as the command its button stands for
(:mod:`channels.approvals`), answered with a toast, the question then edited
to say how it was decided.

A second process polling the same token makes Telegram answer 409 Conflict:
the account logs one line naming its bot and stops polling, rather than
fighting over ``getUpdates``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from telegram import (
    BotCommand,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    TelegramError,
    TimedOut,
)
from telegram.ext import (
    AIORateLimiter,
    Application,
    BaseUpdateProcessor,
    ContextTypes,
    TypeHandler,
)

from channels.approvals import BUTTONS, button_data, press_command
from channels.base import ApprovalAsk, Inbound, InboundHandler, leader_name
from channels.errors import ChannelStartError, DeliveryError
from channels.feedback import Feedback
from channels.refusals import refusal_of
from channels.render import TelegramChunk, telegram_chunks
from channels.seen import Seen
from channels.telegram.address import Address
from channels.telegram.inbound import address_of, inbound_of
from threads.sinks import Delivery, OutboundMessage
from threads.turns import Turn

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
ANSWER_LIMIT = 200  # an answerCallbackQuery text
TEXT_LIMIT = 4096
SEND_ATTEMPTS = 3
CONCURRENT_UPDATES = 64
# httpcore assigns each waiting request by scanning every pooled connection, so a
# big pool costs more than it saves; Telegram's own limits need few connections.
CONNECTIONS = 16

_Call = Callable[[str, str | None], Awaitable[str]]
_Thunk = Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class TelegramOptions:
    """How one account reaches Telegram and shows its turns."""

    name: str = "telegram"
    token: str
    mode: str = "polling"
    webhook_url: str = ""
    webhook_secret: str = ""
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    rate_limit: bool = True
    typing: bool = True
    drafts: bool = True
    edit_every: float = 1.0
    read_timeout: float = 10.0
    commands: Sequence[tuple[str, str]] = ()


class ChatOrder(BaseUpdateProcessor):
    """Updates of different chats are handled at once; a chat's own, one by one, in order.

    PTB creates a task per update in arrival order; tasks take a chat's lock in
    the order they were created (``asyncio.Lock`` is first come, first served),
    so each chat's messages are accepted in the order they were sent while one
    slow chat never holds up another.
    """

    def __init__(self, max_concurrent_updates: int) -> None:
        super().__init__(max_concurrent_updates)
        self._locks: dict[int, asyncio.Lock] = {}

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        message = update.effective_message if isinstance(update, Update) else None
        if message is None:
            await coroutine
            return
        chat = message.chat_id
        lock = self._locks.get(chat)
        if lock is None:
            lock = self._locks[chat] = asyncio.Lock()
        try:
            async with lock:
                await coroutine
        finally:
            if not lock.locked() and self._locks.get(chat) is lock:
                del self._locks[chat]

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None


@dataclass(slots=True)
class _Draft:
    """The message showing a running turn's answer so far; ``final`` once a delivery took it."""

    message_id: int | None
    html: str = ""
    final: bool = False


class TelegramChannel:
    """A Telegram bot account: updates in, rendered chunks out, feedback while turns run."""

    def __init__(self, options: TelegramOptions) -> None:
        self.options = options
        self.name = options.name
        builder = (
            Application.builder()
            .token(options.token)
            .base_url(options.base_url)
            .base_file_url(options.base_file_url)
            .read_timeout(options.read_timeout)
            .connection_pool_size(CONNECTIONS)
            .concurrent_updates(ChatOrder(CONCURRENT_UPDATES))
        )
        if options.mode == "webhook":
            builder = builder.updater(None)
        self._app: Application[Any, Any, Any, Any, Any, Any] = (
            builder.rate_limiter(AIORateLimiter(max_retries=3)).build()
            if options.rate_limit
            else builder.build()
        )
        self._app.add_handler(TypeHandler(Update, self._on_update))
        self._handler: InboundHandler | None = None
        self._seen = Seen()
        self._drafts: dict[str, _Draft] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._conflict: asyncio.Task[None] | None = None
        self.stopped_reason = ""
        self.bot_username = ""
        self.standby = False
        self._webhook_set = False
        self.feedback = Feedback(self, drafts=options.drafts, edit_every=options.edit_every)

    # -- lifetime

    async def start(self, handler: InboundHandler) -> None:
        self._handler = handler
        app = self._app
        try:
            await app.initialize()
        except InvalidToken:
            raise ChannelStartError(
                self.name, "Telegram refused the bot token: check it with @BotFather"
            ) from None
        except TelegramError as exc:
            raise ChannelStartError(self.name, f"Telegram could not be reached ({exc})") from None
        self.bot_username = app.bot.username
        if self.options.commands:
            await app.bot.set_my_commands(
                [BotCommand(name, about) for name, about in self.options.commands]
            )
        await app.start()
        if self.standby:
            log.info(
                "%s: @%s stands by: another process may take its updates",
                self.name,
                self.bot_username,
            )
            return
        await self.start_receiving()

    @property
    def leader(self) -> str:
        return leader_name("telegram", self.options.token)

    async def start_receiving(self) -> None:
        """Take the bot's updates: poll, or point Telegram's webhook at this gateway."""
        app = self._app
        if app.updater is not None:
            if app.updater.running:
                return
            await app.updater.start_polling(
                allowed_updates=ALLOWED_UPDATES, error_callback=self._polling_error
            )
        else:
            await app.bot.set_webhook(
                url=self.options.webhook_url,
                secret_token=self.options.webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
            )
            self._webhook_set = True
        log.info("%s: @%s is %s", self.name, self.bot_username, self.options.mode)

    async def stop_receiving(self) -> None:
        """Stop taking updates (polling ends, offsets confirmed); delivery still works.

        The gateway calls this before it lets running turns finish, so no message
        is fetched that a closing gateway could not accept. In webhook mode the
        webhook stays set: the next leader sets it again, and every gateway
        serves it meanwhile.
        """
        self._webhook_set = False
        if self._app.updater is not None and self._app.updater.running:
            await self._app.updater.stop()

    async def stop(self) -> None:
        app = self._app
        await self.feedback.close()
        if self._conflict is not None:
            await asyncio.gather(self._conflict, return_exceptions=True)
        if app.updater is not None and app.updater.running:
            await app.updater.stop()
        if app.running:
            await app.stop()
        await app.shutdown()
        self._handler = None

    @property
    def receiving(self) -> bool:
        """Whether this process takes the bot's updates: it polls, or set the webhook to itself."""
        updater = self._app.updater
        return updater.running if updater is not None else self._webhook_set

    def health(self) -> dict[str, object]:
        out: dict[str, object] = {
            "running": self._app.running and not self.stopped_reason,
            "bot": f"@{self.bot_username}" if self.bot_username else "",
            "mode": self.options.mode,
        }
        if self.standby:
            out["receiving"] = self.receiving
        if self.stopped_reason:
            out["stopped"] = self.stopped_reason
        return out

    def _polling_error(self, error: TelegramError) -> None:
        if not isinstance(error, Conflict):
            log.warning("%s: polling Telegram failed, retrying: %s", self.name, error)
            return
        if self.standby:
            # Scaled out, the other poller is a node whose lease lapsed: it stops at its
            # next renewal, and this one, the leader now, goes on polling.
            log.warning("%s: another gateway node still polls the bot; retrying", self.name)
            return
        if self._conflict is not None:
            return
        self.stopped_reason = "another process polls this bot's token (Telegram: 409 Conflict)"
        log.error(
            "%s: another process is polling the token of @%s (Telegram answered 409 Conflict); "
            "this account stopped polling — stop the other process, then restart the gateway",
            self.name,
            self.bot_username,
        )
        self._conflict = asyncio.get_running_loop().create_task(
            self._stop_polling(), name=f"{self.name} conflict"
        )

    async def _stop_polling(self) -> None:
        updater = self._app.updater
        if updater is not None and updater.running:
            # Stopping, PTB confirms the offset with one more getUpdates, which the other
            # poller's 409 refuses (and PTB logs with a traceback): that poller owns the
            # offset now, so skip the confirmation.
            updater._Updater__polling_cleanup_cb = None  # type: ignore[attr-defined]
            await updater.stop()

    # -- inbound

    async def webhook(self, request: web.Request) -> web.Response:
        """An update POSTed by Telegram (webhook mode): its secret checked, then queued."""
        given = request.headers.get(SECRET_HEADER, "")
        if not self.options.webhook_secret or not hmac.compare_digest(
            given.encode(), self.options.webhook_secret.encode()
        ):
            raise web.HTTPUnauthorized(text="wrong or missing secret token")
        try:
            data = await request.json()
            update = Update.de_json(data, self._app.bot)
        except (ValueError, TypeError, KeyError) as exc:
            raise web.HTTPBadRequest(text=f"not a Telegram update: {exc}") from None
        # Answered once the message is taken (durable, or its sender told why not): a
        # gateway that dies before answering leaves the update for Telegram to send again.
        app = self._app
        await app.update_processor.process_update(update, app.process_update(update))
        return web.Response(text="ok")

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if update.callback_query is not None:
            await self._on_press(update.callback_query)
            return
        message = update.message or update.edited_message
        if message is None or self._handler is None or self._seen_before(update):
            return
        inbound = inbound_of(
            message,
            channel=self.name,
            bot=self._app.bot.bot,
            edited=update.edited_message is not None,
        )
        try:
            await self._handler(inbound)
        except Exception as exc:
            refusal = refusal_of(exc, f"{self.name}:{inbound.chat_id}")
            await self._tell(inbound.chat_id, refusal.line)

    async def _on_press(self, query: CallbackQuery) -> None:
        """A button press: an approval's becomes its command; any other is answered as unknown."""
        command = press_command(query.data or "")
        message = query.message
        if command is None or message is None or self._handler is None:
            await query.answer("This button does nothing any more.")
            return
        address = (
            address_of(message)
            if isinstance(message, Message)
            else Address(  # a message too old for Telegram to show: its chat is enough
                chat_id=message.chat.id,
                chat_type="direct" if message.chat.type == "private" else "group",
            )
        )
        inbound = Inbound(
            channel=self.name,
            chat_id=str(address),
            user_id=str(query.from_user.id),
            text=command,
            user_name=query.from_user.full_name,
            message_id=str(message.message_id),
            chat_type=address.chat_type,
            mentioned=True,
            press=query.id,
        )
        try:
            await self._handler(inbound)
        except Exception as exc:
            refusal = refusal_of(exc, f"{self.name}:{inbound.chat_id}")
            await query.answer(refusal.line[:ANSWER_LIMIT])

    def _seen_before(self, update: Update) -> bool:
        """A duplicate: the same message (or the same edit of it) handled before.

        The messages of the last day (at most 4096) are remembered by this
        channel, so a poller that restarts (or Telegram delivering an update
        again) starts no second turn.
        """
        message = update.message or update.edited_message
        assert message is not None
        edited = message.edit_date.timestamp() if message.edit_date else 0.0
        return self._seen.again((message.chat.id, message.message_id, edited))

    async def fetch_file(self, url: str) -> bytes:
        """The bytes of ``telegram://<account>/<file id>`` (for :class:`threads.media.Media`)."""
        file_id = url.rsplit("/", 1)[-1]
        file = await self._app.bot.get_file(file_id)
        return bytes(await file.download_as_bytearray())

    # -- outbound

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        address = Address.parse(chat_id)
        chunks = telegram_chunks(message.text)
        ids: list[str] = []
        async with self._lock(chat_id):
            draft = self._drafts.get(chat_id)
            for index, chunk in enumerate(chunks):
                if index == 0 and draft is not None and not draft.final and draft.message_id:
                    ids.append(await self._edit(address, draft.message_id, chunk))
                else:
                    reply = message.reply_to if index == 0 else ""
                    ids.append(await self._send(address, chunk, reply))
            if draft is not None:
                draft.final = True
            elif self.feedback.following(chat_id):
                # A draft the running turn would still post is moot once its answer is out.
                self._drafts[chat_id] = _Draft(message_id=None, final=True)
        self._forget_lock(chat_id)
        return Delivery(delivered_to=f"{self.name}:{chat_id}", message_ids=tuple(ids))

    async def ask_approval(self, chat_id: str, ask: ApprovalAsk) -> str:
        """The question as plain text under an inline keyboard: Approve / Always / Deny."""
        address = Address.parse(chat_id)
        keyboard = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton(label, callback_data=button_data(choice, ask.request_id))
                    for choice, label in BUTTONS
                ]
            ]
        )

        async def send() -> str:
            sent = await self._app.bot.send_message(
                chat_id=address.chat_id,
                text=ask.text[:TEXT_LIMIT],
                message_thread_id=address.topic,
                reply_markup=keyboard,
            )
            return str(sent.message_id)

        try:
            return await self._attempt(address, send)
        except BadRequest as exc:
            raise DeliveryError(self.name, chat_id, exc.message) from None

    async def settle_approval(self, chat_id: str, message_id: str, text: str) -> None:
        """The question's text becomes ``text``; its keyboard goes."""
        address = Address.parse(chat_id)
        try:
            await self._app.bot.edit_message_text(
                chat_id=address.chat_id, message_id=int(message_id), text=text[:TEXT_LIMIT]
            )
        except BadRequest as exc:
            if "not modified" not in exc.message.lower():
                raise DeliveryError(self.name, chat_id, exc.message) from None

    async def answer_press(self, inbound: Inbound, text: str) -> None:
        """The toast the person who pressed sees (Telegram keeps it to 200 characters)."""
        short = text if len(text) <= ANSWER_LIMIT else text[: ANSWER_LIMIT - 1] + "…"
        await self._app.bot.answer_callback_query(inbound.press, text=short)

    def follow(self, chat_id: str, turn: Turn) -> None:
        """Show typing and the streamed draft in ``chat_id`` while ``turn`` runs."""
        if self.options.typing:
            self.feedback.follow(chat_id, turn)

    async def _tell(self, chat_id: str, text: str) -> None:
        try:
            await self.deliver(chat_id, OutboundMessage(text=text))
        except Exception:
            log.exception("%s: telling chat %s failed", self.name, chat_id)

    async def _send(self, address: Address, chunk: TelegramChunk, reply_to: str) -> str:
        reply = (
            ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)
            if reply_to.isdigit()
            else None
        )

        async def send(text: str, parse_mode: str | None) -> str:
            sent = await self._app.bot.send_message(
                chat_id=address.chat_id,
                text=text,
                parse_mode=parse_mode,
                message_thread_id=address.topic,
                reply_parameters=reply,
            )
            return str(sent.message_id)

        return await self._with_fallback(address, chunk, send)

    async def _edit(self, address: Address, message_id: int, chunk: TelegramChunk) -> str:
        async def edit(text: str, parse_mode: str | None) -> str:
            try:
                await self._app.bot.edit_message_text(
                    chat_id=address.chat_id,
                    message_id=message_id,
                    text=text,
                    parse_mode=parse_mode,
                )
            except BadRequest as exc:
                if "not modified" not in exc.message.lower():
                    raise
            return str(message_id)

        return await self._with_fallback(address, chunk, edit)

    async def _with_fallback(self, address: Address, chunk: TelegramChunk, call: _Call) -> str:
        """Send as HTML; when Telegram refuses the entities, the same chunk as plain text."""
        try:
            return await self._attempt(address, lambda: call(chunk.html, ParseMode.HTML))
        except BadRequest as exc:
            if "can't parse entities" not in exc.message.lower():
                raise DeliveryError(self.name, str(address), exc.message) from None
            log.info("%s: Telegram refused the HTML (%s); sending plain text", self.name, exc)
        return await self._attempt(address, lambda: call(chunk.text, None))

    async def _attempt(self, address: Address, call: _Thunk) -> str:
        """One Telegram call, retried on network errors; a timeout is not re-sent blindly."""
        delay = 0.5
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                return await call()
            except TimedOut:
                raise DeliveryError(
                    self.name,
                    str(address),
                    "Telegram did not answer in time; the message may or may not have arrived, "
                    "so it is not sent again",
                ) from None
            except BadRequest:
                raise
            except Forbidden as exc:
                raise DeliveryError(self.name, str(address), exc.message) from None
            except NetworkError as exc:
                if attempt == SEND_ATTEMPTS:
                    raise DeliveryError(self.name, str(address), str(exc)) from None
                log.warning("%s: sending failed (%s); retrying in %.1f s", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    # -- presence (channels.feedback)

    async def typing(self, chat_id: str) -> None:
        address = Address.parse(chat_id)
        await self._app.bot.send_chat_action(
            chat_id=address.chat_id, action=ChatAction.TYPING, message_thread_id=address.topic
        )

    async def draft(self, chat_id: str, text: str) -> None:
        chunks = telegram_chunks(text)
        if not chunks:
            return
        first = chunks[0]
        if len(chunks) > 1:  # the rest follows in new messages once the answer is final
            first = TelegramChunk(html=f"{first.html}\n…", text=f"{first.text}\n…")
        address = Address.parse(chat_id)
        async with self._lock(chat_id):
            current = self._drafts.get(chat_id)
            if current is None:
                message_id = await self._send(address, first, "")
                self._drafts[chat_id] = _Draft(message_id=int(message_id), html=first.html)
            elif not current.final and current.message_id and current.html != first.html:
                await self._edit(address, current.message_id, first)
                current.html = first.html

    async def end_draft(self, chat_id: str) -> None:
        async with self._lock(chat_id):
            draft = self._drafts.pop(chat_id, None)
            if draft is not None and not draft.final and draft.message_id:
                address = Address.parse(chat_id)
                await self._app.bot.delete_message(
                    chat_id=address.chat_id, message_id=draft.message_id
                )
        self._forget_lock(chat_id)

    def _lock(self, chat_id: str) -> asyncio.Lock:
        lock = self._locks.get(chat_id)
        if lock is None:
            lock = self._locks[chat_id] = asyncio.Lock()
        return lock

    def _forget_lock(self, chat_id: str) -> None:
        lock = self._locks.get(chat_id)
        if lock is not None and not lock.locked() and chat_id not in self._drafts:
            del self._locks[chat_id]

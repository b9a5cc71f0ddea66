"""A Discord bot as a gateway channel, on discord.py's ``Client``.

The Client runs inside the gateway's event loop as discord.py embeds it:
``login`` at start (a refused token is one line and stops only this channel),
then ``connect`` in a task the channel owns — reconnects and RESUMEs are
discord.py's. Messages arrive as ``on_message`` events, each handled in order
within its conversation (conversations side by side), duplicates dropped,
turned into an :class:`~channels.base.Inbound` for the router. Slash commands
(``app_commands.CommandTree``, synced at start) become the same text commands
the router answers for every channel, their answers sent as ephemeral
follow-ups.

Outbound markdown stays Discord markdown (:func:`channels.render.render_discord`:
chunks of at most 2000 characters, mass mentions neutralized), sent with
``allowed_mentions`` that let the bot ping nobody but the person it replies
to; rate limits are discord.py's own. While a turn runs the conversation sees
the typing indicator and, with a streaming model, the answer growing in one
message (:mod:`channels.feedback`). An approval question carries Approve /
Always / Deny buttons (:mod:`channels.discord.approvals`); a press is
acknowledged at once (an ephemeral "thinking…"), answered by the router like
the command it stands for, and the question is edited once decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import aiohttp
import discord
import yarl
from discord import app_commands
from discord.gateway import DiscordWebSocket
from discord.http import Route

from channels.base import ApprovalAsk, Inbound, InboundHandler, leader_name
from channels.discord.address import Address
from channels.discord.approvals import ApprovalButton, buttons
from channels.discord.inbound import address_of, inbound_of
from channels.errors import DeliveryError
from channels.feedback import Feedback
from channels.refusals import refusal_of
from channels.render import render_discord
from channels.seen import Seen
from threads.sinks import Delivery, OutboundMessage
from threads.turns import Turn

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_API = "https://discord.com/api/v10"
INTERACTIONS = 512
INTERACTION = "interaction:"
NOTHING_TO_SAY = "Nothing to answer here."
RETRY_DELAYS = (0.5, 1.0, 2.0)
"""Seconds before each new try of a send Discord could not take (see ``DiscordChannel._attempt``)."""
DISCORD_PY_RETRIES = frozenset({500, 502, 504, 524})
"""Statuses discord.py already retried five times before raising: not tried again."""

# Ping nobody from model text but the person a reply answers.
MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=False, replied_user=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscordOptions:
    """How one bot reaches Discord and shows its turns."""

    name: str = "discord"
    token: str
    api_base: str = DEFAULT_API
    gateway_url: str = ""
    ready_timeout: float = 2.0
    typing: bool = True
    drafts: bool = True
    edit_every: float = 1.0
    commands: Sequence[tuple[str, str]] = ()


@dataclass(slots=True)
class _Draft:
    """The message showing a running turn's answer so far; ``final`` once a delivery took it."""

    message: discord.Message | None
    text: str = ""
    final: bool = False


class DiscordChannel:
    """A Discord bot: messages and slash commands in, Discord markdown out."""

    def __init__(self, options: DiscordOptions) -> None:
        self.options = options
        self.name = options.name
        intents = discord.Intents.default()
        intents.message_content = True
        intents.dm_messages = True
        intents.guild_messages = True
        self._client = discord.Client(
            intents=intents,
            allowed_mentions=MENTIONS,
            chunk_guilds_at_startup=False,
            guild_ready_timeout=options.ready_timeout,
        )
        self._client.event(self.on_message)
        self._client.event(self.on_message_edit)
        self._client.event(self.on_approval_press)
        self._client.add_dynamic_items(ApprovalButton)
        self.tree = app_commands.CommandTree(self._client)
        for name, about in options.commands:
            self.tree.add_command(self._command(name, about))
        self._handler: InboundHandler | None = None
        self._seen = Seen()
        self._order: dict[str, asyncio.Lock] = {}
        self._interactions: OrderedDict[str, discord.Interaction] = OrderedDict()
        self._dms: dict[int, discord.DMChannel] = {}
        self._drafts: dict[str, _Draft] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._connection: asyncio.Task[None] | None = None
        self.standby = False
        self.stopped_reason = ""
        self.feedback = Feedback(self, drafts=options.drafts, edit_every=options.edit_every)

    @property
    def client(self) -> discord.Client:
        return self._client

    # -- lifetime

    async def start(self, handler: InboundHandler) -> None:
        """Log in and connect; a failure is one logged line and stops only this channel."""
        self._handler = handler
        point_at(self.options.api_base, self.options.gateway_url)
        try:
            await self._client.login(self.options.token)
            await self.tree.sync()
        except discord.LoginFailure:
            self._stopped("Discord refused the bot token: check it in the developer portal")
            return
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            self._stopped(f"Discord could not be reached ({exc})")
            return
        if not self.standby:
            await self.start_receiving()

    @property
    def leader(self) -> str:
        return leader_name("discord", self.options.token)

    async def start_receiving(self) -> None:
        """Open the bot's gateway connection (delivery needs only the login)."""
        if self.stopped_reason or (self._connection is not None and not self._connection.done()):
            return
        self._connection = asyncio.create_task(self._connect(), name=f"{self.name} gateway")

    async def stop_receiving(self) -> None:
        """Close the gateway connection; messages can still be delivered over REST."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.cancel()
        await asyncio.gather(connection, return_exceptions=True)
        if self._client.ws is not None:
            await self._client.ws.close(code=1000)

    async def _connect(self) -> None:
        try:
            await self._client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            self._stopped(
                "the bot lacks the Message Content intent: turn it on in the developer portal "
                "(Bot → Privileged Gateway Intents)"
            )
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            if not self._client.is_closed():
                self._stopped(f"the Discord gateway connection ended ({exc})")

    def _stopped(self, reason: str) -> None:
        self.stopped_reason = reason
        log.error("the %s channel stopped: %s; other channels go on", self.name, reason)

    async def stop(self) -> None:
        await self.feedback.close()
        await self._client.close()
        if self._connection is not None:
            await asyncio.gather(self._connection, return_exceptions=True)
        self._handler = None

    @property
    def receiving(self) -> bool:
        """Whether this process holds the bot's gateway connection."""
        return self._connection is not None and not self._connection.done()

    def health(self) -> dict[str, object]:
        user = self._client.user
        out: dict[str, object] = {
            "running": self._client.is_ready() and not self.stopped_reason,
            "bot": str(user) if user is not None else "",
        }
        if self.standby:
            out["receiving"] = self.receiving
        if self.stopped_reason:
            out["stopped"] = self.stopped_reason
        return out

    # -- inbound

    async def on_message(self, message: discord.Message) -> None:
        await self._take(message, edited=False)

    async def on_message_edit(self, before: discord.Message, after: discord.Message) -> None:
        if after.content != before.content:
            await self._take(after, edited=True)

    async def _take(self, message: discord.Message, *, edited: bool) -> None:
        bot = self._client.user
        if bot is None or message.author.id == bot.id or message.author.bot:
            return  # our own messages come back over the gateway; other bots are not people
        stamp = message.edited_at.timestamp() if edited and message.edited_at else 0.0
        if self._seen.again((message.id, stamp)):
            return
        inbound = inbound_of(message, channel=self.name, bot=bot, edited=edited)
        await self._hand_over(inbound)

    async def _hand_over(self, inbound: Inbound) -> None:
        """To the router, one at a time per conversation, in the order they came."""
        if self._handler is None:
            return
        chat = inbound.chat_id
        lock = self._order.get(chat)
        if lock is None:
            lock = self._order[chat] = asyncio.Lock()
        try:
            async with lock:
                await self._handler(inbound)
        except Exception as exc:
            await self._tell(inbound, refusal_of(exc, f"{self.name}:{chat}").line)
        finally:
            if not lock.locked() and self._order.get(chat) is lock:
                del self._order[chat]

    def _command(self, name: str, about: str) -> app_commands.Command[Any, Any, None]:
        async def command(interaction: discord.Interaction, text: str | None = None) -> None:
            await self._on_command(interaction, name, text or "")

        return app_commands.Command(
            name=name,
            description=about[:100],
            callback=app_commands.describe(text="what follows the command, e.g. on or off")(
                command
            ),
        )

    async def _on_command(self, interaction: discord.Interaction, name: str, text: str) -> None:
        """A slash command: answered by the router like its text form, as an ephemeral note."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        key = str(interaction.id)
        self._interactions[key] = interaction
        while len(self._interactions) > INTERACTIONS:
            self._interactions.popitem(last=False)
        address = address_of(interaction.channel, interaction.user.id)
        await self._hand_over(
            Inbound(
                channel=self.name,
                chat_id=str(address),
                user_id=str(interaction.user.id),
                text=f"/{name} {text}".strip(),
                user_name=interaction.user.display_name,
                message_id=f"{INTERACTION}{key}",
                chat_type=address.chat_type,
                mentioned=True,
            )
        )
        pending = self._interactions.pop(key, None)
        if pending is not None:
            await pending.edit_original_response(content=NOTHING_TO_SAY)

    async def on_approval_press(
        self, interaction: discord.Interaction, choice: str, request_id: str
    ) -> None:
        """A press on an approval button: acknowledged now, then handled as its command."""
        await interaction.response.defer(ephemeral=True, thinking=True)
        key = str(interaction.id)
        self._interactions[key] = interaction
        while len(self._interactions) > INTERACTIONS:
            self._interactions.popitem(last=False)
        address = address_of(interaction.channel, interaction.user.id)
        message = interaction.message
        await self._hand_over(
            Inbound(
                channel=self.name,
                chat_id=str(address),
                user_id=str(interaction.user.id),
                text=f"/{choice} {request_id}",
                user_name=interaction.user.display_name,
                message_id=str(message.id) if message is not None else "",
                chat_type=address.chat_type,
                mentioned=True,
                press=key,
            )
        )

    async def ask_approval(self, chat_id: str, ask: ApprovalAsk) -> str:
        """The question with Approve / Always / Deny buttons under it."""
        target = await self._target(Address.parse(chat_id))
        text = render_discord(ask.text)[0] if ask.text else ask.request_id
        try:
            sent = await target.send(text, view=buttons(ask.request_id), allowed_mentions=MENTIONS)
        except discord.HTTPException as exc:
            raise DeliveryError(self.name, chat_id, f"{exc.status} {exc.text}") from None
        return str(sent.id)

    async def settle_approval(self, chat_id: str, message_id: str, text: str) -> None:
        """The question's text becomes ``text``; its buttons go."""
        target = await self._target(Address.parse(chat_id))
        if not isinstance(target, discord.DMChannel | discord.TextChannel | discord.Thread):
            return
        try:
            await target.get_partial_message(int(message_id)).edit(content=text, view=None)
        except discord.HTTPException as exc:
            raise DeliveryError(self.name, chat_id, f"{exc.status} {exc.text}") from None

    async def answer_press(self, inbound: Inbound, text: str) -> None:
        """The pressing person's ephemeral answer, in place of its "thinking…"."""
        interaction = self._interactions.pop(inbound.press, None)
        if interaction is not None:
            await interaction.edit_original_response(content=text)

    async def fetch_file(self, url: str) -> bytes:
        """The bytes of ``discord://<account>/<channel>/<message>/<attachment>`` (for media)."""
        channel_id, message_id, attachment_id = (int(p) for p in url.split("/")[-3:])
        channel = self._client.get_channel(channel_id) or await self._client.fetch_channel(
            channel_id
        )
        if not isinstance(channel, discord.abc.Messageable):
            raise DeliveryError(self.name, str(channel_id), "not a channel with messages")
        message = await channel.fetch_message(message_id)
        for attachment in message.attachments:
            if attachment.id == attachment_id:
                return await attachment.read()
        raise DeliveryError(self.name, str(channel_id), f"attachment {attachment_id} is gone")

    # -- outbound

    async def deliver(self, chat_id: str, message: OutboundMessage) -> Delivery:
        chunks = render_discord(message.text)
        if message.reply_to.startswith(INTERACTION):
            return await self._follow_up(chat_id, message.reply_to, chunks)
        target = await self._target(Address.parse(chat_id))
        ids: list[str] = []
        try:
            async with self._lock(chat_id):
                draft = self._drafts.get(chat_id)
                for index, chunk in enumerate(chunks):
                    if index == 0 and draft is not None and not draft.final and draft.message:
                        shown = draft.message
                        await self._attempt(
                            chat_id, shown.edit, content=chunk, allowed_mentions=MENTIONS
                        )
                        ids.append(str(shown.id))
                        continue
                    if index == 0 and message.reply_to.isdigit():
                        reference = discord.MessageReference(
                            message_id=int(message.reply_to),
                            channel_id=Address.parse(chat_id).target,
                            fail_if_not_exists=False,
                        )
                        sent = await self._attempt(
                            chat_id,
                            target.send,
                            chunk,
                            reference=reference,
                            allowed_mentions=MENTIONS,
                        )
                    else:
                        sent = await self._attempt(
                            chat_id, target.send, chunk, allowed_mentions=MENTIONS
                        )
                    ids.append(str(sent.id))
                if draft is not None:
                    draft.final = True
                elif self.feedback.following(chat_id):
                    self._drafts[chat_id] = _Draft(message=None, final=True)
        except discord.HTTPException as exc:
            raise DeliveryError(self.name, chat_id, f"{exc.status} {exc.text}") from None
        self._forget_lock(chat_id)
        return Delivery(delivered_to=f"{self.name}:{chat_id}", message_ids=tuple(ids))

    async def _attempt(
        self, chat_id: str, call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """One delivery call, tried again with backoff when Discord could not take it.

        Rate limits and 500/502/504 are discord.py's to retry; what it raises at
        once — another 5xx (503: unavailable), or no connection at all — is tried
        again after each of :data:`RETRY_DELAYS`. A timeout is not: the message
        may have been posted, and sending it again could double it.
        """
        for delay in (*RETRY_DELAYS, None):
            try:
                return await call(*args, **kwargs)
            except discord.DiscordServerError as exc:
                if delay is None or exc.status in DISCORD_PY_RETRIES:
                    raise
                cause = f"{exc.status} {exc.text}"
            except aiohttp.ClientConnectorError as exc:
                if delay is None:
                    raise DeliveryError(self.name, chat_id, str(exc)) from None
                cause = str(exc)
            log.warning(
                "%s: delivery to %s failed (%s); retrying in %.1f s",
                self.name,
                chat_id,
                cause,
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _follow_up(self, chat_id: str, reply_to: str, chunks: list[str]) -> Delivery:
        interaction = self._interactions.pop(reply_to.removeprefix(INTERACTION), None)
        if interaction is None:
            return await self.deliver(chat_id, OutboundMessage(text="\n".join(chunks)))
        # The first chunk takes the place of the "thinking…" note; the rest follow it.
        first = await interaction.edit_original_response(content=chunks[0] if chunks else "…")
        ids = [str(first.id)]
        for chunk in chunks[1:]:
            sent = await interaction.followup.send(chunk, ephemeral=True, wait=True)
            ids.append(str(sent.id))
        return Delivery(delivered_to=f"{self.name}:{chat_id}", message_ids=tuple(ids))

    async def _target(self, address: Address) -> discord.abc.Messageable:
        """The channel to send to: the user's direct message (opened once), or the channel."""
        client = self._client
        if address.user is not None:
            dm = self._dms.get(address.user)
            if dm is None:
                user = client.get_user(address.user) or await client.fetch_user(address.user)
                dm = self._dms[address.user] = await user.create_dm()
            return dm
        channel = client.get_channel(address.target) or await client.fetch_channel(address.target)
        if not isinstance(channel, discord.abc.Messageable):
            raise DeliveryError(self.name, str(address), "not a channel the bot can write to")
        return channel

    async def _tell(self, inbound: Inbound, text: str) -> None:
        try:
            await self.deliver(
                inbound.chat_id, OutboundMessage(text=text, reply_to=inbound.message_id)
            )
        except Exception:
            log.exception("%s: telling %s failed", self.name, inbound.chat_id)

    def follow(self, chat_id: str, turn: Turn) -> None:
        """Show typing and the streamed draft in ``chat_id`` while ``turn`` runs."""
        if self.options.typing:
            self.feedback.follow(chat_id, turn)

    # -- presence (channels.feedback)

    async def typing(self, chat_id: str) -> None:
        target = await self._target(Address.parse(chat_id))
        await target.typing()

    async def draft(self, chat_id: str, text: str) -> None:
        chunks = render_discord(text)
        if not chunks:
            return
        shown = chunks[0] if len(chunks) == 1 else f"{chunks[0][:1990]}\n…"
        target = await self._target(Address.parse(chat_id))
        async with self._lock(chat_id):
            current = self._drafts.get(chat_id)
            if current is None:
                sent = await target.send(shown, allowed_mentions=MENTIONS)
                self._drafts[chat_id] = _Draft(message=sent, text=shown)
            elif not current.final and current.message is not None and current.text != shown:
                await current.message.edit(content=shown, allowed_mentions=MENTIONS)
                current.text = shown

    async def end_draft(self, chat_id: str) -> None:
        async with self._lock(chat_id):
            draft = self._drafts.pop(chat_id, None)
            if draft is not None and not draft.final and draft.message is not None:
                await draft.message.delete()
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


def point_at(api_base: str, gateway_url: str) -> None:
    """Point discord.py at ``api_base`` and, when given, ``gateway_url`` (a proxy, a fake).

    discord.py keeps both as class attributes, so they hold for every client in
    the process; a gateway runs one Discord platform, so that is what it wants.
    """
    Route.BASE = api_base.rstrip("/")
    if gateway_url:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)

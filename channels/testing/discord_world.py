"""What the fake Discord knows: users, guilds, channels, messages, files, and what the bot did.

``World`` is the state behind the fake Discord. Users, guilds and channels
are frozen values a test creates through the fake; messages are stored as
Discord's JSON objects, per channel, in the order they were posted; ids are
snowflakes made from the fake's clock, so discord.py reads sensible creation
times from them. Every event the bot should hear is handed to the gateway
through ``dispatch``; every change wakes whoever waits on ``changed()``.
"""

from __future__ import annotations

import asyncio
import datetime
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from channels.testing.errors import FakeUsageError

JSON = dict[str, Any]
DISCORD_EPOCH_MS = 1_420_070_400_000

# Gateway intents (bits of IDENTIFY's ``intents``) the fake honours.
GUILDS = 1 << 0
GUILD_MEMBERS = 1 << 1
GUILD_PRESENCES = 1 << 8
GUILD_MESSAGES = 1 << 9
DIRECT_MESSAGES = 1 << 12
MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = {
    "members": GUILD_MEMBERS,
    "presences": GUILD_PRESENCES,
    "message_content": MESSAGE_CONTENT,
}

# Channel types, message types and message flags, as Discord numbers them.
GUILD_TEXT = 0
DM = 1
PUBLIC_THREAD = 11
PRIVATE_THREAD = 12
THREAD_TYPES = frozenset({PUBLIC_THREAD, PRIVATE_THREAD})
DEFAULT_MESSAGE = 0
REPLY_MESSAGE = 19
COMMAND_MESSAGE = 20
EPHEMERAL = 1 << 6
LOADING = 1 << 7

# What members may do where the fake has no overwrites: view, send, embed,
# attach, read history, react, mention everyone, use commands and threads.
MEMBER_PERMISSIONS = sum(1 << bit for bit in (6, 10, 11, 14, 15, 16, 17, 18, 31, 35, 36, 38))


@dataclass(frozen=True, slots=True, kw_only=True)
class DcUser:
    """A Discord user (or the bot itself)."""

    id: int
    username: str
    global_name: str | None = None
    bot: bool = False

    def api(self) -> JSON:
        data: JSON = {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name,
            "avatar": None,
            "public_flags": 0,
        }
        if self.bot:
            data["bot"] = True
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class DcGuild:
    """A guild (a "server") the bot is a member of."""

    id: int
    name: str
    owner_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DcChannel:
    """A text channel, a thread (``parent_id`` is its channel) or a DM with one user."""

    id: int
    type: int
    name: str | None = None
    guild_id: int | None = None
    parent_id: int | None = None
    owner_id: int | None = None
    recipient_id: int | None = None

    @property
    def is_dm(self) -> bool:
        return self.type == DM

    @property
    def is_thread(self) -> bool:
        return self.type in THREAD_TYPES


@dataclass(frozen=True, slots=True, kw_only=True)
class DcFile:
    """A file attached to a message: by a user (a test gives it) or by the bot (an upload)."""

    filename: str
    data: bytes
    content_type: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcInjected:
    """A message a test posted as a user (or edited): where it is and its id."""

    message_id: int
    channel_id: int
    guild_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcInteraction:
    """A slash command a test invoked as a user; its ``token`` authorizes the bot's answers."""

    id: int
    token: str
    name: str
    channel_id: int
    guild_id: int | None
    user_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DcEdit:
    """One edit the bot applied to one of its messages; None: the edit left that field alone."""

    content: str | None
    embeds: tuple[JSON, ...] | None
    allowed_mentions: JSON | None
    attachments: tuple[DcFile, ...] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcSentMessage:
    """A message the bot posted, as it stands now.

    ``content`` and ``embeds`` are current (after every edit); ``original_content``
    is the first text. ``allowed_mentions`` and ``message_reference`` are the
    request's, as sent; ``pinged_users``, ``pinged_roles`` and ``pinged_everyone``
    are whom Discord would notify under them. ``interaction_id`` is set for an
    interaction's response or followup, which may be ``ephemeral``.
    """

    channel_id: int
    message_id: int
    guild_id: int | None
    content: str | None
    original_content: str | None
    embeds: tuple[JSON, ...]
    attachments: tuple[DcFile, ...]
    allowed_mentions: JSON | None
    message_reference: JSON | None
    pinged_users: tuple[int, ...]
    pinged_roles: tuple[int, ...]
    pinged_everyone: bool
    flags: int
    components: tuple[JSON, ...]
    interaction_id: int | None
    ephemeral: bool
    edits: tuple[DcEdit, ...]
    deleted: bool
    payload: JSON

    @property
    def reply_to(self) -> int | None:
        """The id of the message this one replies to, if it is a reply."""
        if self.message_reference is None or "message_id" not in self.message_reference:
            return None
        return int(self.message_reference["message_id"])

    @property
    def versions(self) -> tuple[str | None, ...]:
        """Every text the message showed: as sent, then after each edit that set one."""
        texts = [self.original_content]
        texts.extend(edit.content for edit in self.edits if edit.content is not None)
        return tuple(texts)


@dataclass(frozen=True, slots=True, kw_only=True)
class DcCall:
    """One REST call the bot made, and how the fake answered it.

    ``route`` names it as Discord does (``"POST /channels/{channel_id}/messages"``);
    ``body`` is its JSON (``payload_json`` of a multipart call); ``status`` is
    0 when the client went away before the answer.
    """

    method: str
    route: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    code: int | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcTyping:
    """A ``POST /channels/{id}/typing`` the bot made."""

    channel_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DcReaction:
    """A reaction the bot added (``added``) or took back on a message."""

    channel_id: int
    message_id: int
    emoji: str
    added: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DcCallback:
    """The bot's answer to an interaction: ``type`` 4 a message, 5 a deferral, 9 a modal, …"""

    interaction_id: int
    type: int
    data: JSON | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcHandshake:
    """One IDENTIFY or RESUME the fake received on its gateway, and on what connection."""

    kind: Literal["identify", "resume"]
    session_id: str
    seq: int | None
    path: str
    compress: str | None
    intents: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    """An event for the bot's sessions: ``t`` and ``d`` of a gateway dispatch.

    ``intent`` is the intent a session needs to get it (0: every session);
    ``private`` marks a message whose content a session without the
    MESSAGE_CONTENT intent gets empty.
    """

    name: str
    data: JSON
    intent: int = 0
    private: bool = False


@dataclass(slots=True)
class SentRecord:
    """A message the bot posted, kept as it changes; tests see ``DcSentMessage`` snapshots."""

    channel_id: int
    message_id: int
    guild_id: int | None
    content: str | None
    embeds: tuple[JSON, ...]
    attachments: tuple[DcFile, ...]
    allowed_mentions: JSON | None
    message_reference: JSON | None
    pings: tuple[tuple[int, ...], tuple[int, ...], bool]
    flags: int
    components: tuple[JSON, ...]
    interaction_id: int | None
    payload: JSON
    edits: list[DcEdit] = field(default_factory=list)
    deleted: bool = False

    def snapshot(self) -> DcSentMessage:
        content, embeds, attachments = self.content, self.embeds, self.attachments
        for edit in self.edits:
            content = content if edit.content is None else edit.content
            embeds = embeds if edit.embeds is None else edit.embeds
            attachments = attachments if edit.attachments is None else edit.attachments
        users, roles, everyone = self.pings
        return DcSentMessage(
            channel_id=self.channel_id,
            message_id=self.message_id,
            guild_id=self.guild_id,
            content=content,
            original_content=self.content,
            embeds=embeds,
            attachments=attachments,
            allowed_mentions=self.allowed_mentions,
            message_reference=self.message_reference,
            pinged_users=users,
            pinged_roles=roles,
            pinged_everyone=everyone,
            flags=self.flags,
            components=self.components,
            interaction_id=self.interaction_id,
            ephemeral=bool(self.flags & EPHEMERAL),
            edits=tuple(self.edits),
            deleted=self.deleted,
            payload=self.payload,
        )


@dataclass(slots=True)
class InteractionState:
    """What the fake remembers of an interaction: who, where, and how the bot answered."""

    interaction: DcInteraction
    command: JSON
    callback_type: int | None = None
    original_id: int | None = None
    followups: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StoredFile:
    """An attachment's bytes, served at ``/attachments/{channel_id}/{id}/{filename}``."""

    id: int
    channel_id: int
    file: DcFile


def snowflake_at(seconds: float) -> int:
    """The smallest snowflake of a moment: its milliseconds since Discord's epoch, shifted."""
    return (int(seconds * 1000) - DISCORD_EPOCH_MS) << 22


class World:
    """The fake's state; one per ``FakeDiscord``."""

    def __init__(self, bot: DcUser, token: str, clock: Callable[[], float]) -> None:
        self.bot = bot
        self.token = token
        self.clock = clock
        self.base_url = ""
        self.users: dict[int, DcUser] = {bot.id: bot}
        self.guilds: dict[int, DcGuild] = {}
        self.channels: dict[int, DcChannel] = {}
        self.members: dict[int, dict[int, JSON]] = {}
        self.dms: dict[int, int] = {}
        self.messages: dict[int, dict[int, JSON]] = {}
        self.files: dict[int, StoredFile] = {}
        self.sent: list[SentRecord] = []
        self.sent_by_id: dict[int, SentRecord] = {}
        self.calls: list[DcCall] = []
        self.typing: list[DcTyping] = []
        self.reactions: list[DcReaction] = []
        self.callbacks: list[DcCallback] = []
        self.commands: dict[int | None, list[JSON]] = {}
        self.interactions: dict[int, InteractionState] = {}
        self.handshakes: list[DcHandshake] = []
        self.listeners: list[Callable[[Dispatch], None]] = []
        self._last_snowflake = bot.id
        self._change = asyncio.Event()

    # -- waking waiters

    def changed(self) -> asyncio.Event:
        """An event set at the next change; take it before checking, then wait on it."""
        return self._change

    def notify(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    def dispatch(self, name: str, data: JSON, *, intent: int = 0, private: bool = False) -> None:
        """Hand an event to every gateway session (the gateway filters by intents)."""
        event = Dispatch(name=name, data=data, intent=intent, private=private)
        for listener in self.listeners:
            listener(event)
        self.notify()

    # -- ids and times

    def snowflake(self) -> int:
        """A new id, made from the clock and always greater than the last."""
        self._last_snowflake = max(self._last_snowflake + 1, snowflake_at(self.clock()))
        return self._last_snowflake

    def timestamp(self) -> str:
        moment = datetime.datetime.fromtimestamp(self.clock(), datetime.UTC)
        return moment.isoformat(timespec="microseconds")

    # -- users, guilds, channels

    def add_user(self, user: DcUser) -> DcUser:
        if user.id in self.users and self.users[user.id] != user:
            raise FakeUsageError(f"user id {user.id} is already taken by {self.users[user.id]}")
        self.users[user.id] = user
        return user

    def add_guild(self, guild: DcGuild) -> DcGuild:
        self.guilds[guild.id] = guild
        self.members[guild.id] = {}
        self.join(guild, self.bot)
        return guild

    def join(self, guild: DcGuild, user: DcUser) -> JSON:
        """``user``'s member object in ``guild``, made when they first appear there."""
        members = self.members[guild.id]
        if user.id not in members:
            self.add_user(user)
            members[user.id] = {
                "roles": [],
                "nick": None,
                "avatar": None,
                "joined_at": self.timestamp(),
                "premium_since": None,
                "deaf": False,
                "mute": False,
                "pending": False,
                "flags": 0,
            }
        return members[user.id]

    def add_channel(self, channel: DcChannel) -> DcChannel:
        self.channels[channel.id] = channel
        self.messages.setdefault(channel.id, {})
        return channel

    def dm_channel(self, user: DcUser) -> DcChannel:
        """The DM channel between the bot and ``user``; the same one every time."""
        self.add_user(user)
        channel_id = self.dms.get(user.id)
        if channel_id is None:
            channel = self.add_channel(
                DcChannel(id=self.snowflake(), type=DM, recipient_id=user.id)
            )
            self.dms[user.id] = channel.id
            return channel
        return self.channels[channel_id]

    def known_guild(self, guild: DcGuild | int) -> DcGuild:
        guild_id = guild if isinstance(guild, int) else guild.id
        if guild_id not in self.guilds:
            raise FakeUsageError(
                f"guild {guild_id} is unknown to the fake; make it with fake.guild()"
            )
        return self.guilds[guild_id]

    def known_channel(self, channel: DcChannel | DcUser | int) -> DcChannel:
        """The channel a test names: a channel, its id, or a user (their DM with the bot)."""
        if isinstance(channel, DcUser):
            return self.dm_channel(channel)
        channel_id = channel if isinstance(channel, int) else channel.id
        if channel_id not in self.channels:
            raise FakeUsageError(
                f"channel {channel_id} is unknown to the fake; make it with the fake"
            )
        return self.channels[channel_id]

    def threads_of(self, guild_id: int) -> list[DcChannel]:
        return [c for c in self.channels.values() if c.guild_id == guild_id and c.is_thread]

    def guild_channels(self, guild_id: int) -> list[DcChannel]:
        return [c for c in self.channels.values() if c.guild_id == guild_id and not c.is_thread]

    # -- messages

    def message(self, channel_id: int, message_id: int) -> JSON | None:
        return self.messages.get(channel_id, {}).get(message_id)

    def store(self, message: JSON) -> JSON:
        self.messages[int(message["channel_id"])][int(message["id"])] = message
        return message

    def record_sent(self, sent: SentRecord) -> None:
        self.sent.append(sent)
        self.sent_by_id[sent.message_id] = sent
        self.notify()

    def sent_messages(self, channel_id: int | None = None) -> list[DcSentMessage]:
        return [s.snapshot() for s in self.sent if channel_id is None or s.channel_id == channel_id]

    def add_file(self, channel_id: int, file: DcFile) -> StoredFile:
        stored = StoredFile(id=self.snowflake(), channel_id=channel_id, file=file)
        self.files[stored.id] = stored
        return stored

    def cdn_url(self, stored: StoredFile) -> str:
        name = urllib.parse.quote(stored.file.filename)
        return f"{self.base_url}/attachments/{stored.channel_id}/{stored.id}/{name}"

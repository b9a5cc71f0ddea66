"""What people do on the fake Discord, turned into the gateway events a bot receives.

``Injector`` is the half of ``FakeDiscord`` a test uses to act as people and
places: make users, guilds (the bot is a member), text channels and threads,
post in DMs and channels (with mentions, replies, attachments the fake
serves), edit and delete those messages, and invoke slash commands the bot
registered. Everything a connected bot should hear is dispatched at once:
GUILD_CREATE, CHANNEL_CREATE, THREAD_CREATE, MESSAGE_CREATE, MESSAGE_UPDATE,
MESSAGE_DELETE, INTERACTION_CREATE. Messages are shaped as Discord shapes
them; a session without the MESSAGE_CONTENT intent gets a guild message's
content empty unless it mentions the bot.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from channels.testing.discord_messages import intent_of
from channels.testing.discord_payloads import (
    channel_object,
    guild_object,
    interaction_channel,
    is_private,
    member_object,
    mention_objects,
    mentions_in,
    message_object,
)
from channels.testing.discord_world import (
    GUILD_TEXT,
    GUILDS,
    JSON,
    MEMBER_PERMISSIONS,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    REPLY_MESSAGE,
    DcChannel,
    DcFile,
    DcGuild,
    DcInjected,
    DcInteraction,
    DcSentMessage,
    DcUser,
    InteractionState,
    World,
)
from channels.testing.errors import FakeUsageError

MessageRef = DcInjected | DcSentMessage
ChannelRef = DcChannel | DcUser | int
_ENTITY_OPTIONS = {6: "users", 7: "channels", 8: "roles"}


class Injector:
    """The activity of people on Discord; see ``FakeDiscord``."""

    def __init__(self, world: World) -> None:
        self.world = world

    # -- people and places

    def user(
        self, username: str = "ann", *, global_name: str | None = None, id: int | None = None
    ) -> DcUser:
        """A new user (a snowflake id unless given)."""
        user = DcUser(id=id or self.world.snowflake(), username=username, global_name=global_name)
        return self.world.add_user(user)

    def guild(
        self, name: str = "Test guild", *, owner: DcUser | None = None, id: int | None = None
    ) -> DcGuild:
        """A new guild with the bot in it; a connected bot gets its GUILD_CREATE now."""
        owner = owner or self.user(f"{name.lower().replace(' ', '-')}-owner")
        guild = self.world.add_guild(
            DcGuild(id=id or self.world.snowflake(), name=name, owner_id=owner.id)
        )
        self.world.join(guild, owner)
        self.world.dispatch("GUILD_CREATE", guild_object(self.world, guild), intent=GUILDS)
        return guild

    def text_channel(
        self, guild: DcGuild, name: str = "general", *, id: int | None = None
    ) -> DcChannel:
        """A text channel in ``guild``; a connected bot gets its CHANNEL_CREATE now."""
        guild = self.world.known_guild(guild)
        channel = self.world.add_channel(
            DcChannel(
                id=id or self.world.snowflake(), type=GUILD_TEXT, name=name, guild_id=guild.id
            )
        )
        self.world.dispatch("CHANNEL_CREATE", channel_object(self.world, channel), intent=GUILDS)
        return channel

    def thread(
        self,
        channel: DcChannel,
        name: str = "thread",
        *,
        by: DcUser | None = None,
        private: bool = False,
        id: int | None = None,
    ) -> DcChannel:
        """A thread under a text channel, started by ``by`` (the guild's owner unless given)."""
        parent = self.world.known_channel(channel)
        if parent.type != GUILD_TEXT or parent.guild_id is None:
            raise FakeUsageError(
                f"channel {parent.id} is not a guild text channel; threads hang off one"
            )
        owner = by or self.world.users[self.world.guilds[parent.guild_id].owner_id]
        self.world.join(self.world.guilds[parent.guild_id], owner)
        thread = self.world.add_channel(
            DcChannel(
                id=id or self.world.snowflake(),
                type=PRIVATE_THREAD if private else PUBLIC_THREAD,
                name=name,
                guild_id=parent.guild_id,
                parent_id=parent.id,
                owner_id=owner.id,
            )
        )
        data = channel_object(self.world, thread) | {"newly_created": True}
        self.world.dispatch("THREAD_CREATE", data, intent=GUILDS)
        return thread

    def dm_channel(self, user: DcUser) -> DcChannel:
        """The DM channel between ``user`` and the bot (made on first use, as Discord does)."""
        return self.world.dm_channel(user)

    # -- messages

    def send_dm(
        self,
        user: DcUser,
        text: str,
        *,
        reply_to: MessageRef | int | None = None,
        attachments: Sequence[DcFile] = (),
    ) -> DcInjected:
        """``user`` writes ``text`` to the bot in their DM."""
        channel = self.world.dm_channel(user)
        return self._post(channel, user, text, reply_to, True, attachments)

    def send_in_channel(
        self,
        channel: DcChannel,
        user: DcUser,
        text: str,
        *,
        mention: bool = False,
        reply_to: MessageRef | int | None = None,
        mention_author: bool = True,
        attachments: Sequence[DcFile] = (),
    ) -> DcInjected:
        """``user`` writes ``text`` in a guild channel or thread.

        ``mention`` puts ``<@bot>`` in front; any ``<@id>``, ``<@&id>``,
        ``@everyone`` or ``@here`` in the text counts as Discord counts it. A
        reply pings the replied-to author unless ``mention_author=False``.
        """
        where = self.world.known_channel(channel)
        if where.guild_id is None:
            raise FakeUsageError("send_in_channel takes a guild channel; use send_dm for a DM")
        self.world.join(self.world.guilds[where.guild_id], user)
        if mention:
            text = f"<@{self.world.bot.id}> {text}"
        return self._post(where, user, text, reply_to, mention_author, attachments)

    def edit_message(self, message: DcInjected, text: str) -> DcInjected:
        """The author edits a message a test posted; the bot gets MESSAGE_UPDATE."""
        stored = self.world.message(message.channel_id, message.message_id)
        if stored is None or int(stored["author"]["id"]) == self.world.bot.id:
            raise FakeUsageError(f"message {message.message_id} is not a user's message here")
        channel = self.world.channels[message.channel_id]
        _, roles, everyone = mentions_in(text)
        updated = dict(stored)
        updated.update(
            content=text,
            mentions=mention_objects(self.world, channel, self._mentioned(text, stored)),
            mention_roles=[str(r) for r in roles],
            mention_everyone=everyone,
            edited_timestamp=self.world.timestamp(),
        )
        self.world.store(updated)
        self._dispatch("MESSAGE_UPDATE", channel, updated)
        return message

    def delete_message(self, message: DcInjected) -> None:
        """The author deletes a message; the bot gets MESSAGE_DELETE."""
        channel = self.world.known_channel(message.channel_id)
        if self.world.messages[channel.id].pop(message.message_id, None) is None:
            raise FakeUsageError(f"message {message.message_id} is not in channel {channel.id}")
        event: JSON = {"id": str(message.message_id), "channel_id": str(channel.id)}
        if channel.guild_id is not None:
            event["guild_id"] = str(channel.guild_id)
        self.world.dispatch("MESSAGE_DELETE", event, intent=intent_of(channel))

    def dispatch(self, name: str, data: JSON, *, intent: int = 0) -> None:
        """Send a raw gateway event to every session that has ``intent`` (0: all)."""
        self.world.dispatch(name, data, intent=intent)

    # -- buttons

    def press_button(self, message: MessageRef, user: DcUser, custom_id: str) -> DcInteraction:
        """``user`` presses the button ``custom_id`` under the bot's ``message``; the bot gets
        INTERACTION_CREATE (a component interaction, type 3) carrying that message."""
        where = self.world.known_channel(message.channel_id)
        stored = self.world.message(where.id, message.message_id)
        if stored is None:
            raise FakeUsageError(f"message {message.message_id} is not in channel {where.id}")
        buttons = [
            c
            for row in stored.get("components") or ()
            for c in row.get("components") or ()
            if c.get("custom_id") == custom_id
        ]
        if not buttons:
            raise FakeUsageError(f"message {message.message_id} has no button {custom_id!r}")
        interaction = DcInteraction(
            id=self.world.snowflake(),
            token=f"fake-interaction-{uuid.uuid4().hex}",
            name=custom_id,
            channel_id=where.id,
            guild_id=where.guild_id,
            user_id=user.id,
        )
        self.world.add_user(user)
        self.world.interactions[interaction.id] = InteractionState(interaction, {})
        data: JSON = {"custom_id": custom_id, "component_type": buttons[0].get("type", 2)}
        payload = self._interaction(interaction, data, where, user)
        payload["type"] = 3
        payload["message"] = copy.deepcopy(stored)
        self.world.dispatch("INTERACTION_CREATE", payload)
        return interaction

    # -- slash commands

    def slash_command(
        self,
        user: DcUser,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        channel: ChannelRef | None = None,
    ) -> DcInteraction:
        """``user`` invokes the registered slash command ``name`` in ``channel`` (their DM
        unless given); the bot gets INTERACTION_CREATE.

        ``name`` may name a subcommand: ``"config set"``. ``options`` are typed
        by the command's registered definition; users and channels may be
        given as the fake's values and arrive resolved, as Discord sends them.
        """
        where = self.world.known_channel(channel if channel is not None else user)
        path = name.split()
        command = self._command(path[0], where)
        data: JSON = {"id": command["id"], "name": path[0], "type": 1}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        resolved: JSON = {}
        definition, holder = command, data
        for sub in path[1:]:
            definition = next(
                (
                    o
                    for o in definition.get("options") or ()
                    if o["name"] == sub and o["type"] in (1, 2)
                ),
                {},
            )
            if not definition:
                raise FakeUsageError(f"command {path[0]!r} has no subcommand {sub!r}")
            nested: JSON = {"name": sub, "type": definition["type"], "options": []}
            holder["options"] = [nested]
            holder = nested
        holder["options"] = self._options(definition, dict(options or {}), where, resolved)
        if resolved:
            data["resolved"] = resolved
        interaction = DcInteraction(
            id=self.world.snowflake(),
            token=f"fake-interaction-{uuid.uuid4().hex}",
            name=name,
            channel_id=where.id,
            guild_id=where.guild_id,
            user_id=user.id,
        )
        self.world.add_user(user)
        self.world.interactions[interaction.id] = InteractionState(interaction, command)
        self.world.dispatch("INTERACTION_CREATE", self._interaction(interaction, data, where, user))
        return interaction

    # -- shared

    def _post(
        self,
        channel: DcChannel,
        user: DcUser,
        text: str,
        reply_to: MessageRef | int | None,
        mention_author: bool,
        attachments: Sequence[DcFile],
    ) -> DcInjected:
        target = None
        if reply_to is not None:
            reply_id = reply_to if isinstance(reply_to, int) else reply_to.message_id
            target = self.world.message(channel.id, reply_id)
            if target is None:
                raise FakeUsageError(f"message {reply_id} is not in channel {channel.id}")
        mentioned = list(self._mentioned(text))
        if target is not None and mention_author and target["author"]["id"] != str(user.id):
            author = int(target["author"]["id"])
            mentioned += [] if author in mentioned else [author]
        _, roles, everyone = mentions_in(text)
        message = message_object(
            self.world,
            channel,
            user,
            content=text,
            mentioned=mentioned,
            roles=roles,
            everyone=everyone,
            attachments=[self.world.add_file(channel.id, f) for f in attachments],
            reference=target,
            type=REPLY_MESSAGE if target is not None else 0,
        )
        self._dispatch("MESSAGE_CREATE", channel, message)
        return DcInjected(
            message_id=int(message["id"]), channel_id=channel.id, guild_id=channel.guild_id
        )

    def _mentioned(self, text: str, stored: JSON | None = None) -> list[int]:
        users = [u for u in mentions_in(text)[0] if u in self.world.users]
        if stored is not None and stored.get("type") == REPLY_MESSAGE:
            replied = stored.get("referenced_message") or {}
            author = int(replied.get("author", {}).get("id", 0))
            if any(int(m["id"]) == author for m in stored["mentions"]) and author not in users:
                users.append(author)
        return users

    def _dispatch(self, name: str, channel: DcChannel, message: JSON) -> None:
        self.world.dispatch(
            name,
            copy.deepcopy(message),
            intent=intent_of(channel),
            private=is_private(self.world, message),
        )

    def _command(self, name: str, where: DcChannel) -> JSON:
        scopes: list[int | None] = [where.guild_id, None] if where.guild_id else [None]
        for scope in scopes:
            for command in self.world.commands.get(scope, []):
                if command["name"] == name and command["type"] == 1:
                    return command
        registered = sorted(
            {c["name"] for scope in scopes for c in self.world.commands.get(scope, [])}
        )
        raise FakeUsageError(
            f"no slash command {name!r} is registered where channel {where.id} is "
            f"(registered: {registered or 'none'}); sync the bot's command tree first"
        )

    def _options(
        self, definition: JSON, given: dict[str, Any], where: DcChannel, resolved: JSON
    ) -> list[JSON]:
        known = {o["name"]: o for o in definition.get("options") or () if o["type"] not in (1, 2)}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise FakeUsageError(f"the command has no option {unknown}; it has {sorted(known)}")
        options = []
        for name, option in known.items():
            if name not in given:
                if option.get("required"):
                    raise FakeUsageError(f"the command's option {name!r} is required")
                continue
            value = given[name]
            kind = option["type"]
            if kind in _ENTITY_OPTIONS:
                value = self._resolve(kind, value, where, resolved)
            options.append({"name": name, "type": kind, "value": value})
        return options

    def _resolve(self, kind: int, value: Any, where: DcChannel, resolved: JSON) -> str:
        entity_id = int(getattr(value, "id", value))
        if kind == 6 and entity_id in self.world.users:
            user = self.world.users[entity_id]
            resolved.setdefault("users", {})[str(entity_id)] = user.api()
            if where.guild_id is not None:
                member = member_object(self.world, where.guild_id, user, with_user=False)
                member["permissions"] = str(MEMBER_PERMISSIONS)
                resolved.setdefault("members", {})[str(entity_id)] = member
        elif kind == 7 and entity_id in self.world.channels:
            channel = interaction_channel(self.world, self.world.channels[entity_id])
            channel["permissions"] = str(MEMBER_PERMISSIONS)
            resolved.setdefault("channels", {})[str(entity_id)] = channel
        return str(entity_id)

    def _interaction(
        self, interaction: DcInteraction, data: JSON, where: DcChannel, user: DcUser
    ) -> JSON:
        payload: JSON = {
            "id": str(interaction.id),
            "application_id": str(self.world.bot.id),
            "type": 2,
            "data": data,
            "token": interaction.token,
            "version": 1,
            "channel_id": str(where.id),
            "channel": interaction_channel(self.world, where),
            "app_permissions": str(MEMBER_PERMISSIONS),
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        if where.guild_id is not None:
            member = member_object(self.world, where.guild_id, user)
            member["permissions"] = str(MEMBER_PERMISSIONS)
            payload |= {
                "guild_id": str(where.guild_id),
                "guild": {"id": str(where.guild_id), "locale": "en-US", "features": []},
                "guild_locale": "en-US",
                "member": member,
                "authorizing_integration_owners": {"0": str(where.guild_id)},
                "context": 0,
            }
        else:
            payload |= {
                "user": user.api(),
                "authorizing_integration_owners": {"0": "0"},
                "context": 1,
            }
        return payload

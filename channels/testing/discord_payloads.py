"""Discord's JSON objects, built from the fake's ``World`` as Discord shapes them.

Guilds as GUILD_CREATE carries them (roles, channels, active threads, the
bot's member), channels of each type, members in their three shapes (with
``user`` in a guild, without it beside a message's ``author``, inside
``mentions`` and with ``permissions`` in an interaction), messages with
``mentions`` / ``mention_roles`` / ``mention_everyone`` read from the content
as Discord reads them, replies with ``message_reference`` and
``referenced_message``, and attachments whose URLs the fake serves.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence

from channels.testing.discord_world import (
    DM,
    GUILD_TEXT,
    JSON,
    MEMBER_PERMISSIONS,
    DcChannel,
    DcGuild,
    DcUser,
    StoredFile,
    World,
)
from channels.testing.errors import invalid_form_body

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_EVERYONE = re.compile(r"@(everyone|here)")
Pings = tuple[tuple[int, ...], tuple[int, ...], bool]


def everyone_role(guild: DcGuild) -> JSON:
    return {
        "id": str(guild.id),
        "name": "@everyone",
        "permissions": str(MEMBER_PERMISSIONS),
        "position": 0,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": False,
        "icon": None,
        "unicode_emoji": None,
        "flags": 0,
    }


def member_object(world: World, guild_id: int, user: DcUser, *, with_user: bool = True) -> JSON:
    """``user``'s member object in a guild; beside a message's ``author`` it has no ``user``."""
    member = dict(world.join(world.guilds[guild_id], user))
    if with_user:
        member["user"] = user.api()
    return member


def channel_object(world: World, channel: DcChannel, *, in_guild_create: bool = False) -> JSON:
    """A channel as REST answers it; inside GUILD_CREATE a guild channel has no ``guild_id``."""
    messages = world.messages.get(channel.id, {})
    last = str(max(messages)) if messages else None
    if channel.is_dm:
        assert channel.recipient_id is not None, "a DM channel has a recipient"
        recipient = world.users[channel.recipient_id]
        return {
            "id": str(channel.id),
            "type": DM,
            "last_message_id": last,
            "flags": 0,
            "recipients": [recipient.api()],
        }
    data: JSON = {
        "id": str(channel.id),
        "type": channel.type,
        "name": channel.name,
        "last_message_id": last,
        "rate_limit_per_user": 0,
        "flags": 0,
    }
    if not in_guild_create or channel.is_thread:
        data["guild_id"] = str(channel.guild_id)
    if channel.is_thread:
        created = world.timestamp()
        data |= {
            "parent_id": str(channel.parent_id),
            "owner_id": str(channel.owner_id),
            "message_count": len(messages),
            "total_message_sent": len(messages),
            "member_count": 1,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": created,
                "locked": False,
                "create_timestamp": created,
            },
        }
    else:
        position = [c.id for c in world.guild_channels(channel.guild_id or 0)].index(channel.id)
        data |= {
            "position": position,
            "permission_overwrites": [],
            "parent_id": None,
            "topic": None,
            "nsfw": False,
        }
    return data


def guild_object(world: World, guild: DcGuild) -> JSON:
    """A guild as GUILD_CREATE carries it: the bot's member, channels and active threads."""
    channels = world.guild_channels(guild.id)
    return {
        "id": str(guild.id),
        "name": guild.name,
        "icon": None,
        "splash": None,
        "discovery_splash": None,
        "banner": None,
        "description": None,
        "owner_id": str(guild.owner_id),
        "afk_channel_id": None,
        "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "premium_progress_bar_enabled": False,
        "preferred_locale": "en-US",
        "features": [],
        "roles": [everyone_role(guild)],
        "emojis": [],
        "stickers": [],
        "system_channel_id": str(channels[0].id) if channels else None,
        "system_channel_flags": 0,
        "rules_channel_id": None,
        "public_updates_channel_id": None,
        "vanity_url_code": None,
        "application_id": None,
        "joined_at": world.members[guild.id][world.bot.id]["joined_at"],
        "large": False,
        "lazy": True,
        "unavailable": False,
        "member_count": len(world.members[guild.id]),
        "members": [member_object(world, guild.id, world.bot)],
        "channels": [channel_object(world, c, in_guild_create=True) for c in channels],
        "threads": [channel_object(world, t) for t in world.threads_of(guild.id)],
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
    }


def attachment_object(world: World, stored: StoredFile) -> JSON:
    file = stored.file
    url = world.cdn_url(stored)
    data: JSON = {
        "id": str(stored.id),
        "filename": file.filename,
        "size": len(file.data),
        "url": url,
        "proxy_url": url,
    }
    if file.content_type is not None:
        data["content_type"] = file.content_type
    if file.description is not None:
        data["description"] = file.description
    return data


def mentions_in(content: str) -> Pings:
    """The user ids, role ids and ``@everyone``/``@here`` that ``content`` mentions."""
    users = tuple(dict.fromkeys(int(m) for m in _USER_MENTION.findall(content)))
    roles = tuple(dict.fromkeys(int(m) for m in _ROLE_MENTION.findall(content)))
    return users, roles, bool(_EVERYONE.search(content))


def pings(content: str, allowed: JSON | None, replied_author: int | None) -> Pings:
    """Whom a message notifies: its mentions filtered by ``allowed_mentions``, as Discord does.

    Without ``allowed_mentions`` everything mentioned is pinged, the author
    of the replied-to message too; with it, only what ``parse`` or the
    ``users`` / ``roles`` lists allow, and the replied-to author only when
    ``replied_user`` is true. ``parse`` and a list of the same kind together
    are refused with Discord's 400.
    """
    users, roles, everyone = mentions_in(content)
    if allowed is None:
        reply_ping = replied_author is not None
    else:
        parse = set(allowed.get("parse") or ())
        for kind in ("users", "roles"):
            if kind in parse and allowed.get(kind):
                raise invalid_form_body(
                    "allowed_mentions",
                    "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                    f'parse:["{kind}"] and {kind}: [ids...] are mutually exclusive.',
                )
        listed_users = {int(u) for u in allowed.get("users") or ()}
        listed_roles = {int(r) for r in allowed.get("roles") or ()}
        users = users if "users" in parse else tuple(u for u in users if u in listed_users)
        roles = roles if "roles" in parse else tuple(r for r in roles if r in listed_roles)
        everyone = everyone and "everyone" in parse
        reply_ping = replied_author is not None and bool(allowed.get("replied_user", False))
    if reply_ping and replied_author not in users:
        users = (*users, replied_author or 0)
    return users, roles, everyone


def message_object(
    world: World,
    channel: DcChannel,
    author: DcUser,
    *,
    content: str,
    mentioned: Sequence[int] = (),
    roles: Sequence[int] = (),
    everyone: bool = False,
    attachments: Sequence[StoredFile] = (),
    embeds: Sequence[JSON] = (),
    reference: JSON | None = None,
    type: int = 0,
    flags: int = 0,
    extra: JSON | None = None,
) -> JSON:
    """A new message in ``channel`` by ``author``, stored, as MESSAGE_CREATE carries it.

    ``reference`` is the message replied to: it becomes ``message_reference``
    and ``referenced_message`` (one level deep, as Discord nests it).
    """
    message: JSON = {
        "id": str(world.snowflake()),
        "channel_id": str(channel.id),
        "author": author.api(),
        "content": content,
        "timestamp": world.timestamp(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": everyone,
        "mentions": [],
        "mention_roles": [str(r) for r in roles],
        "attachments": [attachment_object(world, a) for a in attachments],
        "embeds": list(embeds),
        "components": [],
        "pinned": False,
        "type": type,
        "flags": flags,
    }
    if channel.guild_id is not None:
        message["guild_id"] = str(channel.guild_id)
        message["member"] = member_object(world, channel.guild_id, author, with_user=False)
    message["mentions"] = mention_objects(world, channel, mentioned)
    if reference is not None:
        message["message_reference"] = {
            "type": 0,
            "message_id": reference["id"],
            "channel_id": reference["channel_id"],
        }
        if channel.guild_id is not None:
            message["message_reference"]["guild_id"] = str(channel.guild_id)
        message["referenced_message"] = {
            k: v for k, v in reference.items() if k != "referenced_message"
        }
    message.update(extra or {})
    return world.store(message)


def mention_objects(world: World, channel: DcChannel, user_ids: Sequence[int]) -> list[JSON]:
    """A message's ``mentions``: users, with their member object in a guild."""
    mentions = []
    for user_id in user_ids:
        user = world.users.get(user_id)
        if user is None:
            continue
        mention = user.api()
        if channel.guild_id is not None:
            mention["member"] = member_object(world, channel.guild_id, user, with_user=False)
        mentions.append(mention)
    return mentions


def without_content(message: JSON) -> JSON:
    """What a session without the MESSAGE_CONTENT intent gets of someone else's message."""
    stripped = copy.deepcopy(message)
    stripped.update(content="", embeds=[], attachments=[], components=[])
    stripped.pop("poll", None)
    return stripped


def is_private(world: World, message: JSON) -> bool:
    """Whether MESSAGE_CONTENT is needed to read ``message``: a guild message by someone
    else that does not mention the bot."""
    if "guild_id" not in message or int(message["author"]["id"]) == world.bot.id:
        return False
    return all(int(m["id"]) != world.bot.id for m in message["mentions"])


def application_object(world: World, owner: DcUser, flags: int) -> JSON:
    """``GET /oauth2/applications/@me``: the bot's application (its id is the bot's)."""
    return {
        "id": str(world.bot.id),
        "name": world.bot.username,
        "icon": None,
        "description": "",
        "summary": "",
        "type": None,
        "bot": world.bot.api(),
        "bot_public": True,
        "bot_require_code_grant": False,
        "verify_key": "0" * 64,
        "flags": flags,
        "owner": owner.api(),
        "team": None,
        "redirect_uris": [],
        "interactions_endpoint_url": None,
        "rpc_origins": [],
        "tags": [],
    }


def interaction_channel(world: World, channel: DcChannel) -> JSON:
    """The partial channel an interaction carries."""
    data = channel_object(world, channel)
    if channel.type == GUILD_TEXT:
        data.pop("permission_overwrites", None)
    return data

"""The REST routes of users, the gateway, channels and messages, with Discord's errors.

``GET /users/@me`` (what ``login`` asks), ``GET /oauth2/applications/@me``
(asked right after), ``GET /gateway`` and ``/gateway/bot`` (the latter is
how ``AutoShardedClient`` finds the gateway), users, DMs (``POST
/users/@me/channels`` opens a DM or returns the open one), channels,
message history, posting / editing / deleting messages, typing, the bot's
own reactions, and threads the bot starts.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from channels.testing import discord_messages as messages
from channels.testing.discord_payloads import application_object, channel_object
from channels.testing.discord_rest import Answer, Call, RouteSpec
from channels.testing.discord_world import (
    EPHEMERAL,
    GUILD_TEXT,
    GUILDS,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    DcChannel,
    DcReaction,
    DcTyping,
    DcUser,
    World,
)
from channels.testing.errors import DiscordApiError, invalid_form_body


def unknown_channel() -> DiscordApiError:
    return DiscordApiError(404, 10003, "Unknown Channel")


class ChannelRoutes:
    """Users, gateway discovery, channels and messages over one ``World``."""

    def __init__(
        self,
        world: World,
        *,
        owner: DcUser,
        application_flags: Callable[[], int],
        gateway_url: Callable[[], str],
    ) -> None:
        self.world = world
        self.owner = owner
        self.application_flags = application_flags
        self.gateway_url = gateway_url

    def routes(self) -> list[RouteSpec]:
        channel = "/channels/{channel_id}"
        message = channel + "/messages/{message_id}"
        return [
            RouteSpec("GET", "/users/@me", self.me),
            RouteSpec("GET", "/oauth2/applications/@me", self.application),
            RouteSpec("GET", "/applications/@me", self.application),
            RouteSpec("GET", "/gateway", self.gateway, auth=False),
            RouteSpec("GET", "/gateway/bot", self.gateway_bot),
            RouteSpec("POST", "/users/@me/channels", self.open_dm),
            RouteSpec("GET", "/users/{user_id}", self.user),
            RouteSpec("GET", channel, self.channel),
            RouteSpec("GET", channel + "/messages", self.history),
            RouteSpec("POST", channel + "/messages", self.send),
            RouteSpec("GET", message, self.message),
            RouteSpec("PATCH", message, self.edit),
            RouteSpec("DELETE", message, self.delete),
            RouteSpec("POST", channel + "/typing", self.typing),
            RouteSpec("PUT", message + "/reactions/{emoji}/@me", self.react),
            RouteSpec("DELETE", message + "/reactions/{emoji}/@me", self.unreact),
            RouteSpec("POST", message + "/threads", self.thread_from_message),
            RouteSpec("POST", channel + "/threads", self.thread),
        ]

    # -- users, application, gateway

    async def me(self, call: Call) -> Answer:
        return self.world.bot.api() | {
            "verified": True,
            "mfa_enabled": False,
            "email": None,
            "flags": 0,
            "bio": "",
            "locale": "en-US",
        }

    async def application(self, call: Call) -> Answer:
        return application_object(self.world, self.owner, self.application_flags())

    async def gateway(self, call: Call) -> Answer:
        return {"url": self.gateway_url()}

    async def gateway_bot(self, call: Call) -> Answer:
        return {
            "url": self.gateway_url(),
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": 999,
                "reset_after": 14_400_000,
                "max_concurrency": 1,
            },
        }

    async def user(self, call: Call) -> Answer:
        user = self.world.users.get(call.snowflake("user_id"))
        if user is None:
            raise DiscordApiError(404, 10013, "Unknown User")
        return user.api()

    async def open_dm(self, call: Call) -> Answer:
        recipient = str(call.json().get("recipient_id"))
        user = self.world.users.get(int(recipient)) if recipient.isdigit() else None
        if user is None or user.id == self.world.bot.id:
            raise DiscordApiError(400, 50033, "Invalid Recipient(s)")
        return channel_object(self.world, self.world.dm_channel(user))

    # -- channels and messages

    def _channel(self, call: Call) -> DcChannel:
        found = self.world.channels.get(call.snowflake("channel_id"))
        if found is None:
            raise unknown_channel()
        return found

    async def channel(self, call: Call) -> Answer:
        return channel_object(self.world, self._channel(call))

    async def history(self, call: Call) -> Answer:
        channel = self._channel(call)
        limit = int(call.query.get("limit", "50"))
        if not 1 <= limit <= 100:
            raise invalid_form_body(
                "limit", "NUMBER_TYPE_MAX", "int value should be less than or equal to 100."
            )
        stored = self.world.messages[channel.id]
        ids = sorted(i for i in stored if not int(stored[i].get("flags") or 0) & EPHEMERAL)
        if "before" in call.query:
            ids = [i for i in ids if i < int(call.query["before"])]
        if "after" in call.query:
            ids = [i for i in ids if i > int(call.query["after"])][:limit]
        return [stored[i] for i in reversed(ids[-limit:])]

    async def message(self, call: Call) -> Answer:
        channel = self._channel(call)
        found = self.world.message(channel.id, call.snowflake("message_id"))
        if found is None:
            raise messages.unknown_message()
        return found

    async def send(self, call: Call) -> Answer:
        return messages.post(self.world, self._channel(call), call.json(), call.files)

    async def edit(self, call: Call) -> Answer:
        channel = self._channel(call)
        return messages.edit(
            self.world, channel, call.snowflake("message_id"), call.json(), call.files
        )

    async def delete(self, call: Call) -> Answer:
        messages.delete(self.world, self._channel(call), call.snowflake("message_id"))
        return None

    async def typing(self, call: Call) -> Answer:
        channel = self._channel(call)
        self.world.typing.append(DcTyping(channel_id=channel.id))
        self.world.notify()
        return None

    async def react(self, call: Call) -> Answer:
        return self._reaction(call, added=True)

    async def unreact(self, call: Call) -> Answer:
        return self._reaction(call, added=False)

    def _reaction(self, call: Call, *, added: bool) -> Answer:
        channel = self._channel(call)
        message_id = call.snowflake("message_id")
        if self.world.message(channel.id, message_id) is None:
            raise messages.unknown_message()
        emoji = urllib.parse.unquote(call.match["emoji"])
        self.world.reactions.append(
            DcReaction(channel_id=channel.id, message_id=message_id, emoji=emoji, added=added)
        )
        self.world.notify()
        return None

    # -- threads the bot starts

    async def thread_from_message(self, call: Call) -> Answer:
        parent = self._channel(call)
        message_id = call.snowflake("message_id")
        if self.world.message(parent.id, message_id) is None:
            raise messages.unknown_message()
        if message_id in self.world.channels:
            raise DiscordApiError(400, 160004, "A thread has already been created for this message")
        return self._start_thread(parent, call, message_id, PUBLIC_THREAD)

    async def thread(self, call: Call) -> Answer:
        parent = self._channel(call)
        kind = int(call.json().get("type") or PRIVATE_THREAD)
        if kind not in (PUBLIC_THREAD, PRIVATE_THREAD):
            raise invalid_form_body("type", "BASE_TYPE_CHOICES", "Value must be one of (11, 12).")
        return self._start_thread(parent, call, self.world.snowflake(), kind)

    def _start_thread(self, parent: DcChannel, call: Call, thread_id: int, kind: int) -> Answer:
        if parent.type != GUILD_TEXT:
            raise DiscordApiError(400, 50024, "Cannot execute action on this channel type")
        name = str(call.json().get("name") or "")
        if not 1 <= len(name) <= 100:
            raise invalid_form_body(
                "name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
            )
        thread = self.world.add_channel(
            DcChannel(
                id=thread_id,
                type=kind,
                name=name,
                guild_id=parent.guild_id,
                parent_id=parent.id,
                owner_id=self.world.bot.id,
            )
        )
        data = channel_object(self.world, thread)
        self.world.dispatch("THREAD_CREATE", data | {"newly_created": True}, intent=GUILDS)
        return data

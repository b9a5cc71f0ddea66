"""Application commands and interactions on the fake Discord.

Commands: ``PUT /applications/{application_id}/commands`` (and the guild
variant) overwrite the whole list as ``CommandTree.sync`` does, checked as
Discord checks them (names, descriptions, at most 25 options, no duplicate
names); a command keeps its id across syncs. Interactions: the bot answers
one with ``POST /interactions/{id}/{token}/callback`` (discord.py adds
``?with_response=1`` and gets the callback object back), once; a message
response (type 4) or a deferral (type 5) becomes the interaction's original
message, which ``/webhooks/{application_id}/{token}/messages/@original``
reads, edits and deletes, and ``POST /webhooks/{application_id}/{token}``
adds followups. Ephemeral messages (flag 64) are recorded but never reach
the bot's sessions or the channel's history.
"""

from __future__ import annotations

import re
from typing import Any

from channels.testing import discord_messages as messages
from channels.testing.discord_rest import Answer, Call, RouteSpec
from channels.testing.discord_world import (
    COMMAND_MESSAGE,
    EPHEMERAL,
    JSON,
    DcCallback,
    InteractionState,
    World,
)
from channels.testing.errors import DiscordApiError, invalid_form_body

_NAME = re.compile(r"[-_\w]{1,32}")
MESSAGE_RESPONSE, DEFERRED_RESPONSE = 4, 5
CALLBACK_TYPES = frozenset({4, 5, 8, 9})


class InteractionRoutes:
    """Command registration, interaction callbacks and interaction webhooks over one ``World``."""

    def __init__(self, world: World) -> None:
        self.world = world

    def routes(self) -> list[RouteSpec]:
        commands = "/applications/{application_id}/commands"
        guild_commands = "/applications/{application_id}/guilds/{guild_id}/commands"
        webhook = "/webhooks/{application_id}/{interaction_token}"
        webhook_message = webhook + "/messages/{message_id}"
        return [
            RouteSpec("GET", commands, self.list_commands),
            RouteSpec("PUT", commands, self.overwrite_commands),
            RouteSpec("GET", guild_commands, self.list_commands),
            RouteSpec("PUT", guild_commands, self.overwrite_commands),
            RouteSpec(
                "POST",
                "/interactions/{interaction_id}/{interaction_token}/callback",
                self.callback,
                auth=False,
            ),
            RouteSpec("POST", webhook, self.followup, auth=False),
            RouteSpec("GET", webhook_message, self.webhook_message, auth=False),
            RouteSpec("PATCH", webhook_message, self.edit_webhook_message, auth=False),
            RouteSpec("DELETE", webhook_message, self.delete_webhook_message, auth=False),
        ]

    # -- commands

    def _scope(self, call: Call) -> int | None:
        if call.snowflake("application_id") != self.world.bot.id:
            raise DiscordApiError(403, 50001, "Missing Access")
        if "guild_id" not in call.match:
            return None
        guild_id = call.snowflake("guild_id")
        if guild_id not in self.world.guilds:
            raise DiscordApiError(403, 50001, "Missing Access")
        return guild_id

    async def list_commands(self, call: Call) -> Answer:
        return self.world.commands.get(self._scope(call), [])

    async def overwrite_commands(self, call: Call) -> Answer:
        guild_id = self._scope(call)
        payload = call.body if isinstance(call.body, list) else None
        if payload is None:
            raise invalid_form_body(
                "_root", "LIST_TYPE_CONVERT", "Only iterables may be used in a ListType"
            )
        previous = {(c["name"], c["type"]): c for c in self.world.commands.get(guild_id, [])}
        seen: set[tuple[str, int]] = set()
        stored = []
        for index, command in enumerate(payload):
            kind = int(command.get("type") or 1)
            name = str(command.get("name") or "")
            _check_command(index, kind, command)
            if (name, kind) in seen:
                raise invalid_form_body(
                    f"{index}.name",
                    "APPLICATION_COMMANDS_DUPLICATE_NAME",
                    f"Application command names must be unique: {name}",
                )
            seen.add((name, kind))
            old = previous.get((name, kind))
            entry: JSON = {
                "id": old["id"] if old else str(self.world.snowflake()),
                "application_id": str(self.world.bot.id),
                "version": str(self.world.snowflake()),
                "type": kind,
                "name": name,
                "description": str(command.get("description") or ""),
                "options": list(command.get("options") or ()),
                "default_member_permissions": command.get("default_member_permissions"),
                "nsfw": bool(command.get("nsfw", False)),
                "contexts": command.get("contexts"),
                "integration_types": command.get("integration_types") or [0],
            }
            if guild_id is not None:
                entry["guild_id"] = str(guild_id)
            stored.append(entry)
        self.world.commands[guild_id] = stored
        self.world.notify()
        return stored

    # -- interaction callbacks and webhooks

    def _interaction(self, call: Call) -> InteractionState:
        state = self.world.interactions.get(call.snowflake("interaction_id"))
        if state is None or state.interaction.token != call.match["interaction_token"]:
            raise DiscordApiError(404, 10062, "Unknown interaction")
        return state

    def _webhook(self, call: Call) -> InteractionState:
        token = call.match["interaction_token"]
        if call.snowflake("application_id") == self.world.bot.id:
            for state in self.world.interactions.values():
                if state.interaction.token == token and state.callback_type is not None:
                    return state
        raise DiscordApiError(404, 10015, "Unknown Webhook")

    async def callback(self, call: Call) -> Answer:
        state = self._interaction(call)
        body = call.json()
        kind = body.get("type")
        if kind not in CALLBACK_TYPES:
            raise invalid_form_body(
                "type", "BASE_TYPE_CHOICES", f"Value must be one of {sorted(CALLBACK_TYPES)}."
            )
        if state.callback_type is not None:
            raise DiscordApiError(400, 40060, "Interaction has already been acknowledged.")
        data = body.get("data")
        message = None
        if kind in (MESSAGE_RESPONSE, DEFERRED_RESPONSE):
            message = self._post(state, data or {}, call, loading=kind == DEFERRED_RESPONSE)
            state.original_id = int(message["id"])
        state.callback_type = kind
        self.world.callbacks.append(
            DcCallback(interaction_id=state.interaction.id, type=kind, data=data)
        )
        self.world.notify()
        if call.query.get("with_response") not in ("1", "true", "True"):
            return None
        flags = int(message["flags"]) if message else 0
        answer: JSON = {
            "interaction": {
                "id": str(state.interaction.id),
                "type": 2,
                "response_message_loading": kind == DEFERRED_RESPONSE,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            },
            "resource": {"type": kind},
        }
        if message is not None:
            answer["interaction"]["response_message_id"] = message["id"]
            answer["resource"]["message"] = message
        return answer

    async def followup(self, call: Call) -> Answer:
        state = self._webhook(call)
        message = self._post(state, call.json(), call, loading=False)
        state.followups.append(int(message["id"]))
        return message if call.query.get("wait") in ("1", "true", "True") else None

    async def webhook_message(self, call: Call) -> Answer:
        state = self._webhook(call)
        found = self.world.message(state.interaction.channel_id, _message_id(state, call))
        if found is None:
            raise messages.unknown_message()
        return found

    async def edit_webhook_message(self, call: Call) -> Answer:
        state = self._webhook(call)
        channel = self.world.channels[state.interaction.channel_id]
        return messages.edit(self.world, channel, _message_id(state, call), call.json(), call.files)

    async def delete_webhook_message(self, call: Call) -> Answer:
        state = self._webhook(call)
        channel = self.world.channels[state.interaction.channel_id]
        messages.delete(self.world, channel, _message_id(state, call))
        return None

    def _post(self, state: InteractionState, body: JSON, call: Call, *, loading: bool) -> JSON:
        interaction = state.interaction
        channel = self.world.channels[interaction.channel_id]
        user = self.world.users[interaction.user_id]
        metadata = {
            "id": str(interaction.id),
            "type": 2,
            "user": user.api(),
            "authorizing_integration_owners": {},
            "name": interaction.name,
        }
        extra = {
            "webhook_id": str(self.world.bot.id),
            "application_id": str(self.world.bot.id),
            "interaction_metadata": metadata,
        }
        if loading:
            body = {"flags": int(body.get("flags") or 0) & EPHEMERAL}
        return messages.post(
            self.world,
            channel,
            body,
            call.files,
            interaction_id=interaction.id,
            type=COMMAND_MESSAGE if state.original_id is None else 0,
            extra=extra,
            loading=loading,
        )


def _message_id(state: InteractionState, call: Call) -> int:
    raw = call.match["message_id"]
    if raw == "@original":
        if state.original_id is None:
            raise messages.unknown_message()
        return state.original_id
    message_id = call.snowflake("message_id")
    if message_id != state.original_id and message_id not in state.followups:
        raise messages.unknown_message()
    return message_id


def _check_command(index: int, kind: int, command: dict[str, Any]) -> None:
    name = str(command.get("name") or "")
    if not _NAME.fullmatch(name) or (kind == 1 and name != name.lower()):
        raise invalid_form_body(
            f"{index}.name", "APPLICATION_COMMAND_INVALID_NAME", f"Command name is invalid: {name}"
        )
    if kind == 1:
        description = str(command.get("description") or "")
        if not 1 <= len(description) <= 100:
            raise invalid_form_body(
                f"{index}.description",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            )
    if len(command.get("options") or ()) > 25:
        raise invalid_form_body(
            f"{index}.options", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length."
        )

"""The bot's messages on the fake Discord: posting, editing, deleting, with Discord's checks.

``post``, ``edit`` and ``delete`` are shared by the channel routes and the
interaction routes (a response or followup is a message too). A post is
checked as Discord checks it (2000 characters of content, at most 10 embeds,
not empty, a reply to a message that exists unless
``fail_if_not_exists: false``, ``allowed_mentions`` that make sense), stored,
recorded for the test, and echoed to the bot's sessions as MESSAGE_CREATE,
since Discord sends a bot its own messages. A post with ``enforce_nonce``
and a nonce the bot used in that channel moments ago returns the earlier
message instead of making a second one (or 404 when that message was
deleted), as Discord does.
"""

from __future__ import annotations

from collections.abc import Mapping

from channels.testing.discord_payloads import attachment_object, message_object, pings
from channels.testing.discord_world import (
    DIRECT_MESSAGES,
    DISCORD_EPOCH_MS,
    EPHEMERAL,
    GUILD_MESSAGES,
    JSON,
    LOADING,
    REPLY_MESSAGE,
    DcChannel,
    DcEdit,
    DcFile,
    SentRecord,
    StoredFile,
    World,
)
from channels.testing.errors import DiscordApiError, invalid_form_body

CONTENT_LIMIT = 2000
EMBED_LIMIT = 10
NONCE_WINDOW_S = 120.0


def intent_of(channel: DcChannel) -> int:
    """The intent a session needs to hear about messages in ``channel``."""
    return DIRECT_MESSAGES if channel.guild_id is None else GUILD_MESSAGES


def unknown_message() -> DiscordApiError:
    return DiscordApiError(404, 10008, "Unknown Message")


def post(
    world: World,
    channel: DcChannel,
    body: JSON,
    files: Mapping[int, DcFile],
    *,
    interaction_id: int | None = None,
    type: int = 0,
    extra: JSON | None = None,
    loading: bool = False,
) -> JSON:
    """The bot posts ``body`` in ``channel``; the stored message (or the nonce's earlier one)."""
    content = _content(body)
    embeds = _embeds(body)
    flags = int(body.get("flags") or 0) | (LOADING if loading else 0)
    nonce = body.get("nonce")
    if nonce is not None and body.get("enforce_nonce"):
        earlier = _by_nonce(world, channel.id, str(nonce))
        if earlier is not None:
            return earlier
    attachments = _uploads(world, channel, body, files)
    components = list(body.get("components") or ())
    if not (content or embeds or attachments or components or body.get("sticker_ids") or loading):
        raise DiscordApiError(400, 50006, "Cannot send an empty message")
    target = _reference(world, channel, body.get("message_reference"))
    replied = None
    if target is not None and int(target["author"]["id"]) != world.bot.id:
        replied = int(target["author"]["id"])
    allowed = body.get("allowed_mentions")
    users, roles, everyone = pings(content, allowed, replied)
    message = message_object(
        world,
        channel,
        world.bot,
        content=content,
        mentioned=users,
        roles=roles,
        everyone=everyone,
        attachments=attachments,
        embeds=embeds,
        reference=target,
        type=REPLY_MESSAGE if target is not None else type,
        flags=flags,
        extra=extra,
    )
    message["components"] = components
    if nonce is not None:
        message["nonce"] = nonce
    world.record_sent(
        SentRecord(
            channel_id=channel.id,
            message_id=int(message["id"]),
            guild_id=channel.guild_id,
            content=content,
            embeds=tuple(embeds),
            attachments=tuple(a.file for a in attachments),
            allowed_mentions=allowed,
            message_reference=body.get("message_reference"),
            pings=(users, roles, everyone),
            flags=flags,
            components=tuple(components),
            interaction_id=interaction_id,
            payload=body,
        )
    )
    if not flags & EPHEMERAL:
        world.dispatch("MESSAGE_CREATE", message, intent=intent_of(channel))
    return message


def edit(
    world: World, channel: DcChannel, message_id: int, body: JSON, files: Mapping[int, DcFile]
) -> JSON:
    """The bot edits one of its messages: the fields ``body`` names change, the rest stay."""
    message = world.message(channel.id, message_id)
    if message is None:
        raise unknown_message()
    if int(message["author"]["id"]) != world.bot.id:
        raise DiscordApiError(403, 50005, "Cannot edit a message authored by another user")
    content = _content(body) if "content" in body else None
    embeds = _embeds(body) if "embeds" in body else None
    attachments: list[StoredFile] | None = None
    if "attachments" in body or files:
        kept = {str(a.get("id")) for a in body.get("attachments") or ()}
        attachments = [
            world.files[int(a["id"])] for a in message["attachments"] if a["id"] in kept
        ] + _uploads(world, channel, body, files)
    new = dict(message)
    if content is not None:
        new["content"] = content
    if embeds is not None:
        new["embeds"] = embeds
    if attachments is not None:
        new["attachments"] = [attachment_object(world, a) for a in attachments]
    if "components" in body:
        new["components"] = list(body.get("components") or ())
    new["flags"] = int(new.get("flags") or 0) & ~LOADING
    if not (new["content"] or new["embeds"] or new["attachments"] or new["components"]):
        raise DiscordApiError(400, 50006, "Cannot send an empty message")
    new["edited_timestamp"] = world.timestamp()
    world.store(new)
    sent = world.sent_by_id.get(message_id)
    if sent is not None:
        sent.edits.append(
            DcEdit(
                content=content,
                embeds=None if embeds is None else tuple(embeds),
                allowed_mentions=body.get("allowed_mentions"),
                attachments=None if attachments is None else tuple(a.file for a in attachments),
            )
        )
        sent.flags = new["flags"]
        sent.components = tuple(new["components"])  # "as it stands now"
    if not new["flags"] & EPHEMERAL:
        world.dispatch("MESSAGE_UPDATE", new, intent=intent_of(channel))
    world.notify()
    return new


def delete(world: World, channel: DcChannel, message_id: int) -> None:
    """The bot deletes a message: its own anywhere, someone else's only in a guild."""
    message = world.message(channel.id, message_id)
    if message is None:
        raise unknown_message()
    if channel.is_dm and int(message["author"]["id"]) != world.bot.id:
        raise DiscordApiError(403, 50003, "Cannot execute action on a DM channel")
    del world.messages[channel.id][message_id]
    sent = world.sent_by_id.get(message_id)
    if sent is not None:
        sent.deleted = True
    event: JSON = {"id": str(message_id), "channel_id": str(channel.id)}
    if channel.guild_id is not None:
        event["guild_id"] = str(channel.guild_id)
    if not int(message.get("flags") or 0) & EPHEMERAL:
        world.dispatch("MESSAGE_DELETE", event, intent=intent_of(channel))
    world.notify()


def _content(body: JSON) -> str:
    content = body.get("content")
    text = "" if content is None else str(content)
    if len(text) > CONTENT_LIMIT:
        raise invalid_form_body(
            "content", "BASE_TYPE_MAX_LENGTH", f"Must be {CONTENT_LIMIT} or fewer in length."
        )
    return text


def _embeds(body: JSON) -> list[JSON]:
    embeds = list(body.get("embeds") or ())
    if len(embeds) > EMBED_LIMIT:
        raise invalid_form_body(
            "embeds", "BASE_TYPE_MAX_LENGTH", f"Must be {EMBED_LIMIT} or fewer in length."
        )
    return embeds


def _uploads(
    world: World, channel: DcChannel, body: JSON, files: Mapping[int, DcFile]
) -> list[StoredFile]:
    """The files uploaded with a message, named and described by ``attachments``."""
    described = {
        str(a["id"]): a for a in body.get("attachments") or () if str(a.get("id", "")).isdigit()
    }
    stored = []
    for index in sorted(files):
        file = files[index]
        meta = described.get(str(index), {})
        name = meta.get("filename") or file.filename
        file = DcFile(
            filename=name,
            data=file.data,
            content_type=file.content_type,
            description=meta.get("description"),
        )
        stored.append(world.add_file(channel.id, file))
    return stored


def _reference(world: World, channel: DcChannel, reference: JSON | None) -> JSON | None:
    """The message a post replies to; Discord's 400 when it does not exist and must."""
    if not reference or "message_id" not in reference:
        return None
    channel_id = int(reference.get("channel_id") or channel.id)
    target = world.message(channel_id, int(reference["message_id"]))
    if target is None and reference.get("fail_if_not_exists", True):
        raise invalid_form_body(
            "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
        )
    return target


def _by_nonce(world: World, channel_id: int, nonce: str) -> JSON | None:
    now = world.clock()
    for sent in reversed(world.sent):
        if sent.channel_id != channel_id or str(sent.payload.get("nonce")) != nonce:
            continue
        created = ((sent.message_id >> 22) + DISCORD_EPOCH_MS) / 1000
        if now - created >= NONCE_WINDOW_S:
            return None
        if sent.deleted:
            raise unknown_message()
        return world.message(channel_id, sent.message_id)
    return None

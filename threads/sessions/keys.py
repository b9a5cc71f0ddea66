"""Session keys as the session tools see them: OpenClaw shapes, ``main``, ids and kinds.

Callers may name a session the way seed 002 does — ``main``, an
``agent:<agentId>:<channel>:group:<id>`` group key, ``cron:<job>``,
``hook:<uuid>``, ``node-<nodeId>`` — by one of our own keys, or by a session id
(``s_…``). :func:`translate` maps a shape to our key without touching the
store; :func:`resolve` also finds the session. ``global`` and ``unknown`` are
reserved: never a session, never listed (``global`` is ``main`` when
``session.scope = "global"``). The mapping is documented in
``docs/session-keys.md``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from config.models import GatewayConfig
from threads.errors import InvalidKeyError, NotFoundError
from threads.identity import PUBLIC_ID
from threads.keys import SessionKey, endpoint_key
from threads.sessions.errors import ReservedSessionKeyError, UnknownSessionError
from threads.store.base import Query, SessionStore

Kind = Literal["main", "group", "cron", "hook", "node", "other"]
KINDS: tuple[Kind, ...] = ("main", "group", "cron", "hook", "node", "other")
MAIN = "main"
RESERVED = frozenset({"global", "unknown"})

# Our channel names as seed 002 spells them, and back.
_SEED_CHANNEL = {"web": "webchat"}
_OUR_CHANNEL = {"webchat": "web"}
_DIRECT_MARKERS = ("dm", "direct")
_GROUP_MARKERS = ("group", "channel")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """A session the caller named: its key and the session id meant.

    ``current`` is False when the caller gave the id of a session its key no
    longer points at (one ``/new`` replaced); history reads that session,
    while a send wakes the key's current one.
    """

    key: SessionKey
    session_id: str
    current: bool = True


def main_key(config: GatewayConfig) -> SessionKey:
    """The key ``main`` stands for (``session.main_key``: the owner's DM, or ``cli``)."""
    return SessionKey(config.session.main_key)


def translate(text: str, config: GatewayConfig) -> SessionKey:
    """Our session key for ``text``, given in any accepted shape (session ids excluded).

    Raises :class:`ReservedSessionKeyError` for ``global`` (unless the scope is
    global) and ``unknown``, and :class:`InvalidKeyError` for text that is no
    key at all.
    """
    text = text.strip()
    if text == MAIN:
        return main_key(config)
    if text == "global":
        if config.session.scope == "global":
            return main_key(config)
        raise ReservedSessionKeyError(
            text, "it names no session here (session.scope is per-sender); use 'main' or a key"
        )
    if text == "unknown":
        raise ReservedSessionKeyError(text, "it names no session; use 'main' or a key")
    parts = text.split(":")
    if len(parts) >= 3 and parts[0] == "agent" and parts[1]:
        return _translate_agent_key(text, parts, config)
    return SessionKey(text)


def _translate_agent_key(text: str, parts: list[str], config: GatewayConfig) -> SessionKey:
    rest = parts[2:]
    if rest == [MAIN]:
        return main_key(config)
    if rest[0] == "subagent":
        return SessionKey(text)  # our sub-agent keys have OpenClaw's shape already
    if rest[0] in ("cron", "hook") and len(rest) >= 2:
        return SessionKey(":".join(rest))
    if len(rest) >= 3 and rest[1] in (*_GROUP_MARKERS, *_DIRECT_MARKERS):
        channel = _OUR_CHANNEL.get(rest[0], rest[0])
        peer = ":".join(rest[2:])
        if rest[1] in _DIRECT_MARKERS:
            return endpoint_key(channel, peer)
        return endpoint_key(channel, f"{rest[1]}:{peer}")
    raise InvalidKeyError(
        text,
        "an agent key is agent:<agentId>:main, agent:<agentId>:subagent:<uuid>, "
        "agent:<agentId>:<channel>:group:<id>, agent:<agentId>:<channel>:channel:<id> or "
        "agent:<agentId>:<channel>:dm:<peer>",
    )


async def resolve(text: str, store: SessionStore, config: GatewayConfig) -> Resolved:
    """The session ``text`` names: a key in any accepted shape, a session id, or a public id.

    Raises :class:`UnknownSessionError` when no session answers to it.
    """
    text = text.strip()
    if text.startswith("s_"):
        return await _by_session_id(text, store)
    if text.startswith("p_"):
        page = await store.list(Query(meta={PUBLIC_ID: text}, limit=1))
        if not page.sessions:
            raise UnknownSessionError(text)
        return await _by_session_id(page.sessions[0].id, store)
    key = translate(text, config)
    session_id = await store.resolve(key)
    if session_id is None:
        raise UnknownSessionError(
            str(key) if str(key) == text else f"{text} (our key {key})",
        )
    return Resolved(key=key, session_id=session_id)


async def _by_session_id(session_id: str, store: SessionStore) -> Resolved:
    for key, current in (await store.keys()).items():
        if current == session_id:
            return Resolved(key=SessionKey(key), session_id=session_id)
    try:
        loaded = await store.load(session_id)
    except (NotFoundError, ValueError):
        raise UnknownSessionError(session_id) from None
    owner = loaded.header.meta.get("key")
    if not owner:
        raise UnknownSessionError(session_id, "it has no session key; nothing routes to it")
    return Resolved(key=SessionKey(owner), session_id=session_id, current=False)


def is_subagent(key: str) -> bool:
    """A ``sessions_spawn`` child: ``agent:<agentId>:subagent:<uuid>``."""
    parts = key.split(":")
    return len(parts) == 4 and parts[0] == "agent" and parts[2] == "subagent"


def subagent_key(agent: str) -> SessionKey:
    """A fresh sub-agent key under ``agent``."""
    return SessionKey(f"agent:{agent}:subagent:{uuid.uuid4()}")


def chat_type_of(key: str) -> str:
    """``direct``, ``group`` or ``channel`` for a chat key; "" for a key that is no chat.

    Groups are ``<channel>:group:<id>`` (a Telegram forum topic goes on:
    ``telegram:group:<id>:topic:<thread>``); Discord guild channels are
    ``discord:channel:<id>``.
    """
    session_key = SessionKey(key)
    if not session_key.is_user_facing:
        return ""
    parts = session_key.parts
    if len(parts) >= 3 and parts[1] in _GROUP_MARKERS:
        return parts[1]
    return "direct"


def kind_of(key: str, config: GatewayConfig) -> Kind:
    """The seed's kind of a key: main, group, cron, hook, node or other."""
    if key == config.session.main_key:
        return "main"
    if key.startswith("cron:"):
        return "cron"
    if key.startswith("hook:"):
        return "hook"
    if key.startswith(("node-", "node:")):
        return "node"
    if chat_type_of(key) in _GROUP_MARKERS:
        return "group"
    return "other"


def seed_channel(channel: str) -> str:
    """Our channel name as the seed spells it (``web`` is ``webchat``)."""
    return _SEED_CHANNEL.get(channel, channel)


def channel_of(key: str, kind: Kind, last_channel: str = "") -> str:
    """The row's ``channel``: internal for cron/hook/node and sub-agents, else the chat's.

    A group's channel is the one its key records; a direct chat's is the
    channel it was last reached on (``lastChannel``), which for our keys is
    also the key's own; anything else is ``unknown``.
    """
    if kind in ("cron", "hook", "node") or is_subagent(key):
        return "internal"
    session_key = SessionKey(key)
    if session_key.parent is not None:
        return "internal"
    if last_channel:
        return seed_channel(last_channel)
    if session_key.is_user_facing:
        return seed_channel(session_key.channel)
    return "unknown"

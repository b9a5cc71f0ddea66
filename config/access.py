"""The access section of a chat channel: who may talk to the bot there.

``[channels.telegram.access]``, ``[channels.telegram.accounts.<name>.access]``
and ``[channels.discord.access]`` are each an :class:`AccessConfig`;
:mod:`channels.access` applies them. Ids may be written as numbers (TOML
gives Telegram's as integers, groups negative) and are kept as text; a
mention pattern that is not a regular expression is an error naming it.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from config.section import Section

DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]
GroupPolicy = Literal["allowlist", "open", "disabled"]


def _id_text(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _check_pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    return value


PlatformId = Annotated[str, BeforeValidator(_id_text), Field(min_length=1)]
MentionPattern = Annotated[str, AfterValidator(_check_pattern)]


class AccessConfig(Section):
    """Who may talk to the bot on a chat channel, checked once for every channel.

    Direct messages follow ``dm_policy``: ``pairing`` (an unknown sender gets
    a code an operator approves with ``gateway pairing approve``),
    ``allowlist`` (only ``allow_from`` and ``owners``), ``open`` (anyone) or
    ``disabled``. Group chats follow ``group_policy`` over the chat ids in
    ``groups`` (on Discord a channel id, or a guild id for all its channels); there the bot answers only when addressed (a mention, a reply
    to it, or a ``mention_patterns`` match) unless ``require_mention`` is off,
    and keeps up to ``group_context_messages`` of the rest as context for the
    next turn. ``owners`` may use owner-only commands (``/send``) here.
    """

    dm_policy: DmPolicy = "pairing"
    allow_from: list[PlatformId] = Field(default_factory=list)
    group_policy: GroupPolicy = "allowlist"
    groups: list[PlatformId] = Field(default_factory=list)
    require_mention: bool = True
    mention_patterns: list[MentionPattern] = Field(default_factory=list)
    group_context_messages: int = Field(default=20, ge=0, le=200)
    owners: list[PlatformId] = Field(default_factory=list)

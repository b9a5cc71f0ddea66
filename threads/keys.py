"""Session keys: the routing names of threads.

Shapes (DESIGN §2): ``telegram:123``, ``discord:channel:456``, ``cli``,
``web:<id>``, ``api:<id>``, ``cron:<job>``, ``<key>:threads:<task>`` (a
subagent), ``<key>:fork:<task>`` (a fork) and ``agent:<agentId>:subagent:<uuid>``.
A key is validated once, where it enters, and is then an ordinary ``str``.
"""

from __future__ import annotations

import re

from threads.errors import InvalidKeyError

MAX_KEY_LENGTH = 512
USER_CHANNELS = frozenset({"telegram", "discord", "cli", "web", "api", "feishu", "wecom"})
CHILD_MARKERS = ("threads", "fork")
TASK_ID = re.compile(r"[a-z0-9_-]+")
_WHITESPACE = re.compile(r"\s")
# The common case in one match: non-empty parts of printable characters other
# than whitespace and path separators. Anything else takes the slow path,
# which names the rule that failed.
_PLAIN_KEY = re.compile(r"[^\s/\\:\x00-\x1f\x7f]+(?::[^\s/\\:\x00-\x1f\x7f]+)*")


class SessionKey(str):
    """A validated session key. Construct it to validate; it compares as its text."""

    __slots__ = ()

    def __new__(cls, value: str) -> SessionKey:
        if isinstance(value, SessionKey):
            return value
        _validate(value)
        return super().__new__(cls, value)

    @property
    def parts(self) -> list[str]:
        return self.split(":")

    @property
    def channel(self) -> str:
        """The first part: the channel of a user key, or the key's namespace."""
        return self.partition(":")[0]

    @property
    def root(self) -> SessionKey:
        """The key with every ``:threads:`` / ``:fork:`` suffix removed."""
        key = self
        while (parent := key.parent) is not None:
            key = parent
        return key

    @property
    def parent(self) -> SessionKey | None:
        """The key that spawned this one, for subagent and fork keys; else None."""
        parts = self.parts
        if len(parts) >= 3 and parts[-2] in CHILD_MARKERS:
            return SessionKey(":".join(parts[:-2]))
        return None

    @property
    def child_kind(self) -> str | None:
        """``"subagent"`` or ``"fork"`` for child keys, None otherwise."""
        parts = self.parts
        if len(parts) >= 3 and parts[-2] in CHILD_MARKERS:
            return "subagent" if parts[-2] == "threads" else "fork"
        return None

    @property
    def task_id(self) -> str | None:
        return self.parts[-1] if self.parent is not None else None

    @property
    def is_user_facing(self) -> bool:
        """A key whose thread talks to a channel user: telegram:*, discord:*, cli, web:*, ...

        A channel with several accounts names each ``<channel>.<account>``
        (``telegram.support:123``): those keys are user-facing too.
        """
        return self.parent is None and base_channel(self.channel) in USER_CHANNELS

    def child(self, kind: str, task_id: str) -> SessionKey:
        """The key of this thread's subagent (``threads``) or fork child for ``task_id``."""
        marker = {"subagent": "threads", "threads": "threads", "fork": "fork"}[kind]
        if not TASK_ID.fullmatch(task_id):
            raise InvalidKeyError(task_id, "a task_id is one or more of [a-z0-9_-]")
        return SessionKey(f"{self}:{marker}:{task_id}")


def _validate(value: object) -> None:
    if (
        isinstance(value, str)
        and len(value) <= MAX_KEY_LENGTH
        and ".." not in value
        and _PLAIN_KEY.fullmatch(value)
    ):
        return
    if not isinstance(value, str):
        raise InvalidKeyError(repr(value), "a session key is a string")
    if not value:
        raise InvalidKeyError(value, "a session key cannot be empty")
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidKeyError(value, f"longer than {MAX_KEY_LENGTH} characters ({len(value)})")
    if _WHITESPACE.search(value):
        raise InvalidKeyError(value, "whitespace is not allowed")
    if "/" in value or "\\" in value:
        raise InvalidKeyError(value, "path separators ('/' or '\\') are not allowed")
    if ".." in value:
        raise InvalidKeyError(value, "'..' is not allowed")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidKeyError(value, "control characters are not allowed")
    for index, part in enumerate(value.split(":")):
        if not part:
            raise InvalidKeyError(
                value, f"part {index + 1} is empty (two ':' in a row, or one at an end)"
            )


def base_channel(channel: str) -> str:
    """The platform of a channel name: ``telegram`` for ``telegram`` and ``telegram.support``."""
    return channel.partition(".")[0]


def endpoint_key(channel: str, user_id: str) -> SessionKey:
    """The session key of a channel endpoint (``dispatch`` to ``channel`` + ``user_id``).

    Groups follow the channel's convention: ``user_id = "group:<chatid>"``.
    Telegram direct chats are ``telegram:<user id>`` and groups
    ``telegram:group:<chat id>`` (an account's: ``telegram.<account>:…``);
    Discord direct messages are ``discord:<user id>`` and guild channels
    ``discord:channel:<id>``; the terminal is ``cli``; other channels
    ``<channel>:<id>`` and ``<channel>:group:<id>``.
    """
    kind, sep, rest = user_id.partition(":")
    group = sep and kind in ("group", "channel")
    if channel == "cli":
        return SessionKey("cli")
    if base_channel(channel) == "telegram":
        return SessionKey(f"{channel}:group:{rest}" if group else f"{channel}:{user_id}")
    if base_channel(channel) == "discord":
        return SessionKey(f"{channel}:channel:{rest}" if group else f"{channel}:{user_id}")
    if group:
        return SessionKey(f"{channel}:group:{rest}")
    return SessionKey(f"{channel}:{user_id}")

"""The send policy: which deliveries may reach a channel user (seed 002).

Rules (``session.send_policy.rules``) match a delivery's session key by
channel, chat type and key prefix. A session's own override (``allow`` or
``deny``, set by an owner's ``/send on|off`` or ``gateway sessions
send-policy``) decides first; otherwise any matching ``deny`` rule blocks
(the first one is named), any matching ``allow`` rule allows, and the default
decides the rest.

The gateway wraps every sink that reaches a channel user in a
:class:`PolicySink`: dispatch replies and ``to=user`` sends, final text
answers, announces and cron deliveries all pass through one. A blocked
delivery is not sent; it is recorded on the session (a ``send_blocked``
custom entry) and reported in ``Delivery.blocked``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from config.models import GatewayConfig, SendPolicyConfig, SendPolicyMatch
from threads.errors import NotFoundError, OwnedElsewhereError
from threads.keys import SessionKey, base_channel
from threads.session import Session
from threads.sessions import meta as m
from threads.sessions.errors import UnknownSessionError
from threads.sessions.keys import chat_type_of, seed_channel
from threads.sinks import Delivery, OutboundMessage, Sink, dedups
from threads.store.base import SessionStore
from threads.store.entries import InfoEntry
from threads.turns import NoRuns

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

Setting = Literal["allow", "deny", "inherit"]
SETTINGS: tuple[Setting, ...] = ("allow", "deny", "inherit")
BLOCKED_KIND = "send_blocked"
EXCERPT = 200
WORDS: dict[str, Setting] = {"on": "allow", "off": "deny", "inherit": "inherit"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Whether a delivery may go, and the words that say why."""

    allowed: bool
    reason: str
    source: Literal["session", "rule", "default"]

    @property
    def action(self) -> str:
        return "allow" if self.allowed else "deny"


def decide(config: SendPolicyConfig, key: str, *, override: str | None = None) -> Decision:
    """The send policy for a delivery to ``key``'s channel user."""
    if override in ("allow", "deny"):
        return Decision(
            allowed=override == "allow",
            reason=f"the session's own send policy is {override} (set with /send or "
            "`gateway sessions send-policy`)",
            source="session",
        )
    channel = SessionKey(key).channel
    chat_type = chat_type_of(key)
    allowed_by = 0
    for index, rule in enumerate(config.rules, 1):
        if not _matches(rule.match, key, channel, chat_type):
            continue
        if rule.action == "deny":
            return Decision(
                allowed=False,
                reason=f"send policy rule {index} ({describe_match(rule.match)}) denies it",
                source="rule",
            )
        allowed_by = allowed_by or index
    if allowed_by:
        rule = config.rules[allowed_by - 1]
        return Decision(
            allowed=True,
            reason=f"send policy rule {allowed_by} ({describe_match(rule.match)}) allows it",
            source="rule",
        )
    return Decision(
        allowed=config.default == "allow",
        reason=f"the default send policy is {config.default}",
        source="default",
    )


def _matches(match: SendPolicyMatch, key: str, channel: str, chat_type: str) -> bool:
    if match.channel is not None and match.channel not in (channel, seed_channel(channel)):
        return False
    if match.chat_type is not None:
        # A channel (Discord guild channel, …) is a kind of group chat.
        kinds = ("group", "channel") if match.chat_type == "group" else (match.chat_type,)
        if chat_type not in kinds:
            return False
    return match.key_prefix is None or key.startswith(match.key_prefix)


def describe_match(match: SendPolicyMatch) -> str:
    parts = [
        f"{name}={value}"
        for name, value in (
            ("channel", match.channel),
            ("chatType", match.chat_type),
            ("keyPrefix", match.key_prefix),
        )
        if value is not None
    ]
    return " ".join(parts) or "every session"


def latest_override(entries: list[Any]) -> str | None:
    """The override the newest info entry that sets one records."""
    for entry in reversed(entries):
        if isinstance(entry, InfoEntry) and m.SEND_POLICY in entry.meta:
            return m.send_override(entry.meta)
    return None


class SendPolicy:
    """The gateway's send policy: decisions, per-session overrides, and the wrapping sink.

    Overrides are read from each session once and then cached by session id;
    every override written through this object updates the cache. A new
    session (``/new``) starts without one.
    """

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager
        self.config: GatewayConfig = manager.config
        self._overrides: dict[str, str | None] = {}

    def wrap(self, key: str, sink: Sink) -> Sink:
        """``sink`` guarded by the policy of ``key``'s deliveries."""
        return PolicySink(inner=sink, key=SessionKey(key), policy=self)

    async def check(self, key: str) -> Decision:
        return decide(self.config.session.send_policy, key, override=await self.override(key))

    async def override(self, key: str) -> str | None:
        thread = self.manager.thread(key)
        session_id = thread.session.id if thread else await self.manager.store.resolve(key)
        if session_id is None:
            return None
        if session_id in self._overrides:
            return self._overrides[session_id]
        if thread is not None:
            value = m.send_override(thread.session.meta())
        else:
            try:
                loaded = await self.manager.store.load(session_id)
            except NotFoundError:
                return None
            value = latest_override(loaded.entries)
            value = value if value is not None else m.send_override(loaded.header.meta)
        self._overrides[session_id] = value
        return value

    async def set(self, key: str, setting: str, *, create: bool = False) -> Decision:
        """Record ``key``'s override (``inherit`` clears it); the policy now in force."""
        if setting not in SETTINGS:
            raise ValueError(f"send policy {setting!r} is not one of allow, deny, inherit")
        try:
            thread = await self.manager.open_thread(key, create=create)
        except OwnedElsewhereError:
            # Scaled out: the node that runs the session records it (and caches it).
            answer = await self.manager.ownership.ask_owner(
                SessionKey(key), "send_policy", {"setting": setting, "create": create}
            )
            if answer is None:  # the owner let go meanwhile: it is free to take now
                return await self.set(key, setting, create=create)
            found = answer["decision"]
            return Decision(
                allowed=found["allowed"], reason=found["reason"], source=found["source"]
            )
        if thread is None:
            raise UnknownSessionError(key, "a send policy is set on an existing session")
        await thread.session.set_info(meta={m.SEND_POLICY: setting})
        self._overrides[thread.session.id] = setting if setting != "inherit" else None
        return await self.check(key)

    async def set_here(self, key: SessionKey, args: Mapping[str, Any]) -> dict[str, Any]:
        """Another gateway node's ``set`` for a session this node runs (an owner op)."""
        decision = await self.set(key, str(args["setting"]), create=bool(args.get("create")))
        return {"ok": True, "decision": dataclasses.asdict(decision)}

    async def record_blocked(self, key: str, message: OutboundMessage, decision: Decision) -> None:
        """Write the refusal onto the session, so a blocked delivery is never silent."""
        log.info("send to %s blocked: %s", key, decision.reason)
        thread = await self.manager.open_thread(key)
        if thread is None:
            return
        await thread.session.custom(
            BLOCKED_KIND, {"reason": decision.reason, "text": message.text[:EXCERPT]}
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySink:
    """A channel user's sink that asks the send policy before each delivery."""

    inner: Sink
    key: SessionKey
    policy: SendPolicy

    @property
    def drops(self) -> bool:
        return self.inner.drops

    @property
    def attached(self) -> bool:
        """Whether the inner sink's chat is tied to this process (scale-out relays for it)."""
        return bool(getattr(self.inner, "attached", False))

    @property
    def dedups(self) -> bool:
        return dedups(self.inner)

    def describe(self) -> str:
        return self.inner.describe()

    def to_wire(self) -> dict[str, str]:
        return {**self.inner.to_wire(), "key": str(self.key)}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        decision = await self.policy.check(self.key)
        if decision.allowed:
            return await self.inner.deliver(message)
        await self.policy.record_blocked(self.key, message, decision)
        return Delivery(delivered_to=f"{self.key} (not sent)", blocked=decision.reason)


def key_of_endpoint(channel: str, chat: str) -> SessionKey:
    """The session key of a channel endpoint, for sink wire forms that do not carry it."""
    if channel == "cli":
        return SessionKey("cli")
    return SessionKey(f"{channel}:{chat}")


# -- /send, the owner's standalone command


class Sender(Protocol):
    """Who typed a command (a channel's inbound message satisfies it)."""

    @property
    def channel(self) -> str: ...

    @property
    def user_id(self) -> str: ...


SendCommand = Callable[[Sender, SessionKey, str], Awaitable[str]]


def is_owner(sender: Sender, config: GatewayConfig) -> bool:
    """Owners are ``session.owners`` (``<channel>:<user id>``, ``<platform>:<user id>``
    for any of a platform's accounts, or a bare user id), and the channel's own
    ``[channels.<name>.access] owners``.

    The terminal user is always one: whoever can type into ``gateway chat``
    can run ``gateway sessions send-policy`` on the same machine.
    """
    if sender.channel == "cli":
        return True
    owners = config.session.owners
    platform = base_channel(sender.channel)  # a Telegram account's owners: "telegram:<id>"
    if sender.user_id in owners or any(
        f"{name}:{sender.user_id}" in owners for name in (sender.channel, platform)
    ):
        return True
    access = config.channels.access_sections().get(sender.channel)
    return access is not None and sender.user_id in access.owners


def describe_decision(key: str, decision: Decision, config: GatewayConfig) -> str:
    if decision.source == "session":
        return f"Send policy for {key}: {decision.action} (this session's own setting)."
    return f"Send policy for {key}: {decision.action}, inherited ({decision.reason})."


def send_command(policy: SendPolicy) -> SendCommand:
    """The router's ``/send on|off|inherit``: answered at once, no turn runs."""

    async def command(sender: Sender, key: SessionKey, rest: str) -> str:
        config = policy.config
        if not is_owner(sender, config):
            return (
                "Only an owner can change the send policy; owners are listed in "
                '[session] owners (e.g. owners = ["telegram:12345"]).'
            )
        word = rest.strip().lower()
        if not word:
            return describe_decision(key, await policy.check(key), config)
        setting = WORDS.get(word)
        if setting is None:
            return f"/send takes on, off or inherit, not {rest.strip()!r}: e.g. /send off"
        decision = await policy.set(key, setting, create=True)
        return describe_decision(key, decision, config)

    return command


# -- writing an override without a running gateway


async def write_override(
    store: SessionStore, config: GatewayConfig, key: str, setting: str
) -> Decision:
    """Set ``key``'s override straight in the store (no gateway holds the session)."""
    if setting not in SETTINGS:
        raise ValueError(f"send policy {setting!r} is not one of allow, deny, inherit")
    session_id = await store.resolve(key)
    if session_id is None:
        raise UnknownSessionError(key, "`gateway sessions list` shows the sessions")
    session = await Session.open(store, session_id, NoRuns())
    try:
        await session.set_info(meta={m.SEND_POLICY: setting})
        override = m.send_override(session.meta())
    finally:
        await session.close()
    return decide(config.session.send_policy, key, override=override)

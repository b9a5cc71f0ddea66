"""Access control every chat channel shares: who may start a turn, and owners.

One :class:`Access` per channel with an ``[channels.<name>.access]`` section
(Telegram, Discord) decides each inbound message before the router does
anything else with it:

====================  ==========================================================
direct message        ``run`` when the sender is in ``allow_from``, an owner, or
                      (under ``pairing``) paired, or the policy is ``open``;
                      under ``pairing`` a stranger gets a ``pair`` verdict (a
                      code is issued, the message goes nowhere); ``allowlist``
                      and ``disabled`` ``refuse`` with one plain line.
group chat            ``ignore`` (no reply: a bot added to a group it may not
                      serve stays silent rather than answer every line) when
                      the group policy is ``disabled`` or the chat is not in
                      ``groups`` under ``allowlist``. Otherwise ``run`` when the
                      message addresses the bot — a mention, a reply to the
                      bot, a ``mention_patterns`` match, or any message when
                      ``require_mention`` is off — else ``context``: kept (at
                      most ``group_context_messages`` per chat, oldest dropped)
                      and handed, with the verdict, to the next turn that runs
                      in that chat. A slash command counts as addressed to the
                      bot and takes no context. ``groups`` lists group ids; a
                      Telegram forum topic (``group:<id>:topic:<n>``) belongs
                      to its group, and keeps its own context. On Discord a
                      listed channel allows its threads, a listed guild every
                      channel in it.
====================  ==========================================================

``check`` is synchronous and does no I/O: the paired users are an in-memory
set the :class:`~channels.pairing.PairingService` keeps in sync. Only a
stranger's ``pair`` verdict touches the state store, in :meth:`Access.admit`.
Context is held in memory only (a restart forgets it; it is context, not
conversation).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from channels.base import Inbound
from channels.pairing import Ask, PairingService
from config.access import AccessConfig
from threads.state import StateStoreError

log = logging.getLogger(__name__)

Action = Literal["run", "pair", "refuse", "ignore", "context"]

MAX_CONTEXT_CHATS = 1000
MAX_CONTEXT_CHARS = 1000
MAX_LOGGED_GROUPS = 1000
CONTEXT_OPEN = "[Earlier messages in this chat, not addressed to you, for context:]"
CONTEXT_CLOSE = "[End of earlier messages. The message to answer:]"
UNAVAILABLE = "This bot cannot take new users right now; try again later."


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one inbound message gets.

    ``inbound`` is the message to route on ``run``, else None; ``context`` the
    group messages its turn gets before it (:func:`with_context`); ``reply``
    is what to tell the sender (empty: nothing).
    """

    action: Action
    inbound: Inbound | None = None
    context: tuple[ContextLine, ...] = ()
    reply: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextLine:
    """A group message the bot was not addressed by, kept for the next turn."""

    sender: str
    text: str


class Access:
    """One channel's access decisions and its owners; see the module docstring."""

    def __init__(
        self,
        channel: str,
        config: AccessConfig,
        *,
        pairing: PairingService | None = None,
        session_owners: Iterable[str] = (),
    ) -> None:
        if config.dm_policy == "pairing" and pairing is None:
            raise ValueError(
                f"channels.{channel}.access: dm_policy 'pairing' needs a pairing service"
            )
        self.channel = channel
        self.config = config
        self.pairing = pairing
        self._allowed = frozenset(config.allow_from)
        self._groups = frozenset(config.groups)
        self._owners = frozenset(_owners_of(channel, config.owners, session_owners))
        self._patterns = tuple(re.compile(p, re.IGNORECASE) for p in config.mention_patterns)
        self._context: OrderedDict[str, deque[ContextLine]] = OrderedDict()
        self._ignored: OrderedDict[str, None] = OrderedDict()

    # -- who

    def is_owner(self, user_id: str) -> bool:
        """Owners: this channel's ``owners``, and ``session.owners`` written
        ``<channel>:<id>``, ``<platform>:<id>`` (``telegram:`` for every Telegram
        account) or as a bare id."""
        return user_id in self._owners

    def allows_direct(self, user_id: str) -> bool:
        """Whether a direct message from ``user_id`` runs a turn under the DM policy."""
        policy = self.config.dm_policy
        if policy == "disabled":
            return False
        if policy == "open" or user_id in self._allowed or user_id in self._owners:
            return True
        return (
            policy == "pairing"
            and self.pairing is not None
            and self.pairing.is_paired(self.channel, user_id)
        )

    # -- deciding

    def check(self, inbound: Inbound, *, command: bool = False) -> Verdict:
        """The verdict for ``inbound`` (``command``: it is a slash command the router knows)."""
        if inbound.chat_type == "direct":
            return self._direct(inbound)
        return self._group(inbound, command=command)

    async def admit(self, inbound: Inbound, *, command: bool = False) -> Verdict:
        """:meth:`check`, then for a stranger under pairing: their code (or no room)."""
        verdict = self.check(inbound, command=command)
        if verdict.action != "pair" or self.pairing is None:
            return verdict
        try:
            ask = await self.pairing.ask(
                self.channel, inbound.user_id, user_name=inbound.user_name, chat_id=inbound.chat_id
            )
        except StateStoreError as exc:
            log.error("%s: cannot record a pairing request: %s", self.channel, exc)
            return dataclasses.replace(verdict, reply=UNAVAILABLE)
        return dataclasses.replace(verdict, reply=self._pairing_text(ask))

    def _direct(self, inbound: Inbound) -> Verdict:
        if self.allows_direct(inbound.user_id):
            return Verdict(action="run", inbound=inbound, reason="allowed")
        policy = self.config.dm_policy
        if policy == "pairing":
            return Verdict(action="pair", reason="a stranger under pairing")
        if policy == "disabled":
            return Verdict(
                action="refuse",
                reply="This bot does not take direct messages.",
                reason="direct messages are disabled",
            )
        return Verdict(
            action="refuse",
            reply=f"This bot answers only allowlisted users; your {self.channel} user id is "
            f"{inbound.user_id}.",
            reason="not on the allowlist",
        )

    def _group(self, inbound: Inbound, *, command: bool) -> Verdict:
        policy = self.config.group_policy
        group = group_of(inbound.chat_id)
        listed = not self._groups.isdisjoint((group, inbound.chat_id, inbound.space or group))
        if policy == "disabled" or (policy == "allowlist" and not listed):
            self._log_ignored(group, policy)
            return Verdict(action="ignore", reason=f"group {group} is not allowed")
        if command:
            return Verdict(action="run", inbound=inbound, reason="a command")
        if self.addressed(inbound):
            context = tuple(self._context.pop(inbound.chat_id, ()))
            return Verdict(
                action="run", inbound=inbound, context=context, reason="addressed to the bot"
            )
        self._keep(inbound)
        return Verdict(action="context", reason="not addressed to the bot")

    def addressed(self, inbound: Inbound) -> bool:
        """Whether a group message speaks to the bot (always, without ``require_mention``)."""
        if not self.config.require_mention or inbound.mentioned or inbound.reply_to_bot:
            return True
        return any(pattern.search(inbound.text) for pattern in self._patterns)

    # -- group context

    def context(self, chat_id: str) -> tuple[ContextLine, ...]:
        """The messages kept for ``chat_id``'s next turn, oldest first."""
        return tuple(self._context.get(chat_id, ()))

    def _keep(self, inbound: Inbound) -> None:
        limit = self.config.group_context_messages
        if limit == 0 or not inbound.text.strip():
            return
        lines = self._context.get(inbound.chat_id)
        if lines is None:
            lines = self._context[inbound.chat_id] = deque(maxlen=limit)
            while len(self._context) > MAX_CONTEXT_CHATS:
                self._context.popitem(last=False)
        else:
            self._context.move_to_end(inbound.chat_id)
        sender = " ".join((inbound.user_name or f"user {inbound.user_id}").split())
        lines.append(ContextLine(sender=sender, text=inbound.text[:MAX_CONTEXT_CHARS]))

    # -- words

    def _pairing_text(self, ask: Ask) -> str:
        request = ask.request
        if ask.outcome == "full" or request is None or self.pairing is None:
            return "This bot has too many pairing requests waiting right now; try again later."
        left = (request.expires - self.pairing.now()).total_seconds()
        minutes = max(1, round(left / 60))
        return (
            "This bot answers only people its owner has approved; your message was not "
            "passed on.\n"
            f"Pairing code: {request.code} (valid for {minutes} more minutes)\n"
            f"Ask the owner to run: gateway pairing approve {self.channel} {request.code}"
        )

    def _log_ignored(self, chat_id: str, policy: str) -> None:
        if chat_id in self._ignored:
            return
        self._ignored[chat_id] = None
        while len(self._ignored) > MAX_LOGGED_GROUPS:
            self._ignored.popitem(last=False)
        why = "group_policy is disabled" if policy == "disabled" else "it is not in groups"
        log.info(
            "%s: ignoring group chat %s (%s in [channels.%s.access])",
            self.channel,
            chat_id,
            why,
            self.channel,
        )


def with_context(lines: Iterable[ContextLine], text: str) -> str:
    """``text`` after a delimited block of earlier group messages, one sender per line.

    A message's own line breaks are indented, so no message can start a line
    that looks like a sender or a delimiter. No lines: ``text`` as it is.
    """
    lines = tuple(lines)
    if not lines:
        return text
    body = [CONTEXT_OPEN]
    for line in lines:
        body.append(f"{line.sender}: " + line.text.replace("\n", "\n  "))
    body.append(CONTEXT_CLOSE)
    body.append(text)
    return "\n".join(body)


def group_of(chat_id: str) -> str:
    """The group a chat is in, as ``groups`` lists it.

    Telegram's ``group:<id>[:topic:<n>]`` and Discord's ``channel:<id>[:thread:<n>]``
    are ``<id>`` (a topic or thread belongs to its group or channel); any other
    chat id is itself.
    """
    kind, sep, rest = chat_id.partition(":")
    return rest.partition(":")[0] if sep and kind in ("group", "channel") else chat_id


def _owners_of(channel: str, owners: Iterable[str], session_owners: Iterable[str]) -> set[str]:
    found = set(owners)
    names = {channel, channel.partition(".")[0]}  # an account's owners include its platform's
    for owner in session_owners:
        name, sep, user_id = owner.partition(":")
        if not sep:
            found.add(owner)
        elif name in names and user_id:
            found.add(user_id)
    return found

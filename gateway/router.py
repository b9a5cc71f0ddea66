"""The router: an inbound channel message becomes a session key and a wake.

Slash commands that must not wait for a turn are answered here, at once and
without a turn, for every channel: ``/stop`` (end the running turn and the
work it set going; ``/stop drain`` also drops the user's queued messages),
``/new`` and ``/reset`` (start a fresh session for this chat; the old one is
kept), ``/status`` and ``/help``; the gateway adds ``/send`` and ``/compact``.
:data:`COMMANDS` lists them for the platforms that show a command menu. An
unknown ``/word`` is answered with the commands the person may use, never
handed to the model (see :mod:`gateway.chat_commands` for the words).

A message becomes a wake: the text (after the message it replies to, quoted
and shortened), the files it carries, the sender as the caller, and a sink
back to the chat that answers the triggering message in a group. A channel
that can show a running turn (typing, a streamed draft) is handed the turn;
so is a channel whose every message waits for its own answer (the API), whose
replies are addressed to the message. The message may name the agent to run.

On a channel with access control (``Router.access``: Telegram, Discord) every
message passes its :class:`~channels.access.Access` first: a stranger's
direct message gets a pairing code or a refusal and goes no further, an
unaddressed group message is kept as context, and owner-only commands
(``/send``) need an owner.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from channels.access import Access, ContextLine, with_context
from channels.base import Answers, AsksApproval, Channel, ChannelSink, Follows, Inbound
from gateway.chat_commands import COMMAND_WORD, COMMANDS, help_text, status_text, unknown_text
from threads.errors import NoTurnRunningError, ThreadNotLoadedError
from threads.keys import SessionKey, base_channel
from threads.manager import ThreadManager
from threads.messages import FilePart
from threads.sessions.policy import is_owner
from threads.sinks import OutboundMessage, Sink
from threads.wake import UserCaller, Wake, WakeSource

log = logging.getLogger(__name__)

__all__ = ["COMMANDS", "Router", "body_of", "endpoint_of", "files_of", "session_key_of"]

Command = Callable[[Inbound, SessionKey, str], Awaitable[str]]
SinkWrapper = Callable[[SessionKey, Sink], Sink]


def _as_is(key: SessionKey, sink: Sink) -> Sink:
    return sink


def session_key_of(inbound: Inbound) -> SessionKey:
    """The session key of the chat an inbound message came from."""
    channel, chat = inbound.channel, inbound.chat_id
    if channel == "cli":
        return SessionKey("cli")
    return SessionKey(f"{channel}:{chat}")


def endpoint_of(key: SessionKey) -> tuple[str, str] | None:
    """The (channel, chat id) a user-facing key delivers to; the inverse of the above."""
    if not key.is_user_facing:
        return None
    if key == "cli":
        return "cli", "cli"
    channel, _, chat = key.partition(":")
    return (channel, chat) if chat else None


def body_of(inbound: Inbound) -> str:
    """A wake's body: the message, after the one it replies to (quoted, shortened)."""
    if not inbound.reply_to_text:
        return inbound.text
    quoted = "\n".join(f"> {line}" for line in inbound.reply_to_text.splitlines())
    who = "the bot" if inbound.reply_to_bot else "a message"
    return f"(replying to {who}:)\n{quoted}\n\n{inbound.text}"


def files_of(inbound: Inbound) -> tuple[FilePart, ...]:
    """The files of a message, by reference (fetched only when a model is to see them)."""
    return tuple(
        FilePart(
            url=media.ref,
            media_type=media.media_type or "application/octet-stream",
            name=media.name,
            size=media.size,
        )
        for media in inbound.media
    )


class Router:
    """Turns inbound messages into wakes; answers the commands that need no turn."""

    def __init__(self, manager: ThreadManager, channels: Mapping[str, Channel]) -> None:
        self.manager = manager
        self.channels = channels
        # The gateway puts the send policy between a wake's replies and the channel.
        self.wrap_sink: SinkWrapper = _as_is
        self.commands: dict[str, Command] = {
            "/help": self._help,
            "/new": self._new,
            "/reset": self._new,
            "/stop": self._stop,
            "/status": self._status,
        }
        # Channels with an access section (Telegram, Discord) are checked before
        # anything else; owner-only commands need one of that channel's owners.
        self.access: Mapping[str, Access] = {}
        self.owner_commands: set[str] = {"/send"}

    async def handle(self, inbound: Inbound) -> None:
        """Route one inbound message: access first, then a command answered now, or a wake."""
        name, rest = "", ""
        text = inbound.text.strip()
        word, _, after = text.partition(" ")
        if COMMAND_WORD.fullmatch(word):
            name, rest = word.split("@", 1)[0].lower(), after
        known = self.commands.get(name) if name else None
        # An unknown /word is answered with the help, but only a known command counts as
        # addressed to the bot in a group (another bot's /start@other_bot is not ours).
        command = known or (self._unknown if name else None)
        context: tuple[ContextLine, ...] = ()
        access = self.access.get(inbound.channel)
        if access is not None:
            verdict = await access.admit(inbound, command=known is not None)
            if verdict.reply:
                await self.reply(inbound, verdict.reply)
            if verdict.inbound is None:
                return
            inbound, context = verdict.inbound, verdict.context
            owner_only = command is not None and name in self.owner_commands
            if owner_only and not access.is_owner(inbound.user_id):
                await self.reply(inbound, f"Only an owner of this bot can use {name}.")
                return
        key = session_key_of(inbound)
        if command is not None:
            answer = await command(inbound, key, rest.strip())
            await self.reply(inbound, answer)
            return
        channel = self.channels[inbound.channel]
        platform = base_channel(inbound.channel)
        answers = isinstance(channel, Answers)
        reply_to = inbound.message_id if inbound.chat_type != "direct" or answers else ""
        wake = Wake(
            source=WakeSource(platform),
            body=with_context(context, body_of(inbound)),
            caller=UserCaller(channel=platform, user_id=inbound.user_id, name=inbound.user_name),
            sink=self.wrap_sink(
                key, ChannelSink(channel=channel, chat_id=inbound.chat_id, reply_to=reply_to)
            ),
            meta={"message_id": inbound.message_id} if inbound.message_id else {},
            files=files_of(inbound),
            agent=inbound.agent or None,
        )
        _accepted, turn = await self.manager.wake_turn(key, wake)
        if isinstance(channel, Answers):
            channel.answer(inbound.message_id, turn)
        elif isinstance(channel, Follows):
            channel.follow(inbound.chat_id, turn)

    async def reply(self, inbound: Inbound, text: str) -> None:
        """Answer a message in its chat; a button press, to the person who pressed it."""
        channel = self.channels[inbound.channel]
        if inbound.press and isinstance(channel, AsksApproval):
            await channel.answer_press(inbound, text)
            return
        await channel.deliver(
            inbound.chat_id, OutboundMessage(text=text, reply_to=inbound.message_id)
        )

    def help_for(self, inbound: Inbound) -> str:
        """The commands ``inbound``'s sender may use: owner-only ones for owners alone."""
        access = self.access.get(inbound.channel)
        owner = (
            access.is_owner(inbound.user_id)
            if access is not None
            else is_owner(inbound, self.manager.config)
        )
        return help_text(owner=owner, owner_only=self.owner_commands)

    async def _help(self, inbound: Inbound, key: SessionKey, rest: str) -> str:
        return self.help_for(inbound)

    async def _unknown(self, inbound: Inbound, key: SessionKey, rest: str) -> str:
        word = inbound.text.strip().split(" ", 1)[0].split("@", 1)[0]
        return unknown_text(word, self.help_for(inbound))

    async def _new(self, inbound: Inbound, key: SessionKey, rest: str) -> str:
        session_id = await self.manager.new_session(key)
        return f"Started a new conversation ({session_id}). The previous one is kept."

    async def _stop(self, inbound: Inbound, key: SessionKey, rest: str) -> str:
        drain = rest.lower() == "drain"
        try:
            report = await self.manager.stop(key, drain=drain, by_user=True)
        except (ThreadNotLoadedError, NoTurnRunningError):
            return "Nothing is running."
        parts = [
            "Stopped the running turn and what it started."
            if str(key) in report.ended
            else "No turn was running."
        ]
        if report.dropped:
            parts.append(f"Dropped {_count(report.dropped, 'queued message')}.")
        thread = self.manager.thread(key)
        waiting = thread.session.pending_count() if thread is not None else 0
        if waiting:
            parts.append(
                f"Your {_count(waiting, 'message')} will run next (/stop drain drops them)."
            )
        return " ".join(parts)

    async def _status(self, inbound: Inbound, key: SessionKey, rest: str) -> str:
        info = await self.manager.check_session(key)
        return status_text(key, info, self.manager.config.model_for(info.get("agent")))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"

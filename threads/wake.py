"""Wakes: one input to a thread, and the YAML header that introduces it to the model."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeAlias

from threads.keys import SessionKey
from threads.messages import FilePart, Message, TextPart
from threads.sinks import DropSink, Sink, SinkResolver


class WakeSource(StrEnum):
    """Where a wake came from. User channels first, then the system sources."""

    TELEGRAM = "telegram"
    DISCORD = "discord"
    WEB = "web"
    CLI = "cli"
    API = "api"
    SESSION = "session"
    CHILD_COMPLETED = "child_completed"
    CRON = "cron"
    HEARTBEAT = "heartbeat"
    PROGRESS = "progress"
    COMPRESSION = "compression"
    RESUME = "resume"

    @property
    def is_user_channel(self) -> bool:
        return self in _USER_SOURCES


_USER_SOURCES = frozenset(
    {WakeSource.TELEGRAM, WakeSource.DISCORD, WakeSource.WEB, WakeSource.CLI, WakeSource.API}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserCaller:
    """The channel user who sent the message."""

    channel: str
    user_id: str
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionCaller:
    """Another session (its thread's turn dispatched to this one)."""

    session_key: SessionKey


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemCaller:
    """The gateway itself (cron, heartbeat, progress, compression, child completion)."""

    name: str


Caller: TypeAlias = UserCaller | SessionCaller | SystemCaller


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Wake:
    """One input to a thread: who sent what, and where the reply to them goes.

    ``chain`` and ``depth`` bound exchanges between sessions (DESIGN §11): a
    wake that no session caused (a user's message, a cron fire) starts a chain
    at depth 0 — the thread manager names it when it accepts the wake — and
    every wake a turn causes (a reply to a session, a send, a child's
    completion, a progress report) carries its cause's chain one level deeper.
    ``expects_reply`` is false for a session's plain-text final answer: it is
    delivered once, and the receiving side's own plain answer goes nowhere.
    ``files`` are the files the user sent with the message; they ride in the
    prompt message itself, after its text. ``origin`` is the outbound record
    (in the sending session's ledger) this wake is the delivery of: a session
    accepts one wake per origin, so a hand-off completed twice (before and
    after a crash) wakes it once.
    """

    source: WakeSource
    body: str
    caller: Caller
    sink: Sink = field(default_factory=DropSink)
    agent: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)
    created: datetime = field(default_factory=_now)
    chain: str = ""
    depth: int = 0
    expects_reply: bool = True
    files: tuple[FilePart, ...] = ()
    origin: str = ""

    def __post_init__(self) -> None:
        # Frozen all the way down: the meta a wake carries cannot change under it.
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def caller_session_key(self) -> SessionKey | None:
        return self.caller.session_key if isinstance(self.caller, SessionCaller) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    """The chain a caused wake belongs to and its depth in it (see :class:`Wake`)."""

    chain: str
    depth: int

    @classmethod
    def after(cls, payload: object) -> Cause:
        """The cause of what a turn started by ``payload`` (its wake) does: one level deeper.

        A turn with no wake (a test's bare send) causes wakes at depth 1 of no chain.
        """
        if isinstance(payload, Wake):
            return cls(chain=payload.chain, depth=payload.depth + 1)
        return cls(chain="", depth=1)


def caller_to_wire(caller: Caller) -> dict[str, str]:
    if isinstance(caller, UserCaller):
        out = {"kind": "user", "channel": caller.channel, "user_id": caller.user_id}
        if caller.name:
            out["name"] = caller.name
        return out
    if isinstance(caller, SessionCaller):
        return {"kind": "session", "session_key": str(caller.session_key)}
    return {"kind": "system", "name": caller.name}


def caller_from_wire(obj: Mapping[str, Any]) -> Caller:
    kind = obj.get("kind")
    if kind == "user":
        return UserCaller(
            channel=str(obj["channel"]), user_id=str(obj["user_id"]), name=str(obj.get("name", ""))
        )
    if kind == "session":
        return SessionCaller(session_key=SessionKey(str(obj["session_key"])))
    if kind == "system":
        return SystemCaller(name=str(obj["name"]))
    raise ValueError(f"wake caller kind {kind!r} is not user, session or system")


def wake_to_wire(wake: Wake) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": wake.source.value,
        "caller": caller_to_wire(wake.caller),
        "sink": wake.sink.to_wire(),
        "created": wake.created.isoformat(),
    }
    if wake.agent:
        out["agent"] = wake.agent
    if wake.meta:
        out["meta"] = dict(wake.meta)
    if wake.chain:
        out["chain"] = wake.chain
    if wake.depth:
        out["depth"] = wake.depth
    if not wake.expects_reply:
        out["expects_reply"] = False
    if wake.origin:
        out["origin"] = wake.origin
    return out


def wake_from_wire(obj: Mapping[str, Any], body: str, resolve_sink: SinkResolver) -> Wake:
    """Rebuild a wake from its wire form; the body travels in the message itself."""
    return Wake(
        source=WakeSource(obj["source"]),
        body=body,
        caller=caller_from_wire(obj["caller"]),
        sink=resolve_sink(obj.get("sink", {"kind": "drop"})),
        agent=obj.get("agent"),
        meta=dict(obj.get("meta", {})),
        created=datetime.fromisoformat(obj["created"]),
        chain=str(obj.get("chain", "")),
        depth=int(obj.get("depth", 0)),
        expects_reply=bool(obj.get("expects_reply", True)),
        origin=str(obj.get("origin", "")),
    )


def render_header(
    wake: Wake,
    *,
    thread: str,
    session_id: str,
    tz: tzinfo = UTC,
    injected: bool = False,
) -> str:
    """The YAML header seed 000 puts before a wake's body.

    It names the source, the thread and session, the time (with weekday and
    zone), whether the sender is a user or the system, the caller's session
    key on cross-session wakes only, and where a reply to the caller goes.
    """
    local = wake.created.astimezone(tz)
    # Seed 000: the sender is the channel user or the system; a session caller is
    # named by caller_session_key below.
    sender = "user" if isinstance(wake.caller, UserCaller) else "system"
    lines = [
        "---",
        f"source: {wake.source.value}",
        f"thread: {_yaml_scalar(thread)}",
        f"session: {session_id}",
        f"time: {local.strftime('%Y-%m-%d %H:%M:%S %A')} {_zone_name(local)}",
        f"sender: {sender}",
    ]
    if isinstance(wake.caller, UserCaller) and wake.caller.name:
        lines.append(f"sender_name: {_yaml_scalar(wake.caller.name)}")
    if isinstance(wake.caller, SessionCaller):
        lines.append(f"caller_session_key: {_yaml_scalar(str(wake.caller.session_key))}")
        if not wake.expects_reply:
            lines.append("reply_expected: false")
    if wake.depth:
        lines.append(f"exchange_depth: {wake.depth}")
    if wake.agent:
        lines.append(f"agent: {_yaml_scalar(wake.agent)}")
    lines.append(f"delivery: {_yaml_scalar(_delivery_words(wake))}")
    if injected:
        lines.append("injected: true")
    lines.append("---")
    return "\n".join(lines)


def render_prompt(
    wake: Wake, *, thread: str, session_id: str, tz: tzinfo = UTC, injected: bool = False
) -> str:
    """The header, then the body: the user message a turn starts from."""
    header = render_header(wake, thread=thread, session_id=session_id, tz=tz, injected=injected)
    return f"{header}\n{wake.body}"


def prompt_message(wake: Wake, prompt: str) -> Message:
    """The user message of a wake: its rendered prompt, then the files it carries."""
    if not wake.files:
        return Message.user(prompt)
    return Message(role="user", content=(TextPart(text=prompt), *wake.files))


def mark_injected(prompt: str) -> str:
    """A rendered prompt marked ``injected: true`` (a steer restored after a restart).

    Text without a wake header is returned unchanged.
    """
    if not prompt.startswith("---\n") or "injected: true" in prompt:
        return prompt
    end = prompt.find("\n---", 4)
    if end < 0:
        return prompt
    return f"{prompt[:end]}\ninjected: true{prompt[end:]}"


def injected_message(message: Message) -> Message:
    """A prompt message as a steer delivers it: its text marked ``injected: true``, files kept."""
    first = message.content[0] if message.content else None
    if not isinstance(first, TextPart):
        return message
    marked = TextPart(text=mark_injected(first.text))
    return Message(role=message.role, content=(marked, *message.content[1:]))


def _delivery_words(wake: Wake) -> str:
    if wake.sink.drops:
        return wake.sink.describe()
    if isinstance(wake.caller, SessionCaller):
        if not wake.expects_reply:
            return (
                f"Session {wake.caller.session_key} sent its final answer and expects no reply: "
                "end with dispatch({}), or message your user with dispatch(to=user)"
            )
        return (
            f"Caller is session {wake.caller.session_key} - reply with dispatch(to=caller:session)"
        )
    if isinstance(wake.caller, UserCaller):
        return f"Caller is the {wake.caller.channel} user - reply with dispatch(to=caller:user)"
    return wake.sink.describe()


def _zone_name(moment: datetime) -> str:
    key = getattr(moment.tzinfo, "key", None)
    return key if isinstance(key, str) else (moment.tzname() or "UTC")


# A character that makes a YAML scalar mean something else unless it is quoted.
_YAML_SPECIAL = re.compile(r"[:#{}\[\],&*?|<>=!%@`\"'\n]")


def _yaml_scalar(text: str) -> str:
    plain = text and text.strip() == text and _YAML_SPECIAL.search(text) is None
    if plain and text[0] not in "-" and text.lower() not in ("true", "false", "null", "yes", "no"):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """What ``ThreadManager.wake`` returns once a wake is durable.

    ``run_id`` is the id of the turn the wake will run as (``<session>-t<n>``), or,
    for a wake steered into a running turn, that turn's run id; ``created`` says
    the session was created by this wake (first contact). A wake for a key
    another gateway process owns is accepted once it is on its way there:
    ``node`` names that process, and the session and run ids are its to know.
    """

    key: SessionKey
    session_id: str
    run_id: str
    created: bool = False
    node: str = ""

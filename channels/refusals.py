"""What a person reads when the gateway did not take their message: one plain line.

A channel hands each message to its handler (the router). The handler
returning means the message was taken: it is durable in its session (or it
was a command, answered). The handler raising means it was not taken and
nothing of it was kept — the store could not save it, the chat is busy, its
stored history cannot be read, the gateway is stopping. :func:`refusal_of`
says which (a :class:`Refused` kind, for a channel that answers in codes or
marks a message failed) and the one line the person reads, naming no
internals; the cause is logged here, once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from threads.errors import (
    BusyError,
    CorruptError,
    InvalidKeyError,
    ManagerClosedError,
    NewerFormatError,
    QuarantinedError,
    StoreError,
)

log = logging.getLogger(__name__)


class Refused(StrEnum):
    """Why a message was not taken."""

    BUSY = "busy"
    UNREADABLE = "unreadable"
    NOT_SAVED = "not_saved"
    CLOSING = "closing"
    BAD_CHAT = "bad_chat"
    FAILED = "failed"


LINES: dict[Refused, str] = {
    Refused.BUSY: (
        "This chat is busy and did not take the message: send it again once the answer arrives."
    ),
    Refused.UNREADABLE: (
        "This conversation's stored history cannot be read, so the message was not taken: "
        "send /new to start a fresh conversation."
    ),
    Refused.NOT_SAVED: (
        "Can't save your message right now, so it was not taken: try again in a moment."
    ),
    Refused.CLOSING: (
        "The gateway is shutting down and did not take the message: send it again once it is back."
    ),
    Refused.BAD_CHAT: "This chat cannot take messages: start a new chat.",
    Refused.FAILED: (
        "Something went wrong and the message was not taken: try again, and tell the "
        "gateway's operator if it keeps happening."
    ),
}

_KINDS: list[tuple[type[Exception] | tuple[type[Exception], ...], Refused]] = [
    (BusyError, Refused.BUSY),
    ((QuarantinedError, CorruptError, NewerFormatError), Refused.UNREADABLE),
    (ManagerClosedError, Refused.CLOSING),
    (InvalidKeyError, Refused.BAD_CHAT),
    ((StoreError, OSError), Refused.NOT_SAVED),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A message not taken: why, and the line its sender reads."""

    kind: Refused
    line: str


def refusal_of(exc: Exception, chat: str) -> Refusal:
    """Why the message ``chat`` sent was not taken, as its sender reads it; the cause is logged."""
    for kinds, kind in _KINDS:
        if isinstance(exc, kinds):
            log.warning("%s: message not taken: %s", chat, exc)
            return Refusal(kind=kind, line=LINES[kind])
    log.error("%s: message not taken", chat, exc_info=exc)
    return Refusal(kind=Refused.FAILED, line=LINES[Refused.FAILED])

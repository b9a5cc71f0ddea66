"""What the person at the page reads when a message was not taken.

One plain line each, naming no internals (no paths, URLs or exception
names); the cause is logged for the operator.
"""

from __future__ import annotations

import logging

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

BUSY = "This chat is busy and did not take the message: send it again once the answer arrives."
UNREADABLE = (
    "This conversation's stored history cannot be read, so the message was not taken: "
    "send /new to start a fresh conversation."
)
NOT_SAVED = "The message could not be saved, so it was not taken: try again in a moment."
BAD_CHAT = "This chat cannot take messages: reload the page to start a new chat."
CLOSING = (
    "The gateway is shutting down and did not take the message: send it again once it is back."
)
FAILED = (
    "Something went wrong and the message was not taken: try again, and tell the gateway's "
    "operator if it keeps happening."
)


def refusal_of(exc: Exception, chat: str) -> str:
    """The line the person reads for a message the gateway did not take; the cause is logged."""
    known: list[tuple[type[Exception] | tuple[type[Exception], ...], str]] = [
        (BusyError, BUSY),
        ((QuarantinedError, CorruptError, NewerFormatError), UNREADABLE),
        (ManagerClosedError, CLOSING),
        (InvalidKeyError, BAD_CHAT),
        ((StoreError, OSError), NOT_SAVED),
    ]
    for kinds, line in known:
        if isinstance(exc, kinds):
            log.warning("%s: message not taken: %s", chat, exc)
            return line
    log.error("%s: message not taken", chat, exc_info=exc)
    return FAILED

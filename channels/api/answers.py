"""What a request gets back: the turn's answer, or the refusal that says why there is none.

A request's :class:`Exchange` collects what its turn delivers to the caller
(the ``dispatch(to=caller:user)`` body, or the final text; a notice such as a
failed model's one line too). When the turn is decided, :func:`answer_of`
makes that the completion's content, or raises the :class:`ApiError` a failed
turn is to the client; :func:`refusal_of` does the same for a message the
gateway did not take.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from channels.api.errors import ApiError
from threads.errors import (
    BusyError,
    ClosedError,
    CorruptError,
    DroppedError,
    InvalidKeyError,
    ManagerClosedError,
    NewerFormatError,
    NotPersistedError,
    NotRunError,
    QuarantinedError,
    StoreError,
)
from threads.llm import errors as model_errors
from threads.messages import Usage
from threads.turns import Turn

log = logging.getLogger(__name__)

NOT_SAVED = "The message could not be saved, so it was not taken: try again in a moment."
CLOSING = (
    "The gateway is shutting down and did not take the message: send it again once it is back."
)
# A message taken and kept whose turn did not run: sending it again would add it twice.
KEPT = (
    "your message is saved and runs once {when}; its answer will be in this session's "
    "history (the next request sees it). Do not send it again."
)
KEPT_CLOSING = "The gateway is shutting down: " + KEPT.format(when="the gateway is back")
KEPT_STORE = "The gateway could not write to its store: " + KEPT.format(when="the store is back")


class Exchange:
    """One request waiting for its answer: the turn it started and what that turn delivered."""

    __slots__ = ("chat", "id", "texts", "turn")

    def __init__(self, ident: str, chat: str) -> None:
        self.id = ident
        self.chat = chat
        self.turn: Turn | None = None
        self.texts: list[str] = []

    @property
    def answer(self) -> str:
        return "\n\n".join(self.texts)


@dataclass(frozen=True, slots=True)
class Answer:
    """A completion's content, its ``finish_reason`` and the turn's token usage."""

    content: str
    finish: str = "stop"
    usage: Usage = field(default_factory=Usage)


PARKED = (
    "This turn waits for a person's approval of a tool call. An operator decides it with "
    "`gateway approvals` or the dashboard; the turn then goes on in this session."
)


def answer_of(exchange: Exchange) -> Answer:
    """The answer of an exchange whose turn is decided; raises :class:`ApiError` when it failed.

    An exchange with no turn was a command, answered at once.
    """
    turn = exchange.turn
    if turn is None:
        return Answer(exchange.answer)
    assert turn.done()
    if turn.error is not None:
        raise _unanswered(turn.error)
    result = turn.result
    if result is None:
        # Steered into a running turn (a busy policy other than queue): the
        # answer is that turn's, delivered to its own request.
        return Answer(exchange.answer)
    reason = result.stop_reason
    if reason in ("dispatch", "end_turn", "stopped"):
        return Answer(exchange.answer, "stop", result.usage)
    if reason == "max_steps":
        return Answer(exchange.answer, "length", result.usage)
    if reason == "parked":
        return Answer(exchange.answer or PARKED, "stop", result.usage)
    if reason == "budget":
        raise ApiError(
            429,
            exchange.answer or result.error or "this session has spent its budget",
            type="insufficient_quota",
            code="budget_exceeded",
            retry=False,
        )
    if reason == "canceled":
        raise ApiError(
            409,
            "The turn was stopped before it answered (a /stop, stop-session or a shutdown).",
            code="turn_canceled",
            retry=False,
        )
    raise _failed(result.error, exchange.answer)


def _failed(error: str, notice: str) -> ApiError:
    """A turn that ended in an error; the client reads the line a chat user would."""
    name = error.partition(":")[0]
    kind = getattr(model_errors, name, None)
    said = notice.strip() or "The turn failed."
    if not isinstance(kind, type) or not issubclass(kind, model_errors.ModelError):
        return ApiError(500, said, type="server_error", code="turn_failed")
    if issubclass(kind, model_errors.RateLimitError):
        return ApiError(429, said, type="requests", code="rate_limit_exceeded")
    if issubclass(kind, model_errors.ModelTimeoutError):
        return ApiError(504, said, type="server_error", code="model_timeout")
    if issubclass(kind, model_errors.ContextOverflowError):
        return ApiError(
            400,
            said + " Send X-Session-Reset: 1 (or a new session key) to start afresh.",
            code="context_length_exceeded",
            retry=False,
        )
    return ApiError(502, said, type="server_error", code="model_error")


def _unanswered(error: BaseException) -> ApiError:
    """A turn that never ran."""
    if isinstance(error, DroppedError):
        return ApiError(
            409,
            "The message was dropped from the session's queue before it ran (/stop drain).",
            code="request_dropped",
            retry=False,
        )
    if isinstance(error, NotRunError):
        return ApiError(503, KEPT_STORE, type="server_error", code="store_unavailable", retry=False)
    if isinstance(error, NotPersistedError):
        return ApiError(503, NOT_SAVED, type="server_error", code="store_unavailable")
    if isinstance(error, ClosedError):
        return ApiError(503, KEPT_CLOSING, type="server_error", code="shutting_down", retry=False)
    log.error("an API request's turn ended without a result", exc_info=error)
    return ApiError(500, "The turn failed.", type="server_error", code="turn_failed")


def refusal_of(exc: Exception, session: str) -> ApiError:
    """What a message the gateway did not take is to the client; the cause is logged."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, BusyError):
        log.info("%s: request not taken: %s", session, exc)
        return ApiError(
            429,
            f"The session {session} is busy: too many requests wait for it. Try again shortly.",
            type="requests",
            code="session_busy",
        )
    if isinstance(exc, QuarantinedError | CorruptError | NewerFormatError):
        log.warning("%s: request not taken: %s", session, exc)
        return ApiError(
            409,
            f"The stored history of {session} cannot be read, so the message was not taken: "
            "send X-Session-Reset: 1 (or use another session key) to start a fresh one.",
            code="session_unreadable",
            retry=False,
        )
    if isinstance(exc, ManagerClosedError):
        return ApiError(503, CLOSING, type="server_error", code="shutting_down")
    if isinstance(exc, InvalidKeyError):
        return ApiError(400, f"{session} is not a valid session: {exc}", code="invalid_session_key")
    if isinstance(exc, StoreError | OSError):
        log.warning("%s: request not taken: %s", session, exc)
        return ApiError(503, NOT_SAVED, type="server_error", code="store_unavailable")
    log.error("%s: request not taken", session, exc_info=exc)
    return ApiError(
        500,
        "Something went wrong and the message was not taken: try again, and tell the "
        "gateway's operator if it keeps happening.",
        type="server_error",
        code="server_error",
    )

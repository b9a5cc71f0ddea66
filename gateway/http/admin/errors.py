"""Errors of the admin API, and how every error a call can meet becomes an HTTP status.

::

    AdminError
    ├── AdminTokenError (ValueError)  the admin token cannot be read, or is not one
    └── ApiError                      an answer other than 2xx: status, one line, refused fields

Handlers raise the errors of the packages they call (cron, threads, channels);
:func:`api_error_of` maps each to its status once, here: a refused field is
400 naming it, a thing that is not there 404, a state that forbids the call
409 (an approval request no longer waiting), an expired pairing code 410. Anything unexpected is a 500 whose message
names no internals (the cause is logged).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from channels.errors import ExpiredCodeError, PairingError
from cron.errors import (
    InvalidJobError,
    JobConflictError,
    JobNotFoundError,
    NoGatewayError,
    NotYourJobError,
)
from cron.errors import StoreError as CronStoreError
from threads.approvals.errors import GrantNotFoundError, NotPendingError
from threads.errors import (
    InvalidKeyError,
    ManagerClosedError,
    NotFoundError,
    NoTurnRunningError,
    ThreadNotLoadedError,
)
from threads.sessions.errors import ReservedSessionKeyError, UnknownSessionError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One refused input: the field's name (dotted for nested ones) and why."""

    field: str
    message: str


class AdminError(Exception):
    """Root of the admin API's errors."""


class AdminTokenError(AdminError, ValueError):
    """The admin token cannot be read, or is not one; the message names the setting."""


class ApiError(AdminError):
    """An error answer: ``status``, one line, and the refused fields when input was refused."""

    def __init__(self, status: int, message: str, *, problems: Sequence[FieldProblem] = ()) -> None:
        self.status = status
        self.message = message
        self.problems = tuple(problems)
        super().__init__(f"{status}: {message}")

    @property
    def field(self) -> str | None:
        """The first refused field, when input was refused."""
        return self.problems[0].field if self.problems else None

    @classmethod
    def bad_field(cls, field: str, message: str) -> ApiError:
        return cls(400, f"{field}: {message}", problems=[FieldProblem(field, message)])


def api_error_of(exc: Exception) -> ApiError:
    """The answer for an error a handler raised; an unknown kind is a logged 500."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidJobError):
        problems = [FieldProblem(p.field or "body", p.message) for p in exc.problems]
        return ApiError(400, str(exc), problems=problems)
    if isinstance(exc, InvalidKeyError | ReservedSessionKeyError):
        return ApiError(400, str(exc), problems=[FieldProblem("key", str(exc))])
    if isinstance(exc, ExpiredCodeError):
        return ApiError(410, str(exc))
    if isinstance(exc, JobNotFoundError | UnknownSessionError | NotFoundError | PairingError):
        return ApiError(404, str(exc))
    if isinstance(exc, NotYourJobError):
        return ApiError(403, str(exc))
    if isinstance(exc, GrantNotFoundError):
        return ApiError(404, str(exc))
    if isinstance(exc, NotPendingError):
        return ApiError(409, str(exc))
    conflicts = (
        JobConflictError,
        NoGatewayError,
        ThreadNotLoadedError,
        NoTurnRunningError,
    )
    if isinstance(exc, conflicts):
        return ApiError(409, str(exc))
    if isinstance(exc, ManagerClosedError | CronStoreError):
        return ApiError(503, str(exc))
    if isinstance(exc, ValueError):
        return ApiError(400, str(exc))
    log.error("admin API: a call failed", exc_info=exc)
    return ApiError(500, "the call failed inside the gateway; its log has the details")

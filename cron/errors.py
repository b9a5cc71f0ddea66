"""Errors of the cron package.

Every error raised here derives from :class:`CronError`::

    CronError
    ├── InvalidJobError (ValueError)     a job, expression, zone, interval or time that is refused
    ├── JobNotFoundError (LookupError)   no job with this id
    ├── JobConflictError                 the job's state forbids the call (resume a spent `at` job)
    ├── NotYourJobError (PermissionError) an agent touching a job that wakes another session
    ├── SessionMissingError (LookupError) a direct-wake job's session does not exist
    ├── DeliveryTargetError              a job's deliver_to chat has no running channel
    ├── NoGatewayError                   run-now while no gateway is running against the store
    ├── ServiceStateError                start twice, or scheduling calls before start
    └── StoreError                       the state store refused or cannot be reached
        └── NewerSchemaError             the store was written by a newer build

Messages name the thing (the job id, the field, the store URL) and, where it
helps, what to do next. A store URL is shown with its password redacted, and
the driver's text a message quotes is scrubbed of credentials the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from config.redaction import redact_text, redact_url


class CronError(Exception):
    """Root of every error the cron package raises."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One refused field: its name and why."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidJobError(CronError, ValueError):
    """A job definition (or an expression, zone, interval or time) is refused.

    ``problems`` lists every refused field; the message names each one and why.
    Nothing is stored when this is raised.
    """

    def __init__(self, problems: Sequence[Problem], job_id: str = "") -> None:
        self.problems = tuple(problems)
        self.job_id = job_id
        what = f"cron job {job_id!r}" if job_id else "cron job"
        lines = "; ".join(str(p) for p in self.problems)
        super().__init__(f"{what} refused: {lines}")

    @classmethod
    def one(cls, field: str, message: str, job_id: str = "") -> InvalidJobError:
        return cls([Problem(field, message)], job_id)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(p.field for p in self.problems)


class JobNotFoundError(CronError, LookupError):
    """No job with this id is stored."""

    def __init__(self, job_id: str, where: str = "") -> None:
        self.job_id = job_id
        suffix = f" in {redact_url(where)}" if where else ""
        super().__init__(
            f"cron job {job_id!r} not found{suffix}; `gateway cron list` shows the ids"
        )


class JobConflictError(CronError):
    """The job exists, but its state forbids the call."""

    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id = job_id
        super().__init__(f"cron job {job_id!r}: {reason}")


class NotYourJobError(CronError, PermissionError):
    """An agent asked to change a job that wakes another session."""

    def __init__(self, job_id: str, target: str | None, session: str) -> None:
        self.job_id = job_id
        owner = f"session {target}" if target else f"its own session cron:{job_id}"
        super().__init__(
            f"cron job {job_id!r} wakes {owner}, not {session}; "
            "an agent may only change the jobs that wake its own session"
        )


class SessionMissingError(CronError, LookupError):
    """A direct-wake job fired, but the session it wakes does not exist."""

    def __init__(self, job_id: str, session: str) -> None:
        self.job_id = job_id
        self.session = session
        super().__init__(
            f"cron job {job_id!r}: session {session} does not exist; a direct-wake job only "
            "wakes an existing session (drop --direct-wake to run the task in its own session)"
        )


class DeliveryTargetError(CronError, LookupError):
    """A job fired whose ``deliver_to`` chat no running channel reaches."""

    def __init__(self, job_id: str, chat: str) -> None:
        self.job_id = job_id
        self.chat = chat
        channel = chat.partition(":")[0]
        super().__init__(
            f"cron job {job_id!r}: its output goes to {chat}, but the {channel} channel is not "
            "running in this gateway; enable it, or set the job's --deliver-to to a chat that is"
        )


class NoGatewayError(CronError):
    """``run-now`` needs a running gateway, and none is running against this store."""

    def __init__(self, job_id: str, store_url: str, last_seen: str = "") -> None:
        self.job_id = job_id
        seen = f" (last seen {last_seen})" if last_seen else ""
        super().__init__(
            f"cannot run cron job {job_id!r} now: no gateway is running against "
            f"{redact_url(store_url)}{seen}; start it with `gateway run` (the job still fires at its "
            "next scheduled time)"
        )


class ServiceStateError(CronError):
    """The cron service was used in a state that does not allow the call."""


class StoreError(CronError):
    """The state store refused the call or cannot be reached."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = redact_url(url)
        super().__init__(f"cron state store {self.url}: {redact_text(detail)}")


class NewerSchemaError(StoreError):
    """The store holds cron data written by a newer build; this build refuses to touch it."""

    def __init__(self, url: str, found: int, known: int) -> None:
        super().__init__(
            url,
            f"cron schema version {found} was written by a newer build (this one knows {known}); "
            "upgrade the gateway before using this store",
        )

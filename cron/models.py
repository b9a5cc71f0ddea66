"""Cron records: a job, its schedule state, one run in the ledger, and the view of a job.

A :class:`Job` is our own record, the source of truth for what fires when;
APScheduler only computes fire times from it. Building a job validates it:
a refusal is an :class:`~cron.errors.InvalidJobError` naming each field and
why (see :func:`build_job`). Whether an expression can ever fire, and whether
an ``at`` time is still ahead, is checked where fire times are computed
(``cron.service``), since that needs the scheduler.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cron import crontab
from cron.errors import InvalidJobError, Problem
from threads.errors import InvalidKeyError
from threads.keys import SessionKey

JobKind = Literal["cron", "at", "every"]
RunStatus = Literal["fired", "missed", "skipped", "failed"]
RunVia = Literal["schedule", "run-now"]

MIN_INTERVAL = timedelta(seconds=10)
"""The shortest ``every`` the CLI sets without ``--force``: more often floods a session."""
DELIVERY_PENDING = "pending"
"""A fired run's delivery until its turn has ended (then ``delivered``, ``silent``, ``failed: …``)."""

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_INTERVAL = re.compile(r"(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_UNIT_SECONDS = (604_800, 86_400, 3_600, 60, 1)
_SCHEDULE_FIELDS = {"cron": "expr", "at": "at", "every": "every"}


def parse_interval(text: str) -> timedelta:
    """``15m``, ``1h30m``, ``90s``, ``2d``, ``1w`` → a timedelta of at least one second."""
    compact = text.strip().lower().replace(" ", "")
    match = _INTERVAL.fullmatch(compact)
    if not compact or match is None:
        raise ValueError(
            f"{text!r} is not an interval such as 15m, 1h30m, 90s or 2d (units: w d h m s)"
        )
    seconds = sum(int(g or 0) * unit for g, unit in zip(match.groups(), _UNIT_SECONDS, strict=True))
    if seconds < 1:
        raise ValueError(f"{text!r} is shorter than one second")
    return timedelta(seconds=seconds)


def local_instant(text: str, zone: str) -> datetime:
    """A wall-clock time without an offset (``2035-03-01T09:00``), read in ``zone`` → UTC.

    A time the clocks skip in that zone (the spring-forward hour) is refused; a
    time they pass twice (the fall-back hour) is its first occurrence.
    """
    try:
        naive = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time such as 2035-03-01T09:00 or 2035-03-01 09:00"
        ) from None
    if naive.tzinfo is not None:
        return naive.astimezone(UTC)
    tz = ZoneInfo(check_zone(zone))
    moment = naive.replace(tzinfo=tz)
    if moment.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != naive:
        raise ValueError(
            f"{text!r} does not exist in {zone}: the clocks skip that hour (daylight saving); "
            "give a time outside it"
        )
    return moment.astimezone(UTC)


def has_offset(text: str) -> bool:
    """Whether an RFC 3339 / ISO time text carries its UTC offset (``Z``, ``+02:00``)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return True  # not a time at all: let the job's validation name what is wrong
    return moment.tzinfo is not None


def parse_instant(value: object) -> datetime:
    """An RFC 3339 time with a UTC offset (``2026-05-01T09:00:00+02:00``, ``...Z``) → UTC."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if "T" not in text.upper() and " " not in text:
            raise ValueError(f"{value!r} has no time of day; RFC 3339 is e.g. 2026-05-01T09:00:00Z")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an RFC 3339 time such as 2026-05-01T09:00:00+02:00"
            ) from None
    else:
        raise ValueError(f"{value!r} is not an RFC 3339 time")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{value!r} has no UTC offset; add one, e.g. Z or +02:00")
    return moment.astimezone(UTC)


def check_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{value!r} is not an IANA time zone (e.g. 'Europe/Berlin', 'UTC')"
        ) from None
    return value


class Record(BaseModel):
    """Base of the cron records: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Job(Record):
    """One cron job: when it fires and which session its wake goes to.

    ``kind`` picks the schedule field: ``cron`` uses ``expr`` (5 fields) in
    ``timezone``; ``at`` uses ``at`` (stored as UTC, fires once, then is
    disabled and kept); ``every`` uses ``every`` (``15m``) counted from
    when it was set. A ``direct_wake`` job wakes the existing ``wake_session``
    with the session's own agent; otherwise the job runs in ``cron:<id>``
    with ``agent`` (or the default). Where an independent job's output goes:
    ``deliver_to``, a chat's session key (its text answer and its
    ``dispatch(to=user)`` reach that chat's user), or nowhere (a silent job).
    ``wake_session`` without ``direct_wake`` is the older form, kept for the
    jobs that have it: the run's answer wakes that session's agent, which
    decides what its user hears. ``revision`` is set by the store.
    """

    id: str
    kind: JobKind
    expr: str | None = None
    at: datetime | None = None
    every: str | None = None
    timezone: str = "UTC"
    task: str
    wake_session: str | None = None
    direct_wake: bool = False
    deliver_to: str | None = None
    agent: str | None = None
    enabled: bool = True
    created: datetime
    updated: datetime
    revision: int = Field(default=0, ge=0)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not JOB_ID.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a job id: 1-128 letters, digits, '_' or '-', "
                "starting with a letter or digit"
            )
        return value

    @field_validator("expr")
    @classmethod
    def _expr(cls, value: str | None) -> str | None:
        if value is None:
            return None
        crontab.parse(value)
        return " ".join(value.split())

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: object) -> object:
        return None if value is None else parse_instant(value)

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parse_interval(value)
        return value.strip().lower().replace(" ", "")

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return check_zone(value)

    @field_validator("task")
    @classmethod
    def _task(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; say what the woken session should do")
        return value.strip()

    @field_validator("wake_session")
    @classmethod
    def _wake_session(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        try:
            return str(SessionKey(value))
        except InvalidKeyError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("deliver_to")
    @classmethod
    def _deliver_to(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        try:
            key = SessionKey(value)
        except InvalidKeyError as exc:
            raise ValueError(str(exc)) from None
        if not key.is_user_facing:
            raise ValueError(
                f"{value!r} is not a chat: give a chat's session key, such as cli, "
                "telegram:123456, discord:channel:456 or web:<id>"
            )
        return str(key)

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("created", "updated", mode="before")
    @classmethod
    def _aware(cls, value: object) -> object:
        return parse_instant(value)

    @model_validator(mode="after")
    def _consistent(self) -> Job:
        wanted = _SCHEDULE_FIELDS[self.kind]
        for kind, name in _SCHEDULE_FIELDS.items():
            given = getattr(self, name) is not None
            if name == wanted and not given:
                raise ValueError(f"{name}: required for a {self.kind} job")
            if name != wanted and given:
                raise ValueError(f"{name}: not used by a {self.kind} job (it is for kind {kind!r})")
        if self.direct_wake and self.wake_session is None:
            raise ValueError(
                "wake_session: a direct-wake job needs the existing session to wake (--wake-session)"
            )
        if self.deliver_to is not None and self.direct_wake:
            raise ValueError(
                "deliver_to: a direct wake reaches its session's own user (the woken session "
                "answers with dispatch(to=user)); drop --deliver-to, or drop --direct-wake to "
                "run the task in its own session and deliver its output"
            )
        if self.deliver_to is not None and self.wake_session is not None:
            raise ValueError(
                "wake_session: with --deliver-to the output already goes to a chat; "
                "give --deliver-to alone"
            )
        if self.direct_wake and self.agent is not None:
            raise ValueError(
                "agent: a direct-wake job keeps the woken session's agent; drop --agent "
                "or --direct-wake"
            )
        return self

    @property
    def session_key(self) -> SessionKey:
        """The session a fire wakes: ``wake_session`` for direct wake, else ``cron:<id>``."""
        if self.direct_wake and self.wake_session:
            return SessionKey(self.wake_session)
        return SessionKey(f"cron:{self.id}")

    @property
    def interval(self) -> timedelta | None:
        return parse_interval(self.every) if self.every else None

    @property
    def schedule_text(self) -> str:
        """The schedule as an operator wrote it: the expression, the time, or ``every 15m``."""
        if self.kind == "cron":
            return f"{self.expr} ({self.timezone})"
        if self.kind == "at" and self.at is not None:
            if self.timezone == "UTC":
                return f"at {self.at.isoformat().replace('+00:00', 'Z')}"
            local = self.at.astimezone(ZoneInfo(self.timezone))
            return f"at {local:%Y-%m-%d %H:%M:%S} ({self.timezone})"
        return f"every {self.every}"

    @property
    def target_text(self) -> str:
        """Which session the job wakes and where its output goes, in a few words."""
        key = self.session_key
        if self.direct_wake:
            return f"{key} (direct wake)"
        agent = f" agent {self.agent}" if self.agent else ""
        return f"{key}{agent} → {self.output_text}"

    @property
    def output_text(self) -> str:
        """Where the job's output goes: a chat, a session (the older form), or nowhere."""
        if self.direct_wake:
            return f"the {self.wake_session} user, when the session sends it (dispatch(to=user))"
        if self.deliver_to:
            return f"chat {self.deliver_to}"
        if self.wake_session:
            return f"session {self.wake_session}"
        return "nobody (silent)"

    @property
    def schedule_signature(self) -> str:
        """Equal for two versions of a job exactly when they fire at the same times."""
        at = self.at.isoformat() if self.at else ""
        return f"{self.kind}|{self.expr or ''}|{at}|{self.every or ''}|{self.timezone}"


def build_job(**fields: Any) -> Job:
    """Validate ``fields`` as a job; :class:`InvalidJobError` names every refused field."""
    try:
        return Job.model_validate(fields)
    except ValidationError as exc:
        raise InvalidJobError(problems_of(exc), str(fields.get("id") or "")) from None


def problems_of(exc: ValidationError) -> list[Problem]:
    """The refused fields of a validation error, each ``field: why``."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc and (split := re.match(r"^(\w+): (.*)$", message, re.DOTALL)):
            loc, message = split.group(1), split.group(2)
        if error.get("type") == "missing":
            message = "required"
        problems.append(Problem(loc, message))
    return problems


class JobState(Record):
    """What the scheduler knows about a job between fires.

    ``next_fire`` is the next scheduled time not yet handled (None: nothing
    pending, e.g. a spent ``at`` job); it is reset whenever the job is set
    again, and ``schedule_rev`` is the job revision that reset it, so a fire
    finishing after an edit never writes back a stale next fire.
    """

    job_id: str
    next_fire: datetime | None
    schedule_rev: int
    last_status: RunStatus | None = None
    last_scheduled: datetime | None = None
    last_fired: datetime | None = None


class RunRecord(Record):
    """One line of the run ledger: what became of one scheduled fire.

    ``scheduled`` is the time the fire was due; ``handed_over`` when cron
    handed its wake to the thread manager; ``fired`` when the session accepted
    it (durable in the session; None for missed, skipped and failed).
    ``lateness_ms`` is ``fired - scheduled``: how late the wake was in its
    session, hand-over included (for a failed fire, how late the hand-over
    began; for missed and skipped, how late they were judged). ``coalesced``
    counts earlier due times this record also stands for. ``run_id`` is the id
    of the turn the wake runs as. ``delivery`` is what became of the turn's
    output, recorded once the turn ends: ``pending`` until then, ``delivered``
    (it reached a person: the chat of ``deliver_to``, or the woken session's
    user), ``silent`` (the turn ended sending nothing to anyone), or
    ``failed: …`` (the turn failed, or a delivery was refused); ``unknown: …``
    when the gateway stopped before the turn ended; empty for a run that did
    not fire.
    """

    job_id: str
    seq: int = 0
    status: RunStatus
    via: RunVia = "schedule"
    scheduled: datetime
    handed_over: datetime | None = None
    fired: datetime | None = None
    lateness_ms: float = 0.0
    coalesced: int = Field(default=0, ge=0)
    session_key: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    error: str = ""
    note: str = ""
    delivery: str = ""


class JobView(Record):
    """A job with its next fire (UTC) and its last ledger status, as lists show it."""

    job: Job
    next_fire: datetime | None
    last_status: RunStatus | None = None
    last_fired: datetime | None = None

    @property
    def state(self) -> Literal["active", "paused", "done"]:
        """``active`` (fires), ``paused`` (fires nothing), or ``done`` (a spent ``at`` job)."""
        if self.job.enabled:
            return "active"
        return "done" if self.job.kind == "at" and self.next_fire is None else "paused"

    @property
    def upcoming(self) -> datetime | None:
        """The next time the job fires (UTC): None when paused or done, unlike ``next_fire``."""
        return self.next_fire if self.job.enabled else None

    def next_fire_local(self) -> datetime | None:
        if self.next_fire is None:
            return None
        return self.next_fire.astimezone(ZoneInfo(self.job.timezone))


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive datetime is refused (it means no particular instant)."""
    if moment.tzinfo is None:
        raise ValueError(f"{moment.isoformat()} has no time zone")
    return moment.astimezone(UTC)

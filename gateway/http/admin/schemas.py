"""The admin API's requests and responses as pydantic models.

Request bodies and query strings are validated with these models (unknown
fields refused, each refusal naming the field); every JSON answer is built
through one, so the OpenAPI document (:mod:`.openapi`), generated from their
JSON schemas, describes exactly what is sent. Records other packages already
define (cron jobs and runs, pairing requests) are reused as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from channels.pairing import PairedUser, PairingRequest
from cron.models import Job, JobKind, JobView, RunRecord, RunStatus
from threads.sessions.keys import KINDS

# -- inputs


class Body(BaseModel):
    """A request body: a JSON object, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Query(BaseModel):
    """A query string: each parameter once, unknown parameters refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StopRequest(Body):
    """Stop one session's turn (``key``) or every running turn (``all``).

    ``drain`` also drops the user messages queued behind the turn.
    """

    key: str | None = Field(default=None, max_length=512)
    all: bool = False
    drain: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> StopRequest:
        if (self.key is None) == (not self.all):
            raise ValueError("key: name one session key, or send all: true")
        return self


class SendPolicyRequest(Body):
    """A session's own send policy: allow, deny, or inherit (clears the override)."""

    setting: Literal["allow", "deny", "inherit"]


class JobRequest(Body):
    """A cron job's whole definition (a create or a replace; ``id`` comes from the path on PUT).

    ``kind`` picks the schedule field: ``cron`` → ``expr`` (five fields),
    ``at`` → ``at`` (RFC 3339 with offset, in the future), ``every`` →
    ``every`` (``15m``, ``1h30m``, at least 10 s unless ``force``). ``timezone``
    defaults to the gateway's.
    """

    id: str | None = Field(default=None, max_length=128)
    kind: JobKind
    expr: str | None = Field(default=None, max_length=200)
    at: str | None = Field(default=None, max_length=64)
    every: str | None = Field(default=None, max_length=64)
    timezone: str | None = Field(default=None, max_length=64)
    task: str = Field(max_length=16_000)
    wake_session: str | None = Field(default=None, max_length=512)
    direct_wake: bool = False
    agent: str | None = Field(default=None, max_length=64)
    enabled: bool = True
    force: bool = False


class PairingCodeRequest(Body):
    """The code a stranger was given (case, spaces and dashes do not matter)."""

    code: str = Field(min_length=1, max_length=64)


class RevokeRequest(Body):
    """The user id to unpair."""

    user: str = Field(min_length=1, max_length=128)


class SessionsQuery(Query):
    """Filters and paging of the session list (newest first)."""

    kind: str | None = Field(
        default=None, description=f"comma-separated kinds: {', '.join(KINDS)}", max_length=200
    )
    active_minutes: int | None = Field(default=None, ge=1, le=525_600)
    include_archived: bool = False
    limit: int = Field(default=50, ge=1, le=200)
    offset: int = Field(default=0, ge=0, le=1_000_000)

    @field_validator("kind")
    @classmethod
    def _kinds(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        unknown = sorted({k.strip() for k in value.split(",")} - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kind(s) {unknown}; kinds: {', '.join(KINDS)}")
        return value

    @property
    def kinds(self) -> set[str] | None:
        return {k.strip() for k in self.kind.split(",")} if self.kind else None


class HistoryQuery(Query):
    limit: int = Field(default=200, ge=1, le=500)
    include_tools: bool = True


class TailQuery(Query):
    """``after``: the id of the last entry already shown (empty: from now on)."""

    after: str = Field(default="", max_length=128)


class RunsQuery(Query):
    limit: int = Field(default=20, ge=1, le=500)


class ExplainQuery(Query):
    """An expression to explain as its next fire times (``timezone``: default the gateway's)."""

    expr: str = Field(min_length=1, max_length=200)
    timezone: str | None = Field(default=None, max_length=64)
    count: int = Field(default=5, ge=1, le=50)


class MetricsQuery(Query):
    minutes: int = Field(default=60, ge=1, le=60)


# -- outputs


class Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class Open(BaseModel):
    """An answer whose documented fields may be joined by others (health figures, session rows)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class ProblemOut(Out):
    field: str
    message: str


class ErrorBody(Out):
    status: int
    message: str
    field: str | None = None
    problems: list[ProblemOut] = Field(default_factory=list)


class ErrorResponse(Out):
    """Every error answer: ``{"error": {"status", "message", "field", "problems"}}``."""

    error: ErrorBody


class ThreadOut(Out):
    """A live thread: its state, queue length, current tool and time into the running turn."""

    session_key: str
    session_id: str
    agent: str
    state: Literal["running", "pending", "idle"]
    pending: int
    last_activity: float
    idle_seconds: float
    iterations: int
    current_tool: str
    elapsed_sec: float
    run_id: str | None = None


class ThreadsOut(Out):
    """The busy threads and the most recently active idle ones (``live`` counts them all)."""

    threads: list[ThreadOut]
    live: int
    running: int
    pending: int
    turns_in_flight: int
    max_concurrent_turns: int


class HealthOut(Open):
    """Seed 000's ``health``: threads, provider, sessions, process, channels, cron."""

    all_threads: list[ThreadOut]
    threads: dict[str, Any]
    provider: dict[str, Any]
    sessions: dict[str, Any]
    process: dict[str, Any]


class NodesOut(Out):
    """This gateway's node and, scaled out on Redis, every node: alive or gone, its leases,
    the keys it owns and its threads (``cluster`` is null for a gateway on its own)."""

    node: dict[str, Any]
    cluster: dict[str, Any] | None


class SessionRow(Open):
    """One session as ``sessions_list`` shows it (more fields may follow)."""

    key: str
    kind: str
    channel: str | None = None
    displayName: str | None = None
    updatedAt: int
    sessionId: str
    model: str | None = None
    totalTokens: int | None = None
    agent: str | None = None
    sendPolicy: str | None = None


class SessionPage(Out):
    sessions: list[SessionRow]
    total: int
    offset: int
    limit: int
    next_offset: int | None


class TranscriptMessage(Open):
    """One stored message: its entry id, time, role and parts (text, tool_call, tool_result…)."""

    id: str
    created: str
    role: Literal["user", "assistant", "tool"]
    content: list[dict[str, Any]]


class HistoryOut(Out):
    sessionKey: str
    sessionId: str
    current: bool
    messages: list[TranscriptMessage]
    last_entry: str | None = Field(
        description="the id of the session's newest entry: pass it as `after` to the tail"
    )


class TailEntry(Open):
    """One entry the live tail pushes (event ``entry``); messages carry ``role`` and ``content``."""

    id: str
    type: str
    created: str


class CheckSessionOut(Open):
    """Seed 000's ``check_session``: stored or not, and the live thread when loaded."""

    session_key: str
    exists: bool
    thread_active: bool
    session_id: str | None = None
    message_count: int | None = None
    turn_count: int | None = None
    size_bytes: int | None = None
    last_modified: str | None = None
    agent: str | None = None
    thread_state: str | None = None
    thread_pending: int | None = None
    thread_iterations: int | None = None
    thread_current_tool: str | None = None
    thread_elapsed_sec: float | None = None


class StopOut(Out):
    ended: list[str]
    winding_down: list[str]
    dropped: int
    chains: int
    text: str


class SendPolicyOut(Out):
    key: str
    policy: Literal["allow", "deny"]
    source: Literal["session", "rule", "default"]
    reason: str
    override: str | None


class JobsOut(Out):
    jobs: list[JobView]


class JobDetail(Out):
    """A job, its next fire times (UTC) and its latest status."""

    job: Job
    next_fire: datetime | None
    last_status: RunStatus | None = None
    last_fired: datetime | None = None
    next_fires: list[datetime]


class RemovedOut(Out):
    id: str
    removed: bool


class RunsOut(Out):
    runs: list[RunRecord]


class RunNowOut(Out):
    run: RunRecord | None


class ExplainOut(Out):
    expr: str
    timezone: str
    times: list[datetime]


class PairingChannelOut(Out):
    pending: list[PairingRequest]
    paired: list[PairedUser]


class PairingOut(Out):
    channels: dict[str, PairingChannelOut]


class PairingOutcomeOut(Out):
    request: PairingRequest
    told: bool = Field(description="whether the user was told now (else at the next start)")


class RevokeOut(Out):
    user: PairedUser


class MetricsPoint(Out):
    minute: int = Field(description="the minute's start, epoch milliseconds")
    turns: int
    failed_turns: int
    model_calls: int
    model_errors: int
    latency_avg_ms: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_max_ms: float | None
    tokens: int


class SessionTokens(Out):
    key: str
    total_tokens: int
    tokens: list[int] = Field(description="tokens per minute, aligned with points")


class MetricsOut(Out):
    minutes: int
    points: list[MetricsPoint]
    sessions: list[SessionTokens]


# -- approvals


class ApproveRequest(Body):
    """Approve a waiting tool call; ``always`` also lets the same call run unasked from now on."""

    always: bool = False


class DenyRequest(Body):
    """Refuse a waiting tool call; ``reason`` is what the agent reads after ``DENIED:``."""

    reason: str = Field(default="", max_length=2000)


class ApprovalRequestOut(Out):
    id: str
    session_key: str
    session_id: str
    agent: str
    tool: str
    args: Any = None
    args_sha256: str
    reason: str
    created: datetime
    expiry: datetime | None = None
    run_id: str
    caller: dict[str, str] = Field(default_factory=dict)


class ApprovalsOut(Out):
    requests: list[ApprovalRequestOut]


class DecisionOut(Out):
    id: str
    session_key: str
    tool: str
    outcome: Literal["approve", "deny"]
    reason: str
    who: str
    via: str
    always: bool
    grant: str | None = None
    decided: datetime


class GrantOut(Out):
    id: str
    key: str
    tool: str
    label: str
    args: list[dict[str, Any]]
    who: str
    via: str
    created: datetime
    request_id: str = ""
    session_id: str = ""


class GrantsOut(Out):
    grants: list[GrantOut]

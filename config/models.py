"""Pydantic models of the whole configuration.

Every model forbids unknown keys, so a misspelt option is an error naming its
dotted path, never a silently ignored line. Secrets are ``SecretStr`` (never
printed) and may be given inline, through the environment, or as a file path
(``*_file``) whose contents are read at load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config.approvals import ApprovalRule, ApprovalsConfig
from config.channels import AdminConfig, ChannelsConfig, HttpConfig
from config.compaction import CompactionConfig
from config.heartbeat import HeartbeatConfig
from config.paths import DEFAULT_SESSIONS_URL, place_store_paths
from config.redaction import redact_url
from config.section import NAME, ModelRef, Section, given, is_loopback
from config.tools import McpConfig, ToolsConfig

BusyPolicy = Literal["queue", "reject", "steer", "interrupt", "rollback", "collect"]
Visibility = Literal["spawned", "all"]
SendAction = Literal["allow", "deny"]


def _check_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{value!r} is not an IANA time zone (e.g. 'Europe/Berlin', 'UTC')"
        ) from None
    return value


TimeZoneName = Annotated[str, AfterValidator(_check_zone)]


def _no_credentials(value: str) -> str:
    """Refuse a URL that carries a user name or password: keys belong in api_key or headers."""
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "has credentials in it (user:pass@); a URL is printed in logs and errors, so put "
            "the key in api_key, api_key_env or api_key_file, or a header under headers"
        )
    return value


class ProviderConfig(Section):
    """A model provider speaking the OpenAI chat-completions or Anthropic messages protocol."""

    kind: Literal["openai", "anthropic"] = "openai"
    base_url: Annotated[str, AfterValidator(_no_credentials)] = "https://api.openai.com/v1"
    api_key: SecretStr | None = None
    api_key_env: str = ""
    api_key_file: Path | None = None
    # A socket wait: under 10 ms nothing answers; past an hour a hung peer holds a turn.
    timeout_seconds: float = Field(default=120.0, ge=0.01, le=3600)
    max_retries: int = Field(default=4, ge=0, le=20)
    retry_budget_seconds: float = Field(default=60.0, ge=0, le=3600)
    headers: dict[str, str] = Field(default_factory=dict)
    # How each request names the session and turn it serves: X-Weft-* headers
    # (every provider ignores headers it does not know), "body" (a `metadata`
    # object, for providers and proxies that keep it; Anthropic gets user_id
    # only), or "off".
    run_metadata: Literal["headers", "body", "off"] = "headers"


class ModelSettings(Section):
    """Per-model settings: the limits compaction uses, the output cap, and streaming."""

    # Token counts: no model has a window of ten million tokens, and an absurd
    # count is sent to the provider, which refuses every request with it.
    context_window: int = Field(default=128_000, gt=0, le=10_000_000)
    reserve_tokens: int = Field(default=16_000, ge=0)
    keep_recent_tokens: int = Field(default=20_000, ge=0)
    max_output_tokens: int = Field(default=4_096, gt=0, le=1_000_000)
    stream: bool = True
    # Does the model accept images? Images users send are passed to it when it does.
    vision: bool = True

    @model_validator(mode="after")
    def _fits(self) -> ModelSettings:
        if self.reserve_tokens >= self.context_window:
            raise ValueError("reserve_tokens must be below context_window")
        if self.keep_recent_tokens >= self.context_window - self.reserve_tokens:
            raise ValueError("keep_recent_tokens must be below context_window - reserve_tokens")
        return self


class ModelsConfig(Section):
    """Providers and the default model. ``echo`` is the offline model."""

    default: ModelRef = "echo"
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    settings: dict[str, ModelSettings] = Field(default_factory=dict)


class SubagentPolicy(Section):
    """Which agent ids this agent may spawn (``["*"]`` any; empty: only itself)."""

    allow_agents: list[str] = Field(default_factory=list)


class AgentConfig(Section):
    """A named agent: instructions, model, allowed tools and a step cap."""

    instructions: str = ""
    model: ModelRef | None = None
    tools: list[str] = Field(default_factory=lambda: ["*"])
    max_steps: int = Field(default=50, ge=1, le=1000)
    sandboxed: bool = False
    subagents: SubagentPolicy = Field(default_factory=SubagentPolicy)
    cron_tools: bool = True
    # None: by session — owners' and operators' sessions see all, chat sessions
    # see their own and what they spawned. "all" grants this agent every session.
    session_tools_visibility: Visibility | None = None
    # The files tools' directory (default: [tools.files] workspaces / <agent name>).
    workspace: Path | None = None
    # Tools (patterns, as in tools) this agent runs without asking a person even
    # when they require approval.
    auto_approve: list[str] = Field(default_factory=list)
    # This agent's approval rules, tried before [approvals] rules (config.approvals).
    approval_rules: list[ApprovalRule] = Field(default_factory=list)


class SubagentDefaults(Section):
    # A year at most: a timedelta overflows past ~1.4e12 minutes, and archival
    # later than a year is no archival.
    archive_after_minutes: int = Field(default=60, ge=0, le=527_040)
    # Delegation slots per requesting session: sessions_spawn and delegate_task
    # children past it wait, first in first out, for a running one to settle.
    max_concurrent: int = Field(default=4, ge=1, le=1000)


class SandboxDefaults(Section):
    session_tools_visibility: Visibility = "spawned"


class AgentDefaults(Section):
    subagents: SubagentDefaults = Field(default_factory=SubagentDefaults)
    sandbox: SandboxDefaults = Field(default_factory=SandboxDefaults)


def _default_busy() -> dict[str, BusyPolicy]:
    return {
        "telegram": "steer",
        "discord": "steer",
        "web": "steer",
        "cli": "steer",
        "api": "queue",
        "session": "queue",
        "child_completed": "queue",
        "cron": "queue",
        "heartbeat": "queue",
        "progress": "queue",
        "compression": "queue",
        "resume": "queue",
    }


class BudgetConfig(Section):
    """Model calls and tokens one session, and one exchange chain, may spend per hour.

    A session or chain past a limit has its turn stopped and its owner told;
    0 turns a limit off. A chain is everything one user message or one cron
    fire set going: replies between sessions, children, their reports.
    """

    session_model_calls_per_hour: int = Field(default=1000, ge=0)
    session_tokens_per_hour: int = Field(default=10_000_000, ge=0)
    chain_model_calls_per_hour: int = Field(default=200, ge=0)
    chain_tokens_per_hour: int = Field(default=2_000_000, ge=0)


class ThreadsConfig(Section):
    """The runtime: concurrency, eviction, inboxes, busy policies, progress wakes, bounds."""

    # Bounds keep every timer a timer: a window of 1e-300 s spins the loop, one of
    # 1e300 s (or inf) overflows the clocks it is added to. Under 10 ms a timer
    # is a busy loop; past a day (an hour for waits a person sits through) a
    # value is a typo.
    max_concurrent_turns: int = Field(default=32, ge=1, le=100_000)
    idle_evict_seconds: float = Field(default=600.0, ge=0.01, le=86_400)
    inbox_size: int = Field(default=256, ge=1, le=1_000_000)
    continue_on_start: bool = True
    collect_window_seconds: float = Field(default=1.5, ge=0.01, le=3600)
    close_deadline_seconds: float = Field(default=10.0, ge=0, le=3600)
    busy_policy: dict[str, BusyPolicy] = Field(default_factory=_default_busy)
    progress_after_seconds: float = Field(default=60.0, ge=0.01, le=86_400)
    progress_interval_seconds: float = Field(default=60.0, ge=0.01, le=86_400)
    tool_timeout_seconds: float = Field(default=120.0, ge=0.01, le=86_400)
    max_exchange_depth: int = Field(default=6, ge=1, le=100)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)

    @field_validator("busy_policy")
    @classmethod
    def _merge_defaults(cls, value: dict[str, BusyPolicy]) -> dict[str, BusyPolicy]:
        merged = _default_busy()
        unknown = set(value) - set(merged)
        if unknown:
            raise ValueError(f"unknown wake sources {sorted(unknown)}; known: {sorted(merged)}")
        merged.update(value)
        return merged


class StoreConfig(Section):
    """Where sessions live. URL schemes: memory://, jsonl://, sqlite:///, redis://."""

    # Relative file paths are under data_dir (config.paths): <data_dir>/sessions.
    url: str = DEFAULT_SESSIONS_URL
    state_url: str = ""
    fsync: Literal["every_append", "on_flush"] = "every_append"
    salvage: bool = False

    @property
    def safe_url(self) -> str:
        """The session store URL without its password, for banners, logs and health."""
        return redact_url(self.url)

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(("memory://", "jsonl://", "sqlite://", "redis://", "rediss://")):
            raise ValueError(
                f"{value!r} has no known scheme: use memory://, jsonl://DIR, "
                "sqlite:///FILE or redis://HOST:PORT/DB"
            )
        return value


class ClusterConfig(Section):
    """Scale-out on one Redis: this process's node id and the lease every owner holds.

    Used when ``store.url`` is ``redis://``; the top-level ``node_id`` names
    this process among the others. ``lease_seconds`` is how long a session
    key, the cron scheduler or a bot's connection stays with a process that
    stopped renewing it: the longest a dead process's work waits before
    another takes it over.
    """

    lease_seconds: float = Field(default=15.0, ge=0.5, le=3600)


class CronConfig(Section):
    """Scheduled wakes: the default zone and the misfire policy."""

    enabled: bool = True
    timezone: TimeZoneName | None = None
    # A week at most: a later fire is a new fire, not a late one.
    misfire_grace_seconds: float = Field(default=60.0, ge=0, le=604_800)
    coalesce: bool = True
    # How often the store is polled for edits: under 10 ms is a busy loop on
    # the store, over a minute and an edit waits longer than anyone expects.
    poll_seconds: float = Field(default=0.5, ge=0.01, le=60)


class SendPolicyMatch(Section):
    channel: str | None = None
    chat_type: Literal["direct", "group", "channel"] | None = None
    key_prefix: str | None = None


class SendPolicyRule(Section):
    match: SendPolicyMatch = Field(default_factory=SendPolicyMatch)
    action: SendAction


class SendPolicyConfig(Section):
    rules: list[SendPolicyRule] = Field(default_factory=list)
    default: SendAction = "allow"


class AgentToAgentConfig(Section):
    max_ping_pong_turns: int = Field(default=5, ge=0, le=5)


class SessionConfig(Section):
    """Session-tool policies (seed 002): the main key, scope, send policy, ping-pong."""

    main_key: str = "cli"
    scope: Literal["per-sender", "global"] = "per-sender"
    send_policy: SendPolicyConfig = Field(default_factory=SendPolicyConfig)
    agent_to_agent: AgentToAgentConfig = Field(default_factory=AgentToAgentConfig)
    owners: list[str] = Field(default_factory=list)


def _default_agents() -> dict[str, AgentConfig]:
    return {"default": AgentConfig()}


class GatewayConfig(Section):
    """The whole configuration of one gateway."""

    timezone: TimeZoneName = "UTC"
    data_dir: Path = Path("./data")
    # The name this gateway's locks carry in a shared store; empty: one generated once
    # and kept in <data_dir>/state/node.json. Give each process of a cluster its own.
    node_id: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,64}$")
    default_agent: str = "default"
    store: StoreConfig = Field(default_factory=StoreConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=_default_agents)
    agent_defaults: AgentDefaults = Field(default_factory=AgentDefaults)
    threads: ThreadsConfig = Field(default_factory=ThreadsConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    channels: ChannelsConfig = Field(default_factory=ChannelsConfig)
    cron: CronConfig = Field(default_factory=CronConfig)
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)
    session: SessionConfig = Field(default_factory=SessionConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

    @model_validator(mode="before")
    @classmethod
    def _store_paths(cls, data: object) -> object:
        """Relative store paths are under data_dir (see :mod:`config.paths`)."""
        return place_store_paths(data)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, value: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in value:
            if not NAME.match(name):
                raise ValueError(f"agent name {name!r} must match [a-z0-9][a-z0-9_-]*")
        return value

    @field_validator("http")
    @classmethod
    def _tokens_off_loopback(cls, http: HttpConfig, info: ValidationInfo) -> HttpConfig:
        """Off loopback, each part of the HTTP server that is on needs its token."""
        channels, admin = info.data.get("channels"), info.data.get("admin")
        if not http.enabled and isinstance(channels, ChannelsConfig) and channels.web.enabled:
            raise ValueError(
                "the web chat (channels.web) is served by the HTTP server: enable [http] "
                "or disable the web chat"
            )
        if not http.enabled and isinstance(channels, ChannelsConfig) and channels.api.enabled:
            raise ValueError(
                "the OpenAI-compatible API (channels.api) is served by the HTTP server: "
                "enable [http] or disable the API"
            )
        if not http.enabled and isinstance(admin, AdminConfig) and admin.enabled:
            raise ValueError(
                "the admin API and dashboard (admin) are served by the HTTP server: enable "
                "[http] or disable admin"
            )
        if is_loopback(http.host):
            return http
        missing = []
        if isinstance(channels, ChannelsConfig):
            web, api = channels.web, channels.api
            if web.enabled and not given(web.token, web.token_file):
                missing.append("channels.web.token (or token_file) for the web chat")
            if api.enabled and not given(api.api_key, api.api_key_file):
                missing.append("channels.api.api_key (or api_key_file) for the API")
        if (
            isinstance(admin, AdminConfig)
            and admin.enabled
            and not given(admin.token, admin.token_file)
        ):
            missing.append("admin.token (or token_file) for the admin pages")
        if missing:
            raise ValueError(
                f"host {http.host!r} is not a loopback address: set {'; '.join(missing)} — "
                "or bind 127.0.0.1"
            )
        return http

    def state_store_url(self) -> str:
        """Where gateway state (cron jobs, run ledger, outbound ledger) lives.

        ``store.state_url`` when set; the session Redis when sessions are in Redis;
        otherwise one SQLite file under ``data_dir``.
        """
        if self.store.state_url:
            return self.store.state_url
        if self.store.url.startswith(("redis://", "rediss://")):
            return self.store.url
        return f"sqlite:///{self.data_dir / 'gateway.db'}"

    def agent(self, name: str | None) -> AgentConfig:
        return self.agents[name or self.default_agent]

    def model_for(self, agent: str | None) -> str:
        return self.agent(agent).model or self.models.default

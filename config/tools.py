"""Configuration of the agents' tools: the built-in ones (``[tools]``) and MCP servers (``[mcp]``).

Built-in tools are opt-in: an agent gets ``read_file``, ``write_file``,
``list_files``, ``web_fetch`` or ``run_command`` when its ``tools`` names it;
these sections only set their limits. An MCP server's tools are offered to
the agents whose ``tools`` name them (``"github.*"``, ``"github.create_issue"``).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from config.errors import Problem
from config.redaction import redact_url

# An MCP server's name starts its tools' names on the wire (``NAME__tool``): no
# double underscore in it, so the split is never ambiguous; short, so the tool
# name keeps most of the 64 characters model APIs allow.
_SERVER_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?=[a-z0-9-])){0,23}$")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

BUILTIN_TOOLS = ("read_file", "write_file", "list_files", "web_fetch", "run_command")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubagentTools(_Section):
    tools: list[str] | None = None


class FilesToolConfig(_Section):
    """``read_file``, ``write_file`` and ``list_files``: each agent's workspace and the caps."""

    # Each agent works in <workspaces>/<agent> (an agent's own ``workspace`` wins).
    # Empty: data_dir/workspaces.
    workspaces: Path | None = None
    max_read_bytes: int = Field(default=256_000, ge=1, le=100_000_000)
    max_write_bytes: int = Field(default=1_000_000, ge=1, le=1_000_000_000)
    max_list_entries: int = Field(default=500, ge=1, le=100_000)


class WebFetchConfig(_Section):
    """``web_fetch``: one HTTP GET, its caps, and which addresses it may reach."""

    timeout_seconds: float = Field(default=20.0, ge=0.01, le=600)
    max_bytes: int = Field(default=2_000_000, ge=1, le=100_000_000)
    max_chars: int = Field(default=40_000, ge=100, le=10_000_000)
    max_redirects: int = Field(default=5, ge=0, le=20)
    # Loopback, private, link-local and other non-public addresses are refused
    # (checked for every address a name resolves to, at every redirect) unless
    # allow_private is on, or the address is in one of allow_networks (e.g.
    # ["10.1.2.0/24"] for an intranet wiki).
    allow_private: bool = False
    allow_networks: list[str] = Field(default_factory=list)
    user_agent: str = "chat-gateway web_fetch"

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(
                    f"{network!r} is not an address or network (e.g. '10.1.2.0/24', '::1')"
                ) from None
        return value


class RunCommandConfig(_Section):
    """``run_command``: a program run in the agent's workspace, bounded in time and output."""

    timeout_seconds: float = Field(default=60.0, ge=0.01, le=86_400)
    max_output_bytes: int = Field(default=64_000, ge=100, le=100_000_000)
    # false: the model gives an argv list, run without a shell. true: it gives
    # one command line, run by /bin/sh -c (pipes, globs, redirections).
    shell: bool = False
    # The environment variables passed through to the command (nothing else of
    # the gateway's environment, which holds its API keys, reaches it).
    env_passthrough: list[str] = Field(default_factory=lambda: ["PATH", "LANG", "LC_ALL", "TZ"])
    # Each call waits for a person's approval (config.approvals) unless the agent
    # lists it in auto_approve; false lets every agent that has it run it unasked.
    requires_approval: bool = True


class ToolsConfig(_Section):
    subagents: SubagentTools = Field(default_factory=SubagentTools)
    files: FilesToolConfig = Field(default_factory=FilesToolConfig)
    web_fetch: WebFetchConfig = Field(default_factory=WebFetchConfig)
    run_command: RunCommandConfig = Field(default_factory=RunCommandConfig)


def _http_url(value: str) -> str:
    if not value:
        return value
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact_url(value)!r} is not an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "has credentials in it (user:pass@); put them in a header, e.g. "
            'headers = { Authorization = "Bearer ${MY_TOKEN}" }'
        )
    return value


class McpServerConfig(_Section):
    """One MCP server: a command run over stdio, or a streamable HTTP endpoint.

    Values in ``env`` and ``headers`` may name environment variables of the
    gateway as ``${NAME}``; they are filled in at start, so secrets stay out
    of the file.
    """

    enabled: bool = True
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: Annotated[str, AfterValidator(_http_url)] = ""
    headers: dict[str, str] = Field(default_factory=dict)
    # One tool call; past it the model gets a timeout error.
    timeout_seconds: float = Field(default=60.0, ge=0.01, le=86_400)
    # Starting (or reaching) the server, its handshake and its tool list.
    connect_timeout_seconds: float = Field(default=30.0, ge=0.01, le=3600)
    # After a failure, reconnecting waits this long, doubling up to the maximum.
    reconnect_min_seconds: float = Field(default=1.0, ge=0.01, le=3600)
    reconnect_max_seconds: float = Field(default=60.0, ge=0.01, le=86_400)
    # How often a connected server is asked for its tools (its liveness, and
    # tools it added or removed); 0: never, a failed call still finds it gone.
    probe_seconds: float = Field(default=30.0, ge=0, le=86_400)
    # Each call of its tools waits for a person's approval (config.approvals),
    # unless the agent lists them in auto_approve.
    requires_approval: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError(
                "give command (a server run over stdio) or url (a streamable HTTP server), "
                + ("not both" if self.command else "neither is set")
            )
        if self.url and (self.args or self.env or self.cwd is not None):
            raise ValueError("args, env and cwd apply to a command, not to a url server")
        if self.command and self.headers:
            raise ValueError("headers apply to a url server, not to a command")
        if self.reconnect_max_seconds < self.reconnect_min_seconds:
            raise ValueError("reconnect_max_seconds must be at least reconnect_min_seconds")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)


class McpConfig(_Section):
    """MCP tool servers, by name; their tools are ``NAME.tool`` (``NAME__tool`` to the model)."""

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    # Start-up waits this long at most for the servers' first connection; the
    # ones not up by then keep connecting while the gateway runs.
    start_wait_seconds: float = Field(default=10.0, ge=0, le=600)

    @field_validator("servers", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        for name in value if isinstance(value, dict) else ():
            if not _SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r} must be 1-24 of [a-z0-9_-], start with a letter or "
                    "digit, and have no '__' nor a trailing '_'"
                )
        return value


def env_references(value: str) -> list[str]:
    """The environment variables ``value`` names as ``${NAME}``."""
    return _ENV_REF.findall(value)


def fill_env(value: str, env: Mapping[str, str] | None = None) -> str:
    """``value`` with each ``${NAME}`` replaced by that variable (KeyError: one is not set)."""
    source = os.environ if env is None else env
    return _ENV_REF.sub(lambda m: source[m.group(1)], value)


def unset_env_problems(mcp: McpConfig, env: Mapping[str, str] | None = None) -> list[Problem]:
    """Each ``${NAME}`` in an enabled server's env or headers that is not set."""
    source = os.environ if env is None else env
    problems = []
    for name, server in mcp.servers.items():
        if not server.enabled:
            continue
        for field, values in (("env", server.env), ("headers", server.headers)):
            for key, value in values.items():
                for var in env_references(value):
                    if var not in source:
                        problems.append(
                            Problem(
                                path=f"mcp.servers.{name}.{field}.{key}",
                                message=f"names ${{{var}}}, which is not set in the environment",
                            )
                        )
    return problems

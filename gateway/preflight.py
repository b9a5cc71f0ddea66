"""What start-up would refuse, found without starting anything.

:class:`~gateway.app.Gateway` runs these checks first when it starts, and
``gateway config check`` runs them after validating the file, so a
configuration that checks clean starts (as far as the configuration and this
machine decide it): each problem is a :class:`~config.Problem` naming the
setting to change and how.

- The directories the gateway keeps data in (``data_dir``, its ``state/``,
  the jsonl session directory) must, when they exist, be real directories of
  this user closed to everyone else: sessions and cron task texts live there.
- Each provider a model reference uses must find its API key: an
  ``api_key_env`` that is not set, or an empty ``api_key_file``, is named.
- Each enabled channel must find its secrets (a Telegram bot's token, its
  webhook secret) and have what it runs on (webhook mode needs the web server).
- Each ``${NAME}`` an MCP server's ``env`` or ``headers`` names must be set
  (``config check`` only: at start-up such a server is reported down, and
  the gateway runs without it).
"""

from __future__ import annotations

import os
from pathlib import Path

from config import GatewayConfig, Problem
from config.tools import unset_env_problems
from gateway.channel_setup import channel_problems
from threads.llm import ModelConfigError, resolve_api_key
from threads.store.private import dir_problem, make_private_dir


def data_dirs(config: GatewayConfig) -> list[tuple[str, Path]]:
    """Each directory the gateway owns, with the setting that places it."""
    dirs = [("data_dir", config.data_dir), ("data_dir", config.data_dir / "state")]
    if config.store.url.startswith("jsonl://"):
        dirs.append(("store.url", Path(config.store.url.removeprefix("jsonl://"))))
    return dirs


def directory_problems(config: GatewayConfig) -> list[Problem]:
    """The existing data directories that are links, not ours, or open to others."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for setting, path in data_dirs(config):
        shown = os.path.abspath(path)
        if shown in seen or not os.path.lexists(path):
            continue
        seen.add(shown)
        problem = dir_problem(path)
        if problem is not None:
            problems.append(Problem(path=setting, message=f"{path} {problem}"))
    return problems


def make_data_dirs(config: GatewayConfig) -> None:
    """Create ``data_dir`` and its ``state/`` (mode 0700) when they do not exist yet."""
    make_private_dir(config.data_dir)
    make_private_dir(config.data_dir / "state")


def provider_problems(config: GatewayConfig) -> list[Problem]:
    """Providers an agent's model uses whose API key cannot be found (start-up needs it)."""
    users: dict[str, str] = {}
    for name, agent in config.agents.items():
        ref = agent.model or config.models.default
        provider, sep, _ = ref.partition("/")
        if sep and provider in config.models.providers:
            where = f"agents.{name}.model" if agent.model else "models.default"
            users.setdefault(provider, f"{where} {ref!r}")
    problems: list[Problem] = []
    for provider, user in users.items():
        try:
            resolve_api_key(provider, config.models.providers[provider])
        except ModelConfigError as exc:
            problems.append(Problem(path=exc.setting, message=f"{exc.detail} (for {user})"))
    return problems


def preflight(config: GatewayConfig) -> list[Problem]:
    """Every problem start-up would refuse (or run without) that the configuration and machine decide."""
    return [
        *directory_problems(config),
        *provider_problems(config),
        *channel_problems(config),
        *unset_env_problems(config.mcp),
    ]

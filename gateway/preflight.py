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

``gateway config check`` also asks what only this moment decides
(:func:`machine_problems`): whether the HTTP port is free, whether a gateway
already runs on this ``data_dir``, and whether the Redis servers named by
``store.url`` / ``store.state_url`` answer. Start-up finds those itself, in the
act of starting, and refuses with the same words and the same exit code.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from config import GatewayConfig, Problem
from config.section import read_secret
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


def web_problems(config: GatewayConfig) -> list[Problem]:
    """The web chat's token file, when it cannot be read or is empty (start-up reads it)."""
    web = config.channels.web
    if not web.enabled or web.token_file is None:
        return []
    setting = "channels.web.token_file"
    try:
        token = read_secret(web.token, web.token_file, setting)
    except ValueError as exc:
        return [Problem(path=setting, message=str(exc).removeprefix(f"{setting}: "))]
    if token is not None and not token.get_secret_value():
        return [Problem(path=setting, message=f"{web.token_file} is empty")]
    return []


def preflight(config: GatewayConfig) -> list[Problem]:
    """Every problem start-up would refuse (or run without) that the configuration decides."""
    return [
        *directory_problems(config),
        *provider_problems(config),
        *channel_problems(config),
        *web_problems(config),
        *unset_env_problems(config.mcp),
    ]


def port_problems(config: GatewayConfig) -> list[Problem]:
    """The HTTP server's port when something already listens on it (port 0 picks a free one)."""
    http = config.http
    if not http.enabled or http.port == 0:
        return []
    try:
        infos = socket.getaddrinfo(http.host, http.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return [Problem(path="http.host", message=f"{http.host!r} does not resolve: {exc}")]
    for family, kind, proto, _name, address in infos:
        with contextlib.closing(socket.socket(family, kind, proto)) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return [
                    Problem(
                        path="http.port",
                        message=port_in_use(http.host, http.port, exc),
                    )
                ]
    return []


def port_in_use(host: str, port: int, exc: OSError) -> str:
    """The words for a port the HTTP server cannot have, the same at check and at start."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    return (
        f"{host}:{port} cannot be used ({why}): stop what listens there "
        "(another gateway? `gateway health` asks it) or set another [http] port"
    )


def running_gateway_problems(config: GatewayConfig) -> list[Problem]:
    """A gateway already running on this ``data_dir`` (its control socket answers)."""
    path = config.data_dir / "gateway.sock"
    if not path.exists():
        return []
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return []  # a socket left behind by a gateway that died: start-up replaces it
    return [Problem(path="data_dir", message=another_gateway(path))]


def another_gateway(path: Path) -> str:
    """The words for a second gateway on one data directory, the same at check and at start."""
    return (
        f"another gateway is running here (its control socket {path} answers); "
        "stop it first or use a different data_dir"
    )


async def reachability_problems(config: GatewayConfig) -> list[Problem]:
    """The Redis servers of ``store.url`` and ``store.state_url`` that do not answer."""
    from threads.errors import UnreachableError
    from threads.state import StateStoreError, open_state_store
    from threads.store import check_reachable, open_store
    from threads.store.base import StoreOptions

    problems: list[Problem] = []
    if config.store.url.startswith(("redis://", "rediss://")):
        store = open_store(config.store.url, StoreOptions(no_lock=True))
        try:
            await check_reachable(store)
        except UnreachableError as exc:
            problems.append(Problem(path="store.url", message=str(exc)))
        finally:
            await store.close()
    state_url = config.store.state_url
    if state_url.startswith(("redis://", "rediss://")) and state_url != config.store.url:
        try:
            state = await open_state_store(state_url)
        except StateStoreError as exc:
            problems.append(Problem(path="store.state_url", message=str(exc)))
        else:
            await state.close()
    return problems


def machine_problems(config: GatewayConfig) -> list[Problem]:
    """What only this moment decides: a taken port, a running gateway (see the module)."""
    return [*running_gateway_problems(config), *port_problems(config)]

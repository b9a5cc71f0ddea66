"""Loading the configuration from ``gateway.toml`` and ``GATEWAY_*`` environment variables.

The file is found from ``--config``, else ``GATEWAY_CONFIG``, else
``./gateway.toml`` when it exists; with none, the embedded defaults apply.
Environment variables override the file: ``GATEWAY_THREADS__MAX_CONCURRENT_TURNS=8``
sets ``threads.max_concurrent_turns`` (``__`` nests; values are parsed as JSON
when they parse, else taken as strings).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import SecretStr, ValidationError

from config.errors import ConfigError, ConfigFileError, Problem
from config.models import GatewayConfig
from config.redaction import redact_text

ENV_PREFIX = "GATEWAY_"
ENV_CONFIG_PATH = "GATEWAY_CONFIG"
# Arms a fault point (threads/faults.py) for a crash test; not a setting.
ENV_FAULT = "GATEWAY_FAULT"
DEFAULT_FILE = Path("gateway.toml")
_SECRET_NAMES = ("token", "api_key", "secret", "password")


def config_path(explicit: Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The file to load: the explicit path, ``GATEWAY_CONFIG``, or ``./gateway.toml``."""
    env = os.environ if env is None else env
    if explicit is not None:
        return explicit
    if env.get(ENV_CONFIG_PATH):
        return Path(env[ENV_CONFIG_PATH])
    return DEFAULT_FILE if DEFAULT_FILE.exists() else None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigFileError(str(path), "file not found") from None
    except OSError as exc:
        raise ConfigFileError(str(path), f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ConfigFileError(
            str(path), f"not UTF-8 text (byte 0x{byte:02x} at offset {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(str(path), f"not valid TOML: {exc}") from None


def env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    """The nested dict the ``GATEWAY_*`` variables describe."""
    out: dict[str, Any] = {}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name in (ENV_CONFIG_PATH, ENV_FAULT):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = out
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[path[-1]] = _parse_env_value(raw)
    return out


def _parse_env_value(raw: str) -> Any:
    """A JSON list or object when the value is one; otherwise the text, for pydantic to convert.

    ``GATEWAY_CHANNELS__CLI__USER_ID=42`` stays the string "42"; an integer
    option given "42" is converted by the model.
    """
    if raw[:1] not in ("[", "{"):
        return raw
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    return value if isinstance(value, list | dict) else raw


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` onto ``base`` (a new dict; tables merge, values replace)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def validate(data: Mapping[str, Any], source: str) -> GatewayConfig:
    """Validate a configuration mapping; every problem is reported, not only the first.

    Field problems and cross references (an agent or provider a setting names)
    are reported together, each under its own dotted path.
    """
    problems = reference_problems(data)
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        problems = problems_of(exc) + problems
    if problems:
        raise ConfigError(source, problems)
    return config


def reference_problems(data: Mapping[str, Any]) -> list[Problem]:
    """Settings that name something the configuration does not define."""
    problems: list[Problem] = []
    agents = data.get("agents", {"default": {}})
    models = data.get("models", {})
    if not isinstance(agents, Mapping) or not isinstance(models, Mapping):
        return problems
    providers = models.get("providers", {})
    if not isinstance(providers, Mapping):
        return problems
    default_agent = data.get("default_agent", "default")
    if isinstance(default_agent, str) and default_agent not in agents:
        problems.append(
            Problem(
                path="default_agent",
                message=f"names no agent under [agents] (have: {sorted(agents)})",
                value=repr(default_agent),
            )
        )

    def check_model(path: str, ref: object) -> None:
        if not isinstance(ref, str) or "/" not in ref:
            return
        provider = ref.split("/", 1)[0]
        if provider not in providers:
            problems.append(
                Problem(
                    path=path,
                    message=(
                        f"names provider {provider!r}, which is not under [models.providers] "
                        f"(have: {sorted(providers)})"
                    ),
                    value=repr(ref),
                )
            )

    check_model("models.default", models.get("default"))
    for name, agent in agents.items():
        if isinstance(agent, Mapping):
            check_model(f"agents.{name}.model", agent.get("model"))
    problems.extend(mcp_reference_problems(data, agents))
    for name, provider in providers.items():
        key_file = provider.get("api_key_file") if isinstance(provider, Mapping) else None
        if isinstance(key_file, str) and not Path(key_file).is_file():
            problems.append(
                Problem(
                    path=f"models.providers.{name}.api_key_file",
                    message="no such file",
                    value=repr(key_file),
                )
            )
    return problems


def mcp_reference_problems(data: Mapping[str, Any], agents: Mapping[str, Any]) -> list[Problem]:
    """Agent tool patterns of the MCP form (``NAME.tool``, ``NAME.*``) naming no server."""
    mcp = data.get("mcp", {})
    servers = mcp.get("servers", {}) if isinstance(mcp, Mapping) else {}
    if not isinstance(servers, Mapping):
        return []
    problems = []
    for name, agent in agents.items():
        if not isinstance(agent, Mapping):
            continue
        for field in ("tools", "auto_approve"):
            patterns = agent.get(field, [])
            if not isinstance(patterns, list):
                continue
            for pattern in patterns:
                if not isinstance(pattern, str) or "." not in pattern:
                    continue
                server = pattern.removeprefix("-").split(".", 1)[0]
                if server not in servers and not any(c in server for c in "*?["):
                    problems.append(
                        Problem(
                            path=f"agents.{name}.{field}",
                            message=(
                                f"names MCP server {server!r}, which is not under [mcp.servers] "
                                f"(have: {sorted(servers)})"
                            ),
                            value=repr(pattern),
                        )
                    )
    return problems


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Load and validate the configuration; :class:`ConfigError` lists every problem."""
    env = os.environ if env is None else env
    file = config_path(path, env)
    data: dict[str, Any] = read_toml(file) if file is not None else {}
    overrides = env_overrides(env)
    source = str(file) if file is not None else "defaults"
    if overrides:
        source += " + GATEWAY_* environment"
    return validate(merge(data, overrides), source)


def problems_of(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error.get("loc", ())]
        path = ".".join(loc)
        message = str(error.get("msg", "invalid"))
        message = redact_text(message.removeprefix("Value error, "))
        value = ""
        if error.get("type") not in ("missing",) and "input" in error:
            value = _show(error["input"], secret=any(_is_secret(p) for p in loc))
            if isinstance(error["input"], dict):
                value = ""
        problems.append(Problem(path=path, message=message, value=value))
    return problems


def _is_secret(name: str) -> bool:
    return any(name == s or name.endswith("_" + s) for s in _SECRET_NAMES)


def _show(value: Any, *, secret: bool) -> str:
    if secret or isinstance(value, SecretStr):
        return "'**********'"
    text = redact_text(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."

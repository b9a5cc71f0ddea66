"""What every configuration section shares: the base model, secrets, hosts and origins.

Every section is frozen and forbids unknown keys, so a misspelt option is an
error naming its dotted path. A secret is ``SecretStr`` (never printed), given
inline or as a file path (``*_file``) read at load.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, SecretStr

# A name the configuration keys things by: agents, Telegram accounts.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

_MODEL_REF = re.compile(r"^(echo|[A-Za-z0-9_.-]+/[^\s]+)$")


def _check_model_ref(value: str) -> str:
    if not _MODEL_REF.match(value):
        raise ValueError(f"{value!r} is not 'provider/model' (e.g. 'openai/gpt-4o-mini') or 'echo'")
    return value


ModelRef = Annotated[str, AfterValidator(_check_model_ref)]


class Section(BaseModel):
    """Base of every configuration section: frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def read_secret(inline: SecretStr | None, path: Path | None, what: str) -> SecretStr | None:
    """The secret given inline or, failing that, read from ``path`` (stripped)."""
    if inline is not None and inline.get_secret_value():
        return inline
    if path is None:
        return None
    try:
        return SecretStr(path.read_text(encoding="utf-8").strip())
    except OSError as exc:
        raise ValueError(f"{what}: cannot read secret file {path}: {exc.strerror}") from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: 127.0.0.0/8, ::1 or localhost."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def given(inline: SecretStr | None, path: Path | None) -> bool:
    return path is not None or (inline is not None and bool(inline.get_secret_value()))


def normal_origin(value: str) -> str:
    """``value`` as a browser sends it in ``Origin``: ``scheme://host[:port]``, lower case.

    A default port (80 for http, 443 for https) is dropped, as browsers do.
    Raises ``ValueError`` for anything else (a path, no host, another scheme).
    """
    parts = urlsplit(value.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    bare = not parts.query and not parts.fragment and parts.path in ("", "/")
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or not bare:
        raise ValueError(f"{value!r} is not an origin like 'https://chat.example.com:8443'")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def same_origin(origin: str, host: str) -> bool:
    """Whether ``Origin`` names the host and port the request was sent to (its ``Host``).

    A ``Host`` without a port means the default port of the origin's scheme.
    """
    seen = urlsplit(origin)
    sent = urlsplit(f"//{host}")
    try:
        default = {"http": 80, "https": 443}[seen.scheme]
        return (
            seen.hostname is not None
            and seen.hostname == sent.hostname
            and (seen.port or default) == (sent.port or default)
            and seen.path == ""
        )
    except (KeyError, ValueError):
        return False

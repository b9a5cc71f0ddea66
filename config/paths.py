"""Paths in the configuration are relative to ``data_dir``, unless they are absolute.

``data_dir`` itself is relative to the working directory (a service sets one:
see docs/operators.md). The file-backed store URLs live under it:

* ``store.url = "jsonl://sessions"`` (the default) is ``<data_dir>/sessions``;
* ``store.url = "sqlite:///sessions.db"`` is ``<data_dir>/sessions.db``;
* ``store.state_url = "sqlite:///state.db"`` is ``<data_dir>/state.db``;
* an absolute path (``jsonl:///srv/sessions``, ``sqlite:////srv/gateway.db``)
  is used as it is, and ``memory://`` / ``redis://`` URLs have no path.

One older spelling is kept meaning what it meant: a relative path that starts
with ``data_dir``'s own relative path (``jsonl://./data/sessions`` beside
``data_dir = "./data"``, the example file's old default) is taken as it was
written, relative to the working directory — nobody means ``data/data/sessions``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

DEFAULT_DATA_DIR = "./data"
DEFAULT_SESSIONS_URL = "jsonl://sessions"


def under_data_dir(url: str, data_dir: Path) -> str:
    """``url`` with a relative file path placed under ``data_dir`` (see the module)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    kind = scheme.lower()
    if kind == "jsonl" and rest:
        placed = _place(rest, data_dir)
        return url if placed is None else f"{scheme}://{placed}"
    if kind == "sqlite" and rest:
        path = rest[1:] if rest.startswith("/") else rest
        placed = _place(path, data_dir) if path else None
        return url if placed is None else f"{scheme}:///{placed}"
    return url


def _place(path: str, data_dir: Path) -> str | None:
    """``path`` under ``data_dir``; None when it stays as written (absolute, or the old form)."""
    if os.path.isabs(path):
        return None
    if _already_under(path, data_dir):
        return None
    return str(data_dir / path)


def _already_under(path: str, data_dir: Path) -> bool:
    if data_dir.is_absolute():
        return False
    base = PurePosixPath(os.path.normpath(data_dir)).parts
    given = PurePosixPath(os.path.normpath(path)).parts
    return base != (".",) and given[: len(base)] == base


def place_store_paths(data: Any) -> Any:
    """The raw configuration mapping with its store paths placed under ``data_dir``.

    Called before validation; anything that is not a mapping is left for the
    validators to refuse.
    """
    if not isinstance(data, Mapping):
        return data
    store = data.get("store", {})
    if hasattr(store, "model_dump"):
        store = store.model_dump()
    if not isinstance(store, Mapping):
        return data
    data_dir = Path(str(data.get("data_dir", DEFAULT_DATA_DIR)))
    placed = dict(store)
    url = placed.get("url", DEFAULT_SESSIONS_URL)
    if isinstance(url, str):
        placed["url"] = under_data_dir(url, data_dir)
    state_url = placed.get("state_url", "")
    if isinstance(state_url, str) and state_url:
        placed["state_url"] = under_data_dir(state_url, data_dir)
    return {**data, "store": placed}

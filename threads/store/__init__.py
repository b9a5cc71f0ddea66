"""Durable session storage: the entry tree on disk, in SQLite, in Redis or in memory.

:func:`open_store` picks the backend from a URL; every backend implements
:class:`~threads.store.base.SessionStore` (Storage + KeyIndex) and the
capabilities it can (``Watcher``, ``Flusher``, ``Releaser``, ``Leaser``).
Backends are imported only when chosen, so their drivers load on demand.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from config.redaction import redact_url
from threads.store.base import Pinger, SessionStore, StoreOptions

SCHEMES = ("memory://", "jsonl://PATH", "sqlite:///PATH", "redis://HOST:PORT/DB")


def open_store(url: str, options: StoreOptions | None = None) -> SessionStore:
    """Open the session store ``url`` names.

    ``memory://`` — in process; ``jsonl://./data/sessions`` — one file per
    session under the path (relative to the working directory);
    ``sqlite:///./data/gateway.db`` — one SQLite file (``sqlite:////abs/path``
    for an absolute one); ``redis://127.0.0.1:6379/0`` — a Redis database
    (``rediss://`` for TLS). Nothing is touched until the first call.
    """
    shown = redact_url(url)
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise ValueError(f"store URL {shown!r} has no scheme; use one of {', '.join(SCHEMES)}")
    if scheme == "memory":
        from threads.store.memory import MemoryStore

        return MemoryStore(options)
    if scheme == "jsonl":
        if not rest:
            raise ValueError(
                f"store URL {shown!r} names no directory, e.g. jsonl://./data/sessions"
            )
        from threads.store.jsonl import JsonlStore

        return JsonlStore(rest, options)
    if scheme == "sqlite":
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise ValueError(f"store URL {shown!r} names no file, e.g. sqlite:///./data/gateway.db")
        from threads.store.sqlite import SqliteStore

        return SqliteStore(path, options)
    if scheme in ("redis", "rediss", "unix"):
        try:
            urlsplit(url)  # let a malformed URL fail here, naming itself
        except ValueError as exc:
            raise ValueError(f"store URL {shown!r} is malformed: {exc}") from None
        from threads.state.redis import split_base
        from threads.store.redis import DEFAULT_PREFIX, RedisStore

        # Gateways sharing a Redis database by their cron prefixes keep their sessions apart too.
        address, base = split_base(url)
        prefix = DEFAULT_PREFIX if base is None else f"{base}{DEFAULT_PREFIX}"
        return RedisStore(address, options, prefix=prefix)
    raise ValueError(
        f"unknown store scheme {scheme!r} in {shown!r}; use one of {', '.join(SCHEMES)}"
    )


async def check_reachable(store: SessionStore) -> None:
    """Fail now, with :class:`UnreachableError`, when the store's server cannot be reached."""
    if isinstance(store, Pinger):
        await store.ping()


__all__ = ["SessionStore", "StoreOptions", "check_reachable", "open_store"]

"""The gateway's state store: small namespaced JSON values beside the sessions.

:func:`open_state_store` opens the backend a URL names — the URL is
``GatewayConfig.state_store_url()``, the same place cron keeps its jobs:
``sqlite:///<data_dir>/gateway.db`` by default, the session Redis when
sessions live in Redis, ``memory://`` for tests. Every backend implements
:class:`~threads.state.base.StateStore`; drivers load only when chosen.
"""

from __future__ import annotations

from threads.state.base import Clock, Json, StateStore, utc_now
from threads.state.errors import InvalidStateKeyError, StateStoreError

SCHEMES = ("memory://", "sqlite:///PATH", "redis://HOST:PORT/DB")


async def open_state_store(
    url: str, *, clock: Clock = utc_now, redis_prefix: str | None = None
) -> StateStore:
    """Open the state store ``url`` names; the caller closes it.

    ``clock`` judges expiry in the memory and SQLite backends (Redis keeps its
    own time); ``redis_prefix`` overrides the Redis key prefix.
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme == "memory" and sep:
        from threads.state.memory import MemoryStateStore

        return MemoryStateStore(clock=clock)
    if scheme == "sqlite" and sep:
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise StateStoreError(url, "names no file, e.g. sqlite:///./data/gateway.db")
        from threads.state.sqlite import SqliteStateStore

        return await SqliteStateStore.open(path, clock=clock)
    if scheme in ("redis", "rediss", "unix") and sep:
        from threads.state.redis import RedisStateStore

        return await RedisStateStore.open(url, prefix=redis_prefix)
    raise StateStoreError(url, f"has no known scheme for gateway state: use {', '.join(SCHEMES)}")


__all__ = [
    "Clock",
    "InvalidStateKeyError",
    "Json",
    "StateStore",
    "StateStoreError",
    "open_state_store",
    "utc_now",
]

"""Opening cron's job store in the gateway's state store.

The URL is ``GatewayConfig.state_store_url()``: ``sqlite:///<data_dir>/gateway.db``
by default (:mod:`cron.sqlite_store`), the Redis URL when state lives in Redis
(:mod:`cron.redis_store`). Both keep jobs, schedule state, the run ledger,
run-now requests and heartbeats, and both satisfy :class:`cron.base.JobStore`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from cron.base import JobStore
from cron.errors import StoreError
from cron.sqlite_store import SqliteJobStore

__all__ = ["JobStore", "SqliteJobStore", "connect_store", "open_store"]


async def connect_store(
    url: str, *, keep_runs: int = 1000, redis_prefix: str | None = None
) -> JobStore:
    """Open the store at ``url``; the caller closes it.

    On Redis, keys live under ``redis_prefix``, else under the URL's
    ``cron_prefix`` query parameter, else under ``gateway:cron:``.
    """
    if url.startswith("sqlite:///"):
        return await SqliteJobStore.open(url, keep_runs=keep_runs)
    if url.startswith(("redis://", "rediss://", "unix://")):
        # Imported here: the Redis client costs some 8 MB a gateway on SQLite never uses.
        from cron.redis_store import RedisJobStore

        return await RedisJobStore.open(url, prefix=redis_prefix, keep_runs=keep_runs)
    raise StoreError(url, "has no known scheme for cron state: use sqlite:///FILE or redis://HOST")


@asynccontextmanager
async def open_store(
    url: str, *, keep_runs: int = 1000, redis_prefix: str | None = None
) -> AsyncIterator[JobStore]:
    """``async with open_store(url) as store:`` — opened, and closed on the way out."""
    store = await connect_store(url, keep_runs=keep_runs, redis_prefix=redis_prefix)
    try:
        yield store
    finally:
        await store.close()

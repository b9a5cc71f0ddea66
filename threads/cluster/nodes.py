"""Every node's record in Redis: who it is and what it runs, for ``gateway nodes`` and the dashboard.

The hash ``<prefix>nodes`` maps a node id to a JSON record the node rewrites
at every lease renewal: its boot, process, host, start time, HTTP address,
whether it is draining, and its live threads. Whether a node is alive is not
the record's to say: its ``node:<id>`` lease is (:mod:`threads.cluster.leases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import redis.asyncio as aioredis

MAX_THREAD_ROWS = 200
"""A node's record lists at most this many threads (running first); the count is whole."""


class NodeBook:
    """The node records under one prefix."""

    def __init__(self, redis: aioredis.Redis, prefix: str) -> None:
        self.redis = redis
        self.key = f"{prefix}nodes"

    async def publish(self, node: str, record: Mapping[str, Any]) -> None:
        await self.redis.hset(self.key, node, orjson.dumps(dict(record)))

    async def records(self) -> dict[str, dict[str, Any]]:
        found = await self.redis.hgetall(self.key)
        out: dict[str, dict[str, Any]] = {}
        for node, raw in found.items():
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict):
                out[node.decode() if isinstance(node, bytes) else str(node)] = record
        return out

    async def forget(self, node: str) -> None:
        await self.redis.hdel(self.key, node)


def thread_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The threads a record lists: running, then pending, then the most recently active."""
    order = {"running": 0, "pending": 1}
    ranked = sorted(
        rows, key=lambda r: (order.get(r.get("state", ""), 2), -float(r.get("last_activity", 0)))
    )
    return ranked[:MAX_THREAD_ROWS]

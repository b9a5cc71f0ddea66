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

from threads.cluster.leases import LeaseTable

KEY = "key:"
NODE = "node:"
LEADER = "leader:"
"""The lease names' kinds: a session key, a node's liveness, a singleton's leader."""

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


async def cluster_view(leases: LeaseTable, book: NodeBook) -> dict[str, Any]:
    """Every node with its record, whether it is alive, the keys it owns and what it leads.

    Read from Redis alone, so any process can show it (``gateway nodes`` with
    no gateway running). Leases that lapsed and nobody took yet are listed apart.
    """
    now = await leases.now_ms()
    held = await leases.all()
    nodes: dict[str, dict[str, Any]] = {}

    def row(node: str) -> dict[str, Any]:
        return nodes.setdefault(node, {"node": node, "alive": False, "keys": [], "leads": []})

    for node, record in (await book.records()).items():
        row(node).update({**record, "alive": False, "keys": [], "leads": []})
    for lease in held:
        if lease.name.startswith(NODE):
            entry = row(lease.name.removeprefix(NODE))
            entry["alive"] = not lease.lapsed(now)
            entry["lease"] = lease.as_json(now)
        elif not lease.lapsed(now):
            entry = row(lease.node)
            if lease.name.startswith(KEY):
                entry["keys"].append(lease.name.removeprefix(KEY))
            else:
                entry["leads"].append(lease.name.removeprefix(LEADER))
    return {
        "nodes": [nodes[n] for n in sorted(nodes)],
        "lapsed_leases": [lease.as_json(now) for lease in held if lease.lapsed(now)],
    }

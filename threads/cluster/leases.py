"""Expiring leases with fencing tokens, kept in Redis and changed only by Lua.

A lease names one thing a single process may do at a time: own a session
key (``key:<session key>``), be a live node (``node:<id>``), lead a
singleton (``leader:cron``, ``leader:telegram:<bot>``). Each lease is a hash
``<prefix>lease:<name>`` (``node``, ``fence``, ``expires``, ``since``, times
in milliseconds) and a member of the sorted set ``<prefix>leases`` scored by
its expiry, so listing and finding lapsed leases never scans the keyspace.

Every change is one script, so it is a compare-and-set: a claim takes a
lease that is free or lapsed (or extends its own), a renewal extends only
leases still held under the token it names, a release deletes only its own.
Each change of hands draws a new *fencing token* from the counter
``<prefix>fence`` (``INCR``: it only grows), and session writes name the
token they hold (:class:`threads.store.base.Fence`): a process whose lease
lapsed carries a token that is no longer the lease's, and its writes are
refused by the store's own script.

Time is the Redis server's (``TIME`` inside the script), so every process
agrees on when a lease lapses whatever their own clocks say. A test brings a
:data:`LeaseClock` of its own and decides when leases lapse; nothing then
depends on how fast the machine runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from threads.cluster.clock import LeaseClock, server_time
from threads.store.redis import LUA_NOW

# KEYS: lease hash, index, fence counter. ARGV: name, node, ttl_ms, now.
# Returns {won, node, fence, expires, since}.
_CLAIM = (
    LUA_NOW
    + """
local now = now_ms(ARGV[4])
local held = redis.call('HMGET', KEYS[1], 'node', 'fence', 'expires', 'since')
local live = held[1] and tonumber(held[3]) > now
if live and held[1] ~= ARGV[2] then
  return {0, held[1], tonumber(held[2]), tonumber(held[3]), tonumber(held[4])}
end
local fence, since
if live then
  fence, since = tonumber(held[2]), tonumber(held[4])
else
  fence, since = redis.call('INCR', KEYS[3]), now
end
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'node', ARGV[2], 'fence', fence, 'expires', expires, 'since', since)
redis.call('ZADD', KEYS[2], expires, ARGV[1])
return {1, ARGV[2], fence, expires, since}
"""
)

# KEYS: index, then one lease hash per lease. ARGV: node, ttl_ms, now, then names, then
# fences (as many as hashes). Extends each lease still this node's under that fence and
# not lapsed; returns 1 (renewed) or 0 (lost) per lease.
_RENEW = (
    LUA_NOW
    + """
local now = now_ms(ARGV[3])
local n = #KEYS - 1
local out = {}
for i = 1, n do
  local held = redis.call('HMGET', KEYS[i + 1], 'node', 'fence', 'expires')
  if held[1] == ARGV[1] and held[2] == ARGV[3 + n + i] and tonumber(held[3]) > now then
    local expires = now + tonumber(ARGV[2])
    redis.call('HSET', KEYS[i + 1], 'expires', expires)
    redis.call('ZADD', KEYS[1], expires, ARGV[3 + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""
)

# KEYS: lease hash, index. ARGV: name, fence. Deletes the lease when it holds that fence.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'fence') == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 1
end
return 0
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """One lease as stored: who holds it, under which token, until when (ms)."""

    name: str
    node: str
    fence: int
    expires_ms: int
    since_ms: int

    def lapsed(self, now_ms: int) -> bool:
        return self.expires_ms <= now_ms

    def as_json(self, now_ms: int) -> dict[str, Any]:
        """The lease for ``health`` and ``gateway nodes``: times relative to now."""
        return {
            "name": self.name,
            "node": self.node,
            "fence": self.fence,
            "expires_in_seconds": round((self.expires_ms - now_ms) / 1000, 1),
            "held_for_seconds": round((now_ms - self.since_ms) / 1000, 1),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    """What a claim found: ``won`` (the lease is this node's now) and the lease as it stands."""

    won: bool
    lease: Lease


class LeaseTable:
    """The leases under one prefix, as seen and changed by one node."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        *,
        node: str,
        ttl: float,
        clock: LeaseClock = server_time,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.node = node
        self.ttl_ms = max(1, int(ttl * 1000))
        self.clock = clock
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    @property
    def index(self) -> str:
        return f"{self.prefix}leases"

    @property
    def counter(self) -> str:
        return f"{self.prefix}fence"

    def key(self, name: str) -> str:
        """The Redis key of the lease ``name`` (a session write's fence names it)."""
        return f"{self.prefix}lease:{name}"

    def now_arg(self) -> str:
        """The now a script is given: the test clock's milliseconds, or '' for the server's."""
        now = self.clock()
        return "" if now is None else str(now)

    async def now_ms(self) -> int:
        """Now, on the clock leases lapse by."""
        now = self.clock()
        if now is not None:
            return now
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def claim(self, name: str) -> Claim:
        """Take the lease if it is free or lapsed, extend it if it is ours; else who has it."""
        keys = [self.key(name), self.index, self.counter]
        won, node, fence, expires, since = await self._claim(
            keys=keys, args=[name, self.node, self.ttl_ms, self.now_arg()]
        )
        lease = Lease(
            name=name,
            node=_text(node),
            fence=int(fence),
            expires_ms=int(expires),
            since_ms=int(since),
        )
        return Claim(won=bool(won), lease=lease)

    async def renew(self, held: Mapping[str, int]) -> list[str]:
        """Extend every lease in ``held`` (name → fence) still ours; the names that were lost."""
        if not held:
            return []
        names = list(held)
        keys = [self.index, *(self.key(n) for n in names)]
        args: list[str | int] = [self.node, self.ttl_ms, self.now_arg(), *names]
        args += [held[n] for n in names]
        kept = await self._renew(keys=keys, args=args)
        return [name for name, ok in zip(names, kept, strict=True) if not int(ok)]

    async def release(self, name: str, fence: int) -> bool:
        """Let the lease go if it is still held under ``fence``; whether it was."""
        return bool(await self._release(keys=[self.key(name), self.index], args=[name, fence]))

    async def get(self, name: str) -> Lease | None:
        fields = await self.redis.hgetall(self.key(name))
        return _lease(name, fields)

    async def all(self, start: str = "") -> list[Lease]:
        """Every lease whose name begins with ``start``, held or lapsed, in name order."""
        names = sorted(_text(n) for n in await self.redis.zrange(self.index, 0, -1))
        names = [n for n in names if n.startswith(start)]
        return await self.many(names)

    async def lapsed(self, start: str = "") -> list[str]:
        """The names beginning with ``start`` of leases that lapsed and nobody took."""
        now = await self.now_ms()
        found = await self.redis.zrange(self.index, "-inf", now, byscore=True)
        return sorted(n for n in (_text(f) for f in found) if n.startswith(start))

    async def many(self, names: Sequence[str]) -> list[Lease]:
        if not names:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.key(name))
            rows = await pipe.execute()
        out = [_lease(name, fields) for name, fields in zip(names, rows, strict=True)]
        return [lease for lease in out if lease is not None]


def _lease(name: str, fields: Mapping[Any, Any]) -> Lease | None:
    got = {_text(k): _text(v) for k, v in fields.items()}
    if "node" not in got:
        return None
    return Lease(
        name=name,
        node=got["node"],
        fence=int(got.get("fence", 0)),
        expires_ms=int(got.get("expires", 0)),
        since_ms=int(got.get("since", 0)),
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

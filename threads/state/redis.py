"""The state store in Redis (``redis://HOST:PORT/DB``): several gateway processes share it.

Keys, under a prefix (``gateway:state:`` by default)::

    {p}v:<namespace>:<key>   string: the JSON value; a value with an expiry has a
                             Redis expiry (``PXAT``), so Redis drops it itself
    {p}i:<namespace>         sorted set of the namespace's keys (all score 0), so a
                             prefix scan is ``ZRANGEBYLEX`` and never a keyspace SCAN
    {p}namespaces            set of the namespaces ever written

Writes and scans are Lua scripts, so the value and its index change together;
a scan drops the index entries of values Redis expired, and so does
:meth:`RedisStateStore.sweep` for a whole namespace at once.

The prefix: ``prefix=`` when given; else derived from the URL's ``cron_prefix``
query parameter (``staging:cron:`` → ``staging:state:``), so two gateways that
share a Redis database by their cron prefixes keep their state apart too; else
the default. The parameter is removed before connecting.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from threads.state.base import (
    Json,
    check_expiry,
    check_key,
    check_namespace,
    decode,
    encode,
    micros,
)
from threads.state.errors import StateStoreError

SOCKET_TIMEOUT = 30.0
"""No answer for this long: the call fails with an error, it does not hang (as the session
store's, :data:`threads.store.redis.SOCKET_TIMEOUT`)."""
DEFAULT_PREFIX = "gateway:state:"
CRON_PREFIX_PARAM = "cron_prefix"

_PUT = """
if ARGV[3] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[3])
end
redis.call('ZADD', KEYS[2], 0, ARGV[2])
redis.call('SADD', KEYS[3], ARGV[4])
return 1
"""

_DELETE = """
local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return existed
"""

# ARGV: lex min, lex max, value-key prefix of the namespace.
_SCAN = """
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2])
local out = {}
for _, member in ipairs(members) do
  local value = redis.call('GET', ARGV[3] .. member)
  if value then
    table.insert(out, member)
    table.insert(out, value)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return out
"""

_SWEEP = """
local gone = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. member) == 0 then
    redis.call('ZREM', KEYS[1], member)
    gone = gone + 1
  end
end
return gone
"""


def split_address(url: str) -> tuple[str, str | None]:
    """``url`` without its ``cron_prefix`` parameter, and the state prefix that implies."""
    address, base = split_base(url)
    return address, None if base is None else f"{base}state:"


def split_base(url: str) -> tuple[str, str | None]:
    """``url`` without its ``cron_prefix`` parameter, and the base of every prefix it implies.

    ``staging:cron:`` names the base ``staging:``: cron's keys, the state
    store's (``staging:state:``) and the sessions' (``staging:weft:``) share it.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for name, value in query if name == CRON_PREFIX_PARAM]
    rest = urlencode([(name, value) for name, value in query if name != CRON_PREFIX_PARAM])
    address = urlunsplit(parts._replace(query=rest))
    if not named or not named[-1]:
        return address, None
    cron = named[-1]
    return address, cron.removesuffix("cron:") if cron.endswith("cron:") else cron


class RedisStateStore:
    """A :class:`~threads.state.base.StateStore` in Redis; see the module docstring."""

    def __init__(self, client: aioredis.Redis, url: str, *, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._r = client
        self._put = client.register_script(_PUT)
        self._delete = client.register_script(_DELETE)
        self._scan = client.register_script(_SCAN)
        self._sweep = client.register_script(_SWEEP)

    @classmethod
    async def open(cls, url: str, *, prefix: str | None = None) -> RedisStateStore:
        """Connect to the Redis at ``url`` (checked with a PING)."""
        address, derived = split_address(url)
        prefix = prefix if prefix is not None else derived or DEFAULT_PREFIX
        if not prefix:
            raise StateStoreError(url, "the key prefix is empty: name one such as 'app:state:'")
        client = aioredis.Redis.from_url(
            address,
            decode_responses=False,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            await client.aclose()
            raise StateStoreError(url, f"cannot reach Redis: {exc}") from None
        return cls(client, url, prefix=prefix)

    def _value_key(self, namespace: str, key: str = "") -> bytes:
        return f"{self.prefix}v:{namespace}:{key}".encode()

    def _index(self, namespace: str) -> bytes:
        return f"{self.prefix}i:{namespace}".encode()

    async def _call(self, script: Any, keys: list[bytes], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise StateStoreError(self.url, f"Redis refused a call: {exc}") from exc

    async def get(self, namespace: str, key: str) -> Json:
        check_key(namespace, key)
        try:
            data = await self._r.get(self._value_key(namespace, key))
        except (RedisError, OSError) as exc:
            raise StateStoreError(self.url, f"Redis refused a read: {exc}") from exc
        return decode(data) if data is not None else None

    async def put(
        self, namespace: str, key: str, value: Json, *, expires: datetime | None = None
    ) -> None:
        check_key(namespace, key)
        data = encode(namespace, key, value)
        until = check_expiry(expires)
        at = "" if until is None else str(max(1, micros(until) // 1000))
        keys = [self._value_key(namespace, key), self._index(namespace)]
        keys.append(f"{self.prefix}namespaces".encode())
        await self._call(self._put, keys, [data, key.encode(), at, namespace])

    async def delete(self, namespace: str, key: str) -> bool:
        check_key(namespace, key)
        keys = [self._value_key(namespace, key), self._index(namespace)]
        return bool(await self._call(self._delete, keys, [key.encode()]))

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, Json]]:
        check_namespace(namespace)
        if prefix:
            low, high = b"[" + prefix.encode(), b"(" + prefix.encode() + b"\xff"
        else:
            low, high = b"-", b"+"
        found = await self._call(
            self._scan, [self._index(namespace)], [low, high, self._value_key(namespace)]
        )
        return [(found[i].decode(), decode(found[i + 1])) for i in range(0, len(found), 2)]

    async def sweep(self) -> int:
        try:
            namespaces = await self._r.smembers(f"{self.prefix}namespaces".encode())
        except (RedisError, OSError) as exc:
            raise StateStoreError(self.url, f"Redis refused a read: {exc}") from exc
        gone = 0
        for raw in sorted(namespaces):
            namespace = raw.decode() if isinstance(raw, bytes) else str(raw)
            gone += int(
                await self._call(
                    self._sweep, [self._index(namespace)], [self._value_key(namespace)]
                )
            )
        return gone

    async def close(self) -> None:
        await self._r.aclose()

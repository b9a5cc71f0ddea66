"""The shared backend: sessions in Redis, for several gateway processes (``redis://…``).

Per session, a hash ``<prefix>s:<id>`` holds the header line, its creation
time and metadata, the current title, the count of complete entry lines, a
torn flag and a generation number; a list ``<prefix>c:<id>`` holds the
appended bytes, one item per batch. The sorted set ``<prefix>index`` orders
the sessions for ``list`` (score: creation time in microseconds; Redis
orders a tie by member, which is the id). Every write is one Lua script, so
it is atomic — a batch lands whole or not at all — and a load is one
MULTI/EXEC, so it never sees part of a session.

The writer lock is ``<prefix>lock:<id>`` holding this store's token with an
expiry: taken by the first write, renewed while held by one task per store,
deleted on release. A crashed writer's lock lapses after ``lock_ttl``
seconds. With a node identity (``StoreOptions.node``) the token begins with
its owner, ``<node id>/<boot>/``: a lock an earlier boot of the same node left
is taken over at once, and logged, since that process is gone
(:mod:`threads.node`); a lock of another live owner is :class:`LockedError`
naming it. A call the server cannot take (down, out of memory) raises
:class:`UnreachableError` or :class:`UnavailableError`, never a driver error. A store that finds its own lock gone (it lapsed: a stalled process,
a partition) re-takes it only if the session holds as many lines as this
store last wrote or saw; otherwise another writer has moved the session on,
and the append is refused with :class:`StaleError`.

Under scale-out (:mod:`threads.cluster`) a session's writes are also
*fenced*: the process that owns the session's key registers the key's lease
and its fencing token (:meth:`RedisStore.fence`), and the append script
checks, atomically with the write, that the token is still the lease's and
the lease has not lapsed; a process that lost its lease is refused with
:class:`FencedError` and never writes again under it. Durability is the
server's (``appendfsync``); ``flush`` checks the session and has nothing of
its own to complete.

A store's writes to one session run in call order and, once started, to
their end (:mod:`threads.store.inflight`): the bookkeeping after a script
(the held locks, the known line counts) never misses a write that landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import datetime
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec, TypeAlias, TypeVar

import orjson
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from config.redaction import redact_text, redact_url
from threads.errors import (
    ExistsError,
    FencedError,
    LockedError,
    NewerFormatError,
    NotFoundError,
    StaleError,
    UnavailableError,
    UnreachableError,
)
from threads.messages import WireError
from threads.node import parse_owner
from threads.store.base import Fence, Loaded, Page, Pause, Query, StoreOptions
from threads.store.codec import decode_header, encode_header
from threads.store.entries import Entry, Header, InfoEntry
from threads.store.inflight import InFlight
from threads.store.leases import Leases
from threads.store.lines import complete_end, decode_session, encode_lines
from threads.store.rules import ZERO_TIME, check_header, check_id, created_us, page_of
from threads.store.watching import Pulse, advance, tail

log = logging.getLogger(__name__)

_Names: TypeAlias = list[str]
_Headers: TypeAlias = list[Header | None]
_Rows: TypeAlias = list[tuple[tuple[int, str], Header]]
_Args: TypeAlias = list[bytes | str | int | float]
P = ParamSpec("P")
T = TypeVar("T")

SOCKET_TIMEOUT = 30.0
"""A server that answers nothing for this long (stalled, or the link dead) is unavailable:
the call fails and is retried as an outage, it does not hang (longer than any command
here, the cluster's blocking stream reads included)."""

DEFAULT_PREFIX = "weft:"

_NOT_FOUND, _LOCKED, _EXISTS, _STALE, _FENCED = -1, -2, -3, -4, -5

# Whether a lock's owner keeps others out: not when it is free or ours, and not when an
# earlier boot of this node took it (that process is gone). ARGV names token, node, boot.
_OWNERSHIP = """
local function held_by_other(owner, token, node, boot)
  if not owner or owner == token then return false end
  local n, b = string.match(owner, '^([%w_%-]+)/(%d+)/')
  if node ~= '' and n == node and tonumber(b) < tonumber(boot) then return false end
  return true
end
"""

# KEYS: hash, chunks, lock, index. ARGV: token, ttl_ms, id, created_us, header, meta, gen, listable
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return -3 end
redis.call('HSET', KEYS[1], 'header', ARGV[5], 'created_us', ARGV[4], 'meta', ARGV[6],
  'gen', ARGV[7], 'listable', ARGV[8], 'title', '', 'lines', 0, 'torn', -1)
redis.call('DEL', KEYS[2])
if ARGV[8] == '1' then redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3]) end
if ARGV[1] ~= '' then redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2]) end
return 1
"""

# The now of a lease check: the caller's (a test's lease clock) or the server's.
LUA_NOW = """
local function now_ms(given)
  if given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: hash, chunks, lock, lease. ARGV: token, ttl_ms, data, newlines, title, expected
# lines, node, boot, fencing token ('' when unfenced), now. A fenced write first checks
# the lease (its token still the lease's, not lapsed: else {-5}) and, holding it, takes
# the session's lock from whoever had it. Then it takes (or confirms) the lock — refusing,
# when it must take it, a session whose line count is not the expected one (-1: no
# expectation) — repairs a torn tail ('torn' is how many bytes of the last chunk are
# whole, -1 when all are), appends; returns {1, lines, header, owner taken over or ''},
# {-2, owner} when locked, {-4, lines} when stale.
_APPEND = (
    _OWNERSHIP
    + LUA_NOW
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local owner = redis.call('GET', KEYS[3])
if ARGV[9] ~= '' then
  local lease = redis.call('HMGET', KEYS[4], 'fence', 'expires')
  if lease[1] ~= ARGV[9] or tonumber(lease[2]) <= now_ms(ARGV[10]) then return {-5} end
  if owner and owner ~= ARGV[1] then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
    owner = ARGV[1]
  end
end
if held_by_other(owner, ARGV[1], ARGV[7], ARGV[8]) then return {-2, owner} end
local taken = ''
if owner and owner ~= ARGV[1] then
  taken = owner
  owner = false
end
if not owner then
  local lines = tonumber(redis.call('HGET', KEYS[1], 'lines'))
  if ARGV[6] ~= '-1' and lines ~= tonumber(ARGV[6]) then return {-4, lines} end
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
end
local keep = tonumber(redis.call('HGET', KEYS[1], 'torn'))
if keep >= 0 then
  local last = redis.call('LINDEX', KEYS[2], -1) or ''
  redis.call('LSET', KEYS[2], -1, string.sub(last, 1, keep))
  redis.call('HSET', KEYS[1], 'torn', -1)
end
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'lines', ARGV[4])
  if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'title', ARGV[5]) end
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'lines')), redis.call('HGET', KEYS[1], 'header'),
  taken}
"""
)

# KEYS: hash, chunks, lock, index. ARGV: token, id, node, boot.
_DELETE = (
    _OWNERSHIP
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local owner = redis.call('GET', KEYS[3])
if held_by_other(owner, ARGV[1], ARGV[3], ARGV[4]) then return -2 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[2])
return 1
"""
)

# KEYS: hash, lock. ARGV: token.
_RELEASE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""

# KEYS: the held locks. ARGV: token, ttl_ms. Returns 1/0 per lock: still ours.
_RENEW = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2]); out[i] = 1
  else out[i] = 0 end
end
return out
"""

# KEYS: hash, chunks. ARGV: data, newlines, torn.
_INJECT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'lines', ARGV[2])
redis.call('HSET', KEYS[1], 'torn', ARGV[3])
return 1
"""


def _translated(
    method: Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, T]]:
    """The method, with a driver error (the server down, out of memory) as the store's own."""

    @wraps(method)
    async def call(self: RedisStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc

    return call


class RedisStore:
    """A Storage, KeyIndex, Watcher, Flusher, Releaser, Leaser and Fencer over one Redis database."""

    def __init__(
        self,
        url: str,
        options: StoreOptions | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        lock_ttl: float = 30.0,
        poll_interval: float = 0.05,
        max_connections: int = 32,
        pause: Pause | None = None,
    ) -> None:
        """A store over the Redis database ``url``, every key under ``prefix``.

        ``pause`` is the test seam of :data:`~threads.store.base.Pause`.
        """
        # A blocking pool: a burst of concurrent calls waits for a connection
        # instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=30,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        self._shown_url = redact_url(url)
        self._redis: aioredis.Redis = aioredis.Redis.from_pool(pool)
        self._options = options or StoreOptions()
        self._prefix = prefix
        self._ttl_ms = int(lock_ttl * 1000)
        self._poll = poll_interval
        node = self._options.node
        self._node = (node.node_id, node.boot) if node else ("", 0)
        # The token names its owner, so a later boot of this node can tell its locks.
        self._token = f"{node.owner}/{secrets.token_hex(6)}" if node else secrets.token_hex(12)
        self._held: set[str] = set()
        self._known: dict[str, int] = {}  # complete lines of each session as this store left it
        self._fences: dict[str, Fence] = {}
        self._writes = InFlight("redis store", pause)
        self._renewer: asyncio.Task[None] | None = None
        self._leases = Leases()
        self._pulse = Pulse()
        self._create = self._redis.register_script(_CREATE)
        self._append = self._redis.register_script(_APPEND)
        self._delete = self._redis.register_script(_DELETE)
        self._release = self._redis.register_script(_RELEASE)
        self._renew = self._redis.register_script(_RENEW)
        self._inject = self._redis.register_script(_INJECT)
        self._closed = False

    # -- Storage

    async def ping(self) -> None:
        """Check the server answers; :class:`UnreachableError` when it does not."""
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from None

    def where(self, session: str) -> str:
        """Where the session is kept: the Redis URL (password redacted) and its hash key."""
        return f"{self._shown_url} key {self._hash(session)}"

    def _unavailable(self, exc: BaseException) -> UnavailableError:
        """A driver error as the store's: unreachable when the connection failed."""
        detail = redact_text(str(exc)) or type(exc).__name__
        if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
            return UnreachableError(self._shown_url, detail)
        return UnavailableError(self._shown_url, detail)

    @_translated
    async def create(self, header: Header, *, durable: bool = True) -> None:
        check_header(header)
        line = encode_header(header)[:-1]
        create = partial(self._create_raw, header.id, line, header, b"")
        await self._writes.run(header.id, "create:started", create)

    @_translated
    async def append(
        self, session: str, entries: Sequence[Entry], *, durable: bool = True
    ) -> list[bytes]:
        # The server's persistence decides: ``durable`` changes nothing.
        check_id(session)
        lines = encode_lines(entries)
        data = b"".join(lines)
        title = next(
            (e.title for e in reversed(entries) if isinstance(e, InfoEntry) and e.title), ""
        )
        await self._writes.run(
            session, "append:started", partial(self._append_now, session, data, title)
        )
        return lines

    @_translated
    async def load(self, session: str) -> Loaded:
        check_id(session)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(self._hash(session), "header")
            pipe.lrange(self._chunks(session), 0, -1)
            header, chunks = await pipe.execute()
        if header is None:
            raise NotFoundError(session)
        data = b"".join([header, b"\n", *chunks])
        return decode_session(session, data, salvage=self._options.salvage)

    @_translated
    async def list(self, query: Query | None = None) -> Page:
        query = query or Query()
        index = self._prefix + "index"
        if query.meta or query.title_search:
            return await self._list_filtered(query)
        total = int(await self._redis.zcard(index))
        ids: _Names = []
        if query.before is None:
            ids = _names(await self._redis.zrange(index, 0, query.page_size - 1, desc=True))
        else:
            before = created_us(query.before)
            if query.before_id:
                tied = _names(
                    await self._redis.zrange(index, before, before, desc=True, byscore=True)
                )
                ids = [t for t in tied if t < query.before_id][: query.page_size]
            if len(ids) < query.page_size:
                ids += _names(
                    await self._redis.zrange(
                        index,
                        f"({before}",
                        "-inf",
                        desc=True,
                        byscore=True,
                        offset=0,
                        num=query.page_size - len(ids),
                    )
                )
        headers = await self._headers(ids)
        return Page(sessions=[h for h in headers if h is not None], total=total)

    @_translated
    async def delete(self, session: str) -> None:
        check_id(session)
        await self._writes.run(session, "delete:started", partial(self._delete_now, session))

    async def close(self) -> None:
        """Release every lock this store holds and close the connection pool."""
        if self._closed:
            return
        self._closed = True
        await self._writes.drain()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        try:
            for session in list(self._held):
                await self._release(
                    keys=[self._hash(session), self._lock(session)], args=[self._token]
                )
        except (RedisError, OSError) as exc:
            log.warning(
                "the session store %s: %d locks not released (%s); they lapse within %g s",
                self._shown_url,
                len(self._held),
                self._unavailable(exc).detail,
                self._ttl_ms / 1000,
            )
        finally:
            self._held.clear()
            self._known.clear()
            self._fences.clear()
            self._leases.clear()
            await self._redis.aclose()

    # -- KeyIndex

    @_translated
    async def resolve(self, key: str) -> str | None:
        found = await self._redis.hget(self._prefix + "keys", key)
        return _text(found) if found is not None else None

    @_translated
    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        check_id(session_id)
        await self._redis.hset(self._prefix + "keys", key, session_id)

    @_translated
    async def unpoint(self, key: str) -> None:
        await self._redis.hdel(self._prefix + "keys", key)

    @_translated
    async def keys(self) -> dict[str, str]:
        found = await self._redis.hgetall(self._prefix + "keys")
        return {_text(k): _text(v) for k, v in found.items()}

    # -- capabilities

    @property
    def client(self) -> aioredis.Redis:
        """The connection pool (scale-out keeps its leases and streams in the same database)."""
        return self._redis

    @property
    def prefix(self) -> str:
        return self._prefix

    def fence(self, session: str, fence: Fence | None) -> None:
        check_id(session)
        if fence is None:
            self._fences.pop(session, None)
        else:
            self._fences[session] = fence

    @_translated
    async def flush(self, session: str) -> None:
        check_id(session)
        await self._must_exist(session)

    @_translated
    async def release(self, session: str) -> None:
        check_id(session)
        await self._writes.run(session, "release:started", partial(self._release_now, session))

    @_translated
    async def acquire(self, session: str, holder: object) -> tuple[int, datetime]:
        check_id(session)
        self._leases.check(session, holder)
        hold = partial(self._hold, session, b"", "", expect=False)
        lines, header = await self._writes.run(session, "acquire:started", hold)
        self._leases.check(session, holder)
        self._leases.take(session, holder)
        try:
            created = decode_header(header).created
        except (WireError, ValueError, NewerFormatError):
            created = ZERO_TIME
        return lines, created

    @_translated
    async def yield_lease(self, session: str, holder: object) -> None:
        check_id(session)
        if self._leases.may_yield(session, holder):
            await self.release(session)
        else:
            await self._must_exist(session)

    async def watch(self, session: str, after: str = "") -> AsyncIterator[Entry]:
        check_id(session)
        stream = tail(
            session,
            after,
            partial(self._read_from, session),
            self._pulse,
            salvage=self._options.salvage,
            poll_interval=self._poll,
        )
        try:
            async for entry in stream:
                yield entry
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc

    # -- test hooks

    @_translated
    async def inject(self, session: str, data: bytes) -> None:
        """Append raw bytes to a session, as a damaged disk or a crash leaves them."""
        check_id(session)
        await self._writes.run(session, "inject:started", partial(self._inject_now, session, data))

    @_translated
    async def plant(self, session: str, data: bytes) -> None:
        """Store raw bytes as a whole session, header line included."""
        check_id(session)
        first, _, rest = data.partition(b"\n")
        try:
            header: Header | None = decode_header(first)
        except (WireError, ValueError, NewerFormatError):
            header = None
        plant = partial(self._create_raw, session, first, header, rest, lock=False)
        await self._writes.run(session, "plant:started", plant)

    # -- writes, once started

    async def _append_now(self, session: str, data: bytes, title: str) -> None:
        await self._hold(session, data, title)
        self._pulse.fire()

    async def _delete_now(self, session: str) -> None:
        keys = [self._hash(session), self._chunks(session), self._lock(session), self._index]
        result = await self._delete(keys=keys, args=[self._token, session, *self._node])
        self._check(session, int(result))
        self._held.discard(session)
        self._known.pop(session, None)
        self._leases.drop(session)
        self._pulse.fire()

    async def _release_now(self, session: str) -> None:
        result = await self._release(
            keys=[self._hash(session), self._lock(session)], args=[self._token]
        )
        self._check(session, int(result))
        self._held.discard(session)
        self._known.pop(session, None)
        self._leases.drop(session)

    async def _inject_now(self, session: str, data: bytes) -> None:
        keep = complete_end(data)
        torn = keep if keep < len(data) else -1
        keys = [self._hash(session), self._chunks(session)]
        lines = data[:keep].count(b"\n")
        result = await self._inject(keys=keys, args=[data, lines, torn])
        self._check(session, int(result))
        if session in self._known:
            self._known[session] += lines
        self._pulse.fire()

    # -- internals

    @property
    def _index(self) -> str:
        return self._prefix + "index"

    def _hash(self, session: str) -> str:
        return f"{self._prefix}s:{session}"

    def _chunks(self, session: str) -> str:
        return f"{self._prefix}c:{session}"

    def _lock(self, session: str) -> str:
        return f"{self._prefix}lock:{session}"

    def _check(self, session: str, code: int) -> None:
        if code == _NOT_FOUND:
            raise NotFoundError(session)
        if code == _LOCKED:
            raise LockedError(session, "another store")
        if code == _EXISTS:
            raise ExistsError(session)

    async def _create_raw(
        self, session: str, line: bytes, header: Header | None, rest: bytes, *, lock: bool = True
    ) -> None:
        keys = [self._hash(session), self._chunks(session), self._lock(session), self._index]
        args: _Args = [
            self._token if lock else "",
            self._ttl_ms,
            session,
            created_us(header.created) if header else 0,
            line,
            orjson.dumps(dict(header.meta) if header else {}),
            secrets.randbits(62),
            int(header is not None),
        ]
        self._check(session, int(await self._create(keys=keys, args=args)))
        if lock:
            self._known[session] = 0
            self._mark_held(session)
        if rest:
            await self._inject_now(session, rest)
        self._pulse.fire()

    async def _hold(
        self, session: str, data: bytes, title: str, *, expect: bool = True
    ) -> tuple[int, bytes]:
        """Take (or confirm) the lock and append ``data``; the line count and the header.

        With ``expect``, a lock this store must take again is taken only if the
        session holds the lines this store knows of (:class:`StaleError`
        otherwise); ``acquire`` takes it whatever the count, and reports it.
        """
        lock = self._lock(session)
        fence = self._fences.get(session)
        keys = [self._hash(session), self._chunks(session), lock, fence.lease if fence else lock]
        expected = self._known.get(session, -1) if expect else -1
        args: _Args = [
            self._token,
            self._ttl_ms,
            data,
            data.count(b"\n"),
            title,
            expected,
            *self._node,
            *_fence_args(fence),
        ]
        result = await self._append(keys=keys, args=args)
        code = int(result[0])
        if code == _FENCED:
            assert fence is not None
            self._held.discard(session)
            raise FencedError(session, fence.lease.removeprefix(self._prefix), fence.token)
        if code == _LOCKED:
            raise LockedError(session, _holder(result[1]))
        if code == _STALE:
            raise StaleError(
                session,
                f"this store's lock lapsed and the session moved on: it holds {int(result[1])} "
                f"lines, this store left it at {expected}",
            )
        self._check(session, code)
        if result[3]:
            log.warning(
                "session %s: took over the lock %s left (an earlier run of this node, gone)",
                session,
                _holder(result[3]),
            )
        self._known[session] = int(result[1])
        self._mark_held(session)
        return int(result[1]), bytes(result[2])

    def _mark_held(self, session: str) -> None:
        self._held.add(session)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(
                self._renew_forever(), name="redis-store-lock-renewal"
            )

    async def _renew_forever(self) -> None:
        """Keep this store's locks alive: renew every held lock a few times per lifetime."""
        interval = self._ttl_ms / 3000
        while self._held:
            await asyncio.sleep(interval)
            held = sorted(self._held)
            if not held:
                break
            try:
                still = await self._renew(
                    keys=[self._lock(s) for s in held], args=[self._token, self._ttl_ms]
                )
            except (RedisError, OSError) as exc:
                log.warning(
                    "renewing %d session locks failed (%s); retrying",
                    len(held),
                    self._unavailable(exc).detail,
                )
                continue
            for session, ours in zip(held, still, strict=True):
                if not ours:
                    log.warning(
                        "session %s: this store's lock lapsed; the next write retakes it", session
                    )
                    self._held.discard(session)

    async def _headers(self, ids: _Names) -> _Headers:
        if not ids:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for session in ids:
                pipe.hget(self._hash(session), "header")
            lines = await pipe.execute()
        out: _Headers = []
        for line in lines:
            try:
                out.append(decode_header(line) if line is not None else None)
            except (WireError, ValueError, NewerFormatError):
                out.append(None)
        return out

    async def _list_filtered(self, query: Query) -> Page:
        ids = _names(await self._redis.zrange(self._index, 0, -1))
        async with self._redis.pipeline(transaction=False) as pipe:
            for session in ids:
                pipe.hmget(self._hash(session), ["header", "title"])
            found = await pipe.execute()
        rows: _Rows = []
        titles: dict[int, str] = {}
        for line, title in found:
            if line is None:
                continue
            try:
                header = decode_header(line)
            except (WireError, ValueError, NewerFormatError):
                continue
            titles[id(header)] = (title or b"").decode()
            rows.append(((created_us(header.created), header.id), header))
        return page_of(rows, query, lambda h: titles[id(h)])

    async def _must_exist(self, session: str) -> None:
        if not await self._redis.exists(self._hash(session)):
            raise NotFoundError(session)

    async def _read_from(self, session: str, position: int) -> tuple[int, bytes, int]:
        first = max((position >> 32) - 1, 0)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hmget(self._hash(session), ["gen", "header"])
            pipe.lrange(self._chunks(session), first, -1)
            (generation, header), chunks = await pipe.execute()
        if generation is None:
            raise NotFoundError(session)
        pieces = [(0, header + b"\n")] + [(first + 1 + i, c) for i, c in enumerate(chunks)]
        data, position = advance(pieces, position)
        return int(generation), data, position


def _fence_args(fence: Fence | None) -> _Args:
    if fence is None:
        return ["", ""]
    now = fence.clock()
    return [fence.token, "" if now is None else now]


def _holder(owner: Any) -> str:
    """Who a lock's owner token names, for a message: its node and boot, when it has them."""
    parsed = parse_owner(_text(owner)) if owner else None
    if parsed is None:
        return "another store"
    return f"node {parsed[0]} (boot {parsed[1]})"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _names(values: Any) -> _Names:
    return [_text(v) for v in values]

"""The cron job store on Redis, for gateways whose state lives in Redis.

Keys live under one prefix (``gateway:cron:`` by default, or the URL's
``cron_prefix`` query parameter). Each edit is one
Lua script, which Redis runs atomically: it bumps the ``version`` counter and
writes the one job it touches, so concurrent edits from several processes
never lose each other and a polling service sees every edit exactly once.

    {p}version   change counter            {p}jobs     hash id → job JSON
    {p}revs      zset id → revision         {p}sigs     hash id → schedule signature
    {p}removed   zset id → revision         {p}state    hash id → state JSON
    {p}runs:<id> list "seq JSON" (trimmed)  {p}runseq   ledger sequence
                 (a run's ``delivery`` is set in place once its turn ends)
    {p}requests  list of run-now requests   {p}beats    hash owner → heartbeat time
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError

from config.redaction import redact_url
from cron.base import Advance, Beat, Changes, Recording, RunRequest
from cron.errors import StoreError
from cron.models import Job, JobState, RunRecord

SOCKET_TIMEOUT = 30.0
"""No answer for this long: the call fails with an error, it does not hang (as the session
store's, :data:`threads.store.redis.SOCKET_TIMEOUT`)."""
DEFAULT_PREFIX = "gateway:cron:"
PREFIX_PARAM = "cron_prefix"

_BUMP = "local rev = redis.call('INCR', KEYS[1])\n"

_UPSERT = (
    _BUMP
    + """
local id, data, sig, next_fire = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local job = cjson.decode(data)
local old = redis.call('HGET', KEYS[2], id)
if old then job['created'] = cjson.decode(old)['created'] end
redis.call('HSET', KEYS[2], id, cjson.encode(job))
redis.call('ZADD', KEYS[3], rev, id)
local old_sig = redis.call('HGET', KEYS[4], id)
redis.call('HSET', KEYS[4], id, sig)
redis.call('ZREM', KEYS[5], id)
local nf = cjson.null
if next_fire ~= '' then nf = next_fire end
local raw = redis.call('HGET', KEYS[6], id)
if old_sig ~= sig or not raw then
  local state = {}
  if raw then state = cjson.decode(raw) end
  state['next_fire'] = nf
  state['schedule_rev'] = rev
  redis.call('HSET', KEYS[6], id, cjson.encode(state))
end
return {rev, job['created']}
"""
)

_SET_ENABLED = """
local id, enabled, at = ARGV[1], ARGV[2] == '1', ARGV[3]
local raw = redis.call('HGET', KEYS[2], id)
if not raw then return false end
local job = cjson.decode(raw)
if job['enabled'] == enabled then
  return {raw, redis.call('ZSCORE', KEYS[3], id)}
end
local rev = redis.call('INCR', KEYS[1])
job['enabled'] = enabled
job['updated'] = at
local data = cjson.encode(job)
redis.call('HSET', KEYS[2], id, data)
redis.call('ZADD', KEYS[3], rev, id)
return {data, tostring(rev)}
"""

_DISABLE_IF_UNCHANGED = """
local id, revision = ARGV[1], ARGV[2]
local current = redis.call('ZSCORE', KEYS[3], id)
if not current or tonumber(current) ~= tonumber(revision) then return false end
local job = cjson.decode(redis.call('HGET', KEYS[2], id))
job['enabled'] = false
local rev = redis.call('INCR', KEYS[1])
local data = cjson.encode(job)
redis.call('HSET', KEYS[2], id, data)
redis.call('ZADD', KEYS[3], rev, id)
return {data, tostring(rev)}
"""

_REMOVE = """
local id = ARGV[1]
if redis.call('HDEL', KEYS[2], id) == 0 then return 0 end
local rev = redis.call('INCR', KEYS[1])
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('ZADD', KEYS[5], rev, id)
redis.call('HDEL', KEYS[6], id)
return 1
"""

_CHANGES = """
local version = tonumber(redis.call('GET', KEYS[1]) or '0')
local since = tonumber(ARGV[1])
if version <= since then return {version, {}, {}, {}} end
local set = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ARGV[1], '+inf', 'WITHSCORES')
local jobs = {}
for i = 1, #set, 2 do
  local data = redis.call('HGET', KEYS[2], set[i])
  if data then
    table.insert(jobs, set[i + 1])
    table.insert(jobs, data)
  end
end
local removed = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. ARGV[1], '+inf')
local requests = redis.call('LRANGE', KEYS[7], 0, -1)
redis.call('DEL', KEYS[7])
return {version, jobs, removed, requests}
"""

_RECORD = """
local id, n = ARGV[1], tonumber(ARGV[2])
local seqs = {}
for i = 1, n do
  local seq = redis.call('INCR', KEYS[2])
  redis.call('RPUSH', KEYS[3], seq .. ' ' .. ARGV[2 + i])
  table.insert(seqs, seq)
end
local base = 2 + n
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[base + 1]), -1)
local raw = redis.call('HGET', KEYS[1], id)
if raw then
  local state = cjson.decode(raw)
  if n > 0 then
    state['last_status'] = ARGV[base + 2]
    state['last_scheduled'] = ARGV[base + 3]
    if ARGV[base + 4] ~= '' then state['last_fired'] = ARGV[base + 4] end
  end
  if ARGV[base + 5] == '1' and tonumber(state['schedule_rev']) == tonumber(ARGV[base + 7]) then
    if ARGV[base + 6] == '' then state['next_fire'] = cjson.null
    else state['next_fire'] = ARGV[base + 6] end
  end
  redis.call('HSET', KEYS[1], id, cjson.encode(state))
end
return seqs
"""

# A fire's delivery lands when its turn ends, shortly after its record: the record is
# among the newest few, so the list is searched from its end (at most ARGV[3] lines).
_SET_DELIVERY = """
local prefix = ARGV[1] .. ' '
local last = redis.call('LLEN', KEYS[1]) - 1
local stop = math.max(0, last - tonumber(ARGV[3]))
for i = last, stop, -1 do
  local line = redis.call('LINDEX', KEYS[1], i)
  if line and string.sub(line, 1, #prefix) == prefix then
    local run = cjson.decode(string.sub(line, #prefix + 1))
    run['delivery'] = ARGV[2]
    redis.call('LSET', KEYS[1], i, prefix .. cjson.encode(run))
    return 1
  end
end
return 0
"""
_DELIVERY_SCAN = 1000


class RedisJobStore:
    """Jobs, schedule state, run ledger, run requests and heartbeats in Redis."""

    def __init__(
        self, client: aioredis.Redis, url: str, *, prefix: str = DEFAULT_PREFIX, keep_runs: int
    ) -> None:
        self.url = redact_url(url)  # for messages and logs; never used to connect
        self._r = client
        self._p = prefix
        self._keep_runs = keep_runs
        self._upsert = client.register_script(_UPSERT)
        self._set_enabled = client.register_script(_SET_ENABLED)
        self._disable = client.register_script(_DISABLE_IF_UNCHANGED)
        self._remove = client.register_script(_REMOVE)
        self._changes = client.register_script(_CHANGES)
        self._record = client.register_script(_RECORD)
        self._set_delivery = client.register_script(_SET_DELIVERY)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        prefix: str | None = None,
        keep_runs: int = 1000,
        max_connections: int = 16,
    ) -> RedisJobStore:
        """Connect to the Redis at ``url``; keys under ``prefix``.

        Without ``prefix``, the URL's ``cron_prefix`` query parameter names it
        (``redis://host:6379/0?cron_prefix=staging:cron:``), else ``gateway:cron:``.
        Two gateways sharing one Redis database keep their jobs apart this way.
        """
        address, named = split_prefix(url)
        if prefix is None:
            prefix = named if named is not None else DEFAULT_PREFIX
        if not prefix:
            raise StoreError(
                url, f"has an empty {PREFIX_PARAM}: name a key prefix such as 'a:cron:'"
            )
        # A blocking pool: a burst of fires waits for a free connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            address,
            max_connections=max_connections,
            timeout=30,
            decode_responses=True,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        client = aioredis.Redis.from_pool(pool)
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            await client.aclose()
            raise StoreError(url, f"cannot reach Redis: {exc}") from exc
        return cls(client, url, prefix=prefix, keep_runs=keep_runs)

    async def close(self) -> None:
        await self._r.aclose()

    def _keys(self, *names: str) -> list[str]:
        return [self._p + name for name in names]

    async def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except (RedisError, OSError) as exc:
            raise StoreError(self.url, f"Redis refused a cron write: {exc}") from exc

    async def version(self) -> int:
        return int(await self._r.get(self._p + "version") or 0)

    async def upsert(self, job: Job, *, next_fire: datetime | None) -> Job:
        keys = self._keys("version", "jobs", "revs", "sigs", "removed", "state")
        data = job.model_dump_json(exclude={"revision"})
        args = [job.id, data, job.schedule_signature, next_fire.isoformat() if next_fire else ""]
        revision, created = await self._run(self._upsert, keys, args)
        return job.model_copy(
            update={"revision": int(revision), "created": datetime.fromisoformat(created)}
        )

    async def set_enabled(self, job_id: str, enabled: bool, at: datetime) -> Job | None:
        keys = self._keys("version", "jobs", "revs")
        args = [job_id, "1" if enabled else "0", at.isoformat()]
        result = await self._run(self._set_enabled, keys, args)
        if not result:
            return None
        return self._job(result[0], int(float(result[1])))

    async def disable_if_unchanged(self, job_id: str, revision: int) -> Job | None:
        keys = self._keys("version", "jobs", "revs")
        result = await self._run(self._disable, keys, [job_id, revision])
        return self._job(result[0], int(float(result[1]))) if result else None

    async def remove(self, job_id: str) -> bool:
        keys = self._keys("version", "jobs", "revs", "sigs", "removed", "state")
        return bool(await self._run(self._remove, keys, [job_id]))

    async def get(self, job_id: str) -> Job | None:
        data = await self._r.hget(self._p + "jobs", job_id)
        if data is None:
            return None
        revision = await self._r.zscore(self._p + "revs", job_id)
        return self._job(_text(data), int(revision or 0))

    async def jobs(self) -> list[Job]:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hgetall(self._p + "jobs")
            pipe.zrange(self._p + "revs", 0, -1, withscores=True)
            data, revs = await pipe.execute()
        revisions = {job_id: int(score) for job_id, score in revs}
        return [self._job(data[i], revisions.get(i, 0)) for i in sorted(data)]

    async def state(self, job_id: str) -> JobState | None:
        raw = await self._r.hget(self._p + "state", job_id)
        return _state(job_id, _text(raw)) if raw is not None else None

    async def states(self) -> dict[str, JobState]:
        raw = await self._r.hgetall(self._p + "state")
        return {_text(k): _state(_text(k), _text(v)) for k, v in raw.items()}

    async def changes(self, since: int) -> Changes:
        keys = self._keys("version", "jobs", "revs", "sigs", "removed", "state", "requests")
        version, jobs, removed, requests = await self._run(self._changes, keys, [since])
        return Changes(
            version=int(version),
            jobs=tuple(self._job(jobs[i + 1], int(float(jobs[i]))) for i in range(0, len(jobs), 2)),
            removed=tuple(removed),
            requests=tuple(_request(raw) for raw in requests),
        )

    async def record(
        self, job_id: str, runs: Sequence[RunRecord], *, advance: Advance | None
    ) -> list[RunRecord]:
        [numbered] = await self.record_many(
            [Recording(job_id=job_id, runs=tuple(runs), advance=advance)]
        )
        return numbered

    async def record_many(self, batch: Sequence[Recording]) -> list[list[RunRecord]]:
        """One round trip: each job's script, pipelined (each script is atomic on its own)."""
        try:
            async with self._r.pipeline(transaction=False) as pipe:
                for item in batch:
                    keys, args = self._record_call(item)
                    await self._record(keys=keys, args=args, client=pipe)
                results = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise StoreError(self.url, f"Redis refused a cron ledger write: {exc}") from exc
        return [
            [
                run.model_copy(update={"seq": int(seq)})
                for run, seq in zip(item.runs, seqs, strict=True)
            ]
            for item, seqs in zip(batch, results, strict=True)
        ]

    def _record_call(self, item: Recording) -> tuple[list[str], list[Any]]:
        runs, advance = item.runs, item.advance
        keys = [self._p + "state", self._p + "runseq", f"{self._p}runs:{item.job_id}"]
        fired = [run.fired for run in runs if run.fired is not None]
        last = runs[-1] if runs else None
        args: list[Any] = [item.job_id, len(runs)]
        args += [run.model_dump_json(exclude={"seq"}) for run in runs]
        args += [
            self._keep_runs,
            last.status if last else "",
            last.scheduled.isoformat() if last else "",
            fired[-1].isoformat() if fired else "",
            "1" if advance is not None else "0",
            advance.next_fire.isoformat() if advance and advance.next_fire else "",
            advance.schedule_rev if advance else 0,
        ]
        return keys, args

    async def runs(self, job_id: str, limit: int = 20) -> list[RunRecord]:
        raw = await self._r.lrange(f"{self._p}runs:{job_id}", -limit, -1)
        return [_run(_text(line)) for line in raw]

    async def set_delivery(self, job_id: str, seq: int, delivery: str) -> bool:
        try:
            found = await self._set_delivery(
                keys=[f"{self._p}runs:{job_id}"], args=[seq, delivery, _DELIVERY_SCAN]
            )
        except (RedisError, OSError) as exc:
            raise StoreError(self.url, f"Redis refused a cron ledger write: {exc}") from exc
        return bool(found)

    async def request_run(self, job_id: str, requested: datetime) -> None:
        payload = orjson.dumps({"job_id": job_id, "requested": requested.isoformat()}).decode()
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.rpush(self._p + "requests", payload)
            pipe.incr(self._p + "version")
            await pipe.execute()

    async def beat(self, owner: str, at: datetime) -> None:
        await self._r.hset(self._p + "beats", owner, at.isoformat())

    async def last_beat(self) -> Beat | None:
        beats = await self._r.hgetall(self._p + "beats")
        if not beats:
            return None
        owner, at = max(
            ((_text(k), datetime.fromisoformat(_text(v))) for k, v in beats.items()),
            key=lambda item: item[1],
        )
        return Beat(owner=owner, at=at)

    async def clear_beat(self, owner: str) -> None:
        await self._r.hdel(self._p + "beats", owner)

    def _job(self, data: str, revision: int) -> Job:
        try:
            fields = orjson.loads(data)
            fields["revision"] = revision
            return Job.model_validate(fields)
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise StoreError(self.url, f"stored cron job cannot be read: {exc}") from exc


def split_prefix(url: str) -> tuple[str, str | None]:
    """``url`` without its ``cron_prefix`` query parameter, and that parameter (None: absent)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for name, value in query if name == PREFIX_PARAM]
    if not named:
        return url, None
    rest = urlencode([(name, value) for name, value in query if name != PREFIX_PARAM])
    return urlunsplit(parts._replace(query=rest)), named[-1]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _state(job_id: str, raw: str) -> JobState:
    fields = orjson.loads(raw)
    return JobState(
        job_id=job_id,
        next_fire=_when(fields.get("next_fire")),
        schedule_rev=int(fields.get("schedule_rev") or 0),
        last_status=fields.get("last_status") or None,
        last_scheduled=_when(fields.get("last_scheduled")),
        last_fired=_when(fields.get("last_fired")),
    )


def _when(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _request(raw: str) -> RunRequest:
    fields = orjson.loads(raw)
    return RunRequest(
        job_id=fields["job_id"], requested=datetime.fromisoformat(fields["requested"])
    )


def _run(line: str) -> RunRecord:
    seq, _, data = line.partition(" ")
    fields = orjson.loads(data)
    fields["seq"] = int(seq)
    return RunRecord.model_validate(fields)

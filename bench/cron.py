"""Cron benchmark: the lateness of 200 fires due at once, and 10 000 jobs loaded.

    .venv/bin/python bench/cron.py [--mode manager|fake] [--jobs 10000] [--burst 200]
                                   [--store sqlite|redis] [--repeats 2] [--open-ahead 1.0]

Both modes first store ``--jobs`` jobs (cron expressions, intervals, far
``at`` times) in a SQLite state store, or in the Redis at 127.0.0.1:6379 db 5
under a key prefix of the run's own (its keys are deleted at the end; nothing
else in the database is touched), and fire bursts of ``--burst`` jobs due at
the same instant with those jobs loaded. Lateness is read from the run ledger:
``fired - scheduled``, where ``fired`` is when the session accepted the wake
(durable in it), and ``handed_over - scheduled``, when cron gave the wake to
the thread manager. Target (DESIGN §10): p99 < 50 ms to acceptance.

``--mode manager`` (the default) fires through a real thread manager
(``threads.manager.ThreadManager`` with the agent loop and the offline echo
model) on a jsonl session store with fsync on every append, in three bursts:
direct-wake check-ins into existing idle sessions whose threads are loaded,
the same into sessions whose threads were evicted (loaded from disk by the
wake), and independent jobs, whose first fire creates their ``cron:<id>``
session. Each burst runs twice, interleaved: through the manager's batch
wake (``wake_many``, as the service hands a burst over: the plain figure
names), and with each fire's wake handed over alone, as before the batch
wake existed (``single_…``: the turns the first wakes start run while the
rest of the burst is still being accepted). The batch way's service opens
the burst's sessions ``--open-ahead`` seconds before it is due, as the
gateway's does (decision perf-11: evicted sessions loaded, new ones
created; ``--open-ahead 0`` measures them opened by the burst itself); the
single way's waker cannot open ahead, so its sessions are opened by their
wakes. ``manager_alone`` is the
manager's own floor, 200 wakes with no cron in between, the same two ways.
Each figure is the median over ``--repeats`` rounds of all of these, the two
ways taking turns to go first (the machine's load drifts).

``--mode fake`` is the earlier figure set: start-up (the seconds ``start()``
takes to load the jobs, the memory it holds after), then bursts of ``at`` jobs
and ``* * * * *`` cron jobs through a zero-latency fake waker — cron's own
cost, with no session behind it.

As a long-running gateway should, the bench freezes the start-up heap
(``gc.collect(); gc.freeze()``) once the service is up, and the heap before
the manager's floor, so a full garbage collection does not land in a burst
or in the floor (unfrozen, a full collection of the whole heap, some
114 000 objects, landed in two of a run's three batch floors: 90–150 ms);
``full_gc_pause_unfrozen_ms`` is the pause such a collection costs with the
jobs loaded and nothing frozen.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import validate
from cron.base import HeldWake, JobStore, Waker
from cron.manager_waker import ManagerWaker
from cron.models import Job, RunRecord, build_job
from cron.service import CronService, first_fire
from cron.store import connect_store
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolRegistry
from threads.dispatch import dispatch_tool
from threads.keys import SessionKey
from threads.manager import ThreadManager
from threads.store import open_store
from threads.store.base import StoreOptions
from threads.turns import Turn
from threads.wake import Accepted, SystemCaller, Wake, WakeSource

REDIS_URL = "redis://127.0.0.1:6379/5"
DAYS = ("*", "1-5", "0,6", "1", "*")
LEAD_SECONDS = 5  # the bursts are set first: 200 upserts on a loaded machine take seconds
FSYNC: Any = "every_append"


class InstantWaker:
    """A zero-latency thread manager: accepts every wake at once."""

    def __init__(self) -> None:
        self.count = 0

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        self.count += 1
        return Accepted(key=key, session_id="s_bench", run_id=f"s_bench-t{self.count}")

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, None]:
        return await self.wake(key, wake), None

    async def session_exists(self, key: SessionKey) -> bool:
        return True

    async def held_wakes(self, key: SessionKey, meta: Any) -> list[Any]:
        return []


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# --- the state store and its jobs ---------------------------------------------------------


@asynccontextmanager
async def state_store(kind: str, tmp: Path) -> AsyncIterator[Callable[[], Any]]:
    """Yields an opener of the bench's cron store; Redis keys under a prefix of this run's own."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'gateway.db'}"
        yield lambda: connect_store(url)
        return
    import redis.asyncio as aioredis

    prefix = f"bench:cron:{secrets.token_hex(4)}:"
    try:
        yield lambda: connect_store(REDIS_URL, redis_prefix=prefix)
    finally:
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


async def populate(store: JobStore, count: int) -> float:
    now = datetime.now(UTC)
    started = time.perf_counter()
    for i in range(count):
        kind = ("cron", "every", "at")[i % 3]
        fields: dict[str, Any] = {"id": f"job-{i:05d}", "kind": kind, "task": f"task {i}"}
        if kind == "cron":
            # 1 440 minutes of the day x 5 day sets: few jobs share an expression.
            minute, hour = i % 60, (i // 60) % 24
            fields.update(expr=f"{minute} {hour} * * {DAYS[i % 5]}", timezone="Europe/Berlin")
        elif kind == "every":
            fields["every"] = f"{15 + i % 60}m"
        else:
            fields["at"] = now + timedelta(days=30, seconds=i)
        if i % 4 == 0:
            fields.update(wake_session=f"telegram:{i}", direct_wake=True)
        job = build_job(created=now, updated=now, **fields)
        await store.upsert(job, next_fire=first_fire(job, now))
    return time.perf_counter() - started


# --- a burst ------------------------------------------------------------------------------


async def burst(service: CronService, jobs: list[Job], due: datetime) -> dict[str, float]:
    """Set ``jobs`` (all due at ``due``) and wait for every one's ledger record."""
    ids = {job.id for job in jobs}
    records: list[RunRecord] = []
    done = asyncio.Event()

    def collect(record: RunRecord) -> None:
        if record.job_id in ids:
            records.append(record)
            if len(records) == len(ids):
                done.set()

    service.add_listener(collect)
    for job in jobs:
        await service.upsert(job)
    wait = (due - datetime.now(UTC)).total_seconds() + 30
    await asyncio.wait_for(done.wait(), timeout=wait)
    last_recorded = datetime.now(UTC)
    fired = [r for r in records if r.status == "fired"]
    if len(fired) != len(ids):
        raise RuntimeError(f"only {len(fired)} of {len(ids)} fired: {records[:3]}")
    accepted = [r.lateness_ms for r in fired]
    handed = [(r.handed_over - r.scheduled).total_seconds() * 1000 for r in fired if r.handed_over]
    return {
        "lateness_p50_ms": statistics.median(accepted),
        "lateness_p99_ms": percentile(accepted, 99),
        "lateness_max_ms": max(accepted),
        "handed_over_p50_ms": statistics.median(handed),
        "handed_over_p99_ms": percentile(handed, 99),
        "all_recorded_ms": (last_recorded - due).total_seconds() * 1000,
    }


def due_soon() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now, now.replace(microsecond=0) + timedelta(seconds=LEAD_SECONDS)


def at_jobs(prefix: str, count: int, **fields: Any) -> tuple[list[Job], datetime]:
    now, due = due_soon()
    return [
        build_job(
            id=f"{prefix}-{i}",
            kind="at",
            at=due,
            task=f"{prefix} {i}",
            created=now,
            updated=now,
            **{k: v(i) if callable(v) else v for k, v in fields.items()},
        )
        for i in range(count)
    ], due


@contextmanager
def frozen() -> Iterator[None]:
    """The heap as it is now collected and frozen, unfrozen after (see the module docstring)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@asynccontextmanager
async def running(store: JobStore, waker: Waker, **options: Any) -> AsyncIterator[CronService]:
    """A started service, its start-up heap frozen for the bursts (see the module docstring)."""
    service = CronService(store, waker, **options)
    await service.start()
    with frozen():
        try:
            yield service
        finally:
            await service.stop()


def rounded(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{name}": round(value, 2) for name, value in figures.items()}


# --- mode: a real thread manager ----------------------------------------------------------


class Sessions:
    """A thread manager with the echo model over a jsonl store with fsync on every append."""

    def __init__(self, root: Path) -> None:
        url = f"jsonl://{root / 'sessions'}"
        config = validate({"data_dir": str(root), "store": {"url": url}}, "bench")
        self.store = open_store(url, StoreOptions(fsync=FSYNC))
        loop = AgentLoop(
            config=config, models=Models(config.models), tools=ToolRegistry([dispatch_tool])
        )
        self.manager = ThreadManager(store=self.store, agent=loop, config=config)
        loop.services = self.manager

    async def __aenter__(self) -> Sessions:
        await self.manager.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.manager.close()
        await self.store.close()

    async def create(self, keys: list[str]) -> None:
        """Each key's session, by one first-contact wake; then every thread idle."""
        for key in keys:
            await self.manager.wake(
                key, Wake(source=WakeSource.API, body="hello", caller=SystemCaller(name="bench"))
            )
        await self.idle()

    async def idle(self) -> None:
        for thread in self.manager.threads():
            await thread.session.wait_idle()

    async def alone(self, keys: list[str], *, batch: bool) -> dict[str, float]:
        """The manager's own floor: a cron wake for every key, handed over all at once.

        Milliseconds from the hand-over to each acceptance, with no cron in
        between: one ``wake_many``, or a ``wake`` per key side by side.
        """
        started = time.perf_counter()
        accepted: list[float] = []

        def floor() -> Wake:
            return Wake(source=WakeSource.CRON, body="floor", caller=SystemCaller(name="cron"))

        async def one(key: str) -> None:
            await self.manager.wake(key, floor())
            accepted.append((time.perf_counter() - started) * 1000)

        if batch:
            results = await self.manager.wake_many([(key, floor()) for key in keys])
            done = (time.perf_counter() - started) * 1000
            accepted = [done for result in results if result.error is None]
        else:
            await asyncio.gather(*(one(key) for key in keys))
        await self.idle()
        return {
            "accepted_p50_ms": statistics.median(accepted),
            "accepted_p99_ms": percentile(accepted, 99),
        }


class OneByOne:
    """The thread manager at cron's port without its batch wake: each fire's wake alone."""

    def __init__(self, waker: ManagerWaker) -> None:
        self._waker = waker

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        return await self._waker.wake(key, wake)

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, Turn | None]:
        return await self._waker.wake_turn(key, wake)

    async def session_exists(self, key: SessionKey) -> bool:
        return await self._waker.session_exists(key)

    async def held_wakes(self, key: SessionKey, meta: Mapping[str, str]) -> list[HeldWake]:
        return await self._waker.held_wakes(key, meta)


async def manager_mode(
    opener: Callable[[], Any], tmp: Path, count: int, repeats: int, open_ahead: float
) -> dict[str, Any]:
    ways = ("single", "batch")
    taken: dict[str, list[dict[str, float]]] = {}
    async with Sessions(tmp) as sessions:
        live = {way: [f"telegram:live-{way}-{i}" for i in range(count)] for way in ways}
        cold = {way: [f"telegram:cold-{way}-{i}" for i in range(count)] for way in ways}
        await sessions.create([key for way in ways for key in live[way] + cold[way]])
        batched = ManagerWaker(sessions.manager)
        wakers: dict[str, Waker] = {"single": OneByOne(batched), "batch": batched}
        store = await opener()

        async def fire(way: str, name: str, **fields: Any) -> None:
            async with running(
                store,
                wakers[way],
                session_sink=sessions.manager.session_sink,
                open_ahead_seconds=open_ahead,
            ) as service:
                # Due a few seconds after the start (which loads every stored job).
                jobs, due = at_jobs(f"{way}-{name}-{rep}", count, **fields)
                figures = await burst(service, jobs, due)
            taken.setdefault(named(way, name), []).append(figures)
            await sessions.idle()

        try:
            for rep in range(repeats):
                await sessions.manager.evict_idle(0)
                for key in live["single"] + live["batch"]:
                    await sessions.manager.open_thread(key)
                order = ways if rep % 2 == 0 else ways[::-1]  # neither way always goes first
                for name, keys in (("live_direct_wake", live), ("evicted_direct_wake", cold)):
                    for way in order:
                        target = keys[way]
                        await fire(way, name, wake_session=target.__getitem__, direct_wake=True)
                for way in order:
                    await fire(way, "new_session")
                for way in order:
                    with frozen():  # as the bursts run: no full collection walks the sessions
                        floor = await sessions.alone(live[way], batch=way == "batch")
                    taken.setdefault(named(way, "manager_alone"), []).append(floor)
        finally:
            await store.close()
    figures: dict[str, Any] = {"repeats": repeats, "open_ahead_seconds": open_ahead}
    for prefix, runs in taken.items():
        medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        figures |= rounded(prefix, medians)
    return figures


def named(way: str, burst: str) -> str:
    """The figures' prefix: the batch wake's keep the plain names, the single wakes' say so."""
    return burst if way == "batch" else f"single_{burst}"


# --- mode: the fake waker (start-up, and cron's own cost) --------------------------------


async def measure_startup(opener: Callable[[], Any]) -> dict[str, float]:
    gc.collect()
    store = await opener()
    before = rss_bytes()
    service = CronService(store, InstantWaker())
    started = time.perf_counter()
    await service.start()
    startup = time.perf_counter() - started
    gc.collect()
    grown = rss_bytes() - before
    await service.stop()
    await store.close()

    gc.collect()
    store = await opener()
    tracemalloc.start()
    service = CronService(store, InstantWaker())
    await service.start()
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    await service.stop()
    await store.close()
    return {"startup_seconds": startup, "rss_growth_bytes": grown, "traced_bytes": traced}


async def fake_mode(opener: Callable[[], Any], jobs_loaded: int, count: int) -> dict[str, Any]:
    startup = await measure_startup(opener)
    print(f"start-up {startup['startup_seconds']:.2f} s", file=sys.stderr)
    store = await opener()
    gc.collect()
    started = time.perf_counter()
    gc.collect()
    full_gc = time.perf_counter() - started
    try:
        async with running(store, InstantWaker()) as service:
            jobs, due = at_jobs("burst", count)
            at = await burst(service, jobs, due)

            now = datetime.now(UTC)
            minute = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            if (minute - now).total_seconds() < 5:
                minute += timedelta(minutes=1)
            cron_jobs = [
                build_job(
                    id=f"minutely-{i}",
                    kind="cron",
                    expr="* * * * *",
                    task="tick",
                    created=now,
                    updated=now,
                )
                for i in range(count)
            ]
            cron = await burst(service, cron_jobs, minute)
    finally:
        await store.close()
    return {
        "startup_seconds": round(startup["startup_seconds"], 3),
        "startup_rss_growth_mib": round(startup["rss_growth_bytes"] / 2**20, 1),
        "startup_traced_mib": round(startup["traced_bytes"] / 2**20, 1),
        "traced_bytes_per_job": round(startup["traced_bytes"] / jobs_loaded),
        **rounded("at_burst", at),
        **rounded("cron_burst", cron),
        "full_gc_pause_unfrozen_ms": round(full_gc * 1000, 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cron-bench-") as name:
        tmp = Path(name)
        async with state_store(args.store, tmp) as opener:
            store = await opener()
            populate_s = await populate(store, args.jobs)
            await store.close()
            print(f"stored {args.jobs} jobs in {populate_s:.1f} s", file=sys.stderr)
            if args.mode == "manager":
                figures = await manager_mode(opener, tmp, args.burst, args.repeats, args.open_ahead)
                bursts: tuple[str, ...] = BURSTS
            else:
                figures = await fake_mode(opener, args.jobs, args.burst)
                bursts = ("at_burst", "cron_burst")
    p99 = max(figures[f"{b}_lateness_p99_ms"] for b in bursts)
    if args.mode == "manager":
        single = max(figures[f"single_{b}_lateness_p99_ms"] for b in bursts)
        figures["single_worst_lateness_p99_ms"] = single
    return {
        "mode": args.mode,
        "store": args.store,
        "python": platform.python_version(),
        "jobs_loaded": args.jobs,
        "store_populate_seconds": round(populate_s, 3),
        "burst_jobs": args.burst,
        **figures,
        "worst_lateness_p99_ms": p99,
        "target_p99_ms": 50,
        "meets_target": p99 < 50,
    }


BURSTS = ("live_direct_wake", "evicted_direct_wake", "new_session")

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("manager", "fake"), default="manager")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--open-ahead", type=float, default=1.0)
    figures = asyncio.run(main(parser.parse_args()))
    print(json.dumps(figures))

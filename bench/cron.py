"""Cron benchmark: 10 000 jobs loaded, and the lateness of 200 fires due at once.

    .venv/bin/python bench/cron.py [--jobs 10000] [--burst 200] [--store sqlite|redis]

1. Start-up: a SQLite state store (or the Redis at 127.0.0.1:6379 db 5, which
   is flushed) holding ``--jobs`` jobs (cron expressions, intervals, far ``at``
   times) is loaded by a fresh service: the seconds ``start()`` takes, and
   the memory it holds after (RSS growth, and Python allocations traced in a
   second start).
2. Fire lateness: with those jobs loaded, ``--burst`` ``at`` jobs are set due
   at the same instant, and ``--burst`` cron jobs (``* * * * *``) fire at the
   next minute; lateness is when the wake was handed over minus when it was
   due, from the run ledger. The waker is a zero-latency fake. Target: p99 < 50 ms.
   As a long-running gateway should, the bench freezes the start-up heap
   (``gc.collect(); gc.freeze()``) once the service is up, so a full garbage
   collection does not land in a burst; ``full_gc_pause_unfrozen_ms`` is the
   pause such a collection costs with the jobs loaded and nothing frozen.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cron.base import JobStore
from cron.models import RunRecord, build_job
from cron.service import CronService, first_fire
from cron.store import connect_store
from threads.keys import SessionKey
from threads.wake import Accepted, Wake

REDIS_URL = "redis://127.0.0.1:6379/5"
DAYS = ("*", "1-5", "0,6", "1", "*")


class InstantWaker:
    """A zero-latency thread manager: accepts every wake at once."""

    def __init__(self) -> None:
        self.count = 0

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        self.count += 1
        return Accepted(key=key, session_id="s_bench", run_id=f"s_bench-t{self.count}")

    async def session_exists(self, key: SessionKey) -> bool:
        return True


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


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


async def measure_startup(url: str) -> dict[str, float]:
    gc.collect()
    store = await connect_store(url)
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
    store = await connect_store(url)
    tracemalloc.start()
    service = CronService(store, InstantWaker())
    await service.start()
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    await service.stop()
    await store.close()
    return {"startup_seconds": startup, "rss_growth_bytes": grown, "traced_bytes": traced}


async def burst(service: CronService, jobs: list[Any], due: datetime) -> dict[str, float]:
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
    late = [r.lateness_ms for r in records if r.status == "fired"]
    if len(late) != len(ids):
        raise RuntimeError(f"only {len(late)} of {len(ids)} fired: {records[:3]}")
    return {
        "p50": statistics.median(late),
        "p99": percentile(late, 99),
        "max": max(late),
        "all_recorded_ms": (last_recorded - due).total_seconds() * 1000,
    }


async def measure_fires(url: str, count: int) -> dict[str, float]:
    store = await connect_store(url)
    service = CronService(store, InstantWaker())
    await service.start()
    gc.collect()
    started = time.perf_counter()
    gc.collect()
    full_gc = time.perf_counter() - started
    gc.freeze()
    try:
        now = datetime.now(UTC)
        due = now.replace(microsecond=0) + timedelta(seconds=3)
        at_jobs = [
            build_job(id=f"burst-{i}", kind="at", at=due, task="burst", created=now, updated=now)
            for i in range(count)
        ]
        at = await burst(service, at_jobs, due)

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
        await service.stop()
        await store.close()
        gc.unfreeze()
    figures = {f"at_{k}": v for k, v in at.items()} | {f"cron_{k}": v for k, v in cron.items()}
    return figures | {"full_gc_ms": full_gc * 1000}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cron-bench-") as tmp:
        if args.store == "redis":
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(REDIS_URL)
            await client.flushdb()
            await client.aclose()
            url = REDIS_URL
        else:
            url = f"sqlite:///{Path(tmp) / 'gateway.db'}"
        store = await connect_store(url)
        populate_s = await populate(store, args.jobs)
        await store.close()
        print(f"stored {args.jobs} jobs in {populate_s:.1f} s", file=sys.stderr)
        startup = await measure_startup(url)
        print(f"start-up {startup['startup_seconds']:.2f} s", file=sys.stderr)
        fires = await measure_fires(url, args.burst)
    return {
        "store": args.store,
        "python": platform.python_version(),
        "jobs_loaded": args.jobs,
        "store_populate_seconds": round(populate_s, 3),
        "startup_seconds": round(startup["startup_seconds"], 3),
        "startup_rss_growth_mib": round(startup["rss_growth_bytes"] / 2**20, 1),
        "startup_traced_mib": round(startup["traced_bytes"] / 2**20, 1),
        "traced_bytes_per_job": round(startup["traced_bytes"] / args.jobs),
        "burst_jobs": args.burst,
        "at_burst_lateness_p50_ms": round(fires["at_p50"], 2),
        "at_burst_lateness_p99_ms": round(fires["at_p99"], 2),
        "at_burst_lateness_max_ms": round(fires["at_max"], 2),
        "at_burst_all_recorded_ms": round(fires["at_all_recorded_ms"], 1),
        "cron_burst_lateness_p50_ms": round(fires["cron_p50"], 2),
        "cron_burst_lateness_p99_ms": round(fires["cron_p99"], 2),
        "cron_burst_lateness_max_ms": round(fires["cron_max"], 2),
        "cron_burst_all_recorded_ms": round(fires["cron_all_recorded_ms"], 1),
        "full_gc_pause_unfrozen_ms": round(fires["full_gc_ms"], 1),
        "target_p99_ms": 50,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    figures = asyncio.run(main(parser.parse_args()))
    print(json.dumps(figures))

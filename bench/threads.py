"""Wakes per second through the thread manager, wake-to-reply latency, and memory per thread.

The model is the zero-latency scripted model (its default answers each wake
with one ``dispatch`` to the caller), so what is measured is the runtime: the
manager, thread, session, agent loop and store. The store is the embedded
default, **jsonl with fsync on every append**, in a temporary directory:
every wake is durable before ``wake`` returns, every turn's end before its
reply is counted.

For 1, 100 and 10 000 sessions: the sessions are first created (one
first-contact wake each, not timed), then 1 000 wakes are spread over them
(``i % sessions``) with at most 64 outstanding, each timed from the ``wake``
call to the reply reaching its sink. At 1 session the 64 outstanding wakes
queue behind one another, so latency there is mostly queueing; the
sequential figure (one wake at a time) is the per-turn cost.

For scale, the run also measures the disk's bare ``write`` + ``fsync`` in
the same directory, and the 100-session run once more on the memory store
(the runtime's own cost, no disk).

The 10 000-session figures come from fresh processes over one directory: one
creates the sessions (each with one turn; untimed, fsync off, evicted in
chunks), the next measures. Memory is resident set size deltas there: the
key index loaded (the per-key cost every stored session has), then each
session loaded as a thread and evicted with ``evict_idle(0)`` one at a time
(what grows is what an evicted session leaves behind; the sum of the two is
the cost of an evicted session), then all 10 000 loaded and kept as live idle
threads (that growth per thread is the cost of a live idle thread). The
1 000 timed wakes then go to those live threads.

    .venv/bin/python bench/threads.py [--profile]

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import validate
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolRegistry
from threads.dispatch import dispatch_tool
from threads.manager import ThreadManager
from threads.sinks import Delivery, OutboundMessage
from threads.store import open_store
from threads.store.base import FsyncPolicy, SessionStore, StoreOptions
from threads.testing.scripted import ScriptedModel
from threads.wake import UserCaller, Wake, WakeSource

WAKES = 1000
CONCURRENCY = 64
SEQUENTIAL = 300
MEMORY_COHORT = 10_000
WARM = 500
SETUP_CHUNK = 500


class ReplySink:
    """A caller's endpoint that notes when the reply arrives."""

    __slots__ = ("replied",)

    def __init__(self) -> None:
        self.replied: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        return "Caller is the bench user — reply with dispatch(to=caller:user)"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "channel", "channel": "bench", "chat": "bench"}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        if not self.replied.done():
            self.replied.set_result(time.perf_counter())
        return Delivery(delivered_to="bench")


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled_rss() -> int:
    gc.collect()
    gc.collect()
    return rss_bytes()


class Bench:
    """One manager over one jsonl store directory."""

    def __init__(self, root: Path, *, fsync: FsyncPolicy = "every_append", url: str = "") -> None:
        self.root = root
        url = url or f"jsonl://{root}"
        config = validate(
            {
                "models": {"providers": {"scripted": {"base_url": "http://127.0.0.1:9"}}},
                "agents": {"default": {"model": "scripted/x"}},
                "store": {"url": url, "fsync": fsync},
            },
            "bench",
        )
        self.store: SessionStore = open_store(url, StoreOptions(fsync=fsync))
        models = Models(config.models, clients={"scripted": ScriptedModel()})
        loop = AgentLoop(config=config, models=models, tools=ToolRegistry([dispatch_tool]))
        self.manager = ThreadManager(store=self.store, agent=loop, config=config)
        loop.services = self.manager

    async def __aenter__(self) -> Bench:
        await self.manager.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.manager.close()
        await self.store.close()

    async def one(self, key: str, body: str) -> float:
        """One wake, answered: seconds from the wake call to the reply at its sink."""
        sink = ReplySink()
        wake = Wake(
            source=WakeSource.API,
            body=body,
            caller=UserCaller(channel="api", user_id="bench"),
            sink=sink,
        )
        started = time.perf_counter()
        await self.manager.wake(key, wake)
        return await sink.replied - started

    async def many(self, keys: list[str], concurrency: int) -> tuple[float, list[float]]:
        """Every key's wake with at most ``concurrency`` outstanding: (seconds, latencies)."""
        gate = asyncio.Semaphore(concurrency)
        latencies: list[float] = []

        async def run(i: int, key: str) -> None:
            async with gate:
                latencies.append(await self.one(key, f"wake {i}"))

        started = time.perf_counter()
        await asyncio.gather(*(run(i, k) for i, k in enumerate(keys)))
        return time.perf_counter() - started, latencies

    async def idle(self) -> None:
        for thread in self.manager.threads():
            await thread.session.wait_idle()


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def throughput(tmp: Path, sessions: int, figures: dict[str, Any]) -> None:
    async with Bench(tmp / f"throughput-{sessions}") as bench:
        keys = [f"api:s{n}" for n in range(sessions)]
        created, _ = await bench.many(keys, CONCURRENCY)
        await bench.idle()
        seconds, latencies = await bench.many(
            [keys[i % sessions] for i in range(WAKES)], CONCURRENCY
        )
        await bench.idle()
    figures[f"wakes_per_second_{sessions}_sessions"] = round(WAKES / seconds, 1)
    figures[f"latency_p50_ms_{sessions}_sessions"] = ms(statistics.median(latencies))
    figures[f"latency_p99_ms_{sessions}_sessions"] = ms(quantile(latencies, 0.99))
    figures[f"first_contact_wakes_per_second_{sessions}_sessions"] = round(sessions / created, 1)
    print(
        f"{sessions:>6} sessions: {WAKES / seconds:8.1f} wakes/s, "
        f"p50 {ms(statistics.median(latencies)):.2f} ms, p99 {ms(quantile(latencies, 0.99)):.2f} ms "
        f"(first contact: {sessions / created:.1f} sessions/s)",
        flush=True,
    )


def bare_fsync(tmp: Path, figures: dict[str, Any]) -> None:
    """The disk's own price: one small append and fsync, as a store entry would cost."""
    path = tmp / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    line = b'{"type":"message","id":"e_probe","message":{"role":"user","content":[]}}\n' * 3
    samples = []
    try:
        for _ in range(200):
            started = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
    figures["bare_write_fsync_p50_ms"] = ms(statistics.median(samples))
    print(f"bare write+fsync: p50 {figures['bare_write_fsync_p50_ms']:.2f} ms", flush=True)


async def without_disk(figures: dict[str, Any]) -> None:
    """The runtime's own cost: 100 sessions on the memory store (no disk at all)."""
    async with Bench(Path("unused"), url="memory://") as bench:
        keys = [f"api:s{n}" for n in range(100)]
        await bench.many(keys, CONCURRENCY)
        await bench.idle()
        seconds, _ = await bench.many([keys[i % 100] for i in range(WAKES)], CONCURRENCY)
        await bench.idle()
    figures["wakes_per_second_100_sessions_memory_store"] = round(WAKES / seconds, 1)
    print(f"   100 sessions, memory store: {WAKES / seconds:8.1f} wakes/s (no disk)", flush=True)


async def sequential(tmp: Path, figures: dict[str, Any]) -> None:
    async with Bench(tmp / "sequential") as bench:
        await bench.one("api:seq", "warm up")
        latencies = [await bench.one("api:seq", f"wake {i}") for i in range(SEQUENTIAL)]
    figures["sequential_latency_p50_ms"] = ms(statistics.median(latencies))
    figures["sequential_latency_p99_ms"] = ms(quantile(latencies, 0.99))
    figures["sequential_wakes_per_second"] = round(len(latencies) / sum(latencies), 1)
    print(
        f"sequential, 1 session: p50 {figures['sequential_latency_p50_ms']:.2f} ms, "
        f"p99 {figures['sequential_latency_p99_ms']:.2f} ms",
        flush=True,
    )


async def setup(root: Path, count: int) -> None:
    """Create ``count`` sessions (one first-contact wake each), untimed and without fsync."""
    async with Bench(root, fsync="on_flush") as bench:
        keys = [f"api:c{n}" for n in range(count)]
        for start in range(0, count, SETUP_CHUNK):
            await bench.many(keys[start : start + SETUP_CHUNK], CONCURRENCY)
            await bench.idle()
            # Closing them lets the store drop their descriptors as it goes.
            await bench.manager.evict_idle(0)


async def cohort(root: Path) -> dict[str, Any]:
    """In a fresh process: memory per evicted session and per live idle thread, then wakes/s.

    Evicted: sessions are loaded as threads and evicted one at a time, so the
    memory a loaded thread used is reused by the next and what grows is what
    an evicted session leaves behind. Live: the same sessions are then loaded
    and kept. Then 1 000 wakes are spread over the live threads.
    """
    figures: dict[str, Any] = {}
    bench = Bench(root)
    unindexed = settled_rss()
    indexed_keys = len(await bench.store.keys())
    index_cost = (settled_rss() - unindexed) / indexed_keys
    async with bench:
        manager = bench.manager
        warm = [f"api:c{n}" for n in range(WARM)]
        keys = [f"api:c{n}" for n in range(WARM, WARM + MEMORY_COHORT)]
        for key in warm:
            await manager.open_thread(key)
            await manager.evict_idle(0)
        before = settled_rss()
        for key in keys:
            await manager.open_thread(key)
            await manager.evict_idle(0)
        evicted = settled_rss()
        for key in keys:
            await manager.open_thread(key)
        assert len(manager.threads()) == MEMORY_COHORT
        live = settled_rss()
        seconds, latencies = await bench.many(
            [keys[i % MEMORY_COHORT] for i in range(WAKES)], CONCURRENCY
        )
        await bench.idle()
    sessions = MEMORY_COHORT
    figures[f"wakes_per_second_{sessions}_sessions"] = round(WAKES / seconds, 1)
    figures[f"latency_p50_ms_{sessions}_sessions"] = ms(statistics.median(latencies))
    figures[f"latency_p99_ms_{sessions}_sessions"] = ms(quantile(latencies, 0.99))
    # An evicted session costs its key index entry and whatever its visit left behind.
    figures["rss_bytes_per_key_index_entry"] = round(index_cost)
    figures["rss_bytes_per_evicted_session"] = round(
        index_cost + (evicted - before) / MEMORY_COHORT
    )
    figures["rss_bytes_per_live_idle_thread"] = round((live - evicted) / MEMORY_COHORT)
    return figures


async def large(tmp: Path, figures: dict[str, Any]) -> None:
    root = tmp / "large"
    started = time.perf_counter()
    await child("--setup", root)
    figures["setup_seconds_10000_sessions"] = round(time.perf_counter() - started, 1)
    measured = await child("--cohort", root)
    figures.update(measured)
    figures["memory_cohort_sessions"] = MEMORY_COHORT
    print(
        f" {MEMORY_COHORT} sessions: {measured[f'wakes_per_second_{MEMORY_COHORT}_sessions']:8.1f} "
        f"wakes/s, p50 {measured[f'latency_p50_ms_{MEMORY_COHORT}_sessions']:.2f} ms, "
        f"p99 {measured[f'latency_p99_ms_{MEMORY_COHORT}_sessions']:.2f} ms",
        flush=True,
    )
    print(
        f"memory: {measured['rss_bytes_per_evicted_session'] / 1024:.2f} KiB per evicted "
        f"session, {measured['rss_bytes_per_live_idle_thread'] / 1024:.2f} KiB per live idle "
        "thread",
        flush=True,
    )


async def child(flag: str, root: Path) -> dict[str, Any]:
    """Run one phase in a fresh interpreter; its last stdout line is its JSON figures."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, flag, str(root), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench phase {flag} failed with exit code {proc.returncode}")
    lines = out.decode().strip().splitlines()
    return dict(orjson.loads(lines[-1])) if lines else {}


async def main(profile: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "store": "jsonl",
        "fsync": "every_append",
        "model": "scripted (zero latency, one dispatch per turn)",
        "wakes_per_run": WAKES,
        "concurrency": CONCURRENCY,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as name:
        tmp = Path(name)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            await sequential(tmp, figures)
            await throughput(tmp, 100, figures)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
            print(out.getvalue())
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
            print(out.getvalue().split("tottime", 1)[-1][:6000])
            return figures
        bare_fsync(tmp, figures)
        await sequential(tmp, figures)
        for sessions in (1, 100):
            await throughput(tmp, sessions, figures)
        await large(tmp, figures)
        await without_disk(figures)
    figures["bench_seconds"] = round(time.perf_counter() - started, 1)
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", action="store_true", help="cProfile the 100-session run")
    parser.add_argument("--setup", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cohort", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup:
        asyncio.run(setup(args.setup, WARM + MEMORY_COHORT))
        result: dict[str, Any] = {}
    elif args.cohort:
        result = asyncio.run(cohort(args.cohort))
    else:
        result = asyncio.run(main(args.profile))
    print(orjson.dumps(result).decode())

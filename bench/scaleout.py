"""Several gateway processes on one Redis: throughput as processes are added, and failover.

    .venv/bin/python bench/scaleout.py [--seconds 8] [--concurrency 48] [--lease 15]

Throughput: 1, 2 and 3 real ``gateway run`` processes (:mod:`gateway.testing.cluster`)
share a Redis key prefix and the fake OpenAI-compatible model server (zero
delay, no recording), which answers every turn at once. The load — an
aiohttp client in this process — sends non-streamed API completions over
``KEYS`` sessions (``X-Session-Key: api:k<i>``), ``--concurrency`` at a time,
for ``--seconds`` after a warm-up, and counts completed turns. Each run starts
its processes afresh on a key prefix of its own.

* ``sticky``: each session's requests go to one process (``i mod n``), as a
  balancer with session affinity sends them; the process that gets a session
  first owns it, so nothing is forwarded. ``nN_sticky_turns_per_s`` and its
  ``_ratio_to_one`` (over one process's figure from this same run).
* ``random``: each request goes to a process at random, so (n-1)/n of them
  are forwarded to the owner over its Redis Stream and answered back over the
  relay stream. ``nN_random_turns_per_s`` and ``_ratio_to_one``.

The target (2 processes ≥ 1.8× one) needs a core per process and one for the
load; ``cpu_count`` says what this machine had, and ``load_process_busy``
how much of one core the client and the fake model used while measuring (the
busiest run): near 1.0 they, not the gateways, set the pace.

Failover: two processes with ``--lease`` seconds leases (the default
configuration's 15). A session is made on the first; it is SIGKILLed, and at
once a request for the session is sent to the second, which forwards it to
the dead owner's inbox. ``failover_seconds`` is the time from the SIGKILL to
that request's answer: the lease lapsing, the survivor taking the dead node's
inbox and the session over, and the turn. ``failover_target_seconds`` is the
lease plus 2 s.

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.testing.cluster import Cluster
from threads.testing.fake_openai import FakeOpenAIServer, RecordedRequest, Reply

REDIS = "redis://127.0.0.1:6379/3"
KEYS = 96
WARM_SECONDS = 2.0


def answer(request: RecordedRequest) -> Reply:
    return Reply(text="ok")


class Load:
    """API requests to a set of processes, ``concurrency`` at a time, counted."""

    def __init__(self, urls: list[str], *, concurrency: int, sticky: bool) -> None:
        self.urls = urls
        self.concurrency = concurrency
        self.sticky = sticky
        self.done = 0
        self.failed = 0
        self.busy = 0.0

    def url_for(self, key: int) -> str:
        if self.sticky:
            return self.urls[key % len(self.urls)]
        return random.choice(self.urls)

    async def run(self, seconds: float) -> float:
        """Turns per second over ``seconds``, after the warm-up."""
        stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=self.concurrency * 2)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            workers = [
                asyncio.create_task(self._worker(http, n, stop)) for n in range(self.concurrency)
            ]
            await asyncio.sleep(WARM_SECONDS)
            start_done, start, cpu = self.done, time.perf_counter(), cpu_seconds()
            await asyncio.sleep(seconds)
            wall = time.perf_counter() - start
            rate = (self.done - start_done) / wall
            self.busy = (cpu_seconds() - cpu) / wall
            stop.set()
            await asyncio.gather(*workers)
        return rate

    async def _worker(self, http: aiohttp.ClientSession, n: int, stop: asyncio.Event) -> None:
        key = n
        while not stop.is_set():
            key = (key + self.concurrency) % KEYS
            if await request(http, self.url_for(key), f"api:k{key}"):
                self.done += 1
            else:
                self.failed += 1


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def request(http: aiohttp.ClientSession, base: str, key: str) -> bool:
    body = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(
        f"{base}/v1/chat/completions", json=body, headers={"X-Session-Key": key}
    ) as answered:
        await answered.read()
        return answered.status == 200


async def delete_prefix(prefix: str) -> None:
    client = aioredis.Redis.from_url(REDIS)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.unlink(*keys)
    finally:
        await client.aclose()


async def with_cluster(root: Path, model_url: str, nodes: int, lease: float, work: Any) -> Any:
    prefix = f"bench-{secrets.token_hex(6)}:"
    cluster = Cluster(
        root / prefix.rstrip(":"),
        store_url=f"{REDIS}?cron_prefix={prefix}cron:",
        model_url=model_url,
        api=True,
        lease_seconds=lease,
    )
    cluster.root.mkdir(parents=True)
    try:
        started = [await cluster.start(f"n{i + 1}") for i in range(nodes)]
        return await work(cluster, [node.url for node in started])
    finally:
        await cluster.close()
        await delete_prefix(prefix)


async def throughput(
    root: Path, model_url: str, nodes: int, *, seconds: float, concurrency: int, sticky: bool
) -> tuple[float, float]:
    """Turns per second, and the share of a core this process (load and model) used."""

    async def work(cluster: Cluster, urls: list[str]) -> tuple[float, float]:
        load = Load(urls, concurrency=concurrency, sticky=sticky)
        rate = await load.run(seconds)
        return rate, load.busy

    rate, busy = await with_cluster(root, model_url, nodes, 15.0, work)
    return float(rate), float(busy)


async def failover(root: Path, model_url: str, lease: float) -> float:
    async def work(cluster: Cluster, urls: list[str]) -> float:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=lease * 4)) as http:
            assert await request(http, urls[0], "api:failover")
            killed = time.perf_counter()
            await cluster.kill("n1")
            assert await request(http, urls[1], "api:failover")
            return time.perf_counter() - killed

    return float(await with_cluster(root, model_url, 2, lease, work))


async def bench(seconds: float, concurrency: int, lease: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"cpu_count": os.cpu_count() or 1}
    busiest = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as tmp:
        root = Path(tmp)
        async with FakeOpenAIServer(default=answer, record=False) as model:
            for sticky in (True, False):
                mode = "sticky" if sticky else "random"
                for nodes in (1, 2, 3):
                    if nodes == 1 and not sticky:
                        figures["n1_random_turns_per_s"] = figures["n1_sticky_turns_per_s"]
                        continue
                    rate, busy = await throughput(
                        root,
                        model.base_url,
                        nodes,
                        seconds=seconds,
                        concurrency=concurrency,
                        sticky=sticky,
                    )
                    busiest = max(busiest, busy)
                    figures[f"n{nodes}_{mode}_turns_per_s"] = round(rate, 1)
                    one = figures["n1_sticky_turns_per_s"]
                    figures[f"n{nodes}_{mode}_ratio_to_one"] = round(rate / one, 2)
                    print(f"{nodes} process(es), {mode}: {rate:.1f} turns/s", flush=True)
            figures["load_process_busy"] = round(busiest, 2)
            took = await failover(root, model.base_url, lease)
            print(f"failover: {took:.2f} s from SIGKILL to the survivor's answer", flush=True)
    figures["failover_seconds"] = round(took, 2)
    figures["lease_seconds"] = lease
    figures["failover_target_seconds"] = lease + 2
    figures["concurrency"] = concurrency
    figures["sessions"] = KEYS
    figures["measured_seconds_per_run"] = seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=48)
    parser.add_argument("--lease", type=float, default=15.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(bench(args.seconds, args.concurrency, args.lease))))


if __name__ == "__main__":
    main()

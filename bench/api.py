"""The OpenAI-compatible API through the whole gateway, against the bare hop to the model.

    .venv/bin/python bench/api.py [--requests 2000] [--sequential 500]

A gateway on the embedded default store (JSONL, **every append fsync'd**: each
turn is durable before its answer is sent) serves ``/v1/chat/completions``
on its HTTP server on loopback, API key on. Its model is the fake
OpenAI-compatible server (:mod:`threads.testing.fake_openai`, zero delay,
whole answers, no recording), which answers every call with one ``dispatch``
to the caller: one model request per turn. The fake model and the load — an
aiohttp client sending non-streamed completions as an OpenAI client would —
run in a second process, pinned to the other core when there are two, so the
gateway's figures are its own.

At concurrency 1, 16 and 64, over 16 sessions (``X-Session-Key``, a fresh
set of 16 for each level, so the levels start from the same history):
``--requests`` requests (``--sequential`` at concurrency 1), each worker's
first two untimed. Requests to one session queue behind each other, as the
API does (at 64, four wait on each session).

The bare hop is the same load — the same number of requests at the same
concurrency, the same request body — sent straight to the fake model server:
what an HTTP round trip to the model costs with nothing in between.
``cN_ratio_to_bare`` is the gateway's requests per second over the bare
hop's (a turn is one model request, so 1.0 would be a free gateway).

- ``cN_rps``, ``cN_p50_ms``, ``cN_p99_ms``: through the gateway.
- ``bare_cN_rps``, ``bare_cN_p50_ms``, ``bare_cN_p99_ms``: the bare hop.
- ``cN_cpu_ms_per_request``: the gateway process's CPU time (user and
  system) per request, warm-up included.
- ``cN_load_process_busy``: the load process's CPU time over the level's wall
  time; near 1.0 the client and the fake model, not the gateway, set the pace
  (the fake reads every turn's whole history, as a real model server would).
- ``rss_start_mb``, ``rss_end_mb``: the gateway process's resident set once
  started, and after every level has run.
- ``machine_load_1m_at_start``: the load average as the run began (other
  work on the machine slows every figure here).
- ``disk_fsync_p50_ms``: the disk's own ``write`` + ``fsync`` of a small
  record in the store's directory, for scale (a turn at concurrency 1 waits
  for its fsyncs).

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import validate
from gateway.app import Gateway
from threads.testing.fake_openai import FakeOpenAIServer, RecordedRequest, Reply, ToolCall

GATEWAY_CORE, LOAD_CORE = 0, 1
LEVELS = (1, 16, 64)
SESSIONS = 16
WARM = 2
KEY = "sk-bench"
ANSWER = "ok"


def answered(raw: bytes) -> bool:
    return bool(orjson.loads(raw)["choices"][0]["message"]["content"] == ANSWER)


def percentile_ms(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000, 3)


def cpu_seconds() -> float:
    """This process's CPU time, user and system (the gateway's, all of it on its loop)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bare_fsync_ms(directory: Path, count: int = 200) -> float:
    """The disk's own ``write`` + ``fsync`` of a small record, p50, in the store's directory."""
    fd = os.open(directory / "fsync-probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, b"x" * 300 + b"\n")
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
    return percentile_ms(times, 0.5)


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


# -- the load: the fake model and the OpenAI client, in their own process


async def serve_load() -> None:
    """Answer commands on stdin: ``run URL CONCURRENCY COUNT TAG``, ``quit``."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    final = Reply(
        tool_calls=[
            ToolCall(name="dispatch", arguments={"sends": [{"to": "caller:user", "body": ANSWER}]})
        ]
    )

    def answer(request: RecordedRequest) -> Reply:
        return final

    async with (
        FakeOpenAIServer(record=False, default=answer) as model,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        print(json.dumps({"model": model.base_url}), flush=True)
        while line := (await reader.readline()).decode().split():
            if line[0] != "run":
                return
            url, concurrency, count, tag = line[1], int(line[2]), int(line[3]), line[4]
            figures = await load(http, url, concurrency, count, tag)
            print(json.dumps(figures), flush=True)


async def load(
    http: aiohttp.ClientSession, url: str, concurrency: int, count: int, tag: str
) -> dict[str, float]:
    """``count`` completions from ``concurrency`` workers over the sessions of ``tag``."""
    times: list[float] = []
    errors = 0
    gateway = tag != "bare"
    per_worker = max(1, count // concurrency)

    async def worker(w: int) -> None:
        nonlocal errors
        for i in range(per_worker + WARM):
            session = f"api:{tag}-{(w * 7919 + i) % SESSIONS}"
            body = orjson.dumps(
                {"model": "default", "messages": [{"role": "user", "content": f"message {i}"}]}
            )
            headers = {
                "Authorization": f"Bearer {KEY}",
                "Content-Type": "application/json",
                "X-Session-Key": session,
            }
            started = time.perf_counter()
            async with http.post(url, data=body, headers=headers) as response:
                raw = await response.read()
            elapsed = time.perf_counter() - started
            errors += response.status != 200 or (gateway and not answered(raw))
            if i >= WARM:
                times.append(elapsed)

    started, cpu = time.perf_counter(), cpu_seconds()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "rps": round(len(times) / elapsed, 1),
        "p50": percentile_ms(times, 0.5),
        "p99": percentile_ms(times, 0.99),
        "errors": errors,
        # Near 1.0 the load process (the client and the fake model) is what limits.
        "load_busy": round((cpu_seconds() - cpu) / elapsed, 2),
    }


# -- the gateway, in this process


def gateway_config(root: Path, model_url: str) -> Any:
    data = root / "data"
    return validate(
        {
            "data_dir": str(data),
            "store": {"url": f"jsonl://{data / 'sessions'}", "fsync": "every_append"},
            "models": {
                "providers": {"fake": {"kind": "openai", "base_url": model_url, "api_key": "x"}},
                # Like the bare hop's requests: whole answers, not streams.
                "settings": {"fake/bench": {"stream": False}},
            },
            "agents": {"default": {"model": "fake/bench"}},
            "cron": {"enabled": False},
            "threads": {
                "max_concurrent_turns": 64,
                "budget": {"session_model_calls_per_hour": 0, "session_tokens_per_hour": 0},
            },
            "http": {"port": 0},
            "channels": {
                "web": {"enabled": False},
                "cli": {"enabled": False},
                "api": {"enabled": True, "api_key": KEY},
            },
        },
        "bench",
    )


async def bench(count: int, sequential: int) -> dict[str, Any]:
    load_process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--load",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert load_process.stdin is not None
    assert load_process.stdout is not None
    pinned = pin(load_process.pid, LOAD_CORE) and pin(0, GATEWAY_CORE)
    model_url = json.loads(await load_process.stdout.readline())["model"]

    async def run(url: str, concurrency: int, requests: int, tag: str) -> dict[str, float]:
        assert load_process.stdin is not None
        assert load_process.stdout is not None
        load_process.stdin.write(f"run {url} {concurrency} {requests} {tag}\n".encode())
        await load_process.stdin.drain()
        answer: dict[str, float] = json.loads(await load_process.stdout.readline())
        if answer["errors"]:
            raise SystemExit(f"{tag}: {answer['errors']} requests failed")
        return answer

    # Other work on the machine shows in every figure: the run says how busy it was.
    figures: dict[str, Any] = {"machine_load_1m_at_start": round(os.getloadavg()[0], 2)}
    try:
        with tempfile.TemporaryDirectory() as tmp:  # created 0700
            figures["disk_fsync_p50_ms"] = bare_fsync_ms(Path(tmp))
            config = gateway_config(Path(tmp), model_url)
            async with Gateway(config, control=False) as gw:
                assert gw.http is not None
                url = f"{gw.http.url}v1/chat/completions"
                figures["rss_start_mb"] = rss_mb()
                for level in LEVELS:
                    requests = sequential if level == 1 else count
                    bare = await run(f"{model_url}/chat/completions", level, requests, "bare")
                    cpu = cpu_seconds()
                    through = await run(url, level, requests, f"c{level}")
                    # Warm-up requests included: CPU cannot be split by the window.
                    done = requests // level * level + WARM * level
                    figures[f"c{level}_cpu_ms_per_request"] = round(
                        (cpu_seconds() - cpu) * 1000 / done, 3
                    )
                    figures[f"c{level}_rps"] = through["rps"]
                    figures[f"c{level}_p50_ms"] = through["p50"]
                    figures[f"c{level}_p99_ms"] = through["p99"]
                    figures[f"bare_c{level}_rps"] = bare["rps"]
                    figures[f"bare_c{level}_p50_ms"] = bare["p50"]
                    figures[f"bare_c{level}_p99_ms"] = bare["p99"]
                    figures[f"c{level}_ratio_to_bare"] = round(through["rps"] / bare["rps"], 3)
                    figures[f"c{level}_load_process_busy"] = through["load_busy"]
                    print(
                        f"c{level}: {through['rps']} req/s (p50 {through['p50']} ms, p99 "
                        f"{through['p99']} ms); bare hop {bare['rps']} req/s (p50 {bare['p50']} "
                        f"ms); ratio {figures[f'c{level}_ratio_to_bare']}",
                        flush=True,
                    )
                figures["rss_end_mb"] = rss_mb()
    finally:
        load_process.stdin.write(b"quit\n")
        await load_process.stdin.drain()
        await load_process.wait()
    figures["requests_c1"] = sequential
    figures["requests_c16_c64"] = count
    figures["sessions"] = SESSIONS
    figures["store"] = "jsonl, fsync every_append"
    figures["pinned_to_cores"] = pinned
    return figures


def pin(pid: int, core: int) -> bool:
    """Keep ``pid`` on one core when the machine has two (the gateway and its load apart)."""
    if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(pid, {core})
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--sequential", type=int, default=500)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.load:
        asyncio.run(serve_load())
        return
    print(json.dumps(asyncio.run(bench(args.requests, args.sequential))))


if __name__ == "__main__":
    main()

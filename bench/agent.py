"""Turns per second of the agent loop against the fake OpenAI server, with zero delay.

Each turn is one tool call and one ``dispatch`` (two model requests) through
the real thread manager, agent loop and OpenAI client. The baseline is bare
aiohttp requests to the same fake server in the same run; the ratio says how
much the gateway costs on top of the HTTP it cannot avoid (a turn makes two
requests, so 0.5 is the ceiling).

Both sides are bound by this process's event loop, so the ratio at
concurrency 16 is close to the inverse of ``turn_cpu_in_bare_requests_c16``:
a turn's loop CPU (``turn_loop_cpu_ms_c16``) counted in bare requests' loop
CPU (``bare_request_loop_cpu_ms_c16``). A ratio of 0.3 needs a turn to cost
at most some 3.3 bare requests, two of which are its own model calls.

    .venv/bin/python bench/agent.py [--turns N]

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import validate
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolContext, ToolRegistry, tool
from threads.dispatch import dispatch_tool
from threads.manager import ThreadManager
from threads.sinks import Delivery, OutboundMessage
from threads.store.memory import MemoryStore
from threads.testing.fake_openai import FakeOpenAIServer, Reply, ToolCall, tool_then
from threads.wake import UserCaller, Wake, WakeSource

SESSIONS = 64


class Nothing(BaseModel):
    pass


@tool("noop", "Does nothing.", Nothing)
async def noop(args: Nothing, ctx: ToolContext) -> str:
    return "ok"


class CountingSink:
    def __init__(self) -> None:
        self.count = 0

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        return "Caller is the bench user"

    def to_wire(self) -> dict[str, str]:
        return {"kind": "drop", "reason": "bench"}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        self.count += 1
        return Delivery(delivered_to="bench")


async def bare_requests(url: str, count: int, concurrency: int) -> tuple[float, float]:
    """Requests per second of plain aiohttp POSTs to the fake server, and the event loop's
    CPU milliseconds per request."""
    body = orjson.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "hello"}],
            "tools": [{"type": "function", "function": {"name": "noop", "parameters": {}}}],
        }
    )
    headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:

        async def worker(n: int) -> None:
            for _ in range(n):
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()

        await worker(20)
        per_worker = count // concurrency
        start, cpu = time.perf_counter(), time.thread_time()
        await asyncio.gather(*(worker(per_worker) for _ in range(concurrency)))
        sent = per_worker * concurrency
        cpu_ms = (time.thread_time() - cpu) * 1000 / sent
        return sent / (time.perf_counter() - start), cpu_ms


async def loop_turns(
    base_url: str, count: int, concurrency: int
) -> tuple[float, list[float], float]:
    """Turns per second through the manager, each turn's latency in ms, and the event
    loop's CPU milliseconds per turn."""
    config = validate(
        {
            "models": {
                "providers": {"fake": {"kind": "openai", "base_url": base_url, "api_key": "bench"}},
                # Like the baseline's requests: whole answers, not streams.
                "settings": {"fake/bench": {"stream": False}},
            },
            "agents": {"default": {"model": "fake/bench", "tools": ["noop"]}},
        },
        "bench",
    )
    models = Models(config.models)
    loop = AgentLoop(config=config, models=models, tools=ToolRegistry([noop, dispatch_tool]))
    manager = ThreadManager(store=MemoryStore(), agent=loop, config=config)
    loop.services = manager
    await manager.start()
    sink = CountingSink()
    latencies: list[float] = []

    async def one(key: str, i: int) -> None:
        wake = Wake(
            source=WakeSource.API,
            body=f"turn {i}",
            caller=UserCaller(channel="api", user_id="bench"),
            sink=sink,
        )
        started = time.perf_counter()
        _, turn = await manager.wake_turn(key, wake)
        result = await turn.wait()
        assert result is not None
        assert result.stop_reason == "dispatch", result
        latencies.append((time.perf_counter() - started) * 1000)

    async def worker(w: int, n: int) -> None:
        for i in range(n):
            await one(f"api:bench{(w * 7919 + i) % SESSIONS}", i)

    await worker(0, 20)
    latencies.clear()
    start, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(worker(w, count // concurrency) for w in range(concurrency)))
    elapsed = time.perf_counter() - start
    cpu_ms = (time.thread_time() - cpu) * 1000 / len(latencies)
    await manager.close()
    await models.close()
    return len(latencies) / elapsed, latencies, cpu_ms


async def serve() -> None:
    """The fake server, in its own process: prints its base URL, runs until stdin closes."""
    final = Reply(
        tool_calls=[
            ToolCall(name="dispatch", arguments={"sends": [{"to": "caller:user", "body": "ok"}]})
        ]
    )
    server = FakeOpenAIServer(record=False, default=tool_then(ToolCall(name="noop"), final))
    async with server:
        print(server.base_url, flush=True)
        await asyncio.to_thread(sys.stdin.read)


async def main(turns: int) -> dict[str, Any]:
    # The server runs in another process, as a real model server would: the
    # figures are the gateway's own cost, not the fake's.
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", stdin=PIPE, stdout=PIPE
    )
    assert child.stdout is not None
    assert child.stdin is not None
    base_url = (await child.stdout.readline()).decode().strip()
    try:
        url = f"{base_url}/chat/completions"
        bare_1, _ = await bare_requests(url, turns * 2, 1)
        turns_1, lat_1, _ = await loop_turns(base_url, turns, 1)
        bare_16, bare_cpu_16 = await bare_requests(url, turns * 2, 16)
        turns_16, _, turn_cpu_16 = await loop_turns(base_url, turns, 16)
    finally:
        child.stdin.close()
        await child.wait()
    lat_1.sort()
    return {
        "bare_requests_per_s_c1": round(bare_1, 1),
        "turns_per_s_c1": round(turns_1, 1),
        "turn_ratio_to_bare_requests_c1": round(turns_1 / bare_1, 3),
        "turn_p50_ms_c1": round(statistics.median(lat_1), 3),
        "turn_p99_ms_c1": round(lat_1[int(len(lat_1) * 0.99) - 1], 3),
        "bare_requests_per_s_c16": round(bare_16, 1),
        "turns_per_s_c16": round(turns_16, 1),
        "turn_ratio_to_bare_requests_c16": round(turns_16 / bare_16, 3),
        "bare_request_loop_cpu_ms_c16": round(bare_cpu_16, 3),
        "turn_loop_cpu_ms_c16": round(turn_cpu_16, 3),
        "turn_cpu_in_bare_requests_c16": round(turn_cpu_16 / bare_cpu_16, 2),
        "requests_per_turn": 2,
        "store": "memory",
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        sys.exit(0)
    figures = asyncio.run(main(args.turns))
    for name, value in figures.items():
        print(f"{name:>34}: {value}")
    print(orjson.dumps(figures).decode())

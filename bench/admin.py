"""What the admin part costs a turn: the recorder alone, and the whole gateway off, on, watched.

    .venv/bin/python bench/admin.py [--turns 5000] [--rounds 3]

``recorder_us_per_turn`` is what the admin part adds to each turn's hot
path, measured alone: the metrics recorder's turn observer, its done
callback and one timed model call, against the same turn and call without
them (200 000 turns, the median of five runs). It is the figure to watch:
the whole-gateway figures below move by more than it from run to run on a
shared machine.

A gateway on the memory store (so the disk does not drown the difference)
with a zero-latency scripted model that answers each wake with one
``dispatch``; ``--turns`` wakes over 16 sessions, at most 64 outstanding,
each until its turn is decided. Three set-ups, interleaved ``--rounds``
times, the best round of each reported:

- ``off``: ``[admin] enabled = false`` (no recorder, no model wrapper);
- ``on``: the admin part on, nobody watching (the metrics recorder's turn
  observer and the timed model clients);
- ``watched``: on, with one reader of ``/api/live`` in the same process (its
  turn followers, the coalesced pushes, and the reader itself).

Figures: turns per second, and the process's CPU time per turn (event loop
and threads together) in microseconds. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import validate
from gateway.app import Gateway
from gateway.metrics import Metrics, TimedClient
from threads.llm.base import ModelRequest, ModelResponse
from threads.messages import Message, Usage
from threads.sinks import DropSink
from threads.testing.scripted import ScriptedModel, dispatch
from threads.turns import Outcome, Policy, RunResult, Turn
from threads.wake import UserCaller, Wake, WakeSource

TOKEN = "bench-admin-token-0123456789"
SESSIONS = 16
OUTSTANDING = 64


def config(root: Path, admin: bool) -> Any:
    return validate(
        {
            "data_dir": str(root),
            "store": {"url": "memory://"},
            "http": {"port": 0},
            "models": {
                "default": "scripted/zero",
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}},
            },
            "channels": {"web": {"enabled": False}, "cli": {"enabled": False}},
            "cron": {"enabled": False},
            # Budgets off: the bench's sessions take far more turns an hour than a person's.
            "threads": {
                "budget": {
                    "session_model_calls_per_hour": 0,
                    "session_tokens_per_hour": 0,
                    "chain_model_calls_per_hour": 0,
                    "chain_tokens_per_hour": 0,
                }
            },
            "admin": {"enabled": admin, "token": TOKEN},
        },
        "bench",
    )


async def run_turns(gw: Gateway, turns: int) -> tuple[float, float]:
    """Seconds and CPU seconds for ``turns`` turns over the sessions."""
    gate = asyncio.Semaphore(OUTSTANDING)

    async def one(i: int) -> None:
        async with gate:
            wake = Wake(
                source=WakeSource.TELEGRAM,
                body="hi",
                caller=UserCaller(channel="telegram", user_id=str(i % SESSIONS)),
                sink=DropSink(reason="bench"),
            )
            _accepted, turn = await gw.manager.wake_turn(f"telegram:{i % SESSIONS}", wake)
            await turn.wait()

    await asyncio.gather(*(one(i) for i in range(SESSIONS)))  # first contact, untimed
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(turns)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def watch(url: str, ready: asyncio.Event) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as answer,
    ):
        async for _line in answer.content:
            ready.set()


async def setup(kind: str, turns: int, root: Path) -> tuple[float, float]:
    model = ScriptedModel(default=dispatch(("caller:user", "ok")))
    async with Gateway(
        config(root / kind, kind != "off"), model_clients={"scripted": model}, control=False
    ) as gw:
        reader: asyncio.Task[None] | None = None
        if kind == "watched":
            assert gw.http is not None
            ready = asyncio.Event()
            reader = asyncio.create_task(watch(gw.http.url + "api/live", ready))
            await ready.wait()
        try:
            return await run_turns(gw, turns)
        finally:
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader


class ZeroModel:
    """A model client that answers at once, for timing what wraps it."""

    def __init__(self) -> None:
        self.response = ModelResponse(message=Message.assistant("ok"), usage=Usage())

    async def complete(self, request: ModelRequest, on_delta: Any = None) -> ModelResponse:
        return self.response

    async def close(self) -> None:
        return None


class _Thread:
    key = "telegram:1"


async def recorder_cost(n: int = 200_000) -> float:
    """Microseconds the recorder adds to one turn with one model call (median of five runs)."""
    zero = ZeroModel()
    metrics = Metrics()
    timed = TimedClient(zero, metrics)
    request = ModelRequest(model="zero", messages=[Message.user("hi")])
    result = RunResult(stop_reason="dispatch", usage=Usage(input_tokens=10, output_tokens=2))
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body="hi",
        caller=UserCaller(channel="telegram", user_id="1"),
        sink=DropSink(reason="bench"),
    )
    thread: Any = _Thread()

    async def bare() -> float:
        started = time.perf_counter()
        for _ in range(n):
            turn = Turn("t", "r", Policy.QUEUE)
            await zero.complete(request)
            turn.finish(Outcome.DELIVERED, result)
        return time.perf_counter() - started

    async def recorded() -> float:
        started = time.perf_counter()
        for _ in range(n):
            turn = Turn("t", "r", Policy.QUEUE)
            metrics.observe(thread, wake, turn)
            await timed.complete(request)
            turn.finish(Outcome.DELIVERED, result)
        return time.perf_counter() - started

    added = []
    for _ in range(5):
        added.append((await recorded() - await bare()) / n * 1e6)
    added.sort()
    return round(added[2], 2)


async def bench(turns: int, rounds: int) -> dict[str, float]:
    figures: dict[str, float] = {"recorder_us_per_turn": await recorder_cost()}
    print(f"recorder: {figures['recorder_us_per_turn']} µs per turn", flush=True)
    best: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for kind in ("off", "on", "watched"):
                seconds, cpu = await setup(kind, turns, Path(tmp) / str(n))
                if kind not in best or seconds < best[kind][0]:
                    best[kind] = (seconds, cpu)
    for kind, (seconds, cpu) in best.items():
        figures[f"{kind}_turns_per_s"] = round(turns / seconds, 1)
        figures[f"{kind}_cpu_us_per_turn"] = round(cpu / turns * 1e6, 1)
        print(
            f"{kind:>8}: {figures[f'{kind}_turns_per_s']:>8} turns/s, "
            f"{figures[f'{kind}_cpu_us_per_turn']:>7} µs CPU per turn",
            flush=True,
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(bench(args.turns, args.rounds))))


if __name__ == "__main__":
    main()

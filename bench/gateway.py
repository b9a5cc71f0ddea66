"""The whole gateway, durable, on one core: turns through the web chat and the API, beside the bare hop.

    .venv/bin/python bench/gateway.py [--turns 8000] [--sequential 400] [--keep DIR]

A gateway on the embedded default store (JSONL, ``fsync = "every_append"``:
every turn durable before its reply is sent) serves the web chat's WebSocket
and ``/v1/chat/completions``. Its model is :class:`QuickModel`, an
OpenAI-compatible server of zero delay that reads each request without
parsing it and answers the text ``ok`` (one model call per turn, no
tools; the agent's default tools are still offered, as in production). The
fake model and the load — WebSocket clients holding signed chat cookies, and
an HTTP client for the API — run in a second process, pinned to the other
core when there are two, so this process's figures are the gateway's own.
The web chat's busy policy is ``queue`` here, so every message is a turn of
its own and its reply comes back in order (the default ``steer`` folds a
message sent mid-turn into the running turn: one reply for two messages).

Levels, each over a fresh set of 16 chats (so each starts from the same
history), each client's first two messages untimed:

- ``c1``: one message at a time, rotating over the 16 chats;
- ``c16``: the 16 chats at once, one message outstanding each;
- ``c64``: 64 messages outstanding, four queued on each chat.

Per level, this process reads its event-loop thread's CPU time
(``time.thread_time()`` on the loop) and counts ``os.fsync`` /
``os.fdatasync`` calls and the bytes the store's directory grew, each per
turn. The bare hop is the same load sent straight to the fake model — the
body of the gateway's latest request, the same concurrency — in the same run.
Every ratio is against figures of this run: the machine is shared, absolute
numbers move with whatever else runs.

Keys (the issue's, then more): ``loop_cpu_ms_per_turn`` (at c16),
``fsyncs_per_turn_c1``, ``fsyncs_per_turn_c64``, ``turns_per_s_c64``,
``bare_hop_per_s_c64``, ``p50_ms_c1``, ``p99_ms_c1``, ``bytes_per_turn_c1``,
``bytes_per_turn_c64``, ``rss_mb_after`` (after every level, some 15 000
turns), then ``rss_mb_after_10000_turns`` (after the first level that brings
the turns past 10 000, the issue's measure; ``turns_at_rss_mb_after_10000_turns``
says how many), the same figures per level, the API's, and the bare hop's at c1.

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import itertools
import json
import logging
import os
import pstats
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api import GATEWAY_CORE, LOAD_CORE, cpu_seconds, percentile_ms, pin, rss_mb
from config import validate
from gateway.app import Gateway
from gateway.arenas import settle_arenas
from gateway.heap import settle_heap
from gateway.switching import settle_switching

CHATS = 16
WARM = 2
KEY = "sk-bench"
ANSWER = "ok"


# -- the load: the model, web chat clients and API clients, in their own process


@dataclass(frozen=True, slots=True)
class Chat:
    """One browser's web chat: its cookie jar's client, its socket and the chat id it was given."""

    client: aiohttp.ClientSession
    ws: aiohttp.ClientWebSocketResponse
    id: str

    @classmethod
    async def open(cls, base: str) -> Chat:
        """A fresh chat: a page load (its signed cookie), then the socket."""
        client = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        async with client.get(base) as page:
            await page.read()
        ws = await client.ws_connect(f"{base}ws", max_msg_size=0)
        hello = orjson.loads((await ws.receive()).data)
        if hello.get("type") != "hello":
            raise SystemExit(f"web: the socket opened with {hello}, not a hello")
        return cls(client=client, ws=ws, id=str(hello["chat"]))

    async def say(self, text: str) -> None:
        await self.ws.send_str(orjson.dumps({"text": text}).decode())

    async def close(self) -> None:
        await self.ws.close()
        await self.client.close()


class QuickModel:
    """A zero-latency OpenAI-compatible model that answers every call with ``ok``.

    Unlike :class:`~threads.testing.fake_openai.FakeOpenAIServer` it neither
    parses nor checks the request (the body of a long conversation would cost
    the load's core more than the gateway's): it reads the bytes, keeps the
    latest for the bare hop, and reports a quarter of them as prompt tokens.
    """

    def __init__(self) -> None:
        self.last_body = b""
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> QuickModel:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.Response:
        body = self.last_body = await request.read()
        prompt = len(body) // 4
        answer = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")


class Load:
    """The model and the clients; answers ``web``, ``api``, ``bare`` on stdin."""

    def __init__(self, http: aiohttp.ClientSession, model: QuickModel) -> None:
        self.http = http
        self.model = model

    async def answer(self, command: str, args: list[str]) -> dict[str, Any] | None:
        """The answer to one line from the bench process; None to stop."""
        if command == "web":
            return await self.web(args[0], int(args[1]), int(args[2]))
        if command == "api":
            return await self.api(args[0], int(args[1]), int(args[2]), args[3])
        if command == "bare":
            return await self.bare(int(args[0]), int(args[1]))
        return None

    async def web(self, base: str, concurrency: int, turns: int) -> dict[str, float]:
        """``turns`` messages over 16 chats with ``concurrency`` outstanding in all."""
        chats = [await Chat.open(base) for _ in range(CHATS)]
        times: list[float] = []
        if concurrency == 1:
            started = time.perf_counter()
            for i in range(turns + WARM):
                chat = chats[i % CHATS]
                sent = time.perf_counter()
                await chat.say(f"message {i}")
                await next_reply(chat.ws)
                if i == WARM - 1:
                    started = time.perf_counter()
                if i >= WARM:
                    times.append(time.perf_counter() - sent)
            elapsed = time.perf_counter() - started
        else:
            depth = max(1, concurrency // CHATS)
            per_chat = max(1, turns // CHATS)
            gate = asyncio.Event()
            warmed = 0
            clock: list[float] = []

            async def pipelined(chat: Chat) -> None:
                nonlocal warmed
                for i in range(WARM):
                    await chat.say(f"warm {i}")
                    await next_reply(chat.ws)
                warmed += 1
                if warmed == CHATS:
                    clock.append(time.perf_counter())
                    gate.set()
                await gate.wait()
                outstanding: deque[float] = deque()
                sent = 0
                while sent < per_chat or outstanding:
                    while sent < per_chat and len(outstanding) < depth:
                        outstanding.append(time.perf_counter())
                        await chat.say(f"message {sent}")
                        sent += 1
                    await next_reply(chat.ws)
                    times.append(time.perf_counter() - outstanding.popleft())

            await asyncio.gather(*(pipelined(chat) for chat in chats))
            elapsed = time.perf_counter() - clock[0]
        for each in chats:
            await each.close()
        return figures_of(times, elapsed)

    async def api(self, url: str, concurrency: int, turns: int, tag: str) -> dict[str, float]:
        """``turns`` completions with ``concurrency`` outstanding over 16 sessions of ``tag``."""
        times: list[float] = []
        per_worker = max(1, turns // concurrency)
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        clock: list[float] = []
        warmed = 0
        gate = asyncio.Event()

        async def worker(w: int) -> None:
            nonlocal warmed
            for i in range(per_worker + WARM):
                if i == WARM:
                    warmed += 1
                    if warmed == concurrency:
                        clock.append(time.perf_counter())
                        gate.set()
                    await gate.wait()
                body = orjson.dumps(
                    {"model": "default", "messages": [{"role": "user", "content": f"message {i}"}]}
                )
                session = {"X-Session-Key": f"api:{tag}-{(w * 7919 + i) % CHATS}"}
                started = time.perf_counter()
                async with self.http.post(url, data=body, headers=headers | session) as response:
                    raw = await response.read()
                if response.status != 200:
                    raise SystemExit(f"api: status {response.status}: {raw[:200]!r}")
                if i >= WARM:
                    times.append(time.perf_counter() - started)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return figures_of(times, time.perf_counter() - clock[0])

    async def bare(self, concurrency: int, turns: int) -> dict[str, float]:
        """The gateway's latest model request, sent straight to the model."""
        body = self.model.last_body
        url = f"{self.model.base_url}/chat/completions"
        headers = {"Content-Type": "application/json"}
        times: list[float] = []
        per_worker = max(1, turns // concurrency)

        async def worker() -> None:
            for i in range(per_worker + WARM):
                started = time.perf_counter()
                async with self.http.post(url, data=body, headers=headers) as response:
                    await response.read()
                if i >= WARM:
                    times.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return figures_of(times, time.perf_counter() - started)


async def next_reply(ws: aiohttp.ClientWebSocketResponse) -> None:
    """Wait for the chat's next reply (other frames, such as acknowledgements, are passed by)."""
    while True:
        msg = await ws.receive()
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise SystemExit(f"web: the socket ended ({msg.type.name}) before a reply")
        frame = orjson.loads(msg.data)
        if frame.get("type") == "reply":
            return
        if frame.get("type") == "error":
            raise SystemExit(f"web: the gateway refused a message: {frame}")


def figures_of(times: list[float], elapsed: float) -> dict[str, float]:
    return {
        "per_s": round(len(times) / elapsed, 1),
        "p50": percentile_ms(times, 0.5),
        "p99": percentile_ms(times, 0.99),
        "count": len(times),
    }


async def serve_load(kind: type[Load] = Load) -> None:
    """The load process: the model's URL first, then one answer per line read on stdin."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
        QuickModel() as model,
    ):
        load = kind(http, model)
        print(json.dumps({"model": model.base_url}), flush=True)
        while line := (await reader.readline()).decode().split():
            answer = await load.answer(line[0], line[1:])
            if answer is None:
                return
            print(json.dumps(answer), flush=True)


class LoadProcess:
    """A bench's load, run as ``<script> --load`` pinned to the other core, asked a line at a time."""

    def __init__(self, process: asyncio.subprocess.Process, model_url: str, pinned: bool) -> None:
        self.process = process
        self.model_url = model_url
        self.pinned = pinned

    @classmethod
    async def start(cls, script: str) -> LoadProcess:
        """Start ``script --load``; its first line names the fake model's URL."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, script, "--load",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        pinned = pin(process.pid, LOAD_CORE) and pin(0, GATEWAY_CORE)
        model_url = json.loads(await process.stdout.readline())["model"]
        return cls(process, model_url, pinned)

    async def ask(self, *words: object) -> dict[str, Any]:
        """Send one command line; its answer."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write((" ".join(map(str, words)) + "\n").encode())
        await self.process.stdin.drain()
        return dict(json.loads(await self.process.stdout.readline()))

    async def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"quit\n")
        await self.process.stdin.drain()
        await self.process.wait()


# -- the gateway, in this process


def gateway_config(root: Path, model_url: str) -> Any:
    return validate(config_data(root, model_url), "bench")


def config_data(root: Path, model_url: str) -> dict[str, Any]:
    """The bench gateway's settings, before validation (``bench/history.py`` adjusts them)."""
    data = root / "data"
    return {
        "data_dir": str(data),
        "store": {"url": f"jsonl://{data / 'sessions'}", "fsync": "every_append"},
        "models": {
            "providers": {"fake": {"kind": "openai", "base_url": model_url, "api_key": "x"}},
            "settings": {"fake/bench": {"stream": False}},
        },
        "agents": {"default": {"model": "fake/bench"}},
        "cron": {"enabled": False},
        "threads": {
            "max_concurrent_turns": 64,
            "busy_policy": {"web": "queue"},
            "budget": {"session_model_calls_per_hour": 0, "session_tokens_per_hour": 0},
        },
        "http": {"port": 0},
        "channels": {
            "web": {"enabled": True},
            "cli": {"enabled": False},
            "api": {"enabled": True, "api_key": KEY},
        },
    }


class Counted:
    """``os.fsync`` and ``os.fdatasync`` wrapped to count their calls (from any thread)."""

    def __init__(self) -> None:
        self._calls = itertools.count()
        self._seen = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        saved = os.fsync, os.fdatasync
        # The same calls, counted: typeshed's signatures name the argument's type exactly.
        os.fsync = self._wrap(saved[0])  # type: ignore[assignment]
        os.fdatasync = self._wrap(saved[1])  # type: ignore[assignment]
        try:
            yield
        finally:
            os.fsync, os.fdatasync = saved

    def _wrap(self, real: Callable[[int], None]) -> Callable[[Any], None]:
        def counted(fd: Any) -> None:
            next(self._calls)
            real(fd)

        return counted

    def taken(self) -> int:
        """Calls since the last ``taken``."""
        now = next(self._calls) - 1
        self._calls = itertools.count(now + 1)
        count, self._seen = now - self._seen, now
        return count


def tree_bytes(root: Path) -> int:
    """The bytes of the stored sessions (and key index): the write-ahead log is not storage."""
    return sum(f.stat().st_size for f in root.rglob("*.jsonl"))


async def bench(
    turns: int, sequential: int, profile: bool, keep: Path | None = None
) -> dict[str, Any]:
    load = await LoadProcess.start(__file__)
    ask, model_url, pinned = load.ask, load.model_url, load.pinned

    figures: dict[str, Any] = {"machine_load_1m_at_start": round(os.getloadavg()[0], 2)}
    fsyncs = Counted()
    total_turns = 0
    try:
        with tempfile.TemporaryDirectory() as tmp, fsyncs.installed():
            config = gateway_config(keep or Path(tmp), model_url)
            sessions = config.data_dir / "sessions"
            async with Gateway(config, control=False) as gw:
                assert gw.http is not None
                base = gw.http.url
                figures["rss_start_mb"] = rss_mb()
                settle_heap()  # as `gateway run` does once it serves (decision perf-07)
                settle_switching()  # and hands the GIL over as it does (decision perf-14)
                for level, count in ((1, sequential), (16, turns // 4), (64, turns)):
                    fsyncs.taken()
                    size, loop_cpu, cpu = tree_bytes(sessions), time.thread_time(), cpu_seconds()
                    profiler = cProfile.Profile() if profile and level == 16 else None
                    if profiler is not None:
                        profiler.enable()
                    through = await ask("web", base, level, count)
                    if profiler is not None:
                        profiler.disable()
                        print_profile(profiler)
                    # c1 warms WARM messages in all; the others WARM per chat.
                    done = through["count"] + WARM * (1 if level == 1 else CHATS)
                    total_turns += done
                    figures[f"loop_cpu_ms_per_turn_c{level}"] = round(
                        (time.thread_time() - loop_cpu) * 1000 / done, 3
                    )
                    figures[f"process_cpu_ms_per_turn_c{level}"] = round(
                        (cpu_seconds() - cpu) * 1000 / done, 3
                    )
                    figures[f"fsyncs_per_turn_c{level}"] = round(fsyncs.taken() / done, 3)
                    figures[f"bytes_per_turn_c{level}"] = round(
                        (tree_bytes(sessions) - size) / done
                    )
                    figures[f"turns_per_s_c{level}"] = through["per_s"]
                    rss_at_10000(figures, total_turns)
                    figures[f"p50_ms_c{level}"] = through["p50"]
                    figures[f"p99_ms_c{level}"] = through["p99"]
                    bare = await ask("bare", level, count)
                    figures[f"bare_hop_per_s_c{level}"] = bare["per_s"]
                    figures[f"bare_hop_p50_ms_c{level}"] = bare["p50"]
                    figures[f"ratio_to_bare_hop_c{level}"] = round(
                        through["per_s"] / bare["per_s"], 3
                    )
                    print(
                        f"web c{level}: {through['per_s']} turns/s (p50 {through['p50']} ms, "
                        f"p99 {through['p99']} ms), loop CPU "
                        f"{figures[f'loop_cpu_ms_per_turn_c{level}']} ms/turn, "
                        f"{figures[f'fsyncs_per_turn_c{level}']} fsyncs/turn, "
                        f"{figures[f'bytes_per_turn_c{level}']} B/turn; bare hop "
                        f"{bare['per_s']}/s (p50 {bare['p50']} ms)",
                        flush=True,
                    )
                url = f"{base}v1/chat/completions"
                for level, count in ((1, sequential), (64, turns // 2)):
                    loop_cpu = time.thread_time()
                    through = await ask("api", url, level, count, f"c{level}")
                    done = through["count"] + WARM * level
                    total_turns += done
                    figures[f"api_turns_per_s_c{level}"] = through["per_s"]
                    rss_at_10000(figures, total_turns)
                    figures[f"api_p50_ms_c{level}"] = through["p50"]
                    figures[f"api_p99_ms_c{level}"] = through["p99"]
                    figures[f"api_loop_cpu_ms_per_turn_c{level}"] = round(
                        (time.thread_time() - loop_cpu) * 1000 / done, 3
                    )
                    print(
                        f"api c{level}: {through['per_s']} turns/s (p50 {through['p50']} ms, "
                        f"p99 {through['p99']} ms)",
                        flush=True,
                    )
                gc.collect()
                figures["rss_mb_after"] = rss_mb()
    finally:
        await load.stop()
    figures["loop_cpu_ms_per_turn"] = figures["loop_cpu_ms_per_turn_c16"]
    figures["turns_total"] = total_turns
    figures["chats"] = CHATS
    figures["store"] = "jsonl, fsync every_append"
    figures["pinned_to_cores"] = pinned
    return figures


def rss_at_10000(figures: dict[str, Any], turns: int) -> None:
    """The resident set once, after the first level that brought the turns past 10 000."""
    if turns >= 10_000 and "rss_mb_after_10000_turns" not in figures:
        gc.collect()
        figures["rss_mb_after_10000_turns"] = rss_mb()
        figures["turns_at_rss_mb_after_10000_turns"] = turns


def print_profile(profiler: cProfile.Profile) -> None:
    """The event loop's hot spots over the profiled level (cumulative, then own time)."""
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(45)
        print(out.getvalue(), flush=True)


KEYS = (
    "loop_cpu_ms_per_turn",
    "fsyncs_per_turn_c1",
    "fsyncs_per_turn_c64",
    "turns_per_s_c64",
    "bare_hop_per_s_c64",
    "p50_ms_c1",
    "p99_ms_c1",
    "bytes_per_turn_c1",
    "bytes_per_turn_c64",
    "rss_mb_after",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=8000, help="turns at c64 (c16: a quarter)")
    parser.add_argument("--sequential", type=int, default=400, help="turns at c1")
    parser.add_argument("--profile", action="store_true", help="cProfile the c16 level")
    parser.add_argument(
        "--keep", type=Path, help="run in this (new) directory and keep its store to look at"
    )
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.load:
        asyncio.run(serve_load())
        return
    settle_arenas()  # as `gateway run` does before it starts (decision perf-35)
    figures = asyncio.run(bench(args.turns, args.sequential, args.profile, args.keep))
    ordered = {key: figures.pop(key) for key in KEYS} | figures
    print(orjson.dumps(ordered).decode())


if __name__ == "__main__":
    main()

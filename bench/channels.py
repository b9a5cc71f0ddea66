"""Telegram through the whole gateway: the real adapter against the fake Bot API.

    .venv/bin/python bench/channels.py [--updates 2000] [--rounds 400]

A gateway on the embedded default store (JSONL, every append fsync'd) runs
its real Telegram adapter — python-telegram-bot polling the fake Bot API —
with a zero-latency scripted model that answers every message with one
``dispatch``. The fake server and the load run in a second process (on the
other core when there are two), so the gateway's figures are its own, as in
production where Telegram is far away. Telegram's flood limiter is off (the
fake has no limits; real Telegram caps a bot at 30 messages a second) and
direct messages are open (no pairing).

- ``inbound_updates_per_s``: ``--updates`` messages from as many new users
  arrive at once; from their arrival to the last one durably accepted (its
  wake written to its new session) while the model holds every turn.
- ``roundtrip_p50_ms_c1`` / ``_p99``: one chat sends, waits for the reply,
  sends again: from the message reaching the fake to the reply reaching it
  (polling, access, routing, the durable turn, rendering, sending).
- ``roundtrip_p50_ms_c64`` / ``_p99``: the same with 64 chats at once.
- ``render_10k_telegram_ms``: rendering and chunking a 10 000-character
  answer (``channels.render.telegram_chunks``), median.

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PTB_TIMEDELTA", "true")

from bench.render import median_ms, sample_answer
from channels.render import telegram_chunks
from channels.testing import FakeTelegram
from config import validate
from gateway.app import Gateway
from threads.testing.scripted import ScriptedModel, dispatch

GATEWAY_CORE, LOAD_CORE = 0, 1


def gateway_config(root: Path, url: str, token: str) -> Any:
    data = root / "data"
    return validate(
        {
            "data_dir": str(data),
            "store": {"url": f"jsonl://{data / 'sessions'}"},
            "models": {
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            "agents": {"default": {"model": "scripted/bench"}},
            "cron": {"enabled": False},
            "threads": {"max_concurrent_turns": 256},
            "channels": {
                "web": {"enabled": False},
                "cli": {"enabled": False},
                "telegram": {
                    "enabled": True,
                    "token": token,
                    "base_url": f"{url}/bot",
                    "base_file_url": f"{url}/file/bot",
                    "rate_limit": False,
                    "access": {"dm_policy": "open"},
                },
            },
        },
        "bench",
    )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000, 3)


# -- the load: the fake Bot API and the people writing to the bot, in their own process


async def serve_load() -> None:
    """Answer commands on stdin: ``inject N``, ``roundtrip CHATS ROUNDS``, ``quit``."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with FakeTelegram(bot_username="bench_bot") as fake:
        print(json.dumps({"url": fake.url, "token": fake.token}), flush=True)
        batch = 0
        while line := (await reader.readline()).decode().split():
            if line[0] == "inject":
                batch += 1
                for n in range(int(line[1])):
                    fake.send_dm(fake.user(f"B{batch}U{n}"), "hello")
                print("injected", flush=True)
            elif line[0] == "roundtrip":
                p50, p99 = await roundtrips(fake, int(line[1]), int(line[2]), f"R{line[1]}")
                print(json.dumps({"p50": p50, "p99": p99}), flush=True)
            else:
                return


async def roundtrips(fake: FakeTelegram, chats: int, rounds: int, tag: str) -> tuple[float, float]:
    """Send, wait for the reply, again, in ``chats`` chats: p50 and p99 milliseconds."""
    users = [fake.user(f"{tag}C{n}") for n in range(chats)]
    times: list[float] = []
    per_chat = max(1, rounds // chats)

    async def chat(user: Any) -> None:
        for n in range(per_chat + 2):  # the first two warm the path
            started = time.perf_counter()
            fake.send_dm(user, f"message {n}")
            await fake.wait_for_sent(user, n + 1, timeout=120)
            if n >= 2:
                times.append(time.perf_counter() - started)

    await asyncio.gather(*(chat(user) for user in users))
    return percentile(times, 0.5), percentile(times, 0.99)


# -- the gateway, in this process


async def bench(updates: int, rounds: int) -> dict[str, float]:
    load = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--load",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert load.stdin is not None
    assert load.stdout is not None
    pin(load.pid, LOAD_CORE)
    pin(0, GATEWAY_CORE)
    fake = json.loads(await load.stdout.readline())

    async def ask(command: str) -> bytes:
        assert load.stdin is not None
        assert load.stdout is not None
        load.stdin.write(f"{command}\n".encode())
        await load.stdin.drain()
        return await load.stdout.readline()

    figures: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:  # created 0700
            root = Path(tmp)
            model = ScriptedModel(default=dispatch(("caller:user", "ok")))
            model.gate = asyncio.Event()  # turns wait: acceptance alone is measured
            config = gateway_config(root / "inbound", fake["url"], fake["token"])
            async with Gateway(config, model_clients={"scripted": model}, control=False) as gw:
                accepted = 0
                done = asyncio.Event()

                def count(*_: object) -> None:
                    nonlocal accepted
                    accepted += 1
                    if accepted == updates:
                        done.set()

                gw.manager.observe(count)
                started = time.perf_counter()
                await ask(f"inject {updates}")
                await asyncio.wait_for(done.wait(), 300)
                figures["inbound_updates_per_s"] = round(
                    updates / (time.perf_counter() - started), 1
                )
                model.gate.set()
            print(f"inbound: {figures['inbound_updates_per_s']} updates/s", flush=True)

            model = ScriptedModel(default=dispatch(("caller:user", "ok")))
            config = gateway_config(root / "roundtrip", fake["url"], fake["token"])
            async with Gateway(config, model_clients={"scripted": model}, control=False):
                for chats in (1, 64):
                    answer = json.loads(await ask(f"roundtrip {chats} {rounds}"))
                    figures[f"roundtrip_p50_ms_c{chats}"] = answer["p50"]
                    figures[f"roundtrip_p99_ms_c{chats}"] = answer["p99"]
                    print(f"{chats} chat(s): p50 {answer['p50']} ms, p99 {answer['p99']} ms")
    finally:
        await ask("quit")
        await load.wait()
    answer_text = sample_answer()
    figures["render_10k_telegram_ms"] = median_ms(lambda: telegram_chunks(answer_text), 100)
    return figures


def pin(pid: int, core: int) -> None:
    """Keep ``pid`` on one core when the machine has two (the gateway and its load apart)."""
    if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(pid, {core})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.load:
        asyncio.run(serve_load())
        return
    print(json.dumps(asyncio.run(bench(args.updates, args.rounds))))


if __name__ == "__main__":
    main()

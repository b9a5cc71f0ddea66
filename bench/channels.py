"""Telegram through the whole gateway: the real adapter against the fake Bot API.

    .venv/bin/python bench/channels.py [--updates 2000] [--rounds 200]

A gateway on the embedded default store (JSONL, every append fsync'd) runs
its real Telegram adapter — python-telegram-bot polling the fake Bot API
server on loopback — with a zero-latency scripted model that answers every
message with one ``dispatch``. Telegram's flood limiter is off (the fake has
no limits; real Telegram caps a bot at 30 messages a second) and direct
messages are open (no pairing).

- ``inbound_updates_per_s``: ``--updates`` messages from as many users are
  waiting on the fake; from the first poll to the last message durably
  accepted (its wake written to its session) while the model holds every turn.
- ``roundtrip_p50_ms_c1`` / ``_p99``: one chat sends, waits for the reply,
  sends again (``--rounds`` times): from the message reaching the fake to the
  reply reaching it (polling, routing, the durable turn, rendering, sending).
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


def gateway_config(root: Path, fake: FakeTelegram) -> Any:
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
                    "token": fake.token,
                    "base_url": fake.base_url,
                    "base_file_url": fake.base_file_url,
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


async def inbound(root: Path, updates: int) -> float:
    """Messages waiting on the fake → durably accepted, per second (turns held)."""
    model = ScriptedModel(default=dispatch(("caller:user", "ok")))
    model.gate = asyncio.Event()  # turns wait: this measures acceptance alone
    async with FakeTelegram(bot_username="bench_bot") as fake:
        users = [fake.user(f"U{n}") for n in range(updates)]
        accepted = 0
        done = asyncio.Event()
        config = gateway_config(root / "inbound", fake)
        async with Gateway(config, model_clients={"scripted": model}, control=False) as gw:

            def count(*_: object) -> None:
                nonlocal accepted
                accepted += 1
                if accepted == updates:
                    done.set()

            gw.manager.observe(count)
            started = time.perf_counter()
            for user in users:
                fake.send_dm(user, "hello")
            await asyncio.wait_for(done.wait(), 300)
            elapsed = time.perf_counter() - started
            model.gate.set()
    return round(updates / elapsed, 1)


async def roundtrips(root: Path, chats: int, rounds: int) -> tuple[float, float]:
    """Send, wait for the reply, again: p50 and p99 milliseconds over every round trip."""
    model = ScriptedModel(default=dispatch(("caller:user", "ok")))
    async with FakeTelegram(bot_username="bench_bot") as fake:
        config = gateway_config(root / f"c{chats}", fake)
        async with Gateway(config, model_clients={"scripted": model}, control=False):
            users = [fake.user(f"C{n}") for n in range(chats)]
            times: list[float] = []
            per_chat = max(1, rounds // chats) if chats > 1 else rounds

            async def chat(user: Any) -> None:
                for n in range(per_chat + 2):  # the first two warm the path
                    started = time.perf_counter()
                    fake.send_dm(user, f"message {n}")
                    await fake.wait_for_sent(user, n + 1, timeout=60)
                    if n >= 2:
                        times.append(time.perf_counter() - started)

            await asyncio.gather(*(chat(user) for user in users))
    return percentile(times, 0.5), percentile(times, 0.99)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o700)
        figures: dict[str, float] = {}
        figures["inbound_updates_per_s"] = await inbound(root, args.updates)
        print(f"inbound: {figures['inbound_updates_per_s']} updates/s", flush=True)
        for chats in (1, 64):
            p50, p99 = await roundtrips(root, chats, args.rounds if chats == 1 else args.rounds * 8)
            figures[f"roundtrip_p50_ms_c{chats}"] = p50
            figures[f"roundtrip_p99_ms_c{chats}"] = p99
            print(f"{chats} chat(s): p50 {p50} ms, p99 {p99} ms", flush=True)
        answer = sample_answer()
        figures["render_10k_telegram_ms"] = median_ms(lambda: telegram_chunks(answer), 100)
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())

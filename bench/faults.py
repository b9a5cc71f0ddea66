"""Random SIGKILLs of ``gateway run`` under load through the web chat: what is lost, what is doubled.

    .venv/bin/python bench/faults.py [--kills 6] [--chats 16] [--stores jsonl sqlite redis] [--seed 14]

Per store, a real ``gateway run`` (the process an operator runs) talks to a
fake OpenAI-compatible model that answers every numbered message once with
``reply [m:ID]`` (:mod:`threads.testing.numbered`; one in five messages asks
for a batch of two tools first). ``--chats`` web chats send messages as fast
as they are answered, as the page does: each with an id, kept until the
gateway acknowledges it and sent again on every reconnect until then. The
gateway is killed ``--kills`` times: each run is armed at a random fault
point and hit (:mod:`threads.faults`) and also gets an outside SIGKILL at a
random moment, whichever comes first; after each kill it is started again (a
start that fails is tried again, and counted) and the chats reconnect with
their cookies. After the last kill it runs unarmed until it has nothing left
to do and is stopped cleanly.

Then, per store: ``sent`` (messages the chats sent), ``accepted`` (the ones
the store holds: durable input), ``replied_once`` (accepted and answered
exactly once: a reply as the page shows it, live or in the conversation it
loads on reconnecting), ``lost`` (accepted, never answered), ``doubled``
(answered more than once), ``unconfirmed`` (sent, never durable),
``unacknowledged`` (still waiting for an ack at the end: the page would
still show them as sending), ``refused`` (the gateway said it could not take
them), ``kills`` and ``restart_attempts`` (starts it took to come back; equal
to ``kills`` when every restart works at once). The last line is one JSON
object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from channels.testing.web_client import WebChat
from gateway.testing.process import (
    STORES,
    GatewayRun,
    StartError,
    delete_keys,
    settle,
    store_url,
    write_config,
)
from threads.faults import POINTS
from threads.store import open_store
from threads.store.base import Query
from threads.store.entries import MessageEntry, ReceiptEntry
from threads.testing.fake_openai import FakeOpenAIServer
from threads.testing.numbered import ORDER, answers, numbered, order

REDIS_URL = "redis://127.0.0.1:6379/1"
# The points the load reaches: plain replies and tool batches, no children or exchanges.
LOADED_POINTS = [p for p in POINTS if p not in ("mid_child_hand_off", "mid_announce")]
MAX_HIT = 40
OUTSIDE_KILL_S = (0.3, 3.0)
START_TRIES = 60


@dataclass(slots=True)
class Store:
    """One store's run: what the chats sent, what they heard, and how the restarts went."""

    kind: str
    sent: list[str] = field(default_factory=list)
    kills: int = 0
    restart_attempts: int = 0
    fired: Counter[str] = field(default_factory=Counter)  # fault points that did the killing


async def drive(chat: WebChat, tag: str, store: Store, rng: random.Random) -> None:
    """Send the next message as soon as the last one is answered, until the socket goes."""
    while chat.connected:
        id = f"{tag}-{len(store.sent)}"
        verb = "tools" if rng.random() < 0.2 else "plain"
        mark = f"reply [m:{id}]"
        start = len(chat.replies)
        store.sent.append(id)
        try:
            # Kept until acknowledged: a send into a dying socket goes again on reconnect.
            await chat.send(order(id, verb))
        except ConnectionError:
            return
        try:
            await chat.wait_for(lambda m=mark, s=start: any(m in r for r in chat.replies[s:]), 60)
        except (ConnectionError, TimeoutError):
            return


async def start(config: Path, fault: str, store: Store) -> GatewayRun | None:
    """``gateway run``, started again until it starts (a start that fails counts an attempt).

    None when the armed process reached its fault point while starting (a
    resumed turn can get there before the banner): that was this run's kill.
    """
    for _ in range(START_TRIES):
        run = GatewayRun(config, fault=fault)
        if store.kills:
            store.restart_attempts += 1
        try:
            await run.start()
        except StartError as exc:
            if fault and run.returncode == -signal.SIGKILL:
                return None
            print(f"  {store.kind}: a restart failed: {str(exc).splitlines()[-1]}", flush=True)
            continue
        return run
    raise RuntimeError(f"{store.kind}: gateway run did not start in {START_TRIES} tries")


async def connected(chats: list[WebChat], run: GatewayRun) -> bool:
    """Connect every chat to ``run``; False when an armed run died at its fault meanwhile."""
    try:
        for chat in chats:
            await chat.connect(run.web_url)
    except (aiohttp.ClientError, ConnectionError) as exc:
        if run.fault and await run.wait() == -signal.SIGKILL:
            return False
        raise RuntimeError(f"the chats could not reconnect: {exc}") from exc
    return True


async def one_store(kind: str, args: argparse.Namespace, model: FakeOpenAIServer) -> dict[str, int]:
    rng = random.Random(f"{args.seed}-{kind}")
    root = Path(tempfile.mkdtemp(prefix=f"faults-{kind}-"))
    prefix = f"bench-faults-{secrets.token_hex(4)}:"
    url = store_url(kind, root / "data", redis=f"{REDIS_URL}?cron_prefix={prefix}cron:")
    config = write_config(root, store=url, model_url=model.base_url)
    store = Store(kind)
    try:
        async with aiohttp.ClientSession() as http:
            chats = [WebChat(http) for _ in range(args.chats)]
            for cycle in range(args.kills + 1):
                armed = cycle < args.kills
                fault = f"{rng.choice(LOADED_POINTS)}:{rng.randint(1, MAX_HIT)}" if armed else ""
                run = await start(config, fault, store)
                if run is None:
                    store.fired[f"{fault.partition(':')[0]} (starting)"] += 1
                    store.kills += 1
                    continue
                if not await connected(chats, run):
                    # A resumed turn reached the fault point before the chats were back.
                    store.fired[f"{fault.partition(':')[0]} (reconnecting)"] += 1
                    store.kills += 1
                    continue
                if not armed:
                    await settle(run, chats)
                    await run.stop()
                    break
                load = [
                    asyncio.create_task(drive(chat, f"{kind[0]}{n}", store, rng))
                    for n, chat in enumerate(chats)
                ]
                try:
                    await run.wait(rng.uniform(*OUTSIDE_KILL_S))
                    store.fired[fault.partition(":")[0]] += 1
                except TimeoutError:
                    store.fired["outside"] += 1
                await run.kill()
                store.kills += 1
                await asyncio.gather(*load)
            for chat in chats:
                await chat.close()
            # Heard: as often as it came, or as often as the page shows it now, whichever is more.
            heard = sum((answers(c.replies) | answers(c.view) for c in chats), Counter[str]())
            refused = sum(len(chat.failed) for chat in chats)
            unacked = sum(len(chat.outbox) for chat in chats)
        accepted = await stored_orders(url) & set(store.sent)
    finally:
        if kind == "redis":
            await delete_keys(REDIS_URL, prefix)
        shutil.rmtree(root, ignore_errors=True)
    counts = [heard[f"reply [m:{id}]"] for id in store.sent]
    figures = {
        "sent": len(store.sent),
        "accepted": len(accepted),
        "replied_once": sum(1 for id in accepted if heard[f"reply [m:{id}]"] == 1),
        "lost": sum(1 for id in accepted if heard[f"reply [m:{id}]"] == 0),
        "doubled": sum(1 for n in counts if n > 1),
        "unconfirmed": len(store.sent) - len(accepted),
        "unacknowledged": unacked,
        "refused": refused,
        "kills": store.kills,
        "restart_attempts": store.restart_attempts,
    }
    print(f"{kind}: {figures}  (killed at: {dict(store.fired)})", flush=True)
    return figures


async def stored_orders(url: str) -> set[str]:
    """The IDs of every message the store holds as accepted input (a receipt or a prompt)."""
    store = open_store(url)
    found: set[str] = set()
    try:
        page = await store.list(Query(limit=500))
        for header in page.sessions:
            for entry in (await store.load(header.id)).entries:
                message = None
                if isinstance(entry, MessageEntry) and entry.message.role == "user":
                    message = entry.message
                elif isinstance(entry, ReceiptEntry):
                    message = entry.msg
                if message is not None:
                    found.update(id for id, _, _ in ORDER.findall(message.text()))
    finally:
        await store.close()
    return found


async def main(args: argparse.Namespace) -> None:
    began = time.monotonic()
    figures: dict[str, int] = {}
    async with FakeOpenAIServer(default=numbered, record=False) as model:
        for kind in args.stores:
            for name, value in (await one_store(kind, args, model)).items():
                figures[f"{kind}_{name}"] = value
    figures["wall_seconds"] = round(time.monotonic() - began)
    print(json.dumps(figures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--chats", type=int, default=16)
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES))
    parser.add_argument("--seed", type=int, default=14)
    asyncio.run(main(parser.parse_args()))

"""Cost against history, through the whole gateway: turns/s, tails, GC pauses, memory, opening.

    .venv/bin/python bench/history.py [--turns 1280] [--soak 2000]

A gateway on the embedded default store (JSONL, every append fsync'd) serves
the web chat; a zero-latency OpenAI-compatible model answers every call with ``ok``.
The model (``bench.gateway.QuickModel``) and the web chat clients run in a second process (pinned to the
other core when there are two), as in ``bench/gateway.py``, whose load this
reuses. Once started, the gateway's heap is settled as ``gateway run`` settles
it (:func:`gateway.heap.settle_heap`), and its threads switch as there
(:func:`gateway.switching.settle_switching`). The model's window is set far above any history here, so no turn
compacts: every figure is below the compaction threshold.

History is made, not replayed: one real turn runs first, and its entries
(prompt, answer, turn ledger — whatever a turn writes today) are cloned with
fresh ids into each session's file through the store, before the gateway
first opens the session. A session "with N turns of history" holds N such
turns.

- ``turns_per_s_history_{0,100,1000}``: 32 sessions each, 32 clients (one
  per session, one message at a time), ``--turns`` turns per figure, in the
  same run, after one untimed message per chat (as ``bench/gateway.py``'s
  clients warm up): a session opened from disk encodes its whole context
  for its first request, once (perf-02), a cost of its open that the cold
  soak below measures, and ``first_turn_p50_ms_history_*`` shows. Every
  level's sessions are opened and warmed before any level is timed; then
  each level runs twice, half its turns a time, in the order 0, 100,
  1 000, 1 000, 100, 0 (decision perf-39), and its figures are over both
  (``turns_per_s_history_*_passes``: each pass's rate);
  ``ratio_history_1000_to_0`` is the target's (≥ 0.9);
  ``loop_cpu_ms_per_turn_history_*`` this process's event-loop CPU per turn
  (``loop_kernel_ms_per_turn_history_*`` its part in the kernel: the socket
  writes of a request that carries the whole context, among others) and
  ``load_cpu_ms_per_turn_history_*`` the load process's (the model and the
  clients, on the other core), to tell which side a level's rate is bound
  by; ``gc_ms_per_turn_history_*`` the collections' time in it, per turn,
  and ``page_faults_per_turn_history_*`` the gateway's minor page faults;
  ``request_kb_history_{0,100,1000}`` the size of a model request at each
  level (the whole context goes to the model on every turn).
- ``bare_request_cpu_ms_history_{0,100,1000}``: the event loop's CPU for one
  plain post of a body as long as the level's request, 32 at once, from this
  process to the same model, with no gateway around it
  (``bare_request_kernel_ms_history_*`` its part in the kernel): what sending
  the request costs by itself. ``request_cpu_ms_added_history_1000`` is what
  the 1 000-turn request adds to it, ``turn_cpu_ms_added_history_1000`` what a
  1 000-turn turn adds to a fresh one's loop CPU, and
  ``ratio_history_1000_to_0_ceiling`` the ratio the levels would reach (as loop
  CPU) if a turn on a long session cost only its longer request more
  (decision perf-50).
- ``p99_ms_fresh`` / ``p99_ms_history_100``: 32 clients over 500 sessions
  (each client its own 15–16 chats, in turn), ``--soak`` turns each, on fresh
  sessions (made by their first turn) and on live sessions with 100 turns of
  history (opened as threads before the soak, as the issue's table had them:
  grown in the same process); their ratio (≤ 2).
  ``p99_ms_history_100_cold`` is a third soak on 500 more such sessions left
  on disk, so that each chat's first turn opens its session while the other
  clients' turns run; its ratio to fresh is printed beside (decision
  perf-25).
- ``gc_max_pause_ms``: the longest garbage collection (``gc.callbacks``)
  while turns ran (a level's or a soak's; not the bench's own collections
  between them); ``gc_collections`` how many.
- ``rss_kb_per_live_session_1000_turns``: the resident set's growth, per
  session, as 32 sessions of 1 000 turns are opened as live threads;
  ``context_kb_per_session_1000_turns`` the text of one's context, for scale
  (the target is ≤ 128 KB beyond it). ``rss_kb_per_session_1000_turns_after_a_turn``
  is the same growth once each has answered one message: what the model
  client then keeps of its conversation, encoded, is in it (decisions
  perf-02, perf-44).
- ``rss_to_disk_ratio_after_soak``: the resident set's growth since start-up
  over the bytes of every session file, once every level ran (target ≤ 1).
- ``p99_ms_*_first_turns`` / ``p99_ms_*_later_turns`` (fresh and cold):
  the soak's turns split by whether the turn was its chat's first in
  the soak (for the cold soak, the one that opens the session);
  ``open_ms_500_entries`` the median open of one of those sessions as a
  thread, off the soak (median of twenty sessions, each opened once), and
  ``open_loop_ms_500_entries`` the event loop's CPU in those opens.
- ``open_ms_100000_entries``: a session of 100 000 entries opened as a
  thread (load, tree, thread), median of three, each after an eviction;
  ``next_turn_ms_100000_entries`` the median of its next five turns beside
  ``next_turn_ms_fresh`` on a fresh session. The big session is what a real
  one that long is: it compacted as it grew. Every
  :data:`COMPACT_EVERY`-th turn holds a compaction entry of the gateway's
  own shape (as a threshold compaction writes it: after the turn's prompt,
  keeping that prompt on), so its context after the latest compaction is a
  couple of turns, not its whole history (the model's window here is far
  above it, so no turn of the bench compacts by itself). It is opened once
  before the three (``open_ms_100000_entries_first``): that open reads every
  line, as the first open after an upgrade does, and leaves the checkpoint a
  gateway that grew the session would have left (decision perf-19).

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api import percentile_ms, rss_mb
from bench.gateway import (
    Chat,
    Load,
    LoadProcess,
    QuickModel,
    config_data,
    figures_of,
    next_reply,
    print_profile,
    serve_load,
    tree_bytes,
)
from bench.planting import seed, template_of
from config import validate
from gateway.app import Gateway
from gateway.arenas import settle_arenas
from gateway.heap import settle_heap
from gateway.switching import settle_switching
from threads.messages import Message

CLIENTS = 32
LEVELS = (0, 100, 1000)
"""Turns of history a level's sessions hold."""
SOAK_SESSIONS = 500
COMPACT_EVERY = 100
"""Turns between the big session's compactions (about 500 entries)."""


# -- the load, in its own process


class HistoryLoad(Load):
    """The model and groups of open web chats; answers ``open`` and ``run``."""

    def __init__(self, http: aiohttp.ClientSession, model: QuickModel) -> None:
        super().__init__(http, model)
        self.groups: dict[str, list[Chat]] = {}

    async def open_group(self, base: str, name: str, count: int) -> dict[str, Any]:
        self.groups[name] = [await Chat.open(base) for _ in range(count)]
        return {"chats": [chat.id for chat in self.groups[name]]}

    async def answer(self, command: str, args: list[str]) -> dict[str, Any] | None:
        if command == "open":
            return await self.open_group(args[0], args[1], int(args[2]))
        if command == "warm":
            return await self.warm(args[0], int(args[1]))
        if command == "run":
            return await self.run(args[0], int(args[1]), int(args[2]), keep=args[3:] == ["keep"])
        if command == "close":
            for chat in self.groups.pop(args[0]):
                await chat.close()
            return {}
        return None

    async def warm(self, name: str, clients: int) -> dict[str, float]:
        """One message from each chat of the group, ``clients`` at once; their median."""
        chats = self.groups[name]
        times: list[float] = []

        async def client(share: list[Chat]) -> None:
            for chat in share:
                started = time.perf_counter()
                await chat.say("warm")
                await next_reply(chat.ws)
                times.append(time.perf_counter() - started)

        await asyncio.gather(*(client(chats[c::clients]) for c in range(clients)))
        return {"p50": percentile_ms(times, 0.5)}

    async def run(
        self, name: str, clients: int, turns: int, *, keep: bool = False
    ) -> dict[str, Any]:
        """``turns`` messages, ``clients`` at once, each client over its own share of the group;
        the group's chats are closed after, unless ``keep`` (it runs again)."""
        chats = self.groups[name]
        shares = [chats[c::clients] for c in range(clients)]
        per_client = max(1, turns // clients)
        times: list[float] = []
        firsts: list[float] = []
        laters: list[float] = []

        async def client(share: list[Chat]) -> None:
            for i in range(per_client):
                chat = share[i % len(share)]
                started = time.perf_counter()
                await chat.say(f"message {i}")
                await next_reply(chat.ws)
                took = time.perf_counter() - started
                times.append(took)
                (firsts if i < len(share) else laters).append(took)

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client(share) for share in shares if share))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        # A group that runs once closes its sockets now, before the server's heartbeat
        # finds them unread.
        if not keep:
            for chat in self.groups.pop(name):
                await chat.close()
        # What the model received last: the body a turn of this group sends, for scale.
        return figures_of(times, elapsed) | {
            "times": times,
            "elapsed": elapsed,
            "cpu": cpu,
            "request_kb": round(len(self.model.last_body) / 1024, 1),
            "p99_first": percentile_ms(firsts, 0.99) if firsts else 0.0,
            "p99_later": percentile_ms(laters, 0.99) if laters else 0.0,
            "cpu_ms_per_turn": round(cpu * 1000 / len(times), 3),
        }


# -- the gateway, in this process


async def open_figures(gw: Gateway, store: Any, template: list[dict[str, Any]]) -> dict[str, float]:
    """The open of a 100-turn session as a thread, off any load: wall time and loop CPU."""
    keys = [f"web:open-probe-{n}" for n in range(20)]
    for key in keys:
        await seed(store, key, 100, template)
    walls, cpus = [], []
    for key in keys:
        gc.collect()
        began, cpu = time.perf_counter(), time.thread_time()
        await gw.manager.open_thread(key)
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - began)
    return {
        "open_ms_500_entries": round(statistics.median(walls) * 1000, 2),
        "open_loop_ms_500_entries": round(statistics.median(cpus) * 1000, 2),
    }


def gateway_config(root: Path, model_url: str) -> Any:
    data = config_data(root, model_url)
    # No turn here reaches the compaction threshold.
    data["models"]["settings"]["fake/bench"]["context_window"] = 10_000_000
    data["channels"] = {"web": {"enabled": True}, "cli": {"enabled": False}}
    return validate(data, "bench")


class GcPauses:
    """Every garbage collection's duration, from ``gc.callbacks``, while :meth:`watching`."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._began = 0.0

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        gc.callbacks.append(self)
        try:
            yield
        finally:
            gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._began)


def context_bytes(messages: list[Message]) -> int:
    return sum(len(m.text().encode()) for m in messages)


def level_figures(history: int, passes: list[dict[str, Any]]) -> dict[str, Any]:
    """One history level's figures over its passes: turns/s over their whole time, tails over
    every turn, CPU and collections per turn."""
    times = [took for result in passes for took in result["times"]]
    count = len(times)
    elapsed = sum(result["elapsed"] for result in passes)

    def per_turn_ms(key: str) -> float:
        return round(sum(result[key] for result in passes) * 1000 / count, 3)

    return {
        f"turns_per_s_history_{history}": round(count / elapsed, 1),
        f"turns_per_s_history_{history}_passes": [result["per_s"] for result in passes],
        f"p99_ms_history_{history}_32_sessions": percentile_ms(times, 0.99),
        f"request_kb_history_{history}": passes[-1]["request_kb"],
        f"loop_cpu_ms_per_turn_history_{history}": per_turn_ms("loop_cpu"),
        f"loop_kernel_ms_per_turn_history_{history}": per_turn_ms("loop_sys"),
        f"gc_ms_per_turn_history_{history}": per_turn_ms("gc"),
        f"load_cpu_ms_per_turn_history_{history}": per_turn_ms("cpu"),
        f"page_faults_per_turn_history_{history}": round(
            sum(result["faults"] for result in passes) / count, 2
        ),
    }


async def bare_requests(model_url: str, sizes: dict[int, int], count: int) -> dict[str, Any]:
    """What sending each level's request costs by itself: ``count`` plain posts of a body
    that long to the model, :data:`CLIENTS` at once, from this process's event loop, where
    the gateway's model client sends from (decision perf-50).

    Per level, the loop's CPU per request and its part in the kernel, averaged over two
    passes in mirrored order, as the levels run (:func:`ceiling_figures` compares them).
    """
    url = f"{model_url}/chat/completions"
    headers = {"Content-Type": "application/json"}
    cpu: dict[int, list[float]] = {history: [] for history in sizes}
    kernel: dict[int, list[float]] = {history: [] for history in sizes}
    async with aiohttp.ClientSession() as http:

        async def post(body: bytes, times: int) -> None:
            for _ in range(times):
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()

        for history in (*sizes, *reversed(sizes)):
            # A body of each client's own, as each session sends its own conversation.
            bodies = [bytes([ord("a") + n % 26]) * sizes[history] for n in range(CLIENTS)]
            await asyncio.gather(*(post(body, 2) for body in bodies))  # connections open
            began = time.thread_time()
            began_sys = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
            await asyncio.gather(*(post(body, count // CLIENTS) for body in bodies))
            sent = count // CLIENTS * CLIENTS
            cpu[history].append((time.thread_time() - began) / sent)
            kernel[history].append(
                (resource.getrusage(resource.RUSAGE_THREAD).ru_stime - began_sys) / sent
            )
    figures: dict[str, Any] = {}
    for history in sizes:
        figures[f"bare_request_cpu_ms_history_{history}"] = round(
            statistics.mean(cpu[history]) * 1000, 3
        )
        figures[f"bare_request_kernel_ms_history_{history}"] = round(
            statistics.mean(kernel[history]) * 1000, 3
        )
    return figures


def ceiling_figures(figures: dict[str, Any]) -> dict[str, float]:
    """What a 1 000-turn request adds by itself against what a 1 000-turn turn adds, and the
    history ratio a turn that added only its request would reach (as loop CPU)."""
    turn_0 = figures["loop_cpu_ms_per_turn_history_0"]
    request_added = (
        figures["bare_request_cpu_ms_history_1000"] - figures["bare_request_cpu_ms_history_0"]
    )
    return {
        "request_cpu_ms_added_history_1000": round(request_added, 3),
        "turn_cpu_ms_added_history_1000": round(
            figures["loop_cpu_ms_per_turn_history_1000"] - turn_0, 3
        ),
        "ratio_history_1000_to_0_ceiling": round(turn_0 / (turn_0 + request_added), 3),
    }


async def bench(turns: int, soak: int, profile: bool) -> dict[str, Any]:
    load = await LoadProcess.start(__file__)
    ask, model_url, pinned = load.ask, load.model_url, load.pinned

    figures: dict[str, Any] = {"machine_load_1m_at_start": round(os.getloadavg()[0], 2)}
    pauses = GcPauses()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = gateway_config(Path(tmp), model_url)
            sessions_dir = config.data_dir / "sessions"
            async with Gateway(config, control=False) as gw:
                assert gw.http is not None
                base = gw.http.url
                store = gw.manager.store
                settle_heap()
                settle_switching()
                rss_start = rss_mb()

                # One real turn: what a turn writes today is the template.
                (template_chat,) = (await ask("open", base, "template", 1))["chats"]
                await ask("run", "template", 1, 1)
                template_id = await store.resolve(f"web:{template_chat}")
                assert template_id is not None
                template = template_of((await store.load(template_id)).entries)

                async def group(name: str, count: int, history: int) -> list[str]:
                    """``count`` chats, each a session with ``history`` turns; their keys."""
                    chats: list[str] = (await ask("open", base, name, count))["chats"]
                    keys = [f"web:{chat}" for chat in chats]
                    for key in keys:
                        await seed(store, key, history, template)
                    return keys

                # The gateway serves as many turns first, untimed, as it had served before
                # the 1 000-turn sessions open when the levels ran one after another: the
                # heap they open into is a serving gateway's, not a fresh one's.
                await group("serving", CLIENTS, 0)
                await ask("run", "serving", CLIENTS, 2 * turns)
                for history in LEVELS:
                    keys = await group(f"h{history}", CLIENTS, history)
                    gc.collect()
                    before = rss_mb()
                    for key in keys:
                        await gw.manager.open_thread(key)
                    # One pass of the loop: the handle that woke this task holds the last
                    # open's finished load (its future's result) until the task yields.
                    await asyncio.sleep(0)
                    gc.collect()
                    if history == 1000:
                        grown = (rss_mb() - before) * 1024 / len(keys)
                        figures["rss_kb_per_live_session_1000_turns"] = round(grown, 1)
                        thread = gw.manager.thread(keys[0])
                        assert thread is not None
                        figures["context_kb_per_session_1000_turns"] = round(
                            context_bytes(thread.session.context()) / 1024, 1
                        )
                    warmed = await ask("warm", f"h{history}", CLIENTS)
                    figures[f"first_turn_p50_ms_history_{history}"] = warmed["p50"]
                    if history == 1000:
                        gc.collect()
                        spoken = (rss_mb() - before) * 1024 / len(keys)
                        figures["rss_kb_per_session_1000_turns_after_a_turn"] = round(spoken, 1)

                # Every level runs twice, 0, 100, 1 000, then 1 000, 100, 0, with every
                # level's sessions live and warm before the first: each level meets the
                # same process, and a drift of the machine's speed over the run falls on
                # all of them alike (decision perf-39).
                passes: dict[int, list[dict[str, Any]]] = {history: [] for history in LEVELS}
                profiler = cProfile.Profile() if profile else None
                for history in (*LEVELS, *reversed(LEVELS)):
                    again = bool(passes[history])
                    profiled = profiler is not None and history == 1000
                    if profiled:
                        profiler.enable()
                    loop_cpu, collected = time.thread_time(), len(pauses.pauses)
                    loop_sys = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
                    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                    with pauses.watching():
                        result = await ask(
                            "run", f"h{history}", CLIENTS, turns // 2, *(() if again else ("keep",))
                        )
                    result["loop_cpu"] = time.thread_time() - loop_cpu
                    result["loop_sys"] = (
                        resource.getrusage(resource.RUSAGE_THREAD).ru_stime - loop_sys
                    )
                    result["gc"] = sum(pauses.pauses[collected:])
                    result["faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                    if profiled:
                        profiler.disable()
                    passes[history].append(result)
                if profiler is not None:
                    print_profile(profiler)
                for history in LEVELS:
                    figures |= level_figures(history, passes[history])
                    print(
                        f"history {history}: {figures[f'turns_per_s_history_{history}']} turns/s "
                        f"(passes: {figures[f'turns_per_s_history_{history}_passes']}), "
                        f"p99 {figures[f'p99_ms_history_{history}_32_sessions']} ms",
                        flush=True,
                    )
                figures["ratio_history_1000_to_0"] = round(
                    figures["turns_per_s_history_1000"] / figures["turns_per_s_history_0"], 3
                )
                sizes = {
                    history: int(figures[f"request_kb_history_{history}"] * 1024)
                    for history in LEVELS
                }
                figures |= await bare_requests(model_url, sizes, turns)
                figures |= ceiling_figures(figures)
                print(
                    f"a 1 000-turn request adds {figures['request_cpu_ms_added_history_1000']} "
                    f"ms of loop CPU by itself, a 1 000-turn turn "
                    f"{figures['turn_cpu_ms_added_history_1000']} ms; the ratio's ceiling "
                    f"{figures['ratio_history_1000_to_0_ceiling']}",
                    flush=True,
                )

                for history, label, live in (
                    (0, "fresh", False),
                    (100, "history_100", True),
                    (100, "history_100_cold", False),
                ):
                    keys = await group(label, SOAK_SESSIONS, history)
                    if live:
                        for key in keys:
                            await gw.manager.open_thread(key)
                    with pauses.watching():
                        result = await ask("run", label, CLIENTS, soak)
                    figures[f"p99_ms_{label}"] = result["p99"]
                    figures[f"p50_ms_{label}"] = result["p50"]
                    figures[f"turns_per_s_{label}_500_sessions"] = result["per_s"]
                    if not live:
                        figures[f"p99_ms_{label}_first_turns"] = result["p99_first"]
                        figures[f"p99_ms_{label}_later_turns"] = result["p99_later"]
                    print(
                        f"500 sessions, {label}: {result['per_s']} turns/s, p50 "
                        f"{result['p50']} ms, p99 {result['p99']} ms",
                        flush=True,
                    )
                for label in ("history_100", "history_100_cold"):
                    figures[f"p99_ratio_{label}_to_fresh"] = round(
                        figures[f"p99_ms_{label}"] / figures["p99_ms_fresh"], 3
                    )
                figures["gc_max_pause_ms"] = round(max(pauses.pauses, default=0.0) * 1000, 3)
                figures["gc_collections"] = len(pauses.pauses)
                gc.collect()
                disk = tree_bytes(sessions_dir)
                figures["rss_to_disk_ratio_after_soak"] = round(
                    (rss_mb() - rss_start) * 2**20 / disk, 3
                )
                figures["disk_mb_sessions"] = round(disk / 2**20, 1)

                figures |= await open_figures(gw, store, template)
                turns_big = 100_000 // len(template) + 1
                (chat,) = (await ask("open", base, "big", 1))["chats"]
                big = f"web:{chat}"
                await seed(store, big, turns_big, template, compact_every=COMPACT_EVERY)
                begun = time.perf_counter()
                await gw.manager.open_thread(big)
                figures["open_ms_100000_entries_first"] = round(
                    (time.perf_counter() - begun) * 1000, 1
                )
                opens = []
                for _ in range(3):
                    await gw.manager.evict_idle(0)
                    gc.collect()
                    begun = time.perf_counter()
                    await gw.manager.open_thread(big)
                    opens.append(time.perf_counter() - begun)
                figures["open_ms_100000_entries"] = round(statistics.median(opens) * 1000, 1)
                figures["entries_in_the_big_session"] = (
                    turns_big * len(template) + turns_big // COMPACT_EVERY
                )
                after_big = await ask("run", "big", 1, 5)
                await group("fresh_one", 1, 0)
                after_fresh = await ask("run", "fresh_one", 1, 5)
                figures["next_turn_ms_100000_entries"] = after_big["p50"]
                figures["next_turn_ms_fresh"] = after_fresh["p50"]
                print(
                    f"open of {figures['entries_in_the_big_session']} entries: "
                    f"{figures['open_ms_100000_entries']} ms; next turn {after_big['p50']} ms "
                    f"(fresh: {after_fresh['p50']} ms)",
                    flush=True,
                )
    finally:
        await load.stop()
    figures["pinned_to_cores"] = pinned
    figures["store"] = "jsonl, fsync every_append"
    return figures


KEYS = (
    "turns_per_s_history_0",
    "turns_per_s_history_100",
    "turns_per_s_history_1000",
    "p99_ms_fresh",
    "p99_ms_history_100",
    "gc_max_pause_ms",
    "rss_kb_per_live_session_1000_turns",
    "open_ms_100000_entries",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1280, help="turns per history level")
    parser.add_argument("--soak", type=int, default=2000, help="turns per 500-session round")
    parser.add_argument("--profile", action="store_true", help="cProfile the 1 000-turn level")
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.load:
        asyncio.run(serve_load(HistoryLoad))
        return
    settle_arenas()  # as `gateway run` does before it starts (decision perf-35)
    figures = asyncio.run(bench(args.turns, args.soak, args.profile))
    ordered = {key: figures.pop(key) for key in KEYS} | figures
    print(orjson.dumps(ordered).decode())


if __name__ == "__main__":
    main()

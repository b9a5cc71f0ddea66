"""Figures of the durable session store, jsonl and sqlite, with fsync on.

For each backend: single-entry append latency (p50/p99) and its ratio to a
bare ``os.write`` + ``os.fsync`` loop on the same disk in the same run; the
load time of a 10 000-entry session; ``list`` and ``resolve`` over 10 000
sessions; and group commit — appends per second with 64 concurrent writers
over 16 sessions. For the jsonl key index it also measures the two designs
docs/decisions/store-01-jsonl-key-index.md weighs: a header scan at start-up against an index file
(its load, and a ``point`` as an appended journal line or as a whole file
atomically replaced).

    .venv/bin/python bench/store.py [--appends N] [--sessions N]

Everything is written under a temporary directory beside the working
directory (the same disk), removed at the end. The last line is one JSON
object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from threads.ids import new_entry_id, new_session_id
from threads.messages import Message
from threads.store import open_store
from threads.store.base import Query, StoreOptions
from threads.store.entries import Entry, Header, MessageEntry
from threads.store.keyfile import encode_point, read_journal
from threads.store.listing import DirectoryListing
from threads.store.private import fsync_dir

FIGURES: dict[str, Any] = {}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def entry(text: str = "hello, this is one message of a conversation") -> Entry:
    return MessageEntry(id=new_entry_id(), message=Message.user(text))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_fsync(directory: Path, count: int) -> list[float]:
    """The floor: one line written and fsynced per iteration, no Python store around it."""
    line = orjson.dumps({"type": "message", "text": "x" * 120}) + b"\n"
    fd = os.open(directory / "bare.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return samples


async def timed(call: Callable[[], Awaitable[Any]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


def url_of(backend: str, where: Path) -> str:
    return (
        f"jsonl://{where / 'sessions'}"
        if backend == "jsonl"
        else f"sqlite:///{where / 'gateway.db'}"
    )


async def bench_append(backend: str, where: Path, count: int) -> None:
    store: Any = open_store(url_of(backend, where))
    h = Header(id=new_session_id())
    await store.create(h)
    await store.append(h.id, [entry()])  # the lock and the descriptor, taken once
    bare = bare_fsync(where, count)
    samples = await timed(lambda: store.append(h.id, [entry()]), count)
    bare_after = bare_fsync(where, count)
    await store.close()
    floor = statistics.median(bare + bare_after)
    p50, p99 = statistics.median(samples), pct(samples, 0.99)
    FIGURES[f"bare_fsync_p50_ms_{backend}_run"] = round(floor * 1e3, 3)
    FIGURES[f"{backend}_append_p50_ms"] = round(p50 * 1e3, 3)
    FIGURES[f"{backend}_append_p99_ms"] = round(p99 * 1e3, 3)
    FIGURES[f"{backend}_append_ratio_to_fsync"] = round(p50 / floor, 3)
    FIGURES[f"{backend}_append_p99_ratio_to_fsync"] = round(p99 / pct(bare + bare_after, 0.99), 3)
    say(
        f"{backend}: append p50 {p50 * 1e3:.3f} ms p99 {p99 * 1e3:.3f} ms; bare write+fsync "
        f"p50 {floor * 1e3:.3f} ms; ratio {p50 / floor:.2f}"
    )


async def bench_thread_hop(count: int) -> None:
    """The floor under any off-loop write: a no-op there and back through the writer thread."""
    from threads.store.committer import Committer

    committer = Committer("bench-hop")
    samples = await timed(lambda: committer.run(lambda rnd, op: None), count)
    await committer.stop()
    FIGURES["writer_thread_round_trip_p50_us"] = round(statistics.median(samples) * 1e6, 1)
    say(f"writer thread round trip (no I/O) p50 {statistics.median(samples) * 1e6:.1f} us")


async def bench_load(backend: str, where: Path, entries: int) -> None:
    store: Any = open_store(url_of(backend, where), StoreOptions(fsync="on_flush"))
    h = Header(id=new_session_id())
    await store.create(h)
    for start in range(0, entries, 500):
        await store.append(
            h.id, [entry(f"message {i} of a long session") for i in range(start, start + 500)]
        )
    await store.flush(h.id)
    samples = []
    for _ in range(7):
        gc.collect()
        begin = time.perf_counter()
        loaded = await store.load(h.id)
        samples.append(time.perf_counter() - begin)
        assert len(loaded.entries) == entries
    await store.close()
    FIGURES[f"{backend}_load_{entries}_entries_ms"] = round(statistics.median(samples) * 1e3, 2)
    FIGURES[f"{backend}_load_{entries}_entries_best_ms"] = round(min(samples) * 1e3, 2)
    say(
        f"{backend}: load of {entries} entries median {statistics.median(samples) * 1e3:.1f} ms, best {min(samples) * 1e3:.1f} ms"
    )


async def bench_many_sessions(backend: str, where: Path, sessions: int) -> None:
    url = url_of(backend, where)
    bulk: Any = open_store(url, StoreOptions(fsync="on_flush"))
    keys = [f"telegram:{i}" for i in range(sessions)]
    headers = [Header(id=new_session_id(), meta={"key": k}) for k in keys]
    for start in range(0, sessions, 256):
        chunk = headers[start : start + 256]
        await asyncio.gather(*(bulk.create(h) for h in chunk))
        await asyncio.gather(*(bulk.point(h.meta["key"], h.id) for h in chunk))
        await asyncio.gather(*(bulk.release(h.id) for h in chunk))
    await bulk.close()

    store: Any = open_store(url)
    begin = time.perf_counter()
    page = await store.list(Query(limit=50))
    cold_list = time.perf_counter() - begin
    assert page.total == sessions
    lists = await timed(lambda: store.list(Query(limit=50)), 20)
    # jsonl trusts its header cache only once the directory's mtime is two seconds
    # old (the clock behind it is coarse): measure the settled state too.
    await asyncio.sleep(2.1)
    settled = await timed(lambda: store.list(Query(limit=50)), 20)
    cursor = page.sessions[-1]
    pages = await timed(
        lambda: store.list(Query(limit=50, before=cursor.created, before_id=cursor.id)), 20
    )
    filtered = await timed(lambda: store.list(Query(meta={"key": keys[sessions // 2]})), 5)
    # A create changes the directory: jsonl's next list rescans it, a stat per file.
    await store.create(Header(id=new_session_id()))
    begin = time.perf_counter()
    await store.list(Query(limit=50))
    after_create = time.perf_counter() - begin
    begin = time.perf_counter()
    assert await store.resolve(keys[0]) == headers[0].id
    cold_resolve = time.perf_counter() - begin
    probe = iter(range(10**9))
    resolves = await timed(lambda: store.resolve(keys[next(probe) % sessions]), 2000)
    await store.close()
    FIGURES[f"{backend}_list_{sessions}_sessions_first_ms"] = round(cold_list * 1e3, 2)
    FIGURES[f"{backend}_list_{sessions}_sessions_p50_ms"] = round(statistics.median(lists) * 1e3, 2)
    FIGURES[f"{backend}_list_{sessions}_sessions_settled_p50_ms"] = round(
        statistics.median(settled) * 1e3, 2
    )
    FIGURES[f"{backend}_list_{sessions}_sessions_next_page_p50_ms"] = round(
        statistics.median(pages) * 1e3, 2
    )
    FIGURES[f"{backend}_list_{sessions}_sessions_meta_filter_p50_ms"] = round(
        statistics.median(filtered) * 1e3, 2
    )
    FIGURES[f"{backend}_list_{sessions}_sessions_after_a_create_ms"] = round(after_create * 1e3, 2)
    FIGURES[f"{backend}_resolve_{sessions}_sessions_first_ms"] = round(cold_resolve * 1e3, 3)
    FIGURES[f"{backend}_resolve_{sessions}_sessions_p50_us"] = round(
        statistics.median(resolves) * 1e6, 1
    )
    say(
        f"{backend}: {sessions} sessions — list first {cold_list * 1e3:.1f} ms, p50 "
        f"{statistics.median(lists) * 1e3:.2f} ms (settled {statistics.median(settled) * 1e3:.2f} ms, "
        f"after a create {after_create * 1e3:.1f} ms); resolve first {cold_resolve * 1e3:.2f} ms, "
        f"p50 {statistics.median(resolves) * 1e6:.1f} us"
    )


async def bench_group_commit(
    backend: str, where: Path, writers: int, sessions: int, each: int, *, durable: bool = True
) -> float:
    """Appends per second of ``writers`` writing over ``sessions``; ``durable``: fsync on."""
    fsync = "every_append" if durable else "on_flush"
    store: Any = open_store(
        url_of(backend, where / f"group-{backend}-{fsync}"), StoreOptions(fsync=fsync)
    )
    headers = [Header(id=new_session_id()) for _ in range(sessions)]
    for h in headers:
        await store.create(h)
    latencies: list[float] = []

    async def writer(n: int) -> None:
        session = headers[n % sessions].id
        for _ in range(each):
            start = time.perf_counter()
            await store.append(session, [entry()])
            latencies.append(time.perf_counter() - start)

    begin = time.perf_counter()
    await asyncio.gather(*(writer(n) for n in range(writers)))
    elapsed = time.perf_counter() - begin
    await store.close()
    total = writers * each
    name = f"{backend}_group_commit_{writers}w_{sessions}s"
    if not durable:
        FIGURES[f"{name}_appends_per_s_fsync_off"] = round(total / elapsed)
        say(
            f"{backend}: {writers} writers over {sessions} sessions — {total / elapsed:.0f} appends/s, fsync off"
        )
        return total / elapsed
    FIGURES[f"{name}_appends_per_s"] = round(total / elapsed)
    FIGURES[f"{name}_p50_ms"] = round(statistics.median(latencies) * 1e3, 3)
    say(
        f"{backend}: {writers} writers over {sessions} sessions — {total / elapsed:.0f} appends/s durable"
    )
    return total / elapsed


def bench_key_index_designs(where: Path, sessions: int) -> None:
    """The two jsonl key-index designs over the sessions bench_many_sessions made."""
    root = where / "sessions"
    listing = DirectoryListing(str(root), ".jsonl")
    gc.collect()
    begin = time.perf_counter()
    scanned = {h.meta["key"]: h.id for _, h in listing.headers() if "key" in h.meta}
    scan = time.perf_counter() - begin
    assert len(scanned) == sessions
    begin = time.perf_counter()
    journal = read_journal(str(root), salvage=False)
    load = time.perf_counter() - begin
    assert journal is not None
    assert len(journal) == sessions
    # A point as one appended journal line (what the store does) ...
    fd = os.open(root / ".bench-journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    appended = []
    for i in range(200):
        start = time.perf_counter()
        os.write(fd, encode_point(f"bench:{i}", "s_x"))
        os.fsync(fd)
        appended.append(time.perf_counter() - start)
    os.close(fd)
    # ... against rewriting the whole index file and renaming it into place.
    replaced = []
    for i in range(30):
        journal[f"bench:{i}"] = "s_x"
        start = time.perf_counter()
        tmp = root / ".bench-index.tmp"
        tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(tfd, orjson.dumps(journal))
        os.fsync(tfd)
        os.close(tfd)
        os.rename(tmp, root / ".bench-index.json")
        fsync_dir(str(root))
        replaced.append(time.perf_counter() - start)
    FIGURES[f"key_index_header_scan_{sessions}_sessions_ms"] = round(scan * 1e3, 1)
    FIGURES[f"key_index_journal_load_{sessions}_keys_ms"] = round(load * 1e3, 2)
    FIGURES["key_index_point_journal_append_p50_ms"] = round(statistics.median(appended) * 1e3, 3)
    FIGURES["key_index_point_replace_whole_file_p50_ms"] = round(
        statistics.median(replaced) * 1e3, 3
    )
    say(
        f"jsonl key index over {sessions}: header scan {scan * 1e3:.1f} ms, journal load "
        f"{load * 1e3:.2f} ms; point by journal append {statistics.median(appended) * 1e3:.3f} ms, "
        f"by replacing the file {statistics.median(replaced) * 1e3:.3f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix=".bench-store-", dir=os.getcwd()))
    started = time.perf_counter()
    try:
        await bench_thread_hop(args.appends)
        for backend in ("jsonl", "sqlite"):
            where = scratch / backend
            where.mkdir()
            (where / "append").mkdir()
            await bench_append(backend, where / "append", args.appends)
            await bench_load(backend, where / "append", args.entries)
            durable = await bench_group_commit(backend, where, writers=64, sessions=16, each=40)
            off = await bench_group_commit(
                backend, where, writers=64, sessions=16, each=40, durable=False
            )
            FIGURES[f"{backend}_group_commit_64w_16s_ratio_to_fsync_off"] = round(durable / off, 3)
            many = where / "many"
            many.mkdir()
            await bench_many_sessions(backend, many, args.sessions)
            if backend == "jsonl":
                bench_key_index_designs(many, args.sessions)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    FIGURES["bench_seconds"] = round(time.perf_counter() - started, 1)
    say(orjson.dumps(FIGURES).decode())


if __name__ == "__main__":
    asyncio.run(main())

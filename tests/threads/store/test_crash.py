"""Crash safety: a writer SIGKILLed mid-append or mid-create loses nothing it acknowledged.

Each test runs a child process that writes through a real store and reports
every acknowledged write on its stdout; the parent kills it with SIGKILL at a
known point — inside the append or create window, reported by the child
through the jsonl store's ``pause`` seam, or at random inside a loop of large
batches — then a new writer loads, repairs and appends, and a third load is
clean.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.threads.store.helpers import msg, texts
from threads.errors import NotFoundError
from threads.store import open_store
from threads.store.base import Loaded
from threads.store.jsonl import JsonlStore

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from threads.store import open_store
    from threads.store.jsonl import JsonlStore
    from threads.store.entries import Header, MessageEntry
    from threads.messages import Message

    url, mode, batch_size, text_size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    armed = False

    def say(line):
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

    def pause(point):
        if armed and mode.startswith("pause:") and point == mode[len("pause:"):]:
            say("paused " + point)
            os.read(0, 1)  # the parent never writes: wait here for the SIGKILL

    def batch(tag):
        return [
            MessageEntry(id=f"e_{tag}_{i}", message=Message.user(f"{tag}:{i}:" + "x" * text_size))
            for i in range(batch_size)
        ]

    async def main():
        global armed
        if url.startswith("jsonl://"):
            store = JsonlStore(url[len("jsonl://"):], pause=pause)
        else:
            store = open_store(url)
        await store.create(Header(id="s_crash"))
        say("created s_crash")
        for n in range(3):
            await store.append("s_crash", batch(f"b{n}"))
            say(f"acked b{n}")
        armed = True
        if mode == "pause:create:written":
            await store.create(Header(id="s_half"))
            say("created s_half")
        elif mode == "pause:append:half-written":
            await store.append("s_crash", batch("b3"))
            say("acked b3")
        else:
            n = 3
            while True:
                await store.append("s_crash", batch(f"b{n}"))
                say(f"acked b{n}")
                n += 1

    asyncio.run(main())
    """
)


async def run_child_until(
    url: str, mode: str, until: str, *, batch_size: int = 3, text_size: int = 10
) -> list[str]:
    """Start the child, read its reports until ``until``, SIGKILL it, reap it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        url,
        mode,
        str(batch_size),
        str(text_size),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while True:
            raw = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert raw, f"the child ended early after {lines}"
            lines.append(raw.decode().strip())
            if lines[-1].startswith(until):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()  # reaped: its pid is gone, as after a real crash
    assert proc.returncode == -signal.SIGKILL
    return lines


async def load_fresh(url: str, session: str) -> Loaded:
    """Load through a new store, as a third process would, and close it."""
    store: Any = open_store(url)
    try:
        loaded: Loaded = await store.load(session)
        return loaded
    finally:
        await store.close()


def acked(lines: list[str]) -> list[str]:
    return [line.split()[1] for line in lines if line.startswith("acked")]


async def test_a_writer_killed_mid_append_leaves_a_torn_tail_the_next_writer_repairs(
    tmp_path: Path,
) -> None:
    url = f"jsonl://{tmp_path / 'sessions'}"
    lines = await run_child_until(url, "pause:append:half-written", "paused")
    assert acked(lines) == ["b0", "b1", "b2"]
    store = open_store(url)
    try:
        first = await store.load("s_crash")
        assert [t.split(":")[0] for t in texts(first.entries)] == ["b0"] * 3 + ["b1"] * 3 + [
            "b2"
        ] * 3
        assert first.report is not None
        assert first.report.torn == 11  # header, nine acknowledged lines, then the torn one
        await store.append("s_crash", [msg("after the crash")])
        third = await load_fresh(url, "s_crash")
        assert third.report is None
        assert len(third.entries) == 10
        assert texts(third.entries)[-1] == "after the crash"
    finally:
        await store.close()


async def test_a_writer_killed_mid_create_leaves_no_half_session(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    url = f"jsonl://{root}"
    lines = await run_child_until(url, "pause:create:written", "paused")
    assert acked(lines) == ["b0", "b1", "b2"]
    assert any(p.name.startswith(".s_half.") for p in root.iterdir())  # the unlinked temp
    store = open_store(url)
    try:
        with pytest.raises(NotFoundError):
            await store.load("s_half")
        assert [h.id for h in (await store.list()).sessions] == ["s_crash"]
        # The session whose create was cut can be created; the other loads whole.
        from threads.store.entries import Header

        await store.create(Header(id="s_half"))
        await store.append("s_half", [msg("fresh")])
        loaded = await store.load("s_crash")
        assert loaded.report is None
        assert len(loaded.entries) == 9
        await store.append("s_crash", [msg("after the crash")])
        third = await load_fresh(url, "s_crash")
        assert third.report is None
        assert len(third.entries) == 10
        assert texts((await store.load("s_half")).entries) == ["fresh"]
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
async def test_a_writer_killed_among_large_batches_loses_no_acknowledged_batch(
    tmp_path: Path, backend: str
) -> None:
    url = (
        f"jsonl://{tmp_path / 'sessions'}"
        if backend == "jsonl"
        else f"sqlite:///{tmp_path / 'gateway.db'}"
    )
    batch_size = 400
    lines = await run_child_until(url, "loop", "acked b5", batch_size=batch_size, text_size=2000)
    done = acked(lines)
    store = open_store(url)
    try:
        first = await store.load("s_crash")
        got = texts(first.entries)
        tags = [t.split(":")[0] for t in got]
        # Every acknowledged batch is there, whole and in order; the batch in flight is
        # there whole or not at all.
        assert tags[: len(done) * batch_size] == [b for b in done for _ in range(batch_size)]
        assert len(got) % batch_size == 0
        assert len(got) // batch_size in (len(done), len(done) + 1)
        await store.append("s_crash", [msg("after the crash")])
        third = await load_fresh(url, "s_crash")
        assert third.report is None
        assert texts(third.entries)[-1] == "after the crash"
        assert len(third.entries) == len(got) + 1
    finally:
        await store.close()


async def test_the_pause_seam_is_off_by_default(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "s")
    assert store._pause is None
    await store.close()

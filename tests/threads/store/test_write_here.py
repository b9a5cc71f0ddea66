"""A write made without a flush is made on the event loop's thread when the writer is idle."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from tests.threads.store.helpers import File, header, msg, texts
from threads.errors import UnavailableError
from threads.store.base import AtOnce
from threads.store.committer import Committer, Op, Round
from threads.store.jsonl import JsonlStore

HANG = 30.0  # a hang guard, never a measure


def held_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


class Blocking:
    """A writer-thread operation that, once started, waits until :attr:`gate` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, rnd: Round, op: Op[None]) -> None:
        self.started.set()
        self.gate.wait(HANG)


class Here:
    """An operation for ``run_here`` that notes the thread it ran on."""

    def __init__(self, answer: bool = True, file: File | None = None) -> None:
        self.threads: list[int] = []
        self.answer = answer
        self.file = file

    def __call__(self, rnd: Round, op: Op[bool]) -> bool:
        self.threads.append(threading.get_ident())
        if self.file is not None:
            rnd.sync(self.file, op)
        return self.answer


async def test_an_idle_writers_operation_runs_on_the_callers_thread() -> None:
    committer = Committer("test")
    await committer.run(lambda rnd, op: None)  # the writer thread is up, and idle
    here = Here()
    assert committer.run_here(here)
    assert here.threads == [threading.get_ident()]
    declined = Here(answer=False)
    assert not committer.run_here(declined)  # it could not be done here: it says so
    await committer.stop()
    assert not committer.run_here(Here())  # a stopped committer runs nothing


async def test_an_operation_waits_its_turn_behind_what_the_loop_handed_over() -> None:
    committer = Committer("test")
    held = Blocking()
    first = committer.submit(held)
    here = Here()
    assert not committer.run_here(here)  # the first is not handed over yet
    assert await asyncio.to_thread(held.started.wait, HANG)
    assert not committer.run_here(here)  # the first runs on the writer thread
    held.gate.set()
    await asyncio.wait_for(first, HANG)
    assert here.threads == []
    assert committer.run_here(here)  # settled: the writer is idle again
    assert here.threads == [threading.get_ident()]
    await committer.stop()


async def test_nothing_runs_here_beside_a_round_another_loop_handed_over() -> None:
    committer = Committer("test")
    held = Blocking()

    async def elsewhere() -> None:
        await committer.run(held)

    other = threading.Thread(target=asyncio.run, args=(elsewhere(),))
    other.start()
    here = Here()
    try:
        assert await asyncio.to_thread(held.started.wait, HANG)
        assert not committer.run_here(here)  # this loop handed nothing over, but a round runs
    finally:
        held.gate.set()
        await asyncio.to_thread(other.join, HANG)
    assert committer.run_here(here)
    assert here.threads == [threading.get_ident()]
    await committer.stop()


async def test_a_cancelled_operation_the_writer_skipped_does_not_keep_it_busy() -> None:
    committer = Committer("test")
    ran = Here()
    task = asyncio.ensure_future(committer.run(lambda rnd, op: ran(rnd, op)))
    await asyncio.sleep(0)  # the operation is submitted
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await committer.run(lambda rnd, op: None)  # behind the skipped one, so it is settled too
    assert ran.threads == []
    assert committer.run_here(Here())
    await committer.stop()


async def test_a_sync_asked_for_here_is_made_here_and_an_error_is_the_writers() -> None:
    committer = Committer("test", errors=lambda error: RuntimeError(f"refused: {error}"))
    file = File()
    assert committer.run_here(Here(file=file))
    assert file.syncs == 1

    def failing(rnd: Round, op: Op[bool]) -> bool:
        raise OSError(errno.ENOSPC, "no space")

    with pytest.raises(RuntimeError, match=r"refused: .*no space"):
        committer.run_here(failing)
    assert committer.run_here(Here())  # the failure leaves it idle
    await committer.stop()


async def test_a_jsonl_write_without_a_flush_lands_at_once(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    assert isinstance(store, AtOnce)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])
    assert store.append_at_once(h.id, [msg("durable")]) is None  # a flush: the writer's
    lines = store.append_at_once(h.id, [msg("two"), msg("three")], durable=False)
    assert lines is not None
    assert len(lines) == 2
    assert held_bytes(store.where(h.id)).endswith(b"".join(lines))  # nothing awaited yet
    await store.close()
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["one", "two", "three"]
    await again.close()


async def test_a_jsonl_write_at_once_needs_its_file_held(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.release(h.id)  # its file is closed: opening it is the writer's work
    assert store.append_at_once(h.id, [msg("two")], durable=False) is None
    await store.close()


async def test_a_jsonl_write_at_once_that_the_disk_refuses_is_taken_back_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JsonlStore(tmp_path)
    h = header()
    await store.create(h)
    await store.append(h.id, [msg("one")])

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "pwrite", full)  # the log's record cannot be written
        with pytest.raises(UnavailableError):
            store.append_at_once(h.id, [msg("refused")], durable=False)
    # The file is checked again before its next write: that is the writer's work.
    assert store.append_at_once(h.id, [msg("two")], durable=False) is None
    await store.append(h.id, [msg("two")], durable=False)
    assert store.append_at_once(h.id, [msg("three")], durable=False) is not None
    await store.close()
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["one", "two", "three"]
    await again.close()

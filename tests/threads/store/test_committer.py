"""Group commit: a busy round lingers for more writers, a lone writer never waits."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

from tests.threads.store.helpers import File
from threads.store.committer import SIBLINGS, Committer, Op, Round

HANG = 30.0  # a hang guard, never a measure


def write(file: File, ran: threading.Event | None = None) -> Any:
    def fn(round: Round, op: Op[None]) -> None:
        round.sync(file, op)
        if ran is not None:
            ran.set()

    return fn


async def test_a_lone_writer_never_lingers() -> None:
    file = File()
    committer = Committer("test", linger=HANG * 10, gap=HANG * 10)
    for _ in range(3):
        await asyncio.wait_for(committer.run(write(file)), HANG)
    assert file.syncs == 3
    await committer.stop()


async def test_after_a_busy_round_a_writer_that_comes_late_shares_the_next_rounds_sync() -> None:
    file = File()
    committer = Committer("test", linger=HANG * 10, gap=HANG * 10)
    await asyncio.gather(*(committer.run(write(file)) for _ in range(SIBLINGS)))
    assert file.syncs == 1  # one round, busy: the next one lingers

    ran = threading.Event()
    first = asyncio.ensure_future(committer.run(write(file, ran)))
    assert await asyncio.to_thread(ran.wait, HANG)  # its round has begun without the second
    second = asyncio.ensure_future(committer.run(write(file)))
    await asyncio.sleep(0)  # one loop iteration: the second write is submitted
    await committer.stop()  # ends the lingering round
    await asyncio.wait_for(asyncio.gather(first, second), HANG)
    assert file.syncs == 2


async def test_after_a_linger_that_gathered_nothing_the_next_busy_round_does_not_linger() -> None:
    file = File()
    committer = Committer("test", linger=0.2, gap=0.2)
    await asyncio.gather(*(committer.run(write(file)) for _ in range(SIBLINGS)))
    # Busy, so this round lingers; all its writers wait on it, so nothing comes.
    await asyncio.gather(*(committer.run(write(file)) for _ in range(SIBLINGS)))
    assert file.syncs == 2

    ran = threading.Event()
    first = asyncio.ensure_future(committer.run(write(file, ran)))
    assert await asyncio.to_thread(ran.wait, HANG)
    second = asyncio.ensure_future(committer.run(write(file)))
    await asyncio.wait_for(asyncio.gather(first, second), HANG)
    assert file.syncs == 4  # the round after a fruitless linger ended without the second
    await committer.stop()


async def test_an_operation_that_waits_on_no_sync_is_settled_while_its_round_waits() -> None:
    file = File()
    committer = Committer("test")

    def read(round: Round, op: Op[str]) -> str:
        return "read"

    ran = threading.Event()
    # A flush that may wait long for company: its round holds it open.
    waiting = asyncio.ensure_future(committer.run(write(file, ran), within=HANG * 10))
    assert await asyncio.to_thread(ran.wait, HANG)
    # A read (or a write made without a flush) need not wait for that flush,
    # nor does it end the wait: only a write that must be durable does.
    assert await asyncio.wait_for(committer.run(read), HANG) == "read"
    assert file.syncs == 0  # the round still waits
    await asyncio.wait_for(committer.run(write(file)), HANG)
    await asyncio.wait_for(waiting, HANG)
    assert file.syncs == 1
    await committer.stop()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
async def test_the_writer_thread_is_batch_work() -> None:
    # Its wake-up must not take a pinned event loop's core (decision perf-33).
    loops = os.sched_getscheduler(0)
    committer = Committer("test-batch", parallel_syncs=2)
    policy = await committer.run(lambda rnd, op: os.sched_getscheduler(0))
    await committer.stop()
    assert policy == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == loops  # the event loop's thread is left alone


async def test_a_cancelled_waiter_of_a_write_that_runs_to_its_end_hears_of_it_when_it_ends() -> (
    None
):
    committer = Committer("test")
    started, release = threading.Event(), threading.Event()

    def slow(round: Round, op: Op[str]) -> str:
        started.set()
        release.wait(HANG)
        return "written"

    landed = committer.submit(slow)

    async def caller() -> str:
        return await landed

    waiter = asyncio.ensure_future(caller())
    assert await asyncio.to_thread(started.wait, HANG)
    waiter.cancel()
    assert landed.cancel() is False  # nobody cancels the write itself
    for _ in range(5):
        await asyncio.sleep(0)  # passes of the loop: the waiter still waits for the end
    assert not waiter.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(HANG):
            await waiter
    assert landed.result() == "written"  # what the cancelled caller can still read
    await committer.stop()

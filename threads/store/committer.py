"""Group commit: one writer thread per store, one fsync per touched file per round.

Every write operation of a file backend is a function run on this thread, in
the order the event loop submitted it. The thread drains whatever is queued
into a round, runs the round's operations, then makes each file the round
touched durable with one ``fsync`` — however many appends landed in it — and
only then settles the callers' futures, in one hop back to each event loop.
Under one writer the round is one operation, so a lone append pays one write,
one fsync and two thread hops; under many, the fsyncs are shared.

When the rounds are busy (the last one made ``SIBLINGS`` or more callers
durable, so many writers are at work), a round lingers before its sync: it
keeps taking what the event loop hands over until nothing came for ``GAP``
seconds, or ``linger`` seconds have passed (decision perf-15). Writers that
are not waiting on this round add their writes to its one flush instead of
each starting the next; a lone writer, whose rounds hold one caller, never
waits. A linger that gathered nothing (every writer was waiting on the
round: a closed loop) is not tried again for ``RETRY`` rounds.

An operation that waits on no sync (a read, a write made without a flush)
is settled before its round waits, not after the flush it does not need, and
it does not end a round that waits for company (perf-23).

An operation still queued when its caller is cancelled is skipped: a
cancelled call writes nothing unless the thread had already started it. One
that must run to its end whatever becomes of its caller (``cancellable=False``)
is settled through a :class:`Held` future, which a waiter's cancel does not
cancel: :meth:`Committer.submit` hands it out, for a caller that waits for the
outcome anyway.

An operation that waits on no sync may also be run by the caller itself,
at once, when the writer is idle (:meth:`Committer.run_here`, decision
perf-45): the two hops cost more than such a write.

The writer thread (and its sync threads) run as batch work in the kernel's
eyes (Linux ``SCHED_BATCH``, :func:`yield_to_the_loop`): when the event
loop hands it a round, its wake-up does not take the core from the loop in
the middle of what the loop is doing. It runs when the loop waits, with
whatever more the loop handed over meanwhile (decision perf-33).
"""

from __future__ import annotations

import asyncio
import math
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")

SIBLINGS = 4
"""A round that made this many callers durable makes the next one linger."""
GAP = 0.0005
"""A lingering round stops when the event loop handed over nothing for this long."""
RETRY = 2
"""After a linger that gathered nothing, the rounds that pass before the next one lingers."""


class Syncable(Protocol):
    """What a round wrote to — a file, a transaction; ``sync`` makes it durable.

    Targets are synced in the order the round first registered them, unless the
    committer was made with ``parallel_syncs`` > 1: then the round's targets are
    synced side by side (independent files, whose fsyncs the filesystem can
    fold into one journal commit).
    """

    def sync(self) -> None: ...


class Round:
    """What the operations of one round ask of its end: files to sync."""

    __slots__ = ("_ops", "_pending", "_waiting")

    def __init__(self) -> None:
        self._pending: dict[int, Syncable] = {}
        self._waiting: dict[int, list[Op[Any]]] = {}
        self._ops: set[int] = set()  # the ops waiting on a sync, by id

    @property
    def callers(self) -> int:
        """How many operations wait on this round's syncs."""
        return sum(len(ops) for ops in self._waiting.values())

    def waits(self, op: Op[Any]) -> bool:
        """Whether ``op`` waits on one of this round's syncs."""
        return id(op) in self._ops

    def sync(self, target: Syncable, op: Op[Any]) -> None:
        key = id(target)
        self._pending[key] = target
        self._waiting.setdefault(key, []).append(op)
        self._ops.add(id(op))

    def finish(self, pool: ThreadPoolExecutor | None) -> None:
        if pool is not None and len(self._pending) > 1:
            futures = {key: pool.submit(target.sync) for key, target in self._pending.items()}
            for key, future in futures.items():
                error = future.exception()
                if isinstance(error, Exception):
                    self._fail(key, error)
            return
        for key, target in self._pending.items():
            try:
                target.sync()
            except Exception as exc:
                self._fail(key, exc)

    def _fail(self, key: int, error: Exception) -> None:
        for op in self._waiting[key]:
            if op.error is None:
                op.error = error


class Op(Generic[T]):
    __slots__ = ("cancellable", "cancelled", "error", "fn", "future", "loop", "result", "until")

    def __init__(
        self,
        fn: Callable[[Round, Op[T]], T],
        future: asyncio.Future[T],
        loop: asyncio.AbstractEventLoop,
        cancellable: bool,
        until: float = 0.0,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop
        self.cancellable = cancellable
        self.until = until  # may wait for company until then (time.monotonic()); 0: never
        self.cancelled = False
        self.result: T | None = None
        self.error: BaseException | None = None


Errors = Callable[[BaseException], BaseException]
"""What a committer's caller hears for an operation's error (a store's own error for an OSError)."""


def _as_raised(error: BaseException) -> BaseException:
    return error


class Held(asyncio.Future[T]):
    """A future its waiters cannot cancel: a cancelled waiter hears of the cancel once it settles.

    What awaiting :func:`asyncio.shield` of it would give a caller that must
    see its operation end (the caller waits for the end either way), without
    the shield's second future and the extra pass of the event loop it takes
    to settle: a task whose waiter refuses a cancel is cancelled at its next
    step, which is when the future settles.
    """

    def cancel(self, msg: Any | None = None) -> bool:
        return False


class Committer:
    """The writer thread of one store. Start it lazily; stop it with :meth:`stop`."""

    def __init__(
        self,
        name: str,
        *,
        parallel_syncs: int = 1,
        linger: float = 0.0,
        gap: float = GAP,
        errors: Errors = _as_raised,
    ) -> None:
        self._name = name
        self._errors = errors
        self._linger = linger
        self._gap = gap
        self._queue: queue.SimpleQueue[list[Op[Any]] | None] = queue.SimpleQueue()
        # The calls of one event-loop iteration, handed to the thread together: one
        # wake-up of the writer (a thread switch, on a gateway pinned to one core)
        # for every call a turn's tasks make in that iteration, not one each.
        self._batches: dict[asyncio.AbstractEventLoop, list[Op[Any]]] = {}
        self._thread: threading.Thread | None = None
        self._parallel = parallel_syncs
        self._closed = False
        # Operations each event loop handed over (or is about to) and has not yet seen
        # settled; counted on that loop's own thread (see run_here).
        self._unsettled: dict[asyncio.AbstractEventLoop, int] = {}
        # Held by the writer thread through a round, and by run_here: one runs at a time.
        self._running = threading.Lock()

    async def run(
        self, fn: Callable[[Round, Op[T]], T], *, cancellable: bool = True, within: float = 0.0
    ) -> T:
        """Run ``fn(round, op)`` on the writer thread; its result once the round is durable.

        ``fn`` calls ``round.sync(file, op)`` for each file it wrote that must be
        durable before the caller hears back; one that calls none hears back
        once it ran. With ``within`` (seconds), a round that holds nothing else
        waiting on a sync waits up to that long for another operation that
        does, and ends with it: a flush that may share a later write's.
        """
        op = self._queued(fn, cancellable, within)
        if not cancellable:
            # A close or a recovery: a cancelled caller leaves at once, the thread goes on.
            return await asyncio.shield(op.future)
        try:
            return await op.future
        except asyncio.CancelledError:
            op.cancelled = True
            raise

    def submit(self, fn: Callable[[Round, Op[T]], T]) -> asyncio.Future[T]:
        """:meth:`run` begun here and now, for a caller that keeps no task of its own: ``fn``
        runs to its end whatever becomes of the caller, and the future settles as ``run``
        would return or raise. It is :class:`Held`: a waiter cancelled meanwhile is told
        once it has settled, and may then read its outcome."""
        return self._queued(fn, False, 0.0).future

    def _queued(self, fn: Callable[[Round, Op[T]], T], cancellable: bool, within: float) -> Op[T]:
        """``fn`` as an operation in this loop iteration's batch for the writer thread."""
        if self._closed:
            raise RuntimeError(f"{self._name} is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        until = time.monotonic() + within if within > 0 else 0.0
        future: asyncio.Future[T] = loop.create_future() if cancellable else Held(loop=loop)
        op: Op[T] = Op(fn, future, loop, cancellable, until)
        self._unsettled[loop] = self._unsettled.get(loop, 0) + 1
        batch = self._batches.get(loop)
        if batch is None:
            batch = self._batches[loop] = []
            loop.call_soon(self._hand_over, loop)
        batch.append(op)
        return op

    def run_here(self, fn: Callable[[Round, Op[bool]], bool]) -> bool:
        """Run ``fn(round, op)`` on the caller's thread, now, when the writer is idle.

        For an operation that waits on no sync (a write made without a flush):
        what the writer thread would do, without its two hops — the hand-over
        that wakes the thread, and the call back that wakes the event loop,
        each some 30 µs of a pinned gateway's core, or more, an idle core's
        wake-up. The writer is idle when everything this event loop handed it
        has been settled and no round is running: then nothing submitted
        before this call is still to run, and nothing runs beside it.

        False, having run nothing, when the writer is not idle (the caller then
        submits as usual); else ``fn``'s own answer: False when it did nothing
        (it cannot be done here). A sync ``fn`` asks for is made here too, on
        the caller's thread. Its error is raised as the writer's would be.
        """
        loop = asyncio.get_running_loop()
        if self._closed or self._unsettled.get(loop) or not self._running.acquire(blocking=False):
            return False
        try:
            here = Round()
            op: Op[bool] = Op(fn, loop.create_future(), loop, False)
            try:
                ran = fn(here, op)
                here.finish(None)
            except Exception as exc:
                op.error = exc
            if op.error is not None:
                raise self._errors(op.error)
            return ran
        finally:
            self._running.release()

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._batches.pop(loop, None)
        if batch:
            self._queue.put(batch)

    async def stop(self) -> None:
        """Run what is queued, then end the thread."""
        if self._closed:
            return
        self._closed = True
        thread = self._thread
        if thread is None:
            return
        self._hand_over(asyncio.get_running_loop())
        self._queue.put(None)
        await asyncio.to_thread(thread.join)

    def _main(self) -> None:
        yield_to_the_loop()
        pool = None
        if self._parallel > 1:
            pool = ThreadPoolExecutor(
                self._parallel,
                thread_name_prefix=f"{self._name}-sync",
                initializer=yield_to_the_loop,
            )
        try:
            self._rounds(pool)
        finally:
            if pool is not None:
                pool.shutdown()

    def _rounds(self, pool: ThreadPoolExecutor | None) -> None:
        running = True
        lingering = False
        skip = 0  # rounds left before lingering again, after a linger that gathered nothing
        while running:
            current = Round()
            ops: list[Op[Any]] = []
            done: list[Op[Any]] = []  # ran, and wait on no sync
            deadline = time.monotonic() + (self._linger if lingering else 0.0)
            gathered = False
            batch, running = self._take(self._queue.get())
            with self._running:
                while batch:
                    for op in batch:
                        if op.cancelled and op.cancellable:
                            continue  # skipped; still handed back, for its loop's count
                        try:
                            op.result = op.fn(current, op)
                        except Exception as exc:
                            op.error = exc
                    for op in batch:
                        (ops if current.waits(op) else done).append(op)
                    if not running or not ops:
                        break
                    try:
                        batch, running = self._take(self._more(ops, deadline, done))
                    except queue.Empty:
                        break
                    gathered = True
                current.finish(pool)
            if lingering and not gathered:
                skip = RETRY  # its writers were all waiting on it: a closed loop
            elif skip:
                skip -= 1
            lingering = current.callers >= SIBLINGS and not skip
            self._hand_back(done + ops)

    def _hand_back(self, ops: list[Op[Any]]) -> None:
        """Settle ``ops`` on their event loops, one hop per loop."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Op[Any]]] = {}
        for op in ops:
            by_loop.setdefault(op.loop, []).append(op)
        for loop, settled in by_loop.items():
            with suppress(RuntimeError):  # the loop closed: nobody is waiting any more
                loop.call_soon_threadsafe(self._settle, loop, settled)

    def _settle(self, loop: asyncio.AbstractEventLoop, ops: list[Op[Any]]) -> None:
        left = self._unsettled[loop] - len(ops)
        if left:
            self._unsettled[loop] = left
        else:
            del self._unsettled[loop]  # the loop is not kept for a count of none
        errors = self._errors
        for op in ops:
            future = op.future
            if future.done():
                continue  # its caller was cancelled and has gone
            if op.error is not None:
                future.set_exception(errors(op.error))
            else:
                future.set_result(op.result)

    def _take(self, item: list[Op[Any]] | None) -> tuple[list[Op[Any]], bool]:
        """``item`` and all that is queued behind it; False once :meth:`stop` asked to end."""
        ops: list[Op[Any]] = []
        while item is not None:
            ops.extend(item)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return ops, True
        return ops, False

    def _more(
        self, ops: list[Op[Any]], deadline: float, done: list[Op[Any]]
    ) -> list[Op[Any]] | None:
        """What comes for this round before it must end (:class:`queue.Empty`: it ends).

        A round waits until ``deadline``, but no longer than ``gap`` seconds in
        which nothing comes. A round of operations that may wait for company
        (``within``) waits for the next operation until the earliest of their
        times.
        """
        gap = self._gap
        if all(op.until for op in ops):
            deadline, gap = min(op.until for op in ops), math.inf
        wait = min(gap, deadline - time.monotonic())
        if wait <= 0:
            raise queue.Empty
        with suppress(queue.Empty):
            return self._queue.get_nowait()
        # About to wait: what is done (a read, a write made without a flush) hears
        # now, not after a flush it does not need. A round that does not wait
        # settles everything in one hop at its end.
        self._hand_back(done)
        done.clear()
        return self._queue.get(timeout=wait)


def yield_to_the_loop() -> None:
    """Make the calling thread batch work (Linux ``SCHED_BATCH``); elsewhere, nothing.

    The event loop wakes the writer thread by putting a round on its queue.
    On a gateway pinned to one core, a normal thread's wake-up there switched
    the core to it at once, only for it to wait for the GIL the loop still
    held and switch back: some 30 µs of the loop's time per hand-over, four
    hand-overs a turn. A batch thread's wake-up does not preempt; it runs when
    the loop waits (decision perf-33). Its share of the CPU is unchanged.
    """
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None or not hasattr(os, "sched_setscheduler"):
        return
    with suppress(OSError):  # a sandbox that forbids it: the thread stays as it was
        os.sched_setscheduler(0, policy, os.sched_param(0))

"""Writes of the event-loop backends (memory, redis): in call order per session, whole once started.

The file backends get both properties from their writer thread
(:mod:`threads.store.committer`). A backend whose writes run on the event
loop gets them here. :meth:`InFlight.run` waits for the store's earlier
writes to the same session — a caller cancelled while it waits writes
nothing — and then starts the write in a task of its own, which runs to its
end even when the caller is cancelled; the caller still sees
``CancelledError``. A started write whose caller has gone and that fails is
logged, never dropped in silence. :meth:`InFlight.drain` waits for every
started write, so a store's close does not cut one short.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from threads.store.base import Pause

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Turns:
    """One session's writes: the lock they take in call order, and how many want it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()  # asyncio.Lock wakes its waiters first come, first served
        self.users = 0


class InFlight:
    """One store's started writes and the per-session order they start in.

    ``pause`` is the backend's test seam (:data:`~threads.store.base.Pause`):
    each started write calls it with its point first, on the event loop, and
    awaits what it returns.
    """

    def __init__(self, name: str, pause: Pause | None = None) -> None:
        self._name = name
        self._pause = pause
        self._turns: dict[str, _Turns] = {}
        self._started: set[asyncio.Task[Any]] = set()

    async def run(self, session: str, point: str, write: Callable[[], Awaitable[T]]) -> T:
        """Run ``write`` after the session's earlier writes; once started, to its end."""
        turns = self._turns.get(session)
        if turns is None:
            turns = self._turns[session] = _Turns()
        turns.users += 1
        try:
            await turns.lock.acquire()
        except BaseException:
            self._leave(session, turns)
            raise
        task = asyncio.get_running_loop().create_task(
            self._write(session, turns, point, write), name=f"{self._name} {point} {session}"
        )
        self._started.add(task)
        task.add_done_callback(self._started.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._orphaned)
            raise

    def free(self, session: str) -> bool:
        """Whether a write to ``session`` may run here and now: none ahead of it, no pause."""
        return self._pause is None and session not in self._turns

    async def run_now(self, session: str, point: str, write: Callable[[], T]) -> T:
        """Run ``write``, which never waits, after the session's earlier writes.

        With none started or waiting and no pause to take, it runs here and
        now: nothing is ahead of it, and it cannot be cut short. Otherwise it
        takes its place in line like any other write (:meth:`run`).
        """
        if self.free(session):
            return write()

        async def queued() -> T:
            return write()

        return await self.run(session, point, queued)

    async def drain(self) -> None:
        """Wait for every started write to end (their failures are their callers')."""
        while self._started:
            await asyncio.wait(set(self._started))

    async def _write(
        self, session: str, turns: _Turns, point: str, write: Callable[[], Awaitable[T]]
    ) -> T:
        try:
            if self._pause is not None:
                held = self._pause(point)
                if inspect.isawaitable(held):
                    await held
            return await write()
        finally:
            turns.lock.release()
            self._leave(session, turns)

    def _leave(self, session: str, turns: _Turns) -> None:
        turns.users -= 1
        if turns.users == 0 and self._turns.get(session) is turns:
            del self._turns[session]

    def _orphaned(self, task: asyncio.Task[Any]) -> None:
        """A started write whose caller was cancelled has ended: a failure is logged."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "%s: a write whose caller was cancelled failed: %s",
                self._name,
                error,
                exc_info=error,
            )

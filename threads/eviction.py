"""Idle threads are closed after a while; their sessions stay stored.

Every quarter of ``threads.idle_evict_seconds`` (at most every 30 s) the
manager's :class:`Eviction` closes the threads idle that long: a thread with
a wake on its way in, a turn running or input waiting is never evicted. A
wake for an evicted key loads the session again, after the closing session
has let go of its lease (:meth:`Eviction.closing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from threads.keys import SessionKey
from threads.runner import Thread

log = logging.getLogger(__name__)


class Eviction:
    """Closes the idle threads of ``threads`` (the manager's live map) with ``close``."""

    def __init__(
        self,
        threads: dict[SessionKey, Thread],
        close: Callable[[Thread], Coroutine[Any, Any, None]],
        *,
        idle_after: float,
        let_go: Callable[[int], None] | None = None,
    ) -> None:
        self._threads = threads
        self._close = close
        self.idle_after = idle_after
        # Told, once a sweep's closes have ended, how many entries their sessions held.
        self._let_go = let_go
        self._closing: dict[SessionKey, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep(), name="thread eviction")

    async def stop(self) -> None:
        """Stop looking, and wait for the evictions under way."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._closing:
            await asyncio.gather(*self._closing.values(), return_exceptions=True)

    def closing(self, key: SessionKey) -> asyncio.Task[None] | None:
        """The eviction of ``key`` still under way, if any."""
        return self._closing.get(key)

    async def evict_idle(self, idle_after: float) -> int:
        """Close threads idle longer than ``idle_after`` seconds; how many."""
        now = time.monotonic()
        victims = [
            t for t in self._threads.values() if t.evictable and now - t.last_activity >= idle_after
        ]
        for thread in victims:
            del self._threads[thread.key]
            task = asyncio.create_task(self._close(thread), name=f"evict {thread.key}")
            self._closing[thread.key] = task
            task.add_done_callback(partial(self._evicted, thread.key))
        if victims:
            await asyncio.gather(*(self._closing[t.key] for t in victims if t.key in self._closing))
            if self._let_go is not None:
                self._let_go(sum(t.session.entry_count for t in victims))
        return len(victims)

    async def _sweep(self) -> None:
        period = min(max(self.idle_after / 4, 0.05), 30.0)
        while True:
            await asyncio.sleep(period)
            await self.evict_idle(self.idle_after)

    def _evicted(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self._closing.get(key) is task:
            del self._closing[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("closing the evicted thread %s failed", key, exc_info=task.exception())

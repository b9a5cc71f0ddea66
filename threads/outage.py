"""A store that cannot take writes: what waits for it, and when to try again.

When an append fails with :class:`UnavailableError` (Redis down, a full
disk), what the gateway had already accepted is not given up: a session
whose prompt, step or turn end could not be written keeps it and tries again
with backoff — 0.1 s doubling to 5 s — until the store takes it, or the
session closes (its input is durable and runs at the next start). Input that
arrives meanwhile is refused to its sender, since it could not be saved.

One :class:`StoreOutage` per manager is shared by its sessions: the first
failure is logged once, as is the store's return, ``health`` shows how long
it has been down and how many writes wait, and a write that succeeds wakes
every waiting retry at once instead of letting it sleep out its backoff.
Waits run on an injected :class:`~threads.clock.Clock`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from threads.clock import Clock, MonotonicClock
from threads.errors import UnavailableError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY = 0.1
MOST_DELAY = 5.0


class StoreOutage:
    """Whether the store takes writes now, and the backoff of the writes that wait for it."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        first_delay: float = FIRST_DELAY,
        most_delay: float = MOST_DELAY,
    ) -> None:
        self._clock = clock or MonotonicClock()
        self._first = first_delay
        self._most = most_delay
        self._since: float | None = None
        self._error = ""
        self._back: asyncio.Event | None = None
        self.waiting = 0

    @property
    def down(self) -> bool:
        """True from a failed write until the next one that succeeds."""
        return self._since is not None

    def failed(self, error: UnavailableError) -> None:
        """A write failed because the store could not take it."""
        if self._since is None:
            self._since = self._clock.monotonic()
            log.warning(
                "%s; accepted input is kept and retried until the store is back, new input "
                "is refused to its sender",
                error,
            )
        self._error = str(error)

    def succeeded(self) -> None:
        """A write landed: the store is back, and every waiting retry goes now."""
        if self._since is None:
            return
        down_for = self._clock.monotonic() - self._since
        self._since = None
        log.warning("the session store takes writes again after %.1f s", down_for)
        if self._back is not None:
            self._back.set()
            self._back = None

    async def pause(self, attempt: int, *stop: asyncio.Event) -> None:
        """Wait before retry number ``attempt`` (1, 2, …) of a failed write.

        Returns after the backoff, or as soon as a write elsewhere succeeds or
        one of the ``stop`` events is set, whichever comes first.
        """
        if self._back is None:
            self._back = asyncio.Event()
        events = [self._back, *stop]
        delay = min(self._first * 2 ** max(attempt - 1, 0), self._most)
        slept = asyncio.Event()
        timer = self._clock.call_later(delay, slept.set)
        waits = [asyncio.ensure_future(e.wait()) for e in [slept, *events]]
        self.waiting += 1
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
            timer.cancel()
            for wait in waits:
                wait.cancel()

    async def retry(
        self, write: Callable[[], Awaitable[T]], *, what: str, give_up: asyncio.Event
    ) -> T:
        """``write()``, tried again after :meth:`pause` while it raises :class:`UnavailableError`.

        Once ``give_up`` is set the next failure is raised. ``what`` names the
        write in the one line logged when it first waits.
        """
        tries = 0
        while True:
            try:
                return await write()
            except UnavailableError as exc:
                if give_up.is_set():
                    raise
                tries += 1
                if tries == 1:
                    log.warning("%s waits for the store: %s", what, exc)
            await self.pause(tries, give_up)

    def snapshot(self) -> dict[str, Any]:
        """For ``health``: whether the store takes writes, and what waits for it."""
        if self._since is None:
            return {"writable": True}
        return {
            "writable": False,
            "down_seconds": round(self._clock.monotonic() - self._since, 1),
            "error": self._error,
            "writes_waiting": self.waiting,
        }

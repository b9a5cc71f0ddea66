"""A clock that moves only when a test moves it: for cron, and for a session's debounce.

It is a :class:`cron.base.Clock` (``now()``, a UTC datetime) and a
:class:`threads.clock.Clock` (``monotonic()``, seconds) at once. A test gives
it to what it builds (cron's ``make_service`` does), sets times relative to
it, and :meth:`advances <ManualClock.advance>` it: the timers it passes fire
in time order — the scheduler's next fire, the store poll, the end of a
collect window — each seeing the clock at its own time. Nothing then depends
on how fast the machine is: a job set one second ahead is still ahead when it
is validated, and fires when the test says.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from threads.clock import Timer

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@dataclass(order=True)
class _ManualTimer:
    when: datetime
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time stands still at ``start`` until :meth:`advance`; timers wait for it."""

    def __init__(self, start: datetime = START) -> None:
        self._now = start
        self._timers: list[_ManualTimer] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return (self._now - START).total_seconds()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        if delay <= 0:
            # Due already: it runs on the loop's next pass, as the wall clock's would.
            return asyncio.get_running_loop().call_soon(callback)
        timer = _ManualTimer(self._now + timedelta(seconds=delay), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, seconds: float = 0.0) -> datetime:
        """Move on by ``seconds``, firing the timers passed on the way; the new "now"."""
        return self.advance_to(self._now + timedelta(seconds=seconds))

    def advance_to(self, moment: datetime) -> datetime:
        """Move on to ``moment`` (never back), firing the timers due by then in time order."""
        while self._timers and self._timers[0].when <= moment:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self._now = max(self._now, timer.when)
                timer.callback()
        self._now = max(self._now, moment)
        return self._now


class Seconds:
    """Monotonic seconds that move only when a test sets :attr:`now` (a ``clock=`` callable)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FixedClock:
    """A clock that always says ``moment``: an editor in the past or the future."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def now(self) -> datetime:
        return self.moment

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        raise AssertionError("a fixed clock is for editors; a running service needs timers")

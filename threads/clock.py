"""Where a session's ``collect`` debounce and approval expiry take their time from.

A collected batch starts its turn once no message has arrived for the
window. The session stamps arrivals with :meth:`Clock.monotonic` and waits
for the window's end on :meth:`Clock.call_later`, so a test that brings a
clock of its own (``SessionOptions(clock=…)``) decides when a window ends,
and nothing it checks depends on how fast the machine runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Timer(Protocol):
    """A callback waiting for its time on a :class:`Clock`."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic seconds, and timers on them."""

    def monotonic(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` on the running event loop ``delay`` seconds from now."""
        ...


class WallClock(Protocol):
    """The time of day (UTC), and timers: what approval requests lapse on."""

    def now(self) -> datetime: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` on the running event loop ``delay`` seconds from now."""
        ...


class MonotonicClock:
    """The real time: monotonic seconds, the UTC time of day, timers on the running loop."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)

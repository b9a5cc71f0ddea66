"""How soon a serving process hands the GIL from one thread to another (decision perf-14).

The event loop shares the interpreter with the threads the store works on: a
file store's writer thread (its writes and fsyncs, :mod:`threads.store.committer`)
and the threads that read and decode a session being opened. A thread that
wants the GIL while another computes waits for up to the interpreter's switch
interval before it asks for it — 5 ms by default. On a busy event loop every
durable write's completion and every open waited that long, and under 32
clients at once those waits queued up in the tail.

:func:`settle_switching` sets the interval to half a millisecond, once, by
whatever owns the process (``gateway run``, the benchmarks), beside
:func:`gateway.heap.settle_heap`: never by :class:`~gateway.app.Gateway`,
which tests start many times in one process.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL = 0.0005
"""Seconds a thread waits for the GIL before it asks the one computing to let go."""


def settle_switching() -> None:
    """Let a waiting thread take the GIL after half a millisecond instead of five."""
    sys.setswitchinterval(SWITCH_INTERVAL)

"""The garbage collector's set-up for a serving process (decision perf-07).

A turn allocates a few thousand short-lived objects; live sessions hold
hundreds of thousands of long-lived ones (their context's messages). With
CPython's default thresholds (700, 10, 10) a young collection runs every few
turns, and each one walks every message list a turn holds in flight: on
1 000-turn sessions that cost a third of a millisecond of every turn. And
everything start-up allocated (modules, classes, the app's own objects,
some 90 000 of them) is walked again by every full collection although it
lives as long as the process.

:func:`settle_heap` is called once by whatever owns the process, after the
gateway has started and before it serves (``gateway run``, the benchmarks):
never by :class:`~gateway.app.Gateway` itself, which tests start many times
in one process, where a freeze would keep every test's leftovers forever.
"""

from __future__ import annotations

import gc

# A young collection every 10 000 net allocations (a few turns' worth) rather
# than every 700; the older generations keep CPython's ratios.
THRESHOLDS = (10_000, 10, 10)


def settle_heap() -> None:
    """Collect once, move what is left out of every later collection, and size the generations.

    What start-up left is garbage-free after the collection; frozen, it is
    never walked again (objects freed by reference count still go at once).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)

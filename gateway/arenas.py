"""One C heap for every thread of a serving process (decision perf-35).

glibc's ``malloc`` gives each thread that allocates while another holds the
heap's lock an arena of its own, up to eight per core. A gateway's threads
take turns under the GIL, but they still get their arenas: the threads that
read and decode a session being opened allocate its packed lines, its
lists and its arrays in one, and what an open frees there is kept by that
arena, not handed to the next open on the event loop. On a 1 000-turn
session that was some 90 KB of resident memory per live session (a tenth).

:func:`settle_arenas` caps the arenas at one, by whatever owns the process
(``gateway run``, the benchmarks), before the gateway starts any thread: an
arena a thread already took stays its own. An operator's ``MALLOC_ARENA_MAX``
is left as glibc read it. Elsewhere (musl, macOS) it does nothing.

Opening a long session reads its file whole and decodes it on a worker
thread: a few megabytes that are freed as the open ends, in chunks glibc
keeps in the heap, not given back, while the thresholds it sizes for itself
have grown past them; and a session evicted frees its packed lines and
arrays the same way, once the collector has broken its cycles.
:class:`FreedMemory` hands such pages back (``malloc_trim``) once an open or
an eviction sweep of :data:`TRIM_AFTER_ENTRIES` entries or more is done, and
again after the next full collection (decision perf-41).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import platform

ENVIRONMENT = "MALLOC_ARENA_MAX"
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the most arenas ``malloc`` makes."""


def settle_arenas() -> bool:
    """Make every thread started from now on allocate from the main arena; whether it did."""
    if ENVIRONMENT in os.environ:
        return False  # the operator's own setting, which glibc applied at start
    libc = _glibc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, 1) == 1


TRIM_AFTER_ENTRIES = 1000
"""The entries an open reads, or a sweep lets go of, before the freed pages are handed back
(about 400 KB of file)."""


class FreedMemory:
    """Hands the pages the heap holds free back to the system (decision perf-41).

    :meth:`released` is told of each open from the store and each eviction
    sweep, with the entries it read or let go of; from :data:`TRIM_AFTER_ENTRIES`
    on, it trims at once: about 0.4 ms after a 1 000-turn open, 2 to 7 ms after
    one of 100 000 entries. What an evicted session held goes only when the
    collector breaks its cycles, so, as a ``gc`` callback, it trims once more
    after the next full collection. Nothing is done where the C library is not
    glibc.
    """

    def __init__(self) -> None:
        self._after_collection = False

    def released(self, entries: int) -> None:
        if entries >= TRIM_AFTER_ENTRIES:
            _trim()
            self._after_collection = True

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2 and self._after_collection:
            self._after_collection = False
            _trim()

    def watch(self) -> None:
        """Trim after full collections from now on (:meth:`stop` undoes it)."""
        gc.callbacks.append(self)

    async def stop(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


def _trim() -> None:
    """glibc's ``malloc_trim(0)``: every whole free page of the heap back to the system."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's own symbols, where its C library is glibc (looked for once, when first
    needed: ``platform.libc_ver`` reads the interpreter's file); None elsewhere."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None

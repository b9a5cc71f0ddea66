"""Session and entry ids: ``s_`` / ``e_`` plus a 26-character ULID.

The 26 characters are a 48-bit millisecond timestamp then 80 bits in
Crockford base32, so ids sort with the time they were minted. The 80 bits are
a random starting point drawn once per process (and again in a forked child)
plus a counter: ids minted by one process sort in the order they were minted,
even within a millisecond, and two processes' ids stay apart because their
starting points lie far apart in 2**79. Minting an id is no system call (see
docs/decisions/perf-05-the-hot-path-of-a-durable-turn.md).
"""

from __future__ import annotations

import itertools
import os
import re
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALID_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Two base32 digits per table entry: a 10-bit chunk becomes two characters at once.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]


class _Minter:
    """The process's ULID source: the time digits kept per millisecond, then a counter.

    Safe from any thread: ``next`` on the counter is atomic, and each cache is
    one tuple swapped whole.
    """

    __slots__ = ("_counter", "_high", "_time")

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        """Draw a new starting point (79 bits: the counter never carries past 80)."""
        self._counter = itertools.count(int.from_bytes(os.urandom(10), "big") >> 1)
        self._time = (-1, "")
        self._high = (-1, "")

    def __call__(self) -> str:
        pairs = _PAIRS
        millisecond = time.time_ns() // 1_000_000
        cached = self._time
        if cached[0] != millisecond:
            # 10 digits of 5 bits: the 48-bit time under two zero bits.
            digits = "".join([pairs[(millisecond >> s) & 1023] for s in (40, 30, 20, 10, 0)])
            cached = self._time = (millisecond, digits)
        value = next(self._counter)
        high = self._high
        if high[0] != value >> 40:
            # The counter's upper 40 bits change once in 2**40 ids: their 8 digits are kept.
            top = value >> 40
            high = self._high = (top, "".join([pairs[(top >> s) & 1023] for s in (30, 20, 10, 0)]))
        return (
            cached[1]
            + high[1]
            + pairs[(value >> 30) & 1023]
            + pairs[(value >> 20) & 1023]
            + pairs[(value >> 10) & 1023]
            + pairs[value & 1023]
        )


# The one piece of process state here: a forked child must not mint its parent's ids.
_ulid = _Minter()
os.register_at_fork(after_in_child=_ulid.reseed)


def new_session_id() -> str:
    """Return a new, time-sortable session id: ``s_`` plus 26 characters."""
    return "s_" + _ulid()


def new_entry_id() -> str:
    """Return a new, time-sortable entry id: ``e_`` plus 26 characters."""
    return "e_" + _ulid()


def new_chain_id() -> str:
    """Return a new exchange chain id: ``c_`` plus 26 characters (see :class:`threads.wake.Wake`)."""
    return "c_" + _ulid()


def valid_id(value: str) -> bool:
    """Report whether ``value`` is safe as an id: exactly one path component.

    1 to 128 letters, digits, '_' or '-': never a separator, a traversal or a
    dotfile, so every backend can use it as a file name or a key part.
    """
    return _VALID_ID.fullmatch(value) is not None

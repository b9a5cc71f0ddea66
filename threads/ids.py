"""Session and entry ids: ``s_`` / ``e_`` plus a 26-character ULID.

The 26 characters are a 48-bit millisecond timestamp then 80 random bits in
Crockford base32, so ids sort with the time they were minted (to the
millisecond; ids of the same millisecond order randomly).
"""

from __future__ import annotations

import os
import re
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALID_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Two base32 digits per table entry: a 10-bit chunk becomes two characters at once.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]


def _ulid() -> str:
    # 128 bits: a 48-bit millisecond time then 80 random bits, written as 26
    # base32 digits (the top two bits of the first digit are always zero).
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    pairs = _PAIRS
    middle = "".join([pairs[(value >> shift) & 1023] for shift in range(115, 0, -10)])
    return _CROCKFORD[value >> 125] + middle + _CROCKFORD[value & 31]


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

"""What a channel handled recently, so a platform delivering it again starts no second turn."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

SEEN_SIZE = 4096
SEEN_TTL = 24 * 3600.0
"""Telegram keeps an unconfirmed update for 24 hours; nothing older comes back."""


class Seen:
    """The keys handled lately: at most ``size`` of them, none older than ``ttl`` seconds.

    Kept by the channel, not its poller or socket, so a reconnect or a
    restarted poller that is handed an update again finds it here.
    ``clock`` is monotonic seconds.
    """

    __slots__ = ("_clock", "_keys", "size", "ttl")

    def __init__(
        self,
        size: int = SEEN_SIZE,
        ttl: float = SEEN_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.ttl = ttl
        self._clock = clock
        self._keys: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def again(self, key: Hashable) -> bool:
        """True when ``key`` was handled within the window; else it is remembered now."""
        now = self._clock()
        keys = self._keys
        while keys:
            oldest, at = next(iter(keys.items()))
            if now - at < self.ttl and len(keys) <= self.size:
                break
            del keys[oldest]
        if key in keys:
            return True
        keys[key] = now
        if len(keys) > self.size:
            keys.popitem(last=False)
        return False

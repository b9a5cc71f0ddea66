"""Singletons with one leader at a time: the cron scheduler, each bot's polling or connection.

A :class:`Leadership` names a lease (``leader:cron``, ``leader:telegram:<bot>``)
and what to do on winning and on losing it. The node tries every leadership
it has at each lease tick: the node that wins the lease starts the singleton,
the others stand by and try again at their next tick, so when the leader
dies its lease lapses and the next node to try takes over. A leader that
finds its lease lost (a stall, a partition) stops the singleton at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Action = Callable[[], Awaitable[None]]


@dataclass(slots=True, eq=False)
class Leadership:
    """One singleton: its lease name, how to start and stop it, and whether this node leads."""

    name: str
    start: Action
    stop: Action
    fence: int | None = field(default=None)

    @property
    def leading(self) -> bool:
        return self.fence is not None

    async def won(self, fence: int) -> bool:
        """The lease is this node's: start the singleton; False (and not leading) if it failed."""
        try:
            await self.start()
        except Exception:
            log.exception("%s: starting as the leader failed; another node may take it", self.name)
            return False
        self.fence = fence
        log.info("%s: this node leads now (fencing token %d)", self.name, fence)
        return True

    async def lost(self, why: str) -> None:
        """The lease is gone (or given up): stop the singleton."""
        if self.fence is None:
            return
        self.fence = None
        log.warning("%s: %s; this node stops leading", self.name, why)
        try:
            await self.stop()
        except Exception:
            log.exception("%s: stopping as the leader failed", self.name)

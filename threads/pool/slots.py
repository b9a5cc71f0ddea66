"""Delegation slots: a bounded count with a first-in-first-out queue of waiters.

``asyncio.Semaphore`` wakes waiters in order on current Pythons, but it
neither says how many wait nor hands a slot straight to the next waiter: a
newcomer calling ``acquire`` between a release and the waiter's wake-up can
take it first. :class:`Slots` hands a freed slot to the oldest waiter
directly, so the delegation accepted first runs first, and says how many wait.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """``size`` slots; :meth:`take` waits in arrival order when all are held."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one slot, not {size}")
        self.size = size
        self._held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def held(self) -> int:
        return self._held

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    @property
    def unused(self) -> bool:
        """Nothing held and nobody waiting: the owner may forget these slots."""
        return self._held == 0 and not self.waiting

    def try_take(self) -> bool:
        """Take a slot now if one is free and nobody waits ahead; False otherwise."""
        if self._held < self.size and not self.waiting:
            self._held += 1
            return True
        return False

    async def take(self) -> None:
        """Wait for a slot, behind everyone already waiting."""
        if self.try_take():
            return
        await self.wait(self.ticket())

    def ticket(self) -> asyncio.Future[None]:
        """Join the queue now; :meth:`wait` on the ticket until the slot is handed over."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def wait(self, ticket: asyncio.Future[None]) -> None:
        """Wait until ``ticket``'s turn has come; the slot is then held.

        Cancelled while waiting, it leaves the queue; cancelled just as a slot
        was handed to it, it gives the slot on to the next waiter.
        """
        try:
            await ticket
        except asyncio.CancelledError:
            self.withdraw(ticket)
            raise

    def withdraw(self, ticket: asyncio.Future[None]) -> None:
        """Leave the queue; a slot already handed to ``ticket`` goes on to the next waiter."""
        if ticket.done() and not ticket.cancelled():
            self.give()
            return
        ticket.cancel()
        if ticket in self._waiters:
            self._waiters.remove(ticket)

    def give(self) -> None:
        """Free a slot: straight to the oldest waiter, if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; the count stays
                return
        if self._held <= 0:
            raise RuntimeError("a delegation slot was given back that was never taken")
        self._held -= 1

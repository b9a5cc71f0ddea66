"""What a node does with the entries of its inbox stream: hand them to its owner, in order.

The :class:`Owner` (the thread manager) makes each forwarded wake durable in
its key's session, continues a key handed over, or runs an op on a key's
thread; the :class:`Inbox` acknowledges an entry only once the owner took it,
takes one key's entries one at a time, and, when the node stops, sends what
is left to a live node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from threads.cluster.wakes import MARKER, Entry, Forward, WakeStreams

log = logging.getLogger(__name__)


class Owner(Protocol):
    """What a member asks of the thread manager."""

    async def receive(self, forward: Forward, marker: str) -> None:
        """Make a forwarded wake durable in its key's session (or send it on to the owner)."""
        ...

    async def take_over(self, key: str) -> bool:
        """Continue what the key's session left unsettled; whether a thread now holds the key."""
        ...

    async def lost(self, key: str) -> None:
        """The key's lease is gone: drop its thread without another write."""
        ...

    def thread_rows(self) -> list[dict[str, Any]]:
        """The live threads, as ``health`` lists them."""
        ...


class Inbox:
    """This node's side of its inbox stream: entries handed to the owner, then acknowledged."""

    def __init__(self, streams: WakeStreams) -> None:
        self.streams = streams
        self.owner: Owner | None = None
        self._key_locks: dict[str, asyncio.Lock] = {}

    async def handle(self, entries: list[Entry]) -> None:
        """Hand entries to the owner: keys side by side, one key's entries in order."""
        by_key: dict[str, list[Entry]] = defaultdict(list)
        for entry in entries:
            by_key[entry.forward.key].append(entry)
        await asyncio.gather(*(self._handle_key(batch) for batch in by_key.values()))

    async def hand_over(self, pick: Callable[[], Awaitable[str | None]]) -> bool:
        """Send what this node's inbox still holds to live nodes; False when none is left.

        Each keeps the name it was first read under here: its origin waits on
        that name, and a wake read before is checked against the session under it.
        """
        while entries := [*await self.streams.pending(), *await self.streams.read(block_ms=None)]:
            for entry in entries:
                other = await pick()
                if other is None:
                    log.warning("no other live node takes this node's inbox; it waits here")
                    return False
                forward = entry.forward
                if forward.wake is not None:
                    meta = {MARKER: entry.marker, **dict(forward.wake.get("meta", {}))}
                    forward = dataclasses.replace(forward, wake={**forward.wake, "meta": meta})
                await self.streams.send(other, forward)
                await self.streams.done(entry)
        return True

    async def _handle_key(self, entries: list[Entry]) -> None:
        """One key's entries in order, never beside another batch of the same key's.

        The inbox reader and a takeover may hold entries of one key at once (a
        wake read again is checked against the session before it is taken): one
        at a time, that check and the taking are one step.
        """
        key = entries[0].forward.key
        lock = self._key_locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                await self._receive_all(entries)
        finally:
            if not lock.locked() and self._key_locks.get(key) is lock:
                del self._key_locks[key]

    async def _receive_all(self, entries: list[Entry]) -> None:
        assert self.owner is not None
        for entry in entries:
            try:
                await self.owner.receive(entry.forward, entry.marker)
            except Exception:
                # Left pending: read again at this node's next start, or by a survivor.
                log.exception(
                    "a %s for %s from node %s was not taken; it stays in the inbox",
                    entry.forward.kind,
                    entry.forward.key,
                    entry.forward.origin,
                )
                return
            await self.streams.done(entry)

"""Many wakes at once (a cron burst): each accepted as a single wake is, in shared store rounds.

:meth:`ThreadManager.wake` makes one wake durable before it returns. A burst
of them one after another pays a store round each, and the first wakes'
turns already run — and take the event loop — while the last are still being
accepted. :func:`wake_many` takes the whole burst in phases; each phase makes
the store calls of every wake in the same loop iteration, so the store's
writer takes them in one round (the jsonl store: one flush of its
write-ahead log for the lot, see decision perf-01):

1. every wake is admitted as :meth:`ThreadManager.wake_turn` admits one (the
   manager open, the key not quarantined, the wake's chain within bounds);
2. every key's thread is found or started: evicted sessions are loaded (and
   their writer leases taken), new ones created and their keys pointed at them;
3. every wake is accepted by its thread, exactly as a single wake is (its
   busy policy, its prompt or receipt, its errors); a key's wakes in the
   batch's order;
4. only then may the batch's turns start: the manager's turn gate holds the
   batch's keys until the last acceptance is durable.

Each wake gets its own :class:`WakeResult`: one that is refused (quarantined,
busy, its session unreadable) fails alone, and the others are accepted.

A caller that knows a burst is coming (cron, a second before its jobs are
due) can do step 2 ahead of time with :func:`open_ahead`: the keys' threads
are opened — evicted sessions loaded and leased, new ones created and
pointed — and the burst then finds them live. Nothing is accepted ahead:
each wake is still made durable when it comes, as above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from threads.errors import OwnedElsewhereError
from threads.keys import SessionKey
from threads.runner import Thread
from threads.turns import Turn
from threads.wake import Accepted, Wake

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeResult:
    """One wake of a batch: accepted (with the turn it runs as), or what refused it."""

    key: str
    accepted: Accepted | None = None
    turn: Turn | None = None
    error: Exception | None = None

    def unwrap(self) -> tuple[Accepted, Turn]:
        """What :meth:`ThreadManager.wake_turn` would have returned; raises the wake's error."""
        if self.error is not None:
            raise self.error
        assert self.accepted is not None
        assert self.turn is not None
        return self.accepted, self.turn


@dataclass(frozen=True, slots=True, kw_only=True)
class Ahead:
    """A key about to be woken, whose thread is opened ahead of the wake.

    ``create`` makes the key's session when it has none (with ``agent``, as
    the wake would); without it a key with no session is left alone.
    """

    key: str
    create: bool = False
    agent: str | None = None


Admitted = list[tuple[int, Wake]]
"""A key's wakes in the batch's order, each with its place in the batch."""


async def wake_many(manager: ThreadManager, wakes: Sequence[tuple[str, Wake]]) -> list[WakeResult]:
    """Accept ``wakes`` (key, wake) together; one result per wake, in the same order."""
    results: list[WakeResult | None] = [None] * len(wakes)
    by_key: dict[SessionKey, Admitted] = {}
    for index, (key, wake) in enumerate(wakes):
        try:
            session_key, admitted = manager.admit(key, wake)
        except Exception as exc:
            results[index] = WakeResult(key=key, error=exc)
            continue
        by_key.setdefault(session_key, []).append((index, admitted))

    async def start(key: SessionKey, admitted: Admitted) -> Thread | None:
        """The key's thread; None when the key's wakes were settled here (forwarded, refused)."""
        try:
            thread = await manager.open_thread(key, create=True, agent=admitted[0][1].agent)
            assert thread is not None
            # A loaded session's writer lease, taken now with the others' rather than
            # by its first append: the batch's appends then go to the store together.
            await thread.session.hold()
        except OwnedElsewhereError as elsewhere:
            for index, wake in admitted:
                results[index] = await _forwarded(manager, elsewhere.node, key, wake)
            return None
        except Exception as exc:
            for index, _wake in admitted:
                results[index] = WakeResult(key=str(key), error=exc)
            return None
        return thread

    async def accept(thread: Thread, admitted: Admitted) -> None:
        for index, wake in admitted:
            try:
                accepted, turn = await thread.wake(wake)
            except Exception as exc:
                results[index] = WakeResult(key=str(thread.key), error=exc)
            else:
                results[index] = WakeResult(key=str(thread.key), accepted=accepted, turn=turn)

    with manager.holding_turns(by_key):
        keys = list(by_key)
        # A live, leased thread (a burst's sessions are opened ahead) needs no start of its own.
        threads = [_ready(manager, key) for key in keys]
        starting = [at for at, thread in enumerate(threads) if thread is None]
        started = await asyncio.gather(*(start(keys[at], by_key[keys[at]]) for at in starting))
        for at, thread in zip(starting, started, strict=True):
            threads[at] = thread
        await asyncio.gather(
            *(
                accept(thread, by_key[key])
                for key, thread in zip(keys, threads, strict=True)
                if thread is not None
            )
        )
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


def _ready(manager: ThreadManager, key: SessionKey) -> Thread | None:
    """The key's thread when it is live and holds its writer lease already; else None."""
    thread = manager.thread(key)
    return thread if thread is not None and thread.session.held else None


async def _forwarded(manager: ThreadManager, node: str, key: SessionKey, wake: Wake) -> WakeResult:
    """A wake for a key another node owns, sent to that node's inbox (scale-out)."""
    try:
        accepted, turn = await manager.ownership.forward(node, key, wake)
    except Exception as exc:
        return WakeResult(key=str(key), error=exc)
    return WakeResult(key=str(key), accepted=accepted, turn=turn)


async def open_ahead(manager: ThreadManager, keys: Sequence[Ahead]) -> int:
    """Open the threads of ``keys`` (loaded, leased or created) before their wakes come.

    Returns how many are open. A key that cannot be opened now (quarantined,
    owned by another node, its session locked, the manager closing) is logged
    and left: its wake meets the same refusal when it comes, and reports it.
    """

    async def one(ahead: Ahead) -> bool:
        try:
            thread = await manager.open_thread(ahead.key, create=ahead.create, agent=ahead.agent)
            if thread is None:
                return False
            # Its writer lease too, as a batch takes it (see wake_many).
            await thread.session.hold()
        except Exception as exc:
            log.info("opening %s ahead of its wake: %s", ahead.key, exc)
            return False
        return True

    if manager.closed:
        return 0
    opened = await asyncio.gather(*(one(ahead) for ahead in keys))
    return sum(opened)

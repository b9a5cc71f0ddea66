"""The thread manager as cron's :class:`~cron.base.Waker`.

``ThreadManager`` hands wakes over and knows which sessions exist; what it does
not answer is which cron wakes a session already holds. :class:`ManagerWaker`
adds that by reading the session's entries — the live thread's when it is
loaded, the store's otherwise — and matching the wake meta each accepted
prompt and receipt carries. A restarted cron service asks it before firing a
due time again, so a wake accepted just before a crash is not delivered twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from cron.base import HeldWake
from threads.errors import NotFoundError
from threads.keys import SessionKey
from threads.manager import ThreadManager
from threads.messages import JSON
from threads.store.entries import Entry
from threads.tree import accepted_wake
from threads.turns import Turn
from threads.wake import Accepted, Wake, WakeSource
from threads.wake_batch import Ahead, WakeResult


class ManagerWaker:
    """Wakes sessions through a :class:`ThreadManager`, one or a burst at a time.

    It opens the sessions of a burst ahead of it, and answers cron's held-wake question.
    """

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        return await self.manager.wake(key, wake)

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, Turn | None]:
        return await self.manager.wake_turn(key, wake)

    async def wake_many(self, wakes: Sequence[tuple[SessionKey, Wake]]) -> list[WakeResult]:
        return await self.manager.wake_many(wakes)

    async def open_ahead(self, keys: Sequence[Ahead]) -> int:
        return await self.manager.open_ahead(keys)

    async def session_exists(self, key: SessionKey) -> bool:
        return await self.manager.session_exists(key)

    def busy(self, key: SessionKey) -> bool:
        """Whether the key's thread runs a turn or holds input (a heartbeat is skipped then)."""
        thread = self.manager.thread(key)
        return thread is not None and thread.state != "idle"

    async def last_user_message(self, key: SessionKey) -> datetime | None:
        """When the key's user last wrote: the newest wake from a chat channel it accepted."""
        found = await self._entries(key)
        for entry in reversed(found[1] if found else []):
            accepted = accepted_wake(entry)
            if accepted is not None and _from_a_user(accepted[1]):
                return entry.created
        return None

    async def _entries(self, key: SessionKey) -> tuple[str, Sequence[Entry]] | None:
        thread = self.manager.thread(key)
        if thread is not None:
            return thread.session.id, thread.session.entries()
        found = await self.manager.store.resolve(key)
        if found is None:
            return None
        try:
            loaded = await self.manager.store.load(found)
        except NotFoundError:
            return None
        return found, loaded.entries

    async def held_wakes(self, key: SessionKey, meta: Mapping[str, str]) -> list[HeldWake]:
        found = await self._entries(key)
        if found is None:
            return []
        session_id, entries = found
        return held_in(key, session_id, entries, meta)


def held_in(
    key: SessionKey, session_id: str, entries: Sequence[Entry], meta: Mapping[str, str]
) -> list[HeldWake]:
    """The wakes among ``entries`` whose meta has every item of ``meta``, in append order.

    A wake accepted while busy appears twice — its receipt, then its prompt when
    its turn starts — with one run id and one meta; it is reported once.
    """
    out: list[HeldWake] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for entry in entries:
        found = accepted_wake(entry)
        if found is None:
            continue
        run_id, wire = found
        held = wire.get("meta")
        if not isinstance(held, Mapping):
            continue
        if any(held.get(name) != value for name, value in meta.items()):
            continue
        items = {str(k): str(v) for k, v in held.items()}
        once = (run_id, tuple(sorted(items.items())))
        if once in seen:
            continue
        seen.add(once)
        created = wire.get("created")
        out.append(
            HeldWake(
                accepted=Accepted(key=key, session_id=session_id, run_id=run_id),
                meta=items,
                handed_over=datetime.fromisoformat(created)
                if isinstance(created, str)
                else entry.created,
                accepted_at=entry.created,
            )
        )
    return out


def _from_a_user(wake: Mapping[str, JSON]) -> bool:
    source = wake.get("source")
    return isinstance(source, str) and source in _USER_SOURCES


_USER_SOURCES = frozenset(s.value for s in WakeSource if s.is_user_channel)

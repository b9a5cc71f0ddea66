"""The writer lease between Session values sharing one Storage value.

Bookkeeping over a backend's own lock (seed 003, ``Leaser``): which holder
has each session on this store. The backends keep the lock; this keeps who
among this store's writers may use it.
"""

from __future__ import annotations

from threads.errors import LockedError


class Leases:
    """Session id → the holder that has its lease on this store."""

    def __init__(self) -> None:
        self._holders: dict[str, object] = {}

    def check(self, session: str, holder: object) -> None:
        """Raise :class:`LockedError` when a different holder has the session."""
        if holder is None:
            raise ValueError(f"acquire of session {session}: the holder must not be None")
        current = self._holders.get(session)
        if current is not None and current is not holder:
            raise LockedError(session, "another session writer on this store")

    def take(self, session: str, holder: object) -> None:
        self._holders[session] = holder

    def may_yield(self, session: str, holder: object) -> bool:
        """Whether ``holder`` yielding lets go of the hold: it has the lease, or nobody has."""
        current = self._holders.get(session)
        return current is None or current is holder

    def held(self, session: str) -> bool:
        return session in self._holders

    def drop(self, session: str) -> None:
        self._holders.pop(session, None)

    def clear(self) -> None:
        self._holders.clear()

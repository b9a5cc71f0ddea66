"""Sessions set aside because they cannot be read, so that every other session runs.

A session whose stored data this build cannot read — a damaged line
(:class:`CorruptError`), data from a newer build (:class:`NewerFormatError`),
a file the gateway may not open or that is a link (``PermissionError``,
:class:`UnsafePathError`) — is *quarantined* when the manager first meets it:
at the start-up scan or when a wake loads it. It is logged once with where it
is kept and the line, listed in ``health`` and ``check-session``, and its key
answers every wake with :class:`QuarantinedError` (the person is told in one
line; nothing is taken). ``/new`` points the key at a fresh session and lifts
the quarantine; the unreadable session stays as it was, for the operator.

What is *not* quarantined is what retrying fixes: a store that cannot be
reached, a lock another process holds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from threads.errors import CorruptError, NewerFormatError, QuarantinedError, UnsafePathError

log = logging.getLogger(__name__)

UNREADABLE = (CorruptError, NewerFormatError, UnsafePathError, PermissionError)
"""The errors that mean "this build cannot read this session as stored": retrying changes nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantined:
    """One session set aside: its key, where it is kept, the line and why."""

    key: str
    session_id: str
    where: str
    line: int
    entry: str
    reason: str
    since: float

    @classmethod
    def of(cls, key: str, session_id: str, where: str, error: BaseException) -> Quarantined:
        """The record of a session that failed to load with ``error``."""
        return cls(
            key=key,
            session_id=session_id,
            where=where,
            line=error.line if isinstance(error, CorruptError | NewerFormatError) else 0,
            entry=error.entry if isinstance(error, CorruptError) else "",
            reason=str(error) or type(error).__name__,
            since=time.time(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_key": self.key,
            "session_id": self.session_id,
            "where": self.where,
            "line": self.line,
            "entry": self.entry,
            "reason": self.reason,
            "since": self.since,
        }


class Quarantine:
    """The keys whose sessions cannot be read, and why."""

    def __init__(self) -> None:
        self._keys: dict[str, Quarantined] = {}

    def add(self, key: str, session_id: str, where: str, error: BaseException) -> QuarantinedError:
        """Set the key's session aside, log it once with where it is kept and the line.

        Returns the error the wake that met it raises.
        """
        record = Quarantined.of(key, session_id, where, error)
        self._keys[key] = record
        place = f"{where}, line {record.line}" if record.line else where
        log.error(
            "session key %s: session %s cannot be read and is set aside (%s) — %s. Every other "
            "session runs; this key answers with an error until /new starts a fresh session "
            "or the session is repaired (store.salvage = true skips damaged lines) and the "
            "gateway restarts",
            key,
            session_id,
            record.reason,
            place,
        )
        return QuarantinedError(key, session_id, record.reason)

    def get(self, key: str) -> Quarantined | None:
        return self._keys.get(key)

    def check(self, key: str) -> None:
        """Raise :class:`QuarantinedError` when the key's session is set aside."""
        record = self._keys.get(key)
        if record is not None:
            raise QuarantinedError(key, record.session_id, record.reason)

    def lift(self, key: str) -> None:
        """The key points at another session now (``/new``, or it was forgotten)."""
        self._keys.pop(key, None)

    def listing(self) -> list[dict[str, Any]]:
        return [record.to_json() for _, record in sorted(self._keys.items())]

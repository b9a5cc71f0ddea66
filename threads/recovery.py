"""The recovery log: which session keys a starting gateway looks at for unsettled input.

One small JSON record beside the store, replaced atomically. A start marks it
unclean; a clean close writes the keys that still hold queued input. A start
that finds no clean record (a first run, or a process that died) looks at
every key. A key whose accepted input waits for an unavailable store is
marked in the record as soon as it waits (``unsettled``), and stays in every
record until a start has run it. The record also keeps the exchange chains that were stopped
(:mod:`threads.chains`), written as soon as one is, so none starts again.
The record (it names sessions) is mode 0600 in a 0700 directory, and is never
read or written through a symbolic link.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from threads.errors import UnsafePathError
from threads.store.base import SessionStore
from threads.store.private import make_private_dir, read_private, write_private

log = logging.getLogger(__name__)


class RecoveryLog:
    """Which keys to look at for unsettled input when the gateway starts.

    A clean close records the keys that still hold queued input; a start that
    finds no clean record (first run, or the process died) scans every key.
    Keys a start did not continue are carried into the next clean record.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._carried: set[str] = set()
        self.stopped: dict[str, Any] = {}

    def carry(self, keys: list[str]) -> None:
        """Keys this run leaves unexamined or unsettled: the next clean record keeps them."""
        self._carried.update(keys)

    def mark(self, key: str) -> None:
        """A key's accepted input waits for the store: name it now, and in the clean record.

        Written at once, so the record names the key even if this process dies
        before the store is back.
        """
        if key in self._carried:
            return
        self._carried.add(key)
        try:
            self._write({"clean": False})
        except (OSError, UnsafePathError) as exc:
            log.warning(
                "recovery record %s not written (%s); a start after a crash scans every key",
                self.path,
                exc,
            )

    async def begin(self, store: SessionStore) -> list[str]:
        record = self._read()
        stopped = record.get("stopped")
        self.stopped = dict(stopped) if isinstance(stopped, dict) else {}
        if record.get("clean"):
            keys = [str(k) for k in record.get("pending", [])]
        else:
            keys = sorted({*await store.keys(), *map(str, record.get("unsettled", []))})
        self._write({"clean": False})
        return keys

    async def end(self, pending: list[str]) -> None:
        self._write({"clean": True, "pending": sorted({*pending, *self._carried})})

    def record_stopped(self, stopped: dict[str, Any]) -> None:
        """Keep the stopped chains now (a crash after this still knows them)."""
        self.stopped = dict(stopped)
        self._write({"clean": False})

    def _read(self) -> dict[str, Any]:
        """The last record; an unreadable one counts as none (every key is looked at)."""
        if self.path is None:
            return {}
        try:
            record = orjson.loads(read_private(self.path))
        except FileNotFoundError:
            return {}
        except (orjson.JSONDecodeError, OSError, UnsafePathError) as exc:
            log.warning(
                "recovery record %s not read (%s); looking at every session key", self.path, exc
            )
            return {}
        return record if isinstance(record, dict) else {}

    def _write(self, record: dict[str, Any]) -> None:
        if self.stopped:
            record = {**record, "stopped": self.stopped}
        if not record.get("clean") and self._carried:
            record = {**record, "unsettled": sorted(self._carried)}
        if self.path is None:
            return
        make_private_dir(self.path.parent)
        write_private(self.path, orjson.dumps(record))

"""The recovery log: which session keys a starting gateway looks at for unsettled input.

One small JSON record beside the store, replaced atomically. A start marks it
unclean; a clean close writes the keys that still hold queued input. A start
that finds no clean record (a first run, or a process that died) looks at
every key. The record also keeps the exchange chains that were stopped
(:mod:`threads.chains`), written as soon as one is, so none starts again.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import orjson

from threads.store.base import SessionStore


class RecoveryLog:
    """Which keys to look at for unsettled input when the gateway starts.

    A clean close records the keys that still hold queued input; a start that
    finds no clean record (first run, or the process died) scans every key.
    Keys a start did not continue are carried into the next clean record.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._carried: list[str] = []
        self.stopped: dict[str, Any] = {}

    def carry(self, keys: list[str]) -> None:
        """Keys this run leaves unexamined: the next clean record keeps them."""
        self._carried = list(keys)

    async def begin(self, store: SessionStore) -> list[str]:
        record: dict[str, Any] = {}
        if self.path is not None and self.path.exists():
            with contextlib.suppress(orjson.JSONDecodeError, OSError):
                record = orjson.loads(self.path.read_bytes())
        stopped = record.get("stopped")
        self.stopped = dict(stopped) if isinstance(stopped, dict) else {}
        if record.get("clean"):
            keys = [str(k) for k in record.get("pending", [])]
        else:
            keys = sorted(await store.keys())
        self._write({"clean": False})
        return keys

    async def end(self, pending: list[str]) -> None:
        self._write({"clean": True, "pending": sorted({*pending, *self._carried})})

    def record_stopped(self, stopped: dict[str, Any]) -> None:
        """Keep the stopped chains now (a crash after this still knows them)."""
        self.stopped = dict(stopped)
        self._write({"clean": False})

    def _write(self, record: dict[str, Any]) -> None:
        if self.stopped:
            record = {**record, "stopped": self.stopped}
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(record))
        os.replace(tmp, self.path)

"""Stopped exchange chains: which wakes a stop (or a spent budget) still refuses.

A stop cuts a chain at a depth: the wakes of that chain at the cut or deeper
are refused from then on, whichever session they are for, while what came
before the cut (the user's own turn, when an operator stops a child) is left
alone. A cut is kept for an hour — longer than any reply of the chain could
still be on its way — and survives a restart through the recovery log, so a
stopped chain does not start again when the gateway does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

KEEP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Cut:
    """Where a chain was stopped, why, and until when the cut is kept (wall-clock seconds)."""

    depth: int
    reason: str
    until: float


class StoppedChains:
    """The chains that were stopped, each with its cut."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._cuts: dict[str, Cut] = {}

    def __bool__(self) -> bool:
        return bool(self._cuts)

    def stop(self, chain: str, depth: int, reason: str) -> None:
        """Refuse ``chain``'s wakes at ``depth`` and deeper (a cut already higher stays)."""
        self._expire()
        cut = self._cuts.get(chain)
        if cut is not None and cut.depth <= depth:
            return
        self._cuts[chain] = Cut(depth=depth, reason=reason, until=self.clock() + KEEP_SECONDS)

    def refusal(self, chain: str, depth: int) -> str:
        """Why a wake of ``chain`` at ``depth`` is refused; "" when it may run."""
        if not chain or not self._cuts:
            return ""
        cut = self._cuts.get(chain)
        if cut is None or depth < cut.depth:
            return ""
        if cut.until <= self.clock():
            del self._cuts[chain]
            return ""
        return cut.reason

    def to_record(self) -> dict[str, Any]:
        self._expire()
        return {
            chain: {"depth": cut.depth, "reason": cut.reason, "until": cut.until}
            for chain, cut in self._cuts.items()
        }

    def load(self, record: Mapping[str, Any]) -> None:
        """Take the cuts a previous run recorded (malformed ones are skipped)."""
        for chain, fields in record.items():
            try:
                cut = Cut(
                    depth=int(fields["depth"]),
                    reason=str(fields["reason"]),
                    until=float(fields["until"]),
                )
            except (KeyError, TypeError, ValueError):
                continue
            self._cuts[str(chain)] = cut
        self._expire()

    def _expire(self) -> None:
        now = self.clock()
        for chain in [c for c, cut in self._cuts.items() if cut.until <= now]:
            del self._cuts[chain]

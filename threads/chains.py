"""Exchange chains: naming them, bounding their depth, and the cuts stops make in them.

A wake no session caused starts a chain; every wake a turn causes goes one
level deeper in its cause's chain (see :class:`threads.wake.Wake`). The thread
manager asks :class:`Chains` about every wake it accepts: one deeper than
``threads.max_exchange_depth``, or at or below a cut, is refused.

A stop cuts a chain at a depth: the wakes of that chain at the cut or deeper
are refused from then on, whichever session they are for, while what came
before the cut (the user's own turn, when an operator stops a child) is left
alone. A cut is kept for an hour — longer than any reply of the chain could
still be on its way — and is recorded as soon as it is made (the recovery
log), so a stopped chain does not start again when the gateway does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from threads.errors import ChainStoppedError, ExchangeLimitError, ExchangeRefusedError
from threads.ids import new_chain_id
from threads.session_sink import SessionSink
from threads.wake import Cause, Wake

KEEP_SECONDS = 3600.0

Record = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Cut:
    """Where a chain was stopped, why, and until when the cut is kept (wall-clock seconds)."""

    depth: int
    reason: str
    until: float


class Chains:
    """The exchange-chain rules of one thread manager: the depth limit and the cuts.

    ``record`` is called with every cut in force whenever one is made (the
    recovery log keeps them); ``clock`` is wall-clock seconds.
    """

    def __init__(
        self,
        max_depth: int,
        *,
        record: Record | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_depth = max_depth
        self.clock = clock
        self._record = record
        self._cuts: dict[str, Cut] = {}

    def admit(self, key: str, wake: Wake) -> Wake:
        """The wake with its chain named; raises :class:`ExchangeRefusedError` when it may not run.

        A wake no session caused starts a chain of its own here, and a session
        sink it carries answers in that chain.
        """
        if not wake.chain:
            chain = new_chain_id()
            sink = wake.sink
            if isinstance(sink, SessionSink) and not sink.chain:
                sink = dataclasses.replace(sink, chain=chain, depth=wake.depth)
            wake = dataclasses.replace(wake, chain=chain, sink=sink)
        refusal = self.refusal(key, Cause(chain=wake.chain, depth=wake.depth))
        if refusal is not None:
            raise refusal
        return wake

    def refusal(self, key: str, cause: Cause) -> ExchangeRefusedError | None:
        """Why a wake for ``key`` at ``cause`` would be refused, or None when it may run."""
        if cause.depth > self.max_depth:
            return ExchangeLimitError(key, cause.depth, self.max_depth)
        reason = self._cut_reason(cause.chain, cause.depth)
        if reason:
            return ChainStoppedError(key, reason)
        return None

    def refused(self, payload: object) -> bool:
        """Whether a queued input's wake lies at or below a cut of its chain."""
        return isinstance(payload, Wake) and bool(self._cut_reason(payload.chain, payload.depth))

    @property
    def any_cut(self) -> bool:
        return bool(self._cuts)

    def cut(self, chain: str, depth: int, reason: str) -> None:
        """Refuse ``chain``'s wakes at ``depth`` and deeper (a cut already higher stays)."""
        self._expire()
        existing = self._cuts.get(chain)
        if existing is None or existing.depth > depth:
            self._cuts[chain] = Cut(depth=depth, reason=reason, until=self.clock() + KEEP_SECONDS)
        if self._record is not None:
            self._record(self.to_record())

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

    def _cut_reason(self, chain: str, depth: int) -> str:
        if not chain or not self._cuts:
            return ""
        cut = self._cuts.get(chain)
        if cut is None or depth < cut.depth:
            return ""
        if cut.until <= self.clock():
            del self._cuts[chain]
            return ""
        return cut.reason

    def _expire(self) -> None:
        now = self.clock()
        for chain in [c for c, cut in self._cuts.items() if cut.until <= now]:
            del self._cuts[chain]

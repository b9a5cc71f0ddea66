"""The misfire policy: what to do with due fire times, given how late they are.

APScheduler hands over every due time of a job (``coalesce`` is off on its
side, so none is dropped before we see it); :meth:`MisfirePolicy.plan` then
decides, for one batch of due times judged at ``now``:

* A paused job fires nothing: its due times are ``skipped``.
* A due time later than ``grace`` is ``missed`` — recorded, never dropped.
* A due time within ``grace`` fires.
* With ``coalesce``, the missed times become one ``missed`` record and the
  on-time ones one fire; ``coalesced`` counts the earlier times each stands for.
  Without it, every due time gets its own record or fire.

The policy is pure (no clock, no I/O), so it is tested with any ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

PlanAction = Literal["fire", "missed", "skipped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """One outcome of a batch: fire at ``scheduled``, or record it missed or skipped."""

    action: PlanAction
    scheduled: datetime
    lateness: timedelta
    coalesced: int = 0
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MisfirePolicy:
    """Grace period and coalescing, applied to every job alike."""

    grace: timedelta = timedelta(seconds=60)
    coalesce: bool = True

    @classmethod
    def of(cls, grace_seconds: float, coalesce: bool) -> MisfirePolicy:
        return cls(grace=timedelta(seconds=grace_seconds), coalesce=coalesce)

    def plan(self, due: Sequence[datetime], now: datetime, *, enabled: bool) -> list[Planned]:
        """The records and fires for the due times ``due`` (ascending), judged at ``now``."""
        if not due:
            return []
        if not enabled:
            return self._group("skipped", due, now, "the job is paused")
        late = [t for t in due if now - t > self.grace]
        on_time = [t for t in due if now - t <= self.grace]
        grace_s = f"{self.grace.total_seconds():g} s"
        out = self._group("missed", late, now, f"later than the misfire grace of {grace_s}")
        return out + self._group("fire", on_time, now, "")

    def _group(
        self, action: PlanAction, times: Sequence[datetime], now: datetime, note: str
    ) -> list[Planned]:
        if not times:
            return []
        if self.coalesce:
            last = times[-1]
            more = len(times) - 1
            full = note
            if more and action != "fire":
                full = f"{note}; stands for {more} earlier due time(s) from {times[0].isoformat()}"
            return [
                Planned(
                    action=action,
                    scheduled=last,
                    lateness=_late(now, last),
                    coalesced=more,
                    note=full,
                )
            ]
        return [
            Planned(action=action, scheduled=t, lateness=_late(now, t), note=note) for t in times
        ]


def _late(now: datetime, scheduled: datetime) -> timedelta:
    return max(now - scheduled, timedelta(0))

"""A clock the test moves by hand, for expiry and rate limits without wall-clock time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class HandClock:
    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2030, 5, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)

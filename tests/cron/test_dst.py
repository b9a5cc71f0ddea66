"""Daylight saving in Europe/Berlin, both ways: explain and a stored job's fire times.

2025-03-30: at 02:00 CET clocks jump to 03:00 CEST (01:00Z); 02:xx does not exist.
2025-10-26: at 03:00 CEST clocks go back to 02:00 CET (01:00Z); 02:xx happens twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cron.base import JobStore
from cron.service import CronService, explain
from tests.clock import FixedClock
from tests.cron.conftest import utc

BERLIN = ZoneInfo("Europe/Berlin")


def local(times: list[datetime]) -> list[str]:
    return [t.astimezone(BERLIN).strftime("%m-%d %H:%M %Z") for t in times]


def test_spring_forward_a_daily_time_in_the_missing_hour_fires_once_that_day() -> None:
    times = explain("30 2 * * *", "Europe/Berlin", 3, after=utc(2025, 3, 29, 12))
    assert times == [utc(2025, 3, 30, 1, 30), utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]
    # 02:30 CET never happens on the 30th; it fires once, an hour of wall time later.
    assert local(times) == ["03-30 03:30 CEST", "03-31 02:30 CEST", "04-01 02:30 CEST"]


def test_spring_forward_an_hourly_job_skips_no_real_hour() -> None:
    times = explain("0 * * * *", "Europe/Berlin", 4, after=utc(2025, 3, 29, 22, 30))
    assert times == [
        utc(2025, 3, 29, 23),
        utc(2025, 3, 30, 0),
        utc(2025, 3, 30, 1),
        utc(2025, 3, 30, 2),
    ]
    assert local(times) == [
        "03-30 00:00 CET",
        "03-30 01:00 CET",
        "03-30 03:00 CEST",
        "03-30 04:00 CEST",
    ]


def test_fall_back_a_daily_wall_clock_time_fires_once_not_twice() -> None:
    times = explain("30 2 * * *", "Europe/Berlin", 3, after=utc(2025, 10, 25, 12))
    assert times == [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30), utc(2025, 10, 28, 1, 30)]
    assert local(times) == ["10-26 02:30 CEST", "10-27 02:30 CET", "10-28 02:30 CET"]


def test_fall_back_a_job_fixed_to_the_repeated_hour_runs_through_it_once() -> None:
    times = explain("*/30 2 * * *", "Europe/Berlin", 3, after=utc(2025, 10, 25, 12))
    assert local(times) == ["10-26 02:00 CEST", "10-26 02:30 CEST", "10-27 02:00 CET"]


def test_fall_back_an_hourly_job_fires_every_real_hour_including_the_repeated_one() -> None:
    times = explain("0 * * * *", "Europe/Berlin", 4, after=utc(2025, 10, 25, 22, 30))
    assert times == [
        utc(2025, 10, 25, 23),
        utc(2025, 10, 26, 0),
        utc(2025, 10, 26, 1),
        utc(2025, 10, 26, 2),
    ]
    assert local(times) == [
        "10-26 01:00 CEST",
        "10-26 02:00 CEST",
        "10-26 02:00 CET",
        "10-26 03:00 CET",
    ]


async def test_a_stored_jobs_fire_times_cross_spring_forward(
    sqlite_store: JobStore, make_service: Callable[..., CronService]
) -> None:
    before = utc(2025, 3, 29, 12)
    service = make_service(sqlite_store, clock=FixedClock(before), timezone="Europe/Berlin")
    await service.upsert(service.draft(id="digest", kind="cron", expr="30 2 * * *", task="digest"))
    fires = await service.next_fires("digest", 3)
    assert local(fires) == ["03-30 03:30 CEST", "03-31 02:30 CEST", "04-01 02:30 CEST"]


async def test_a_stored_jobs_fire_times_cross_fall_back(
    sqlite_store: JobStore, make_service: Callable[..., CronService]
) -> None:
    before = utc(2025, 10, 25, 12)
    service = make_service(sqlite_store, clock=FixedClock(before), timezone="Europe/Berlin")
    await service.upsert(service.draft(id="digest", kind="cron", expr="30 2 * * *", task="digest"))
    assert local(await service.next_fires("digest", 3)) == [
        "10-26 02:30 CEST",
        "10-27 02:30 CET",
        "10-28 02:30 CET",
    ]


async def test_an_every_job_keeps_real_intervals_across_fall_back(
    sqlite_store: JobStore, make_service: Callable[..., CronService]
) -> None:
    start = utc(2025, 10, 25, 23, 0)
    service = make_service(sqlite_store, clock=FixedClock(start), timezone="Europe/Berlin")
    await service.upsert(service.draft(id="tick", kind="every", every="1h", task="tick"))
    fires = await service.next_fires("tick", 4)
    assert [b - a for a, b in itertools.pairwise(fires)] == [timedelta(hours=1)] * 3
    assert fires[0] == start + timedelta(hours=1)
    assert local(fires) == [
        "10-26 02:00 CEST",
        "10-26 02:00 CET",
        "10-26 03:00 CET",
        "10-26 04:00 CET",
    ]
    assert all(t.tzinfo is not None and t.utcoffset() == timedelta(0) for t in fires)
    assert fires[0].tzinfo == UTC or fires[0].utcoffset() == timedelta(0)

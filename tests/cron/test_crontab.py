"""Crontab expressions mean what classic cron means, or are refused saying why."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cron import crontab
from cron.errors import InvalidJobError
from cron.service import explain

MONDAY = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # a Monday


def weekdays(expr: str, n: int = 7) -> list[str]:
    return [t.strftime("%a") for t in explain(expr, "UTC", n, after=MONDAY)]


def test_day_of_week_zero_and_seven_are_sunday_as_in_crontab() -> None:
    # APScheduler 3's from_crontab would read 0 as Monday; we translate.
    assert set(weekdays("0 9 * * 0", 3)) == {"Sun"}
    assert set(weekdays("0 9 * * 7", 3)) == {"Sun"}


def test_one_to_five_is_monday_to_friday() -> None:
    assert weekdays("0 9 * * 1-5", 5) == ["Mon", "Tue", "Wed", "Thu", "Fri"]


def test_a_weekday_step_counts_from_sunday() -> None:
    assert weekdays("0 9 * * */2", 4) == ["Tue", "Thu", "Sat", "Sun"]


def test_weekday_names_and_a_range_ending_on_sunday_work() -> None:
    assert weekdays("0 9 * * fri-sun", 3) == ["Fri", "Sat", "Sun"]
    assert weekdays("0 9 * * 5-7", 3) == ["Fri", "Sat", "Sun"]


def test_a_day_of_month_and_a_weekday_fire_when_either_matches_as_in_classic_cron() -> None:
    # 09:00 on the 1st to the 7th, and on every Monday (2026-06-01 is a Monday).
    times = explain("0 9 1-7 * 1", "UTC", 10, after=datetime(2026, 5, 31, tzinfo=UTC))
    assert [t.day for t in times] == [1, 2, 3, 4, 5, 6, 7, 8, 15, 22]
    assert {t.strftime("%a") for t in times[7:]} == {"Mon"}


def test_a_day_field_starting_with_a_star_still_needs_both_days_to_match() -> None:
    # Classic cron counts "*/2" as unrestricted: odd days that are Mondays only.
    times = explain("0 9 */2 * 1", "UTC", 3, after=datetime(2026, 5, 31, tzinfo=UTC))
    assert all(t.strftime("%a") == "Mon" and t.day % 2 == 1 for t in times)
    assert [t.day for t in times] == [1, 15, 29]


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("61 * * * *", "minute field"),
        ("* 24 * * *", "hour field"),
        ("* * 0 * *", "day-of-month field"),
        ("* * * 13 *", "month field"),
        ("* * * * 8", "day-of-week field"),
        ("*/0 * * * *", "step of 0"),
        ("* * * *", "has 4 fields"),
        ("@fortnightly", "not a known macro"),
    ],
)
def test_a_bad_expression_is_refused_naming_the_field_and_why(expr: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        crontab.parse(expr)


def test_macros_expand_to_their_five_fields() -> None:
    assert crontab.parse("@daily").expression() == "0 0 * * *"
    assert crontab.parse("@hourly").expression() == "0 * * * *"
    assert weekdays("@weekly", 2) == ["Sun", "Sun"]


def test_an_expression_that_never_fires_is_refused() -> None:
    with pytest.raises(InvalidJobError, match="never fires"):
        explain("0 0 30 2 *", "UTC")

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


def test_restricting_both_day_fields_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidJobError) as caught:
        explain("0 9 1-7 * 1", "UTC")
    assert caught.value.fields == ("expr",)
    assert "either matches" in str(caught.value)


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

"""The job model: what a job is, and what it refuses (naming the field and why)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron.errors import InvalidJobError
from cron.models import build_job, parse_interval

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def job(**fields: Any) -> Any:
    base: dict[str, Any] = {
        "id": "j1",
        "kind": "cron",
        "expr": "0 9 * * *",
        "task": "say hello",
        "created": NOW,
        "updated": NOW,
    }
    base.update(fields)
    return build_job(**base)


def refused(**fields: Any) -> InvalidJobError:
    with pytest.raises(InvalidJobError) as caught:
        job(**fields)
    return caught.value


def test_a_direct_wake_job_needs_the_session_it_wakes() -> None:
    error = refused(direct_wake=True)
    assert error.fields == ("wake_session",)
    assert "existing session" in str(error)


def test_a_direct_wake_job_refuses_an_agent_because_it_keeps_the_sessions_agent() -> None:
    error = refused(direct_wake=True, wake_session="telegram:1", agent="researcher")
    assert error.fields == ("agent",)
    assert "keeps the woken session's agent" in str(error)


def test_a_direct_wake_job_wakes_its_session_and_an_independent_one_its_own() -> None:
    direct = job(direct_wake=True, wake_session="telegram:1")
    independent = job(wake_session="telegram:1", agent="researcher")
    assert direct.session_key == "telegram:1"
    assert independent.session_key == "cron:j1"


def test_an_at_time_without_an_offset_is_refused_naming_at() -> None:
    error = refused(kind="at", expr=None, at="2026-05-01T09:00:00")
    assert error.fields == ("at",)
    assert "no UTC offset" in str(error)


def test_an_at_time_is_stored_in_utc() -> None:
    made = job(kind="at", expr=None, at="2026-05-01T09:00:00+02:00")
    assert made.at == datetime(2026, 5, 1, 7, 0, tzinfo=UTC)
    assert made.at is not None
    assert made.at.utcoffset() == timedelta(0)


def test_an_at_time_that_is_not_rfc3339_is_refused() -> None:
    assert refused(kind="at", expr=None, at="tomorrow 9am").fields == ("at",)
    assert refused(kind="at", expr=None, at="2026-05-01").fields == ("at",)


def test_an_unknown_timezone_is_refused_naming_timezone() -> None:
    error = refused(timezone="Mars/Olympus_Mons")
    assert error.fields == ("timezone",)
    assert "IANA time zone" in str(error)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900), ("1h30m", 5400), ("90s", 90), ("2d", 172800), ("1w", 604800)],
)
def test_an_interval_is_read_in_weeks_days_hours_minutes_seconds(text: str, seconds: int) -> None:
    assert parse_interval(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["15x", "m15", "", "0s", "1.5h"])
def test_a_bad_interval_is_refused_naming_every(text: str) -> None:
    error = refused(kind="every", expr=None, every=text)
    assert error.fields == ("every",)


def test_a_schedule_field_of_another_kind_is_refused() -> None:
    error = refused(kind="cron", every="15m")
    assert error.fields == ("every",)
    assert "not used by a cron job" in str(error)


def test_a_missing_schedule_field_is_refused_naming_it() -> None:
    assert refused(kind="at", expr=None).fields == ("at",)


def test_a_job_id_that_cannot_be_part_of_a_session_key_is_refused() -> None:
    for bad in ("a:b", "../x", "has space", ""):
        assert refused(id=bad).fields == ("id",)


def test_an_empty_task_is_refused() -> None:
    assert refused(task="   ").fields == ("task",)


def test_an_invalid_wake_session_is_refused_naming_it() -> None:
    assert refused(wake_session="telegram::1").fields == ("wake_session",)


def test_every_problem_is_reported_not_only_the_first() -> None:
    error = refused(expr="61 * * * *", timezone="Nowhere/City")
    assert set(error.fields) == {"expr", "timezone"}


def test_the_schedule_signature_ignores_everything_but_the_schedule() -> None:
    a = job()
    assert a.schedule_signature == job(task="other", enabled=False).schedule_signature
    assert a.schedule_signature != job(expr="0 10 * * *").schedule_signature
    assert a.schedule_signature != job(timezone="Europe/Berlin").schedule_signature

"""The agent's cron tools: a one-time self check-in, list, remove — its own session only."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from cron.base import JobStore
from cron.errors import InvalidJobError, NotYourJobError
from cron.service import CronService
from tests.clock import ManualClock
from tests.cron.conftest import FakeWaker, Runs
from threads.wake import WakeSource

Make = Callable[..., CronService]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def test_a_self_check_in_is_a_direct_wake_at_job_for_the_current_session(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store)
    at = clock.now() + timedelta(hours=2)
    view = await service.set_check_in("telegram:1", rfc3339(at), "Check if user responded")
    job = view.job
    assert job.id.startswith("self-checkin-")
    assert (job.kind, job.direct_wake, job.wake_session, job.agent) == (
        "at",
        True,
        "telegram:1",
        None,
    )
    assert job.at is not None
    assert abs((job.at - at).total_seconds()) < 1e-3
    assert view.next_fire == job.at


async def test_a_self_check_in_wakes_the_session_once_at_its_time(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    at = clock.now() + timedelta(seconds=0.5)
    await service.set_check_in("telegram:1", rfc3339(at), "Check if user responded")
    clock.advance_to(at)
    [(key, wake)] = await waker.woken(1)
    await runs.wait(1)
    assert key == "telegram:1"
    assert wake.source is WakeSource.CRON
    assert wake.sink.drops
    assert wake.body == "Check if user responded"


async def test_an_agent_lists_only_its_own_sessions_check_ins(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store)
    later = rfc3339(clock.now() + timedelta(hours=1))
    await service.set_check_in("telegram:1", later, "mine", job_id="mine")
    await service.set_check_in("telegram:2", later, "theirs", job_id="theirs")
    await service.upsert(
        service.draft(
            id="digest", kind="cron", expr="0 9 * * *", task="x", wake_session="telegram:1"
        )
    )
    assert [v.job.id for v in await service.list_check_ins("telegram:1")] == ["mine"]


async def test_an_agent_removes_its_check_in_but_not_another_sessions_job(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store)
    later = rfc3339(clock.now() + timedelta(hours=1))
    await service.set_check_in("telegram:1", later, "mine", job_id="mine")
    await service.set_check_in("telegram:2", later, "theirs", job_id="theirs")
    with pytest.raises(NotYourJobError, match="wakes session telegram:2, not telegram:1"):
        await service.remove_check_in("telegram:1", "theirs")
    with pytest.raises(NotYourJobError):
        await service.set_check_in("telegram:1", later, "hijack", job_id="theirs")
    await service.remove_check_in("telegram:1", "mine")
    assert [v.job.id for v in await service.list_jobs()] == ["theirs"]


@pytest.mark.parametrize(
    ("at", "words"),
    [("2020-01-01T00:00:00Z", "not in the future"), ("2030-01-01T09:00:00", "no UTC offset")],
)
async def test_a_check_in_at_a_bad_time_is_refused_naming_at_and_nothing_is_stored(
    sqlite_store: JobStore, make_service: Make, at: str, words: str
) -> None:
    service = make_service(sqlite_store)
    with pytest.raises(InvalidJobError, match=words) as caught:
        await service.set_check_in("telegram:1", at, "too late")
    assert caught.value.fields == ("at",)
    assert await service.list_jobs() == []

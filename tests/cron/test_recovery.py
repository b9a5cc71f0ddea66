"""A restart after a crash: a wake its session already holds is recorded, never delivered twice.

The crash these tests stand for comes between a wake's acceptance (durable in
its session) and its ledger record: the job's pending fire was not advanced,
so the restarted service finds the same due time again. The fake waker plays
the session that holds the wake; ``test_crash.py`` does it with a real
process killed at that point.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import cast

from cron.base import HeldWake, JobStore
from cron.firing import LOST, RECOVERED, Firer
from cron.misfire import MisfirePolicy
from cron.models import build_job
from cron.service import CronService
from cron.wakes import CRON_CALLER, cron_meta
from tests.clock import FixedClock, ManualClock
from tests.cron.conftest import FakeWaker, Runs, Stores, spent
from threads.keys import SessionKey
from threads.sinks import DropSink
from threads.wake import Accepted, Wake, WakeSource

Make = Callable[..., CronService]
KEY = SessionKey("telegram:1")


async def set_check_in(stores: Stores, make_service: Make, job_id: str, due: datetime) -> None:
    """Set an ``at`` job due at ``due`` (in the past), as an editor did while it was ahead."""
    editor = make_service(await stores.open(), clock=FixedClock(due - timedelta(minutes=5)))
    await editor.upsert(
        editor.draft(
            id=job_id, kind="at", at=due, task="check in", wake_session=str(KEY), direct_wake=True
        )
    )


async def deliver_before_the_crash(waker: FakeWaker, job_id: str, due: datetime) -> None:
    """The dead service's hand-over: the session accepted this wake; no ledger record followed."""
    await waker.wake(
        KEY,
        Wake(
            source=WakeSource.CRON,
            body="check in",
            caller=CRON_CALLER,
            sink=DropSink(reason="cron"),
            meta=cron_meta(job_id, due) | {"via": "schedule"},
            created=due + timedelta(milliseconds=3),
        ),
    )


async def test_a_wake_the_session_already_holds_is_recorded_fired_and_not_delivered_again(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(seconds=20)
    await set_check_in(stores, make_service, "checkin", due)
    await deliver_before_the_crash(waker, "checkin", due)
    store = await stores.open()
    await store.beat("the-dead-gateway", due + timedelta(seconds=1))

    service = make_service(store, waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert (record.status, record.scheduled) == ("fired", due)
    assert record.note == RECOVERED
    assert record.run_id == "s_telegram:1-t1"
    assert record.handed_over == due + timedelta(milliseconds=3)
    assert record.fired == waker.accepted_at[0]
    assert len(waker.wakes) == 1
    assert waker.asked == [(str(KEY), {"cron_job": "checkin"})]
    await spent(service, "checkin")
    view = await service.get("checkin")
    assert (view.job.enabled, view.next_fire, view.last_status) == (False, None, "fired")


async def test_a_due_time_the_session_does_not_hold_is_fired_after_the_restart(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(seconds=20)
    await set_check_in(stores, make_service, "checkin", due)
    await deliver_before_the_crash(waker, "another-job", due)

    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert (record.status, record.note) == ("fired", "")
    assert [w.meta["cron_job"] for _, w in waker.wakes] == ["another-job", "checkin"]


async def test_a_held_wake_beyond_grace_is_recorded_fired_when_a_dead_service_left_its_beat(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(hours=2)
    await set_check_in(stores, make_service, "checkin", due)
    await deliver_before_the_crash(waker, "checkin", due)
    store = await stores.open()
    await store.beat("the-dead-gateway", due + timedelta(seconds=1))

    service = make_service(store, waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert (record.status, record.note) == ("fired", RECOVERED)
    assert len(waker.wakes) == 1


async def test_sessions_are_not_asked_about_due_times_long_before_the_last_heartbeat(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(hours=2)
    await set_check_in(stores, make_service, "checkin", due)

    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert record.status == "missed"
    assert waker.asked == []


async def test_fires_after_the_start_never_ask_the_session(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    await service.upsert(
        service.draft(
            id="soon",
            kind="at",
            at=clock.now() + timedelta(seconds=0.3),
            task="check in",
            wake_session=str(KEY),
            direct_wake=True,
        )
    )
    clock.advance(0.3)
    [record] = await runs.wait(1)
    assert record.status == "fired"
    assert waker.asked == []


# --- settling held due times: what the lost ledger write had decided ---------------------

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
JOB = build_job(id="job", kind="every", every="1m", task="tick", created=T0, updated=T0)


def firer(coalesce: bool) -> Firer:
    # `recovered` plans from what the session holds; it never touches the store.
    return Firer(
        cast(JobStore, None),
        None,
        policy=MisfirePolicy.of(60, coalesce=coalesce),
        clock=FixedClock(T0),
    )


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def held_at(*offsets: int) -> dict[datetime, HeldWake]:
    return {
        at: HeldWake(
            accepted=Accepted(key=KEY, session_id="s_1", run_id=f"s_1-t{at.minute}"),
            meta=cron_meta(JOB.id, at),
            handed_over=at,
            accepted_at=at + timedelta(milliseconds=5),
        )
        for at in minutes(*offsets)
    }


def test_due_times_after_the_last_held_one_are_left_to_the_policy() -> None:
    outcomes, rest = firer(True).recovered(minutes(0, 1, 2), held_at(0), T0)
    assert [(o.planned.scheduled, o.accepted is not None) for o in outcomes] == [(T0, True)]
    assert rest == minutes(1, 2)


def test_with_coalescing_an_unheld_earlier_due_time_was_folded_into_the_held_fire() -> None:
    outcomes, rest = firer(True).recovered(minutes(0, 1), held_at(1), T0)
    [record] = [o.record(JOB) for o in outcomes]
    assert (record.status, record.scheduled, record.coalesced) == ("fired", minutes(1)[0], 1)
    assert record.lateness_ms == 5.0
    assert rest == []


def test_without_coalescing_an_unheld_earlier_due_time_is_recorded_missed() -> None:
    outcomes, rest = firer(False).recovered(minutes(0, 1), held_at(1), T0 + timedelta(minutes=2))
    records = [o.record(JOB) for o in outcomes]
    assert [(r.status, r.scheduled) for r in records] == [
        ("missed", minutes(0)[0]),
        ("fired", minutes(1)[0]),
    ]
    assert records[0].note == LOST
    assert rest == []

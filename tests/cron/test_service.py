"""The running cron service: real fires, restarts, live edits, the ledger, wakes it builds.

Services run on the test's manual clock (see ``tests.clock``): a test
sets jobs relative to ``clock.now()`` and advances the clock to fire them.
One test runs on the wall clock, to show the real timers fire too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from cron.base import JobStore, WallClock
from cron.delivery import SILENT_WORDS, deliver_words, direct_words
from cron.errors import JobConflictError, NoGatewayError, ServiceStateError
from cron.scheduler import CronScheduler
from cron.service import CronService
from tests.clock import FixedClock, ManualClock
from tests.cron.conftest import DEADLINE, FakeWaker, Runs, Stores, eventually, spent
from threads.keys import SessionKey
from threads.sinks import DropSink, Sink
from threads.wake import SystemCaller, WakeSource

Make = Callable[..., CronService]


async def checkin(
    service: CronService, job_id: str, at: datetime, session: str = "telegram:1"
) -> None:
    await service.upsert(
        service.draft(
            id=job_id, kind="at", at=at, task="check in", wake_session=session, direct_wake=True
        )
    )


async def test_on_the_wall_clock_a_job_fires_when_its_time_comes(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    service = make_service(sqlite_store, waker, clock=WallClock())
    await service.start()
    runs = Runs(service)
    view = await service.upsert(service.draft(id="tick", kind="every", every="1s", task="tick"))
    due = view.next_fire
    assert due is not None
    [(key, _)] = await waker.woken(1)
    [record, *_] = await runs.wait(1)
    assert key == "cron:tick"
    assert (record.status, record.scheduled) == ("fired", due)
    assert record.fired is not None
    assert record.fired >= due
    assert record.lateness_ms == pytest.approx((record.fired - due).total_seconds() * 1000, abs=1)


async def test_a_job_fires_when_the_clock_reaches_its_time_and_not_before(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=1)
    await checkin(service, "soon", due)
    clock.advance(0.999)
    assert service.scheduled_fire("soon") == due
    clock.advance_to(due)
    [(key, _)] = await waker.woken(1)
    [record] = await runs.wait(1)
    assert key == "telegram:1"
    assert (record.status, record.scheduled, record.fired) == ("fired", due, due)
    assert record.lateness_ms == 0


async def test_a_fire_is_stamped_when_its_session_accepts_the_wake_not_when_it_is_handed_over(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    waker.accepting = asyncio.Event()
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=0.3)
    await checkin(service, "slow", due)
    clock.advance_to(due)
    await asyncio.wait_for(waker.handing.wait(), DEADLINE)
    released = clock.advance(0.25)
    waker.accepting.set()
    [record] = await runs.wait(1)
    assert record.status == "fired"
    assert (record.handed_over, record.fired) == (due, released)
    assert record.lateness_ms == 250


async def test_a_run_now_is_stamped_when_its_session_accepts_the_wake(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    await checkin(service, "slow", clock.now() + timedelta(hours=1))
    waker.accepting = asyncio.Event()
    fired = asyncio.create_task(service.run_now("slow"))
    await asyncio.wait_for(waker.handing.wait(), DEADLINE)
    released = clock.advance(0.25)
    waker.accepting.set()
    record = await asyncio.wait_for(fired, DEADLINE)
    assert record is not None
    assert record.handed_over is not None
    assert record.fired is not None
    assert record.handed_over < released == record.fired


async def test_an_at_job_fires_once_then_is_disabled_and_kept(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    await checkin(service, "once", clock.now() + timedelta(seconds=0.3))
    clock.advance(0.3)
    await runs.wait(1)
    await spent(service, "once")
    view = await service.get("once")
    assert not view.job.enabled
    assert view.next_fire is None
    assert view.last_status == "fired"
    assert service.scheduled_fire("once") is None
    assert [v.job.id for v in await service.list_jobs()] == ["once"]
    with pytest.raises(JobConflictError, match="already came due"):
        await service.resume("once")


async def test_a_restart_over_spent_jobs_leaves_them_out_without_searching_the_scheduler(
    sqlite_store: JobStore,
    waker: FakeWaker,
    make_service: Make,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    for i in range(3):
        await checkin(service, f"once-{i}", clock.now() + timedelta(seconds=0.3))
    later = clock.now() + timedelta(days=1)
    await checkin(service, "later", later)
    clock.advance(0.3)
    await runs.wait(3)
    for i in range(3):
        await spent(service, f"once-{i}")
    await service.stop()
    # Before it starts, APScheduler finds a job to remove by looking through every job
    # added so far: with thousands of spent reminders, a start-up that takes seconds.
    searched: list[str] = []
    monkeypatch.setattr(
        CronScheduler, "remove_job", lambda self, job_id, *a: searched.append(job_id)
    )

    again = make_service(sqlite_store, waker)
    await again.start()

    assert searched == []
    assert [again.scheduled_fire(f"once-{i}") for i in range(3)] == [None] * 3
    assert again.scheduled_fire("later") == later


async def test_a_direct_wake_is_a_cron_wake_with_a_drop_sink_keeping_the_sessions_agent(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    await checkin(service, "direct", clock.now() + timedelta(days=1))
    record = await service.run_now("direct")
    [(key, wake)] = waker.wakes
    assert key == SessionKey("telegram:1")
    assert wake.source is WakeSource.CRON
    assert wake.caller == SystemCaller(name="cron")
    assert wake.sink.drops
    assert wake.sink.to_wire() == {"kind": "drop", "reason": "cron"}
    assert wake.sink.describe().startswith("Caller is cron - output to caller is dropped")
    assert wake.agent is None
    assert wake.body == "check in"
    assert wake.meta["cron_job"] == "direct"
    assert record is not None
    assert record.run_id == "s_telegram:1-t1"


async def test_an_independent_job_wakes_its_own_session_with_its_agent_and_reports_back(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    reported: list[SessionKey] = []

    def session_sink(key: SessionKey, origin: SessionKey) -> Sink:
        assert origin == "cron:digest"
        reported.append(key)
        return DropSink(reason=f"test sink for {key}")

    service = make_service(sqlite_store, waker, session_sink=session_sink)
    await service.start()
    await service.upsert(
        service.draft(
            id="digest",
            kind="cron",
            expr="0 9 * * *",
            task="write the digest",
            agent="researcher",
            wake_session="telegram:1",
        )
    )
    record = await service.run_now("digest")
    [(key, wake)] = waker.wakes
    assert key == "cron:digest"
    assert wake.agent == "researcher"
    assert wake.meta["report_to"] == "telegram:1"
    assert reported == ["telegram:1"]
    assert record is not None
    assert record.status == "fired"
    assert record.via == "run-now"
    assert record.session_key == "cron:digest"


async def test_restart_with_an_at_job_due_within_grace_fires_it_once(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(seconds=30)
    # Set while the time was still ahead (an editor whose clock is before it).
    editor = make_service(await stores.open(), clock=FixedClock(due - timedelta(minutes=5)))
    await checkin(editor, "checkin", due)

    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert (record.status, record.scheduled) == ("fired", due)
    assert record.lateness_ms == 30_000
    assert len(waker.wakes) == 1
    await service.stop()

    again = make_service(await stores.open(), waker)
    await again.start()
    assert again.scheduled_fire("checkin") is None
    assert len(await again.runs("checkin")) == 1
    assert not (await again.get("checkin")).job.enabled


async def test_restart_with_an_at_job_due_beyond_grace_records_it_missed(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    due = clock.now() - timedelta(hours=2)
    editor = make_service(await stores.open(), clock=FixedClock(due - timedelta(minutes=5)))
    await checkin(editor, "checkin", due)

    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert (record.status, record.scheduled, record.fired) == ("missed", due, None)
    assert record.lateness_ms == 2 * 3600 * 1000
    assert "grace of 60 s" in record.note
    assert waker.wakes == []
    await spent(service, "checkin")
    view = await service.get("checkin")
    assert (view.job.enabled, view.next_fire, view.last_status) == (False, None, "missed")


async def test_restart_records_the_fires_a_recurring_job_missed_while_down(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    set_at = clock.now() - timedelta(hours=3, minutes=10)
    editor = make_service(await stores.open(), clock=FixedClock(set_at))
    await editor.upsert(editor.draft(id="hourly", kind="every", every="1h", task="tick"))

    service = make_service(await stores.open(), waker)
    runs = Runs(service)
    await service.start()
    [record] = await runs.wait(1)
    assert record.status == "missed"
    assert record.coalesced == 2
    assert record.scheduled == set_at + timedelta(hours=3)
    assert waker.wakes == []
    assert service.scheduled_fire("hourly") == set_at + timedelta(hours=4)


async def test_without_coalescing_a_restart_records_each_missed_fire_and_fires_the_on_time_one(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    set_at = clock.now() - timedelta(hours=2, seconds=20)
    editor = make_service(await stores.open(), clock=FixedClock(set_at))
    await editor.upsert(editor.draft(id="hourly", kind="every", every="1h", task="tick"))

    service = make_service(await stores.open(), waker, coalesce=False)
    runs = Runs(service)
    await service.start()
    records = await runs.wait(2)
    assert [(r.status, r.scheduled) for r in records] == [
        ("missed", set_at + timedelta(hours=1)),
        ("fired", set_at + timedelta(hours=2)),
    ]
    assert len(waker.wakes) == 1


async def test_an_edit_from_another_store_value_is_applied_at_the_next_poll(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    await service.start()
    runs = Runs(service)
    editor = make_service(await stores.open())  # another process's view, never started
    due = clock.now() + timedelta(seconds=1.5)
    await checkin(editor, "live", due)
    assert service.scheduled_fire("live") is None
    clock.advance(service.poll_seconds)
    await eventually(lambda: service.scheduled_fire("live") == due, within=DEADLINE)
    clock.advance_to(due)
    [record] = await runs.wait(1)
    assert record.status == "fired"
    assert record.lateness_ms == 0


async def test_removing_a_job_elsewhere_unschedules_it_at_the_next_poll(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    await service.start()
    await checkin(service, "gone", clock.now() + timedelta(hours=1))
    editor = make_service(await stores.open())
    await editor.remove("gone")
    assert service.scheduled_fire("gone") is not None
    clock.advance(service.poll_seconds)
    await eventually(lambda: service.scheduled_fire("gone") is None, within=DEADLINE)


async def test_a_job_paused_elsewhere_records_its_fire_as_skipped(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=2)
    await checkin(service, "paused", due)
    editor = make_service(await stores.open())
    await editor.pause("paused")
    await service.refresh()  # what the next poll does
    clock.advance_to(due)
    [record] = await runs.wait(1)
    assert (record.status, record.scheduled, record.fired) == ("skipped", due, None)
    assert "paused" in record.note
    assert waker.wakes == []


async def test_a_failing_waker_records_failed_with_the_error_handed_over_but_never_fired(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    waker.failure = RuntimeError("thread manager is closing")
    await checkin(service, "broken", clock.now() + timedelta(seconds=0.3))
    clock.advance(0.3)
    [record] = await runs.wait(1)
    assert record.status == "failed"
    assert record.error == "RuntimeError: thread manager is closing"
    assert record.handed_over is not None
    assert record.fired is None
    assert record.run_id is None
    await spent(service, "broken")
    assert (await service.get("broken")).last_status == "failed"


async def test_a_direct_wake_into_a_missing_session_fails_naming_the_session(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    await checkin(service, "orphan", clock.now() + timedelta(hours=1), session="telegram:999")
    record = await service.run_now("orphan")
    assert record is not None
    assert record.status == "failed"
    assert "session telegram:999 does not exist" in record.error
    assert waker.wakes == []


async def test_a_direct_wake_into_a_busy_session_queues_behind_the_running_turn(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    turn = waker.start_turn("telegram:1")
    service = make_service(sqlite_store, waker)
    await service.start()
    await checkin(service, "busy", clock.now() + timedelta(hours=1))
    record = await service.run_now("busy")
    assert record is not None
    assert record.status == "fired"
    assert [w.body for w in waker.queued["telegram:1"]] == ["check in"]
    assert not turn.interrupted
    assert not turn.done.is_set()


async def test_the_ledger_holds_scheduled_fired_lateness_status_and_run_id_per_fire(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=0.5)
    await checkin(service, "ledger", due)
    clock.advance_to(due)
    await runs.wait(1)
    await service.run_now("ledger")
    ledger = await service.runs("ledger")
    assert [(r.status, r.via) for r in ledger] == [("fired", "schedule"), ("fired", "run-now")]
    first = ledger[0]
    assert first.scheduled == due
    assert first.fired is not None
    assert first.run_id == "s_telegram:1-t1"
    assert first.session_id == "s_telegram:1"
    assert first.seq < ledger[1].seq


async def test_a_fire_the_scheduler_reaches_later_than_grace_is_recorded_missed(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(sqlite_store, waker)
    runs = Runs(service)
    await service.start()
    due = clock.now() + timedelta(seconds=0.5)
    await checkin(service, "late", due)
    # The process was suspended: its timer comes due, but the pass runs an hour on.
    clock.advance_to(due + timedelta(hours=1))
    [record] = await runs.wait(1)
    assert (record.status, record.scheduled) == ("missed", due)
    assert record.lateness_ms == 3600 * 1000
    assert waker.wakes == []


async def test_run_now_without_a_running_gateway_fails_and_requests_nothing(
    sqlite_store: JobStore, make_service: Make, clock: ManualClock
) -> None:
    editor = make_service(sqlite_store)
    await checkin(editor, "job", clock.now() + timedelta(hours=1))
    version = await sqlite_store.version()
    with pytest.raises(NoGatewayError, match="no gateway is running"):
        await editor.run_now("job")
    assert await sqlite_store.version() == version


async def test_run_now_from_another_process_is_fired_by_the_running_service_at_its_next_poll(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    await service.start()
    runs = Runs(service)
    await checkin(service, "job", clock.now() + timedelta(hours=1))
    editor = make_service(await stores.open())
    assert await editor.gateway_running()
    version = await editor.store.version()
    waiting = asyncio.create_task(editor.run_now("job", wait_seconds=DEADLINE))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while await editor.store.version() == version:  # the request is stored
        assert loop.time() < deadline, "run-now never stored its request"
        await asyncio.sleep(0.01)  # polling the store with a deadline
    clock.advance(service.poll_seconds)
    [record] = await runs.wait(1)
    assert (record.status, record.via) == ("fired", "run-now")
    assert await waiting == record
    assert len(waker.wakes) == 1


async def test_stop_clears_the_heartbeat_so_the_cli_knows_no_gateway_runs(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    service = make_service(sqlite_store, waker)
    await service.start()
    beat = await sqlite_store.last_beat()
    assert beat is not None
    assert beat.owner == service.owner
    await service.stop()
    assert await sqlite_store.last_beat() is None
    assert not await make_service(sqlite_store).gateway_running()


async def test_starting_needs_a_waker_and_happens_once(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    with pytest.raises(ServiceStateError, match="needs a waker"):
        await make_service(sqlite_store).start()
    service = make_service(sqlite_store, waker)
    await service.start()
    with pytest.raises(ServiceStateError, match="already started"):
        await service.start()


async def test_a_burst_of_due_at_jobs_larger_than_the_connection_pool_all_fire_and_are_spent(
    stores: Stores, waker: FakeWaker, make_service: Make, clock: ManualClock
) -> None:
    service = make_service(await stores.open(), waker)
    await service.start()
    runs = Runs(service)
    due = clock.now() + timedelta(seconds=1)
    for i in range(120):
        await service.upsert(service.draft(id=f"burst-{i}", kind="at", at=due, task="burst"))
    clock.advance_to(due)
    records = await runs.wait(120, timeout=3 * DEADLINE)
    assert {r.status for r in records} == {"fired"}
    assert len(waker.wakes) == 120

    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while any(v.job.enabled for v in await service.list_jobs()):
        assert loop.time() < deadline, "burst jobs still enabled after their fire"
        await asyncio.sleep(0.05)  # polling the store with a deadline


async def test_a_fires_delivery_is_pending_until_its_turn_ends_then_recorded(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    from threads.turns import Outcome, RunResult

    waker.follow = True
    service = make_service(sqlite_store, waker)
    await service.start()
    await service.upsert(service.draft(id="tick", kind="every", every="1h", task="tick"))
    delivered: list[tuple[str, int, str]] = []
    arrived = asyncio.Event()
    service.add_delivery_listener(lambda *item: (delivered.append(item), arrived.set()))
    record = await service.run_now("tick")
    assert record is not None
    assert record.delivery == "pending"
    (turn,) = waker.turns
    turn.finish(Outcome.ANSWERED, RunResult(stop_reason="dispatch", data={"delivered_to": []}))
    await asyncio.wait_for(arrived.wait(), DEADLINE)
    assert delivered == [("tick", record.seq, "silent")]
    assert (await service.runs("tick"))[-1].delivery == "silent"


async def test_a_stop_before_the_turn_ends_records_the_delivery_as_unknown(
    sqlite_store: JobStore, waker: FakeWaker, make_service: Make
) -> None:
    waker.follow = True
    service = make_service(sqlite_store, waker)
    await service.start()
    await service.upsert(service.draft(id="tick", kind="every", every="1h", task="tick"))
    record = await service.run_now("tick")
    assert record is not None
    await service.stop()
    (run,) = await service.runs("tick")
    assert run.delivery == "unknown: the gateway stopped before the turn ended"


def test_the_delivery_words_of_a_cron_wake_are_ascii() -> None:
    # One non-ASCII character doubles the memory of every prompt a session holds.
    words = [SILENT_WORDS, deliver_words(SessionKey("telegram:1"))]
    words += [direct_words(SessionKey("telegram:1")), direct_words(SessionKey("cron:job"))]
    assert all(w.isascii() for w in words)

"""The run ledger under load: group commit, failures, overlapping fires, primed triggers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cron.base import JobStore, Recording
from cron.errors import StoreError
from cron.ledger import LedgerWriter
from cron.models import RunRecord, build_job
from cron.service import CronService, cron_trigger, fire_times
from tests.clock import ManualClock
from tests.cron.conftest import DEADLINE, FakeWaker, Runs, utc
from threads.keys import SessionKey
from threads.wake import Accepted, Wake

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class CountingStore:
    """Passes through to a real store, counting ledger writes (or failing them)."""

    def __init__(self, inner: JobStore) -> None:
        self.inner = inner
        self.batches: list[int] = []
        self.failure: Exception | None = None

    async def record_many(self, batch: Sequence[Recording]) -> list[list[RunRecord]]:
        self.batches.append(len(batch))
        if self.failure is not None:
            raise self.failure
        return await self.inner.record_many(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def recording(job_id: str) -> Recording:
    return Recording(job_id=job_id, runs=(RunRecord(job_id=job_id, status="fired", scheduled=NOW),))


async def test_concurrent_fires_are_written_to_the_ledger_in_one_batch(
    sqlite_store: JobStore,
) -> None:
    store = CountingStore(sqlite_store)
    writer = LedgerWriter(store)  # type: ignore[arg-type]
    writer.start()
    try:
        written = await asyncio.gather(*(writer.write(recording(f"j{i}")) for i in range(50)))
    finally:
        await writer.close()
    assert store.batches == [50]
    seqs = [records[0].seq for records in written]
    assert seqs == sorted(set(seqs))
    assert len(await sqlite_store.runs("j7")) == 1


async def test_a_failed_ledger_write_fails_every_fire_waiting_on_it_with_the_error(
    sqlite_store: JobStore,
) -> None:
    store = CountingStore(sqlite_store)
    store.failure = StoreError("sqlite:///x", "disk full")
    writer = LedgerWriter(store)  # type: ignore[arg-type]
    writer.start()
    try:
        results = await asyncio.gather(
            *(writer.write(recording(f"j{i}")) for i in range(3)), return_exceptions=True
        )
    finally:
        await writer.close()
    assert all(isinstance(r, StoreError) and "disk full" in str(r) for r in results)


class StuckWaker(FakeWaker):
    """A waker whose hand-over hangs until released."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.stuck = asyncio.Event()
        self.release = asyncio.Event()

    async def wake(self, key: SessionKey, wake: Wake) -> Accepted:
        self.stuck.set()
        await self.release.wait()
        return await super().wake(key, wake)


async def test_a_fire_due_while_the_previous_one_hangs_is_recorded_skipped_not_dropped(
    sqlite_store: JobStore, make_service: Callable[..., CronService], clock: ManualClock
) -> None:
    waker = StuckWaker(clock)
    service = make_service(sqlite_store, waker)
    await service.start()
    runs = Runs(service)
    await service.upsert(service.draft(id="tick", kind="every", every="1s", task="tick"))
    clock.advance(1)
    await asyncio.wait_for(waker.stuck.wait(), DEADLINE)
    clock.advance(1)
    [skipped] = await runs.wait(1, where=lambda r: r.status == "skipped")
    assert "previous fire of this job was still being handed over" in skipped.note
    waker.release.set()
    await runs.wait(1, where=lambda r: r.status == "fired")


@pytest.mark.parametrize(
    ("expr", "after"),
    [
        ("30 2 * * *", utc(2025, 10, 25, 12)),
        ("*/30 * * * *", utc(2025, 10, 26, 0, 10)),
        ("0 * * * *", utc(2025, 3, 29, 22, 30)),
        ("15 9 * * 1-5", utc(2026, 1, 1)),
    ],
)
def test_a_primed_trigger_answers_exactly_as_a_fresh_one(expr: str, after: datetime) -> None:
    fresh = fire_times(cron_trigger(expr, "Europe/Berlin"), after, 8)
    primed = cron_trigger(expr, "Europe/Berlin")
    previous = fresh[0]
    walked = [previous]
    for _ in range(7):
        primed.prime(previous)
        # Asked the way APScheduler asks when a fire comes due: twice, with a later now.
        later = previous.astimezone(UTC) + timedelta(seconds=1)
        first = primed.get_next_fire_time(previous, later)
        assert primed.get_next_fire_time(previous, later + timedelta(seconds=5)) == first
        previous = first
        walked.append(previous)
    assert [t.astimezone(UTC) for t in walked] == fresh


def test_a_primed_hourly_trigger_tells_the_repeated_fall_back_hour_from_the_first() -> None:
    # 02:00 CEST and 02:00 CET compare equal within Europe/Berlin (== ignores fold);
    # a cache keyed on local time would answer 02:00 CET with itself, forever.
    trigger = cron_trigger("0 * * * *", "Europe/Berlin")
    first = trigger.get_next_fire_time(None, utc(2025, 10, 25, 23, 30))
    assert first.astimezone(UTC) == utc(2025, 10, 26, 0)
    trigger.prime(first)
    repeated = trigger.get_next_fire_time(first, utc(2025, 10, 26, 0, 0, 1))
    assert repeated.astimezone(UTC) == utc(2025, 10, 26, 1)
    trigger.prime(repeated)
    after = trigger.get_next_fire_time(repeated, utc(2025, 10, 26, 1, 0, 1))
    assert after.astimezone(UTC) == utc(2025, 10, 26, 2)


def test_jobs_sharing_an_expression_share_its_parsed_trigger_but_not_its_answers() -> None:
    from cron.service import build_trigger

    shared: dict[tuple[str, str], Any] = {}
    one, two = (
        build_trigger(
            build_job(id=name, kind="cron", expr="0 9 * * *", task="x", created=NOW, updated=NOW),
            shared=shared,
        )
        for name in ("one", "two")
    )
    assert one.inner is two.inner
    assert one is not two
    one.prime(NOW)
    assert two._asked is None

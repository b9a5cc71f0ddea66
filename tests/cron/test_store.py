"""The job store, on SQLite and on Redis: upserts, change tracking, ledger, concurrency."""

from __future__ import annotations

import asyncio
import secrets
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from cron.base import Advance, JobStore
from cron.errors import StoreError
from cron.models import Job, RunRecord, build_job
from cron.redis_store import split_prefix
from cron.store import connect_store
from tests.conftest import require_service
from tests.cron.conftest import REDIS_DB, REDIS_HOST, REDIS_PORT, Stores, redis_space

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def every_job(job_id: str, *, every: str = "15m", task: str = "tick", when: datetime = NOW) -> Job:
    return build_job(id=job_id, kind="every", every=every, task=task, created=when, updated=when)


def run(job_id: str, status: Any = "fired", minute: int = 0) -> RunRecord:
    return RunRecord(job_id=job_id, status=status, scheduled=NOW + timedelta(minutes=minute))


async def test_an_upsert_keeps_created_and_bumps_version_and_revision(store: JobStore) -> None:
    first = await store.upsert(every_job("a"), next_fire=NOW)
    later = every_job("a", task="changed", when=NOW + timedelta(hours=1))
    second = await store.upsert(later, next_fire=NOW)
    assert second.created == NOW
    assert second.task == "changed"
    assert second.revision > first.revision
    assert await store.version() == second.revision
    stored = await store.get("a")
    assert stored == second


async def test_setting_a_new_schedule_resets_the_pending_fire_but_the_same_one_keeps_it(
    store: JobStore,
) -> None:
    await store.upsert(every_job("a"), next_fire=NOW)
    await store.upsert(every_job("a", task="new words"), next_fire=NOW + timedelta(hours=5))
    state = await store.state("a")
    assert state is not None
    assert state.next_fire == NOW
    changed = await store.upsert(every_job("a", every="1h"), next_fire=NOW + timedelta(hours=1))
    state = await store.state("a")
    assert state is not None
    assert (state.next_fire, state.schedule_rev) == (NOW + timedelta(hours=1), changed.revision)


async def test_an_edit_from_another_store_value_shows_up_in_changes(stores: Stores) -> None:
    service_side, cli_side = await stores.open(), await stores.open()
    seen = await service_side.version()
    await cli_side.upsert(every_job("a"), next_fire=NOW)
    await cli_side.upsert(every_job("b"), next_fire=NOW)
    await cli_side.remove("a")
    changes = await service_side.changes(seen)
    assert [job.id for job in changes.jobs] == ["b"]
    assert changes.removed == ("a",)
    assert (await service_side.changes(changes.version)).jobs == ()


async def test_a_job_removed_then_set_again_is_not_reported_removed(store: JobStore) -> None:
    seen = await store.version()
    await store.upsert(every_job("a"), next_fire=NOW)
    await store.remove("a")
    await store.upsert(every_job("a"), next_fire=NOW)
    changes = await store.changes(seen)
    assert changes.removed == ()
    assert [job.id for job in changes.jobs] == ["a"]


async def test_pause_and_resume_change_only_enabled(store: JobStore) -> None:
    stored = await store.upsert(every_job("a"), next_fire=NOW)
    paused = await store.set_enabled("a", False, NOW + timedelta(minutes=1))
    assert paused is not None
    assert not paused.enabled
    assert paused.revision > stored.revision
    assert paused.updated == NOW + timedelta(minutes=1)
    assert paused.model_dump(exclude={"enabled", "revision", "updated"}) == stored.model_dump(
        exclude={"enabled", "revision", "updated"}
    )
    assert await store.set_enabled("missing", False, NOW) is None


async def test_concurrent_edits_from_two_store_values_are_all_kept(stores: Stores) -> None:
    one, two = await stores.open(), await stores.open()

    async def edit(store: JobStore, prefix: str) -> None:
        for i in range(40):
            await store.upsert(every_job(f"{prefix}-{i}"), next_fire=NOW)
            if i % 2:
                await store.set_enabled(f"{prefix}-{i}", False, NOW)

    await asyncio.gather(edit(one, "one"), edit(two, "two"))
    jobs = {job.id: job for job in await one.jobs()}
    assert len(jobs) == 80
    assert sum(not job.enabled for job in jobs.values()) == 40
    assert await one.version() == 120


async def test_concurrent_edits_from_two_processes_are_all_kept(store_url: str) -> None:
    script = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
from cron.models import build_job
from cron.store import open_store

async def main(url: str, prefix: str) -> None:
    now = datetime.now(UTC)
    async with open_store(url) as store:
        for i in range(40):
            job = build_job(id=f"{prefix}-{i}", kind="every", every="15m", task=prefix,
                            created=now, updated=now)
            await store.upsert(job, next_fire=now + timedelta(minutes=15))
            if i % 2:
                await store.set_enabled(job.id, False, now)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            store_url,
            prefix,
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        for prefix in ("left", "right")
    ]
    for proc in procs:
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
    store = await connect_store(store_url)
    try:
        jobs = await store.jobs()
        assert len(jobs) == 80
        assert {job.task for job in jobs} == {"left", "right"}
        assert sum(not job.enabled for job in jobs) == 40
        assert await store.version() == 120
    finally:
        await store.close()


async def test_the_ledger_numbers_records_and_keeps_the_newest(store_url: str) -> None:
    store = await connect_store(store_url, keep_runs=3)
    try:
        await store.upsert(every_job("a"), next_fire=NOW)
        numbered = await store.record("a", [run("a", minute=m) for m in range(5)], advance=None)
        assert [r.seq for r in numbered] == sorted({r.seq for r in numbered})
        kept = await store.runs("a", limit=10)
        assert [r.scheduled for r in kept] == [NOW + timedelta(minutes=m) for m in (2, 3, 4)]
        assert [r.seq for r in kept] == [r.seq for r in numbered[2:]]
    finally:
        await store.close()


async def test_recording_sets_the_last_status_and_advances_the_pending_fire(
    store: JobStore,
) -> None:
    stored = await store.upsert(every_job("a"), next_fire=NOW)
    later = NOW + timedelta(minutes=15)
    await store.record(
        "a",
        [run("a", "missed"), run("a", "fired")],
        advance=Advance(next_fire=later, schedule_rev=stored.revision),
    )
    state = await store.state("a")
    assert state is not None
    assert (state.last_status, state.next_fire) == ("fired", later)


async def test_a_stale_advance_does_not_overwrite_a_schedule_set_meanwhile(store: JobStore) -> None:
    old = await store.upsert(every_job("a"), next_fire=NOW)
    await store.upsert(every_job("a", every="1h"), next_fire=NOW + timedelta(hours=1))
    stale = Advance(next_fire=NOW + timedelta(minutes=15), schedule_rev=old.revision)
    await store.record("a", [run("a")], advance=stale)
    state = await store.state("a")
    assert state is not None
    assert state.next_fire == NOW + timedelta(hours=1)


async def test_removing_a_job_keeps_its_ledger(store: JobStore) -> None:
    await store.upsert(every_job("a"), next_fire=NOW)
    await store.record("a", [run("a")], advance=None)
    assert await store.remove("a")
    assert await store.get("a") is None
    assert await store.state("a") is None
    assert len(await store.runs("a")) == 1
    assert not await store.remove("a")


async def test_run_requests_are_claimed_once_and_bump_the_version(stores: Stores) -> None:
    service_side, cli_side = await stores.open(), await stores.open()
    await cli_side.upsert(every_job("a"), next_fire=NOW)
    seen = await service_side.version()
    await cli_side.request_run("a", NOW)
    changes = await service_side.changes(seen)
    assert [(r.job_id, r.requested) for r in changes.requests] == [("a", NOW)]
    assert (await service_side.changes(seen)).requests == ()


async def test_disable_if_unchanged_leaves_a_job_edited_meanwhile_alone(store: JobStore) -> None:
    first = await store.upsert(every_job("a"), next_fire=NOW)
    await store.upsert(every_job("a", task="edited"), next_fire=NOW)
    assert await store.disable_if_unchanged("a", first.revision) is None
    current = await store.get("a")
    assert current is not None
    assert current.enabled
    disabled = await store.disable_if_unchanged("a", current.revision)
    assert disabled is not None
    assert not disabled.enabled


async def test_the_newest_heartbeat_is_reported_and_cleared(store: JobStore) -> None:
    assert await store.last_beat() is None
    await store.beat("g1", NOW)
    await store.beat("g2", NOW + timedelta(seconds=1))
    beat = await store.last_beat()
    assert beat is not None
    assert (beat.owner, beat.at) == ("g2", NOW + timedelta(seconds=1))
    await store.clear_beat("g2")
    beat = await store.last_beat()
    assert beat is not None
    assert beat.owner == "g1"


# --- Redis: one key prefix per store, and tests that keep to their own keys -------------


async def test_the_cron_prefix_of_a_redis_url_holds_every_key_and_nothing_else_is_touched() -> None:
    client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    require_service("redis", REDIS_HOST, REDIS_PORT)
    neighbour = f"another-suite:{secrets.token_hex(8)}"
    await client.set(neighbour, "theirs")
    try:
        async with redis_space() as url:
            _, prefix = split_prefix(url)
            assert prefix
            store = await connect_store(url)
            try:
                await store.upsert(every_job("a"), next_fire=NOW)
                await store.record("a", [run("a")], advance=None)
                await store.beat("gateway", NOW)
            finally:
                await store.close()
            ours = [key async for key in client.scan_iter(match=f"{prefix}*")]
            assert len(ours) >= 5
            assert not [key async for key in client.scan_iter(match="gateway:cron:*")]
        assert not [key async for key in client.scan_iter(match=f"{prefix}*")]
        assert await client.get(neighbour) == b"theirs"
    finally:
        await client.delete(neighbour)
        await client.aclose()


def test_the_cron_prefix_leaves_the_rest_of_the_url_as_it_was() -> None:
    assert split_prefix("redis://h:6379/5?cron_prefix=a:cron:&socket_timeout=2") == (
        "redis://h:6379/5?socket_timeout=2",
        "a:cron:",
    )
    assert split_prefix("redis://h:6379/5") == ("redis://h:6379/5", None)


async def test_an_empty_cron_prefix_is_refused_naming_the_parameter() -> None:
    with pytest.raises(StoreError, match="empty cron_prefix"):
        await connect_store("redis://127.0.0.1:6379/5?cron_prefix=")


async def test_a_runs_delivery_is_set_in_place_once_its_turn_has_ended(store: JobStore) -> None:
    at = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    first, second = await store.record(
        "digest",
        [
            RunRecord(job_id="digest", status="fired", scheduled=at, delivery="pending"),
            RunRecord(job_id="digest", status="fired", scheduled=at, delivery="pending"),
        ],
        advance=None,
    )
    assert await store.set_delivery("digest", first.seq, "failed: blocked: send policy")
    assert await store.set_delivery("digest", second.seq, "delivered")
    assert not await store.set_delivery("digest", second.seq + 100, "delivered")
    runs = await store.runs("digest")
    assert [(r.seq, r.delivery) for r in runs] == [
        (first.seq, "failed: blocked: send policy"),
        (second.seq, "delivered"),
    ]
    assert runs[0].model_copy(update={"delivery": "pending"}) == first

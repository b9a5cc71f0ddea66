"""The misfire policy, judged on a clock the test sets: grace, coalescing, pause."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cron.misfire import MisfirePolicy

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
GRACE = MisfirePolicy.of(60, coalesce=True)


def minutes(*offsets: int) -> list[datetime]:
    return [T0 + timedelta(minutes=m) for m in offsets]


def test_a_due_time_within_grace_fires_with_its_lateness() -> None:
    [planned] = GRACE.plan([T0], T0 + timedelta(seconds=59), enabled=True)
    assert planned.action == "fire"
    assert planned.lateness == timedelta(seconds=59)


def test_a_due_time_beyond_grace_is_missed_not_dropped() -> None:
    [planned] = GRACE.plan([T0], T0 + timedelta(seconds=61), enabled=True)
    assert planned.action == "missed"
    assert planned.scheduled == T0
    assert "grace of 60 s" in planned.note


def test_coalescing_makes_several_on_time_due_times_one_fire() -> None:
    due = [T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20)]
    [planned] = GRACE.plan(due, T0 + timedelta(seconds=30), enabled=True)
    assert (planned.action, planned.scheduled, planned.coalesced) == ("fire", due[-1], 2)


def test_coalescing_keeps_missed_times_apart_from_the_fire_and_counts_them() -> None:
    now = T0 + timedelta(minutes=3, seconds=30)
    missed, fired = GRACE.plan(minutes(0, 1, 2, 3), now, enabled=True)
    assert (missed.action, missed.scheduled, missed.coalesced) == ("missed", minutes(2)[0], 2)
    assert "stands for 2 earlier due time(s)" in missed.note
    assert (fired.action, fired.scheduled, fired.coalesced) == ("fire", minutes(3)[0], 0)


def test_without_coalescing_every_due_time_gets_its_own_outcome() -> None:
    policy = MisfirePolicy.of(60, coalesce=False)
    now = T0 + timedelta(minutes=3, seconds=30)
    plan = policy.plan(minutes(0, 1, 2, 3), now, enabled=True)
    assert [p.action for p in plan] == ["missed", "missed", "missed", "fire"]
    assert [p.scheduled for p in plan] == minutes(0, 1, 2, 3)


def test_a_paused_jobs_due_times_are_skipped() -> None:
    plan = MisfirePolicy.of(60, coalesce=False).plan(minutes(0, 1), T0, enabled=False)
    assert [p.action for p in plan] == ["skipped", "skipped"]
    [one] = GRACE.plan(minutes(0, 1), T0 + timedelta(minutes=1), enabled=False)
    assert (one.action, one.coalesced, one.note.startswith("the job is paused")) == (
        "skipped",
        1,
        True,
    )


def test_a_zero_grace_misses_anything_late_at_all() -> None:
    [planned] = MisfirePolicy.of(0, coalesce=True).plan(
        [T0], T0 + timedelta(milliseconds=1), enabled=True
    )
    assert planned.action == "missed"


def test_nothing_due_plans_nothing() -> None:
    assert GRACE.plan([], T0, enabled=True) == []

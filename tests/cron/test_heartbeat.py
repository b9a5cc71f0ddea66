"""Heartbeats: due beats wake the session as the system, in its hours, never over a busy turn,
with a ledger row each, a structured silence, a backoff when the user is quiet, and no activity."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.heartbeat import HeartbeatConfig
from cron.heartbeat import BeatRecord, Heartbeats, HeartbeatSetting, active_now, interval
from cron.manager_waker import ManagerWaker
from tests.clock import ManualClock
from tests.threads.conftest import Runtime, make_runtime
from threads.sessions.catalog import Catalog
from threads.state.memory import MemoryStateStore
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel, dispatch
from threads.wake import UserCaller, Wake, WakeSource

KEY = "telegram:1"
HALF_HOUR = 1800
QUIET_NEVER = HeartbeatConfig(quiet_after_seconds=30 * 86_400, tick_seconds=60)


class Rig:
    def __init__(self, runtime: Runtime, beats: Heartbeats, clock: ManualClock) -> None:
        self.runtime = runtime
        self.beats = beats
        self.clock = clock

    @property
    def model(self) -> ScriptedModel:
        return self.runtime.model

    def user_inbox(self) -> list[str]:
        return self.runtime.inbox(f"user of {KEY}").messages

    async def user_says(self, text: str) -> None:
        self.model.add(dispatch(("caller:user", f"re: {text}")))
        wake = Wake(
            source=WakeSource.TELEGRAM,
            body=text,
            caller=UserCaller(channel="telegram", user_id="7"),
            sink=self.runtime.inbox(f"user of {KEY}"),
        )
        _accepted, turn = await self.runtime.manager.wake_turn(KEY, wake)
        await turn.wait(10)

    async def set(self, **options: Any) -> HeartbeatSetting:
        options.setdefault("every_seconds", HALF_HOUR)
        setting = HeartbeatSetting(key=KEY, since=self.clock.now(), **options)
        await self.beats.set(setting)
        return setting

    async def tick_after(self, seconds: float) -> list[BeatRecord]:
        self.clock.advance(seconds)
        return await self.beats.tick()

    async def settled(self, seq: int) -> BeatRecord:
        """The beat once its turn ended (its delivery recorded)."""
        async with asyncio.timeout(10):
            while True:
                (record,) = [r for r in await self.beats.runs(KEY) if r.seq == seq]
                if record.delivery:
                    return record
                await asyncio.sleep(0.005)  # polling the ledger, with a deadline


async def make_rig(config: HeartbeatConfig, start: datetime | None = None) -> Rig:
    runtime = await make_runtime(MemoryStore(), ScriptedModel())
    clock = ManualClock(start or datetime.now(UTC))
    beats = Heartbeats(
        MemoryStateStore(), ManagerWaker(runtime.manager), config, clock=clock, zone="UTC"
    )
    return Rig(runtime, beats, clock)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    made = await make_rig(QUIET_NEVER)
    await made.user_says("hello")
    yield made
    await made.beats.stop()
    await made.runtime.manager.close()


async def test_a_due_beat_wakes_the_session_as_the_system_and_silence_sends_nothing(
    rig: Rig,
) -> None:
    await rig.set()
    assert await rig.tick_after(HALF_HOUR - 1) == []
    rig.model.add(dispatch())  # nothing to say
    (beat,) = await rig.tick_after(1)
    assert (beat.status, beat.seq) == ("fired", 1)
    assert (await rig.settled(1)).delivery == "silent"
    prompt = rig.model.requests[-1].messages[-1].text()
    assert "source: heartbeat" in prompt
    assert "sender: system" in prompt
    assert "[heartbeat] A periodic check-in from the gateway" in prompt
    assert rig.user_inbox() == ["re: hello"]  # no token leaked into the chat


async def test_a_beat_with_something_to_say_reaches_the_user(rig: Rig) -> None:
    await rig.set(prompt="the dentist appointment")
    rig.model.add(dispatch(("user", "Your dentist appointment is in an hour.")))
    await rig.tick_after(HALF_HOUR)
    assert (await rig.settled(1)).delivery == "delivered"
    assert "Look at: the dentist appointment" in rig.model.requests[-1].messages[-1].text()
    assert rig.user_inbox()[-1] == "Your dentist appointment is in an hour."


async def test_a_session_running_a_turn_is_skipped_not_queued(rig: Rig) -> None:
    await rig.set()
    gate = asyncio.Event()
    rig.model.gate = gate
    rig.model.add(dispatch(("caller:user", "slow answer")))
    wake = Wake(
        source=WakeSource.TELEGRAM,
        body="a long question",
        caller=UserCaller(channel="telegram", user_id="7"),
        sink=rig.runtime.inbox(f"user of {KEY}"),
    )
    _accepted, turn = await rig.runtime.manager.wake_turn(KEY, wake)
    asked = len(rig.model.requests)
    (beat,) = await rig.tick_after(HALF_HOUR)
    assert (beat.status, beat.reason) == ("skipped", "busy: a turn runs or input waits")
    gate.set()
    await turn.wait(10)
    thread = rig.runtime.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    assert len(rig.model.requests) == asked + 1  # the user's turn only
    assert await rig.tick_after(HALF_HOUR - 1) == []  # the next beat is an interval later


async def test_outside_its_hours_a_beat_waits_for_them_and_leaves_no_row() -> None:
    noon = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    rig = await make_rig(QUIET_NEVER, start=noon)
    try:
        await rig.user_says("hello")
        await rig.set(active="13:00-14:00", tz="Europe/London")  # 13:00 in London is 12:00 UTC
        rig.model.add(dispatch())
        (beat,) = await rig.tick_after(HALF_HOUR)
        assert beat.status == "fired"
        await rig.settled(1)
        assert await rig.tick_after(HALF_HOUR * 2) == []  # 13:30 UTC is 14:30 in London
        assert [r.seq for r in await rig.beats.runs(KEY)] == [1]
    finally:
        await rig.beats.stop()
        await rig.runtime.manager.close()


def test_active_hours_are_read_in_the_sessions_time_zone_and_may_cross_midnight() -> None:
    night = HeartbeatSetting(
        key=KEY, every_seconds=600, active="22:00-06:00", tz="Asia/Tokyo", since=datetime.now(UTC)
    )
    assert active_now(night, datetime(2026, 6, 1, 14, 0, tzinfo=UTC), "UTC")  # 23:00 Tokyo
    assert not active_now(night, datetime(2026, 6, 1, 3, 0, tzinfo=UTC), "UTC")  # 12:00 Tokyo
    with pytest.raises(ValueError, match="not active hours"):
        HeartbeatSetting(key=KEY, every_seconds=600, active="8-22", since=datetime.now(UTC))


def test_the_interval_doubles_for_each_quiet_period_up_to_the_cap() -> None:
    config = HeartbeatConfig(quiet_after_seconds=3600, max_every_seconds=4 * 3600)
    setting = HeartbeatSetting(key=KEY, every_seconds=HALF_HOUR, since=datetime.now(UTC))
    hours = [interval(setting, timedelta(hours=h), config) for h in (0, 0.9, 1, 2, 3, 10)]
    assert [i.total_seconds() / 60 for i in hours] == [30, 30, 60, 120, 240, 240]


async def test_after_the_user_goes_quiet_the_beats_come_further_apart() -> None:
    rig = await make_rig(HeartbeatConfig(quiet_after_seconds=3600, max_every_seconds=86_400))
    try:
        await rig.user_says("hello")
        await rig.set()
        rig.model.add(dispatch(), dispatch())
        assert [b.interval_seconds for b in await rig.tick_after(HALF_HOUR)] == [HALF_HOUR]
        await rig.settled(1)
        # Quiet for over an hour now: a beat every hour, so none half an hour after the last.
        assert await rig.tick_after(HALF_HOUR + 60) == []
        (second,) = await rig.tick_after(HALF_HOUR)
        assert second.interval_seconds == 2 * HALF_HOUR
        await rig.settled(2)
    finally:
        await rig.beats.stop()
        await rig.runtime.manager.close()


async def test_a_beat_is_not_the_users_activity(rig: Rig) -> None:
    thread = rig.runtime.manager.thread(KEY)
    assert thread is not None
    before_activity = (thread.last_activity, thread.last_wall)
    catalog = Catalog.of(rig.runtime.manager)
    before = (await catalog.view(thread.key, thread.session.id)).updated
    await rig.set()
    rig.model.add(dispatch())
    await rig.tick_after(HALF_HOUR)
    await rig.settled(1)
    assert (thread.last_activity, thread.last_wall) == before_activity
    assert (await catalog.view(thread.key, thread.session.id)).updated == before
    assert len(thread.session.entries()) > 0


async def test_the_service_beats_on_its_own_at_each_tick(rig: Rig) -> None:
    await rig.set()
    rig.model.add(dispatch())
    await rig.beats.start()
    rig.clock.advance(HALF_HOUR)  # the tick timers pass
    async with asyncio.timeout(10):
        while not await rig.beats.runs(KEY):
            await asyncio.sleep(0.005)  # polling the ledger, with a deadline
    assert (await rig.settled(1)).status == "fired"


async def test_a_heartbeat_for_a_key_with_no_session_fails_with_a_row() -> None:
    rig = await make_rig(QUIET_NEVER)
    try:
        await rig.set()
        (beat,) = await rig.tick_after(HALF_HOUR)
        assert (beat.status, beat.reason) == ("failed", "the session does not exist")
    finally:
        await rig.runtime.manager.close()

"""Heartbeats: a periodic check-in wake, so an agent can speak first when it has a reason to.

A session with a heartbeat (``gateway heartbeat set KEY --every 30m``) is
woken every interval with source ``heartbeat``, a system caller and a drop
sink: nothing it answers reaches anyone unless it says so. The model ends a
beat with ``dispatch({})`` when there is nothing to say — a structured
silence, where other gateways leak a token such as ``HEARTBEAT_OK`` into the
chat — or with ``dispatch(to=user)`` when there is.

A beat is due one interval after the last one (or after the heartbeat was
set). It runs only within the session's active hours (``08:00-22:00`` in its
time zone, the gateway's by default); outside them nothing is recorded and
the beat waits for the window. A session running a turn or holding input is
skipped, never queued behind. When the user has been quiet for
``heartbeat.quiet_after_seconds`` the interval doubles, and doubles again
each time as long again passes, up to ``heartbeat.max_every_seconds``. A beat
is never the user's activity: it does not wake an idle thread's clock and the
session's ``updatedAt`` ignores it.

Settings, each session's last beat and the ledger live in the state store;
every beat that was due leaves a ledger row like a cron fire's (``fired``
with its run and, once the turn ended, its ``delivery``; ``skipped`` and
``failed`` with the reason). Time comes from a :class:`~cron.base.Clock`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from config.heartbeat import HeartbeatConfig
from cron.base import Clock, Timer
from cron.delivery import delivery_of
from threads.errors import ThreadsError
from threads.keys import SessionKey
from threads.sinks import DropSink
from threads.state.base import StateStore
from threads.wake import Accepted, SystemCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.turns import Turn

log = logging.getLogger(__name__)

SETTINGS = "heartbeat.sessions"
STATE = "heartbeat.state"
LEDGER = "heartbeat.runs"
KEEP_RUNS = 100
_HOURS = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-4]):([0-5]\d)$")

BODY = (
    "[heartbeat] A periodic check-in from the gateway, not a message from your user. "
    "If something needs your user's attention now — a reminder that is due, a follow-up you "
    "promised, news on a task — tell them with dispatch(to=user). Otherwise end with "
    "dispatch({}): nothing is sent, and that is the usual answer."
)

BeatStatus = Literal["fired", "skipped", "failed"]


class HeartbeatSetting(BaseModel):
    """One session's heartbeat: how often, when, and what to look at."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    every_seconds: float = Field(ge=60, le=30 * 86_400)
    active: str = ""  # "HH:MM-HH:MM" in tz; "" all day
    tz: str = ""  # "" the gateway's time zone
    prompt: str = ""  # what this session's beats should look at, added to the body
    since: datetime

    @field_validator("active")
    @classmethod
    def _hours(cls, value: str) -> str:
        if value and not _HOURS.match(value):
            raise ValueError(f"{value!r} is not active hours such as 08:00-22:00")
        return value

    @field_validator("tz")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"{value!r} is not an IANA time zone (e.g. 'Europe/Berlin')"
                ) from None
        return value


class BeatRecord(BaseModel):
    """One beat in the ledger: when it was due, what happened, and its turn's delivery."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    seq: int
    key: str
    at: datetime
    status: BeatStatus
    reason: str = ""
    run_id: str = ""
    interval_seconds: float = 0
    delivery: str = ""


class HeartbeatTarget(Protocol):
    """The thread manager, as heartbeats use it (``cron.manager_waker`` adapts it)."""

    async def wake_turn(self, key: SessionKey, wake: Wake) -> tuple[Accepted, Turn | None]: ...

    async def session_exists(self, key: SessionKey) -> bool: ...

    def busy(self, key: SessionKey) -> bool:
        """Whether the key's thread runs a turn or holds input now."""
        ...

    async def last_user_message(self, key: SessionKey) -> datetime | None:
        """When the key's user last wrote (None: never, or no session)."""
        ...


def interval(setting: HeartbeatSetting, quiet: timedelta, config: HeartbeatConfig) -> timedelta:
    """The session's interval now: doubled for each ``quiet_after`` its user has been quiet."""
    base = timedelta(seconds=setting.every_seconds)
    steps = int(quiet.total_seconds() // config.quiet_after_seconds)
    if steps <= 0:
        return base
    cap = timedelta(seconds=max(config.max_every_seconds, setting.every_seconds))
    grown: timedelta = base * (2 ** min(steps, 32))
    return min(grown, cap)


def active_now(setting: HeartbeatSetting, now: datetime, zone: str) -> bool:
    """Whether ``now`` is within the session's active hours, read in its time zone."""
    if not setting.active:
        return True
    match = _HOURS.match(setting.active)
    assert match is not None
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    local = now.astimezone(ZoneInfo(setting.tz or zone)).time()
    start = time(h1, m1)
    if (h2, m2) == (24, 0):
        return local >= start
    end = time(h2, m2)
    if start <= end:
        return start <= local < end
    return local >= start or local < end  # a window across midnight, such as 22:00-06:00


class Heartbeats:
    """Settings, ledger and the tick that fires due beats (see the module)."""

    def __init__(
        self,
        state: StateStore,
        target: HeartbeatTarget,
        config: HeartbeatConfig,
        *,
        clock: Clock,
        zone: str,
    ) -> None:
        self.state = state
        self.target = target
        self.config = config
        self.clock = clock
        self.zone = zone
        self._timer: Timer | None = None
        self._running: asyncio.Task[None] | None = None
        self._followers: set[asyncio.Task[None]] = set()
        self._stopped = True

    # -- settings (the CLI writes them; a running service reads them every tick)

    async def set(self, setting: HeartbeatSetting) -> None:
        await self.state.put(SETTINGS, setting.key, setting.model_dump(mode="json"))
        await self.state.put(STATE, setting.key, {"last": setting.since.isoformat()})

    async def off(self, key: str) -> bool:
        await self.state.delete(STATE, key)
        return await self.state.delete(SETTINGS, key)

    async def settings(self) -> list[HeartbeatSetting]:
        return [HeartbeatSetting.model_validate(v) for _, v in await self.state.scan(SETTINGS)]

    async def runs(self, key: str, limit: int = 20) -> list[BeatRecord]:
        """The newest ``limit`` beats of ``key``, oldest first."""
        rows = await self.state.scan(LEDGER, f"{key}\x1f")
        return [BeatRecord.model_validate(v) for _, v in rows[-limit:]]

    # -- the service

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop` (in a cluster: while this node leads)."""
        return not self._stopped

    async def start(self) -> None:
        """Look for due beats every ``tick_seconds`` on the clock, until :meth:`stop`.

        A stopped service starts again (a cluster node that leads heartbeats
        again after it lost the lead).
        """
        if self._stopped:
            self._stopped = False
            self._schedule()

    async def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = [t for t in (self._running, *self._followers) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _schedule(self) -> None:
        if not self._stopped:
            self._timer = self.clock.call_later(self.config.tick_seconds, self._due)

    def _due(self) -> None:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._tick_then_schedule())
        else:
            self._schedule()  # the last pass still runs: look again next tick

    async def _tick_then_schedule(self) -> None:
        try:
            await self.tick()
        except Exception:
            log.exception("heartbeats: a pass failed; the next one tries again")
        finally:
            self._schedule()

    async def tick(self) -> list[BeatRecord]:
        """One pass: every configured session whose beat is due is woken or skipped."""
        now = self.clock.now()
        done: list[BeatRecord] = []
        for setting in await self.settings():
            record = await self._beat_if_due(setting, now)
            if record is not None:
                done.append(record)
        return done

    async def _beat_if_due(self, setting: HeartbeatSetting, now: datetime) -> BeatRecord | None:
        key = SessionKey(setting.key)
        state = await self.state.get(STATE, setting.key)
        last = _time(state, "last") or setting.since
        heard = await self.target.last_user_message(key)
        quiet = now - heard if heard is not None else now - setting.since
        every = interval(setting, quiet, self.config)
        if now < last + every or not active_now(setting, now, self.zone):
            return None
        seq = _count(state, "seq") + 1
        await self.state.put(STATE, setting.key, {"last": now.isoformat(), "seq": seq})
        base = {
            "seq": seq,
            "key": setting.key,
            "at": now,
            "interval_seconds": every.total_seconds(),
        }
        if not await self.target.session_exists(key):
            return await self._record(
                {**base, "status": "failed", "reason": "the session does not exist"}
            )
        if self.target.busy(key):
            return await self._record(
                {**base, "status": "skipped", "reason": "busy: a turn runs or input waits"}
            )
        try:
            accepted, turn = await self.target.wake_turn(key, self._wake(setting, seq))
        except ThreadsError as exc:
            return await self._record({**base, "status": "failed", "reason": str(exc)})
        record = await self._record({**base, "status": "fired", "run_id": accepted.run_id})
        if turn is not None:
            follower = asyncio.ensure_future(self._follow(record, turn))
            self._followers.add(follower)
            follower.add_done_callback(self._followers.discard)
        return record

    def _wake(self, setting: HeartbeatSetting, seq: int) -> Wake:
        body = BODY + (f"\n\nLook at: {setting.prompt}" if setting.prompt else "")
        return Wake(
            source=WakeSource.HEARTBEAT,
            body=body,
            caller=SystemCaller(name="heartbeat"),
            sink=DropSink(reason="heartbeat"),
            meta={"heartbeat": str(seq)},
        )

    async def _follow(self, record: BeatRecord, turn: Turn) -> None:
        delivery = await delivery_of(turn, None)
        await self._record({**record.model_dump(), "delivery": delivery})

    async def _record(self, row: Mapping[str, Any]) -> BeatRecord:
        record = BeatRecord.model_validate(row)
        await self.state.put(
            LEDGER, _row_key(record.key, record.seq), record.model_dump(mode="json")
        )
        if record.seq > KEEP_RUNS:
            await self.state.delete(LEDGER, _row_key(record.key, record.seq - KEEP_RUNS))
        return record


def _row_key(key: str, seq: int) -> str:
    return f"{key}\x1f{seq:012d}"


def _count(state: Any, name: str) -> int:
    value = state.get(name) if isinstance(state, dict) else None
    return value if isinstance(value, int) else 0


def _time(state: Any, name: str) -> datetime | None:
    if isinstance(state, dict) and isinstance(state.get(name), str):
        return datetime.fromisoformat(state[name])
    return None

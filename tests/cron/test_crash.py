"""A gateway killed between a cron wake's acceptance and its ledger record delivers it once.

The child (``tests.cron.crash_child``) runs a real thread manager on jsonl
sessions and a cron service on SQLite; it is SIGKILLed once the check-in's
wake is durable in its session and the ledger write has begun. A restart over
the same directory must find that wake in the session, record the fire, and
not wake the session with it again.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

from cron.firing import RECOVERED
from cron.manager_waker import ManagerWaker
from cron.service import CronService
from cron.store import connect_store
from tests.clock import ManualClock
from tests.cron.conftest import Runs
from tests.cron.crash_child import DUE, JOB, KEY, manager_over, settings
from threads.keys import SessionKey

ROOT = Path(__file__).resolve().parents[2]


async def kill_once_accepted(root: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.cron.crash_child",
        str(root),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            line = await proc.stdout.readline()
            assert line.strip() == b"ACCEPTED", f"the child exited (code {await proc.wait()})"
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL


async def test_a_wake_accepted_just_before_a_crash_is_not_delivered_again_after_the_restart(
    tmp_path: Path,
) -> None:
    await kill_once_accepted(tmp_path)
    config = settings(tmp_path)
    manager = manager_over(config)
    await manager.start()
    waker = ManagerWaker(manager)
    [before] = await waker.held_wakes(SessionKey(KEY), {"cron_job": JOB})
    store = await connect_store(config.state_store_url())
    assert await store.runs(JOB) == []
    # Restarted a second after the fire, on the clock the child ran on.
    clock = ManualClock(DUE + timedelta(seconds=1))
    service = CronService.from_config(config, store, waker, clock=clock)
    runs = Runs(service)
    try:
        await service.start()
        [record] = await runs.wait(1)
        assert (record.status, record.note) == ("fired", RECOVERED)
        assert record.run_id == before.accepted.run_id
        assert record.fired == before.accepted_at
        assert not (await service.get(JOB)).job.enabled
        held = await waker.held_wakes(SessionKey(KEY), {"cron_job": JOB})
        assert [h.accepted for h in held] == [before.accepted]
    finally:
        await service.stop()
        await store.close()
        await manager.close()
        await manager.store.close()

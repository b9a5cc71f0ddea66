"""The process the cron crash test kills: a fire its session accepted, whose ledger write never lands.

Run as ``python -m tests.cron.crash_child <dir>``. Over ``<dir>`` (jsonl
sessions, the SQLite state store) it starts a thread manager with the echo
model and a cron service on a manual clock, creates session ``telegram:42``,
sets the direct-wake check-in ``nudge`` a moment ahead and moves the clock
there. When the check-in's wake is
durable in the session and its ledger write begins, it prints ``ACCEPTED``
and waits there to be killed — the crash between acceptance and the ledger.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from config import GatewayConfig, validate
from cron.base import Recording
from cron.manager_waker import ManagerWaker
from cron.models import RunRecord
from cron.service import CronService
from cron.sqlite_store import SqliteJobStore
from tests.clock import START, ManualClock
from threads.agent.loop import AgentLoop
from threads.agent.models import Models
from threads.agent.tools import ToolRegistry
from threads.dispatch import dispatch_tool
from threads.manager import ThreadManager
from threads.store import open_store
from threads.wake import SystemCaller, Wake, WakeSource

KEY = "telegram:42"
JOB = "nudge"
DUE = START + timedelta(seconds=0.3)


class LedgerNeverLands(SqliteJobStore):
    """The state store of a process that dies as its first ledger write begins."""

    async def record_many(self, batch: Sequence[Recording]) -> list[list[RunRecord]]:
        print("ACCEPTED", flush=True)
        await asyncio.Event().wait()  # the parent kills the process here
        raise AssertionError("unreachable")


def settings(root: Path) -> GatewayConfig:
    return validate(
        {"data_dir": str(root), "store": {"url": f"jsonl://{root / 'sessions'}"}}, "crash test"
    )


def manager_over(config: GatewayConfig) -> ThreadManager:
    store = open_store(config.store.url)
    loop = AgentLoop(
        config=config, models=Models(config.models), tools=ToolRegistry([dispatch_tool])
    )
    manager = ThreadManager(
        store=store,
        agent=loop,
        config=config,
        recovery_path=config.data_dir / "state" / "recovery.json",
    )
    loop.services = manager
    return manager


async def main(root: Path) -> None:
    config = settings(root)
    manager = manager_over(config)
    await manager.start()
    await manager.wake(
        KEY, Wake(source=WakeSource.API, body="hello", caller=SystemCaller(name="t"))
    )
    store = await LedgerNeverLands.open(config.state_store_url())
    clock = ManualClock(START)
    service = CronService.from_config(config, store, ManagerWaker(manager), clock=clock)
    await service.start()
    await service.upsert(
        service.draft(
            id=JOB, kind="at", at=DUE, task="check in", wake_session=KEY, direct_wake=True
        )
    )
    clock.advance_to(DUE)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

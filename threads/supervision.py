"""Parents hear about their running children: ``progress`` wakes (seed 000).

While a child has been running longer than ``progress_after_seconds``, its
parent is woken about every ``progress_interval_seconds`` with a mechanical
snapshot of the child: never its result. The wake comes from the system, with
a drop sink, and is durable in the parent when it is accepted (there is
nothing before it to lose). A child's end reaches its parent as a
``child_completed`` hand-off, recorded with that end (:mod:`threads.handoffs`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from threads.errors import ThreadsError
from threads.manager import ThreadManager
from threads.runner import Thread
from threads.sinks import DropSink
from threads.turns import Run
from threads.wake import Cause, SystemCaller, Wake, WakeSource

log = logging.getLogger(__name__)

TOOL_HISTORY = 5


class Supervisor:
    """Watches child threads for their parents.

    Every duration it judges — how long a child has run, how long since its
    last progress wake — is read from ``clock``: monotonic seconds on the
    timeline of :attr:`Run.started <threads.turns.Run.started>`
    (``time.monotonic``). A test drives the thresholds with a clock of its own
    that counts from a run's ``started``; nothing it judges then depends on how
    long the machine took to get there.
    """

    def __init__(
        self, manager: ThreadManager, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.manager = manager
        self.clock = clock
        threads = manager.config.threads
        self.progress_after = threads.progress_after_seconds
        self.progress_interval = threads.progress_interval_seconds
        self._last_progress: dict[str, float] = {}
        self._scanner: asyncio.Task[None] | None = None

    def start(self, *, scanning: bool = True) -> None:
        """With ``scanning``, look for long runs in the background."""
        if scanning:
            tick = max(min(self.progress_after, self.progress_interval) / 4, 0.01)
            self._scanner = self.manager.spawn(self._scan_forever(tick), name="progress scanner")

    async def _scan_forever(self, tick: float) -> None:
        while True:
            await asyncio.sleep(tick)
            await self.scan()

    async def scan(self) -> int:
        """Wake the parent of every child running long enough and not reported lately."""
        now = self.clock()
        woken = 0
        live = set()
        for thread in self.manager.threads():
            parent = thread.key.parent
            run = thread.session.running
            if parent is None or run is None:
                continue
            live.add(run.run_id)
            elapsed = now - run.started
            if elapsed < self.progress_after:
                continue
            last = self._last_progress.get(run.run_id)
            if last is not None and now - last < self.progress_interval:
                continue
            self._last_progress[run.run_id] = now
            try:
                await self.manager.wake(parent, self._progress_wake(thread, run, elapsed))
            except ThreadsError as exc:
                log.warning("progress of %s not delivered to %s: %s", thread.key, parent, exc)
                continue
            woken += 1
        for run_id in set(self._last_progress) - live:
            del self._last_progress[run_id]
        return woken

    def _progress_wake(self, thread: Thread, run: Run, elapsed: float) -> Wake:
        recent = ", ".join(run.tool_history[-TOOL_HISTORY:]) or "none yet"
        body = (
            f"child: {thread.key}\n"
            f"elapsed_seconds: {elapsed:.0f}\n"
            f"steps: {run.steps}\n"
            f"recent_tool_calls: {recent}\n"
            f"current_tool: {run.current_tool or 'none (waiting for the model)'}\n\n"
            "This is a progress snapshot, not the child's result; the child keeps running. "
            "End with dispatch({}) to ignore it, or dispatch(to=user) to tell your user."
        )
        cause = Cause.after(run.payload)
        return Wake(
            source=WakeSource.PROGRESS,
            body=body,
            caller=SystemCaller(name="progress"),
            sink=DropSink(reason="progress"),
            meta={"child": str(thread.key)},
            chain=cause.chain,
            depth=cause.depth,
        )

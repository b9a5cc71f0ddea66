"""Fires due together are handed over together: a cron burst reaches its sessions as one batch.

APScheduler 3 hands each due job to our executor separately, and each fire
runs in a task of its own (:mod:`cron.service`). :class:`BatchingWaker` sits
between those fires and the :class:`~cron.base.Waker`: the wakes handed over
in one pass of the event loop — the jobs of one scheduling pass start their
fire tasks in the same loop iteration — and those handed over while a batch
is being accepted go to the waker together, as one
:meth:`~cron.base.BatchWaker.wake_many`. The thread manager makes such a
batch durable in shared store rounds and starts its turns only after
(:mod:`threads.wake_batch`), so 200 jobs due in the same second are accepted
in a few store rounds instead of 200.

The window is the loop's own pass, not a timer: a lone fire waits for nothing,
and a burst waits only for its own hand-overs (decision perf-06). Each fire
still gets its own answer — its acceptance, or the error that refused its wake
alone. A waker without ``wake_many`` is given each wake on its own, as before.

Each answer says when the waker gave it back (:attr:`Answer.at`, on the
service's clock): the moment the wake is durable in its session as far as
cron can tell. For a batch that is the moment ``wake_many`` returns, before
the batch's turns start and before each fire's task gets round to its
answer: with 200 turns starting at once, that is several milliseconds later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cron.base import BatchWaker, Clock, HeldWake, ThreadOpener, Waker
from threads.keys import SessionKey
from threads.wake import Accepted, Wake
from threads.wake_batch import Ahead

if TYPE_CHECKING:
    from threads.turns import Turn

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A wake accepted: as what, the turn it runs as, and when the waker gave it back."""

    accepted: Accepted
    turn: Turn | None
    at: datetime


@dataclass(slots=True, kw_only=True)
class _Waiting:
    key: SessionKey
    wake: Wake
    answer: asyncio.Future[Answer]


class BatchingWaker:
    """Hands the wakes of one loop pass to the :class:`~cron.base.Waker` as one batch."""

    def __init__(self, waker: Waker, clock: Clock) -> None:
        self._waker = waker
        self._clock = clock
        # Asked once: isinstance against a runtime-checkable protocol costs tens of
        # microseconds, and a burst hands 200 wakes over in one loop pass.
        self._batch = waker if isinstance(waker, BatchWaker) else None
        self._waiting: list[_Waiting] = []
        self._sender: asyncio.Task[None] | None = None

    async def accept(self, key: SessionKey, wake: Wake) -> Answer:
        """Hand ``wake`` over with the others of this loop pass; its own answer once durable."""
        batch = self._batch
        if batch is None:
            accepted, turn = await self._waker.wake_turn(key, wake)
            return Answer(accepted=accepted, turn=turn, at=self._clock.now())
        loop = asyncio.get_running_loop()
        waiting = _Waiting(key=key, wake=wake, answer=loop.create_future())
        self._waiting.append(waiting)
        if self._sender is None:
            # Its first step runs after the fire tasks already due in this loop pass.
            self._sender = loop.create_task(self._send(batch), name="cron batch wake")
        return await waiting.answer

    async def open_ahead(self, keys: Sequence[Ahead]) -> int:
        """Open the sessions of fires about to come, when the waker can (else nothing)."""
        if not isinstance(self._waker, ThreadOpener):
            return 0
        return await self._waker.open_ahead(keys)

    async def session_exists(self, key: SessionKey) -> bool:
        return await self._waker.session_exists(key)

    async def held_wakes(self, key: SessionKey, meta: Mapping[str, str]) -> list[HeldWake]:
        return await self._waker.held_wakes(key, meta)

    async def close(self) -> None:
        """Wait for the batch being handed over (the service stops)."""
        if self._sender is not None:
            await asyncio.shield(self._sender)

    async def _send(self, waker: BatchWaker) -> None:
        """Hand over what waits, batch after batch, until nothing arrived meanwhile."""
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                await self._hand_over(waker, batch)
        finally:
            self._sender = None

    async def _hand_over(self, waker: BatchWaker, batch: list[_Waiting]) -> None:
        try:
            results = await waker.wake_many([(w.key, w.wake) for w in batch])
        except Exception as exc:
            log.warning("cron: a batch of %d wake(s) was refused: %s", len(batch), exc)
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(exc)
            return
        except BaseException:
            for waiting in batch:
                waiting.answer.cancel()
            raise
        at = self._clock.now()
        for waiting, result in zip(batch, results, strict=True):
            if waiting.answer.done():
                continue  # its fire was cancelled (the service stopped) while it waited
            if result.error is not None:
                waiting.answer.set_exception(result.error)
            else:
                accepted, turn = result.unwrap()
                waiting.answer.set_result(Answer(accepted=accepted, turn=turn, at=at))

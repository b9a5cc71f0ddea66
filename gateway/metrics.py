"""A small in-memory recorder of what the dashboard charts: turns, model calls, latency, tokens.

Figures are kept per minute in a ring of ``minutes`` slots (an hour by
default); a slot is reused when its minute comes round again, so memory is
fixed whatever the load. It is fed from two places, each at the cost of a few
additions per event:

* the thread manager's turn observer (:meth:`Metrics.observe`): when a turn
  that ran is decided, one turn, whether it failed, and its tokens by session
  key;
* :class:`TimedModels`, which wraps every model client the agent loop
  resolves: one model call, its wall time and whether it raised.

Nothing here touches the store or the network; reading (:meth:`Metrics.series`)
does the arithmetic, so the hot path only counts. The gateway builds one only
when the admin part is on.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from config.models import ModelsConfig, ModelSettings
from threads.agent.models import Models
from threads.llm.base import DeltaCallback, ModelClient, ModelRequest, ModelResponse
from threads.runner import Thread
from threads.turns import Turn
from threads.wake import Wake

MINUTES = 60
# Upper bounds of the latency histogram, in milliseconds; the last slot holds the rest.
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
)  # fmt: skip
TOP_SESSIONS = 5


@dataclass(slots=True)
class Minute:
    """One minute's counts."""

    minute: int
    turns: int = 0
    failed_turns: int = 0
    model_calls: int = 0
    model_errors: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0
    latency_histogram: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))
    tokens: int = 0
    tokens_by_key: dict[str, int] = field(default_factory=dict)


class Metrics:
    """Per-minute figures of the last ``minutes`` minutes; ``clock`` gives seconds since the epoch."""

    def __init__(self, *, minutes: int = MINUTES, clock: Callable[[], float] = time.time) -> None:
        self.minutes = minutes
        self._clock = clock
        self._ring: list[Minute | None] = [None] * minutes
        self.version = 0
        """Bumped by every record, so a reader can tell whether anything changed."""

    def _slot(self) -> Minute:
        minute = int(self._clock() // 60)
        index = minute % self.minutes
        slot = self._ring[index]
        if slot is None or slot.minute != minute:
            slot = self._ring[index] = Minute(minute=minute)
        self.version += 1
        return slot

    # -- feeding

    def observe(self, thread: Thread, wake: Wake, turn: Turn) -> None:
        """The thread manager's turn observer: count the turn once it is decided."""
        turn.add_done_callback(partial(self._turn_done, str(thread.key)))

    def _turn_done(self, key: str, turn: Turn) -> None:
        result = turn.result
        if result is None:
            return  # steered into another turn, dropped or never run: no turn of its own
        self.record_turn(key, tokens=result.usage.total_tokens, failed=not result.ok)

    def record_turn(self, key: str, *, tokens: int, failed: bool = False) -> None:
        slot = self._slot()
        slot.turns += 1
        slot.failed_turns += failed
        if tokens:
            slot.tokens += tokens
            slot.tokens_by_key[key] = slot.tokens_by_key.get(key, 0) + tokens

    def record_model_call(self, seconds: float, *, failed: bool = False) -> None:
        slot = self._slot()
        ms = seconds * 1000.0
        slot.model_calls += 1
        slot.model_errors += failed
        slot.latency_sum += ms
        if ms > slot.latency_max:
            slot.latency_max = ms
        slot.latency_histogram[bisect.bisect_left(LATENCY_BOUNDS_MS, ms)] += 1

    # -- reading

    def series(self, minutes: int | None = None) -> dict[str, Any]:
        """The last ``minutes`` minutes, oldest first, and the sessions that spent most tokens.

        Each point is one minute (``minute`` in epoch milliseconds). A minute
        with no model call has null latencies, never zero. ``sessions`` holds
        the ``TOP_SESSIONS`` keys with the most tokens over the span, each with
        its tokens per minute.
        """
        span = min(max(minutes or self.minutes, 1), self.minutes)
        now = int(self._clock() // 60)
        first = now - span + 1
        points: list[dict[str, Any]] = []
        by_key: dict[str, list[int]] = {}
        for offset in range(span):
            minute = first + offset
            slot = self._ring[minute % self.minutes]
            if slot is None or slot.minute != minute:
                slot = Minute(minute=minute)
            points.append(_point(slot))
            for key, tokens in slot.tokens_by_key.items():
                by_key.setdefault(key, [0] * span)[offset] += tokens
        top = sorted(by_key.items(), key=lambda kv: sum(kv[1]), reverse=True)[:TOP_SESSIONS]
        return {
            "minutes": span,
            "points": points,
            "sessions": [
                {"key": key, "total_tokens": sum(values), "tokens": values} for key, values in top
            ],
        }


def _point(slot: Minute) -> dict[str, Any]:
    calls = slot.model_calls
    return {
        "minute": slot.minute * 60_000,
        "turns": slot.turns,
        "failed_turns": slot.failed_turns,
        "model_calls": calls,
        "model_errors": slot.model_errors,
        "latency_avg_ms": round(slot.latency_sum / calls, 1) if calls else None,
        "latency_p50_ms": _quantile(slot.latency_histogram, 0.5, slot.latency_max),
        "latency_p95_ms": _quantile(slot.latency_histogram, 0.95, slot.latency_max),
        "latency_max_ms": round(slot.latency_max, 1) if calls else None,
        "tokens": slot.tokens,
    }


def _quantile(histogram: list[int], q: float, largest: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` (never above the largest seen)."""
    total = sum(histogram)
    if total == 0:
        return None
    wanted = q * total
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= wanted and count:
            bound = LATENCY_BOUNDS_MS[index] if index < len(LATENCY_BOUNDS_MS) else largest
            return round(min(bound, largest), 1)
    return round(largest, 1)


class TimedClient:
    """A model client that reports each call's wall time to :class:`Metrics`."""

    def __init__(self, inner: ModelClient, metrics: Metrics) -> None:
        self.inner = inner
        self._metrics = metrics

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        started = time.perf_counter()
        failed = True
        try:
            response = await self.inner.complete(request, on_delta)
            failed = False
            return response
        finally:
            self._metrics.record_model_call(time.perf_counter() - started, failed=failed)

    async def close(self) -> None:
        """Nothing of its own: :class:`Models` closes the client it wraps."""


class TimedModels(Models):
    """:class:`Models` whose clients are timed (one wrapper per client, made once)."""

    def __init__(
        self,
        config: ModelsConfig,
        *,
        metrics: Metrics,
        clients: Mapping[str, ModelClient] | None = None,
    ) -> None:
        super().__init__(config, clients=clients)
        self._metrics = metrics
        self._timed: dict[int, TimedClient] = {}

    def resolve(self, ref: str) -> tuple[ModelClient, str, ModelSettings]:
        client, model, settings = super().resolve(ref)
        timed = self._timed.get(id(client))
        if timed is None or timed.inner is not client:
            timed = self._timed[id(client)] = TimedClient(client, self._metrics)
        return timed, model, settings

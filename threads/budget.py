"""Model budgets: how many model calls and tokens a session, and a chain, may spend per hour.

The agent loop asks :meth:`Budget.check` before every model call and reports
what the call cost with :meth:`Budget.charge`. Spending is counted in
one-minute buckets over a sliding hour, per session key and per exchange
chain (everything one user message or cron fire set going), so a runaway
exchange stops within its budget however many sessions it runs through.

Every user message starts a chain, so the meters are bounded in number
(:data:`MAX_METERS` of each scope): past it, the meter charged least recently
is forgotten. A runaway is charged all the time and is never that one
(docs/decisions/perf-05-the-hot-path-of-a-durable-turn.md).
"""

from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from config.models import BudgetConfig

if TYPE_CHECKING:
    from threads.turns import Run

WINDOW_SECONDS = 3600.0
BUCKET_SECONDS = 60.0
_SWEEP_EVERY = 4096
MAX_METERS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Overspent:
    """A limit a session or chain has reached: what, where, and the figures."""

    scope: Literal["session", "chain"]
    measure: Literal["model calls", "tokens"]
    limit: int
    used: int

    @property
    def setting(self) -> str:
        unit = "model_calls" if self.measure == "model calls" else "tokens"
        return f"threads.budget.{self.scope}_{unit}_per_hour"

    def describe(self) -> str:
        what = "this session" if self.scope == "session" else "the work one message set going"
        return (
            f"{what} reached its budget of {self.limit:,} {self.measure} per hour "
            f"({self.used:,} used; {self.setting})"
        )


class _Meter:
    """Calls and tokens in the buckets of the last hour, with running sums.

    The buckets are one flat ``array("q")`` of (bucket, calls, tokens)
    triples, oldest first, not a deque of lists: a chain is charged a few
    times in its life, and up to :data:`MAX_METERS` of them are kept, each
    some 200 bytes this way against some 900.
    """

    __slots__ = ("buckets", "calls", "tokens")

    def __init__(self) -> None:
        self.buckets = array("q")
        self.calls = 0
        self.tokens = 0

    def expire(self, bucket: int) -> None:
        oldest = bucket - int(WINDOW_SECONDS / BUCKET_SECONDS) + 1
        buckets = self.buckets
        gone = 0
        while gone < len(buckets) and buckets[gone] < oldest:
            self.calls -= buckets[gone + 1]
            self.tokens -= buckets[gone + 2]
            gone += 3
        if gone:
            del buckets[:gone]

    def add(self, bucket: int, calls: int, tokens: int) -> None:
        buckets = self.buckets
        if buckets and buckets[-3] == bucket:
            buckets[-2] += calls
            buckets[-1] += tokens
        else:
            buckets.extend((bucket, calls, tokens))
        self.calls += calls
        self.tokens += tokens


class Budget:
    """Per-hour spending of model calls and tokens, per session key and per chain.

    ``clock`` is monotonic seconds; tests drive the window with a clock of their own.
    """

    def __init__(
        self, config: BudgetConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.clock = clock
        # Least recently charged first: the first to go past MAX_METERS.
        self._sessions: OrderedDict[str, _Meter] = OrderedDict()
        self._chains: OrderedDict[str, _Meter] = OrderedDict()
        self._charges = 0

    def check(self, key: str, chain: str) -> Overspent | None:
        """The first limit ``chain`` or ``key`` has reached, or None when a call may go."""
        bucket = self._bucket()
        config = self.config
        if chain and (meter := self._chains.get(chain)) is not None:
            meter.expire(bucket)
            over = _over(
                "chain", meter, config.chain_model_calls_per_hour, config.chain_tokens_per_hour
            )
            if over is not None:
                return over
        if key and (meter := self._sessions.get(key)) is not None:
            meter.expire(bucket)
            return _over(
                "session",
                meter,
                config.session_model_calls_per_hour,
                config.session_tokens_per_hour,
            )
        return None

    def charge(self, key: str, chain: str, tokens: int) -> None:
        """Count one model call of ``tokens`` against ``key`` and ``chain``."""
        bucket = self._bucket()
        for meters, name in ((self._sessions, key), (self._chains, chain)):
            if not name:
                continue
            meter = meters.get(name)
            if meter is None:
                meter = meters[name] = _Meter()
                if len(meters) > MAX_METERS:
                    meters.popitem(last=False)
            else:
                meters.move_to_end(name)
            meter.expire(bucket)
            meter.add(bucket, 1, tokens)
        self._charges += 1
        if self._charges % _SWEEP_EVERY == 0:
            self._sweep(bucket)

    def spent(self, key: str = "", chain: str = "") -> tuple[int, int]:
        """(model calls, tokens) of the last hour for ``key`` or for ``chain``."""
        meter = self._chains.get(chain) if chain else self._sessions.get(key)
        if meter is None:
            return 0, 0
        meter.expire(self._bucket())
        return meter.calls, meter.tokens

    def _bucket(self) -> int:
        return int(self.clock() // BUCKET_SECONDS)

    def _sweep(self, bucket: int) -> None:
        """Forget meters with nothing left in the window (idle sessions, ended chains)."""
        for meters in (self._sessions, self._chains):
            idle = []
            for name, meter in meters.items():
                meter.expire(bucket)
                if not meter.buckets:
                    idle.append(name)
            for name in idle:
                del meters[name]


def _over(
    scope: Literal["session", "chain"], meter: _Meter, calls_limit: int, tokens_limit: int
) -> Overspent | None:
    if calls_limit and meter.calls >= calls_limit:
        return Overspent(scope=scope, measure="model calls", limit=calls_limit, used=meter.calls)
    if tokens_limit and meter.tokens >= tokens_limit:
        return Overspent(scope=scope, measure="tokens", limit=tokens_limit, used=meter.tokens)
    return None


@runtime_checkable
class Overseer(Protocol):
    """Who keeps the budget and acts when it is spent (the thread manager)."""

    budget: Budget

    async def overspent(self, key: str, run: Run, over: Overspent) -> None:
        """A turn found its session's or chain's budget spent; it ends after this."""
        ...

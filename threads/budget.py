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

import struct
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


class _Meters:
    """Meters by name, bounded to :data:`MAX_METERS`, the one charged least recently first.

    A meter is the calls and tokens of its one-minute buckets in the last hour,
    packed in one ``bytes`` of (bucket, calls, tokens) triples of 64-bit
    integers, oldest first. A chain is charged a few times in its life and up
    to :data:`MAX_METERS` of them are kept: a meter of one bucket is one small
    object this way (some 60 bytes), where an object holding an array and its
    running sums was some 260 (decision perf-31).
    """

    __slots__ = ("_packed",)

    def __init__(self) -> None:
        self._packed: OrderedDict[str, bytes] = OrderedDict()

    def spent(self, name: str, bucket: int) -> tuple[int, int]:
        """(calls, tokens) charged to ``name`` in the hour up to ``bucket``."""
        packed = self._packed.get(name)
        if packed is None:
            return 0, 0
        if len(packed) == _TRIPLE.size:  # the usual meter: one bucket
            at, calls, tokens = _TRIPLE.unpack(packed)
            return (calls, tokens) if at > bucket - _BUCKETS else (0, 0)
        buckets = _live(packed, bucket)
        return sum(buckets[1::3]), sum(buckets[2::3])

    def charge(self, name: str, bucket: int, tokens: int) -> None:
        """One call of ``tokens`` to ``name``, in ``bucket``."""
        meters = self._packed
        packed = meters.get(name)
        if packed is None:
            meters[name] = _TRIPLE.pack(bucket, 1, tokens)
            if len(meters) > MAX_METERS:
                meters.popitem(last=False)
            return
        meters.move_to_end(name)
        if len(packed) == _TRIPLE.size:
            at, calls, spent = _TRIPLE.unpack(packed)
            if at == bucket:
                meters[name] = _TRIPLE.pack(bucket, calls + 1, spent + tokens)
                return
        buckets = _live(packed, bucket)
        if buckets and buckets[-3] == bucket:
            buckets[-2] += 1
            buckets[-1] += tokens
        else:
            buckets.extend((bucket, 1, tokens))
        meters[name] = buckets.tobytes()

    def sweep(self, bucket: int) -> None:
        """Forget the meters with nothing left in the hour up to ``bucket``."""
        oldest = bucket - _BUCKETS + 1
        meters = self._packed
        idle = [
            name
            for name, packed in meters.items()
            if _TRIPLE.unpack_from(packed, len(packed) - _TRIPLE.size)[0] < oldest
        ]
        for name in idle:
            del meters[name]


_TRIPLE = struct.Struct("=qqq")
_BUCKETS = int(WINDOW_SECONDS / BUCKET_SECONDS)


def _live(packed: bytes, bucket: int) -> array[int]:
    """The triples of ``packed`` still in the hour up to ``bucket``."""
    buckets = array("q")
    buckets.frombytes(packed)
    oldest = bucket - _BUCKETS + 1
    if buckets[0] < oldest:
        gone = 0
        while gone < len(buckets) and buckets[gone] < oldest:
            gone += 3
        del buckets[:gone]
    return buckets


class Budget:
    """Per-hour spending of model calls and tokens, per session key and per chain.

    ``clock`` is monotonic seconds; tests drive the window with a clock of their own.
    """

    def __init__(
        self, config: BudgetConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.clock = clock
        self._sessions = _Meters()
        self._chains = _Meters()
        self._charges = 0

    def check(self, key: str, chain: str) -> Overspent | None:
        """The first limit ``chain`` or ``key`` has reached, or None when a call may go."""
        bucket = self._bucket()
        config = self.config
        if chain:
            calls, tokens = self._chains.spent(chain, bucket)
            over = _over(
                "chain",
                calls,
                tokens,
                config.chain_model_calls_per_hour,
                config.chain_tokens_per_hour,
            )
            if over is not None:
                return over
        if key:
            calls, tokens = self._sessions.spent(key, bucket)
            return _over(
                "session",
                calls,
                tokens,
                config.session_model_calls_per_hour,
                config.session_tokens_per_hour,
            )
        return None

    def charge(self, key: str, chain: str, tokens: int) -> None:
        """Count one model call of ``tokens`` against ``key`` and ``chain``."""
        bucket = self._bucket()
        if key:
            self._sessions.charge(key, bucket, tokens)
        if chain:
            self._chains.charge(chain, bucket, tokens)
        self._charges += 1
        if self._charges % _SWEEP_EVERY == 0:
            self._sessions.sweep(bucket)
            self._chains.sweep(bucket)

    def spent(self, key: str = "", chain: str = "") -> tuple[int, int]:
        """(model calls, tokens) of the last hour for ``key`` or for ``chain``."""
        if chain:
            return self._chains.spent(chain, self._bucket())
        return self._sessions.spent(key, self._bucket())

    def _bucket(self) -> int:
        return int(self.clock() // BUCKET_SECONDS)


def _over(
    scope: Literal["session", "chain"], calls: int, tokens: int, calls_limit: int, tokens_limit: int
) -> Overspent | None:
    if calls_limit and calls >= calls_limit:
        return Overspent(scope=scope, measure="model calls", limit=calls_limit, used=calls)
    if tokens_limit and tokens >= tokens_limit:
        return Overspent(scope=scope, measure="tokens", limit=tokens_limit, used=tokens)
    return None


@runtime_checkable
class Overseer(Protocol):
    """Who keeps the budget and acts when it is spent (the thread manager)."""

    budget: Budget

    async def overspent(self, key: str, run: Run, over: Overspent) -> None:
        """A turn found its session's or chain's budget spent; it ends after this."""
        ...

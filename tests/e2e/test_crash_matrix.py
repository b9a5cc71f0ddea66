"""The crash matrix (issue 14): ``gateway run`` killed at each fault point, on each store.

For every fault point (:data:`threads.faults.POINTS`) and every store (jsonl,
sqlite, redis), a real ``gateway run`` is armed to SIGKILL itself there while
web chats talk to it, then started again unarmed (see ``crash_rig``). What
must hold after the restart: every message a chat sent is answered exactly
once, no reply that was delivered is delivered again, and no hand-off (a
child's answer, an agent-to-agent step) is lost. docs/reliability.md holds
the table of what survives where.

One store's scenarios run at once, four gateways at a time, against one fake
model: the module fixture runs them and each test reads its outcome.
Scenarios whose fix has not landed are strict xfails naming the fix: they
turn into failures the moment the fix makes them pass, and lose the mark then.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import require_service
from tests.e2e.crash_rig import SCENARIOS, Outcome, Rig, kept_and_interrupted
from tests.threads.store.conftest import REDIS_HOST, REDIS_PORT, REDIS_URL, delete_prefix

# The first test of each store runs that store's eight scenarios (sixteen gateway
# starts): on a loaded machine that alone can pass the default 60 s; the bound
# here only tells a hang from a slow start.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STORES = ["jsonl", "sqlite", "redis"]

# Scenarios whose fix has not landed, by name, with the fix they wait for (none now).
PENDING: dict[str, str] = {}


@pytest.fixture(scope="module", params=STORES)
def crashes(request: pytest.FixtureRequest) -> Iterator[Crashes]:
    """Every scenario's outcome on one store, by scenario name."""
    store: str = request.param
    if store == "redis":
        require_service("redis", REDIS_HOST, REDIS_PORT)
    rig = Rig(store, redis_url=REDIS_URL)
    try:
        yield Crashes(store, asyncio.run(rig.run(SCENARIOS)))
    finally:
        for prefix in rig.prefixes:
            asyncio.run(delete_prefix(prefix))
        shutil.rmtree(rig.root, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Crashes:
    store: str
    outcomes: dict[str, Outcome]


def scenarios() -> list[object]:
    """Every scenario; those whose fix has not landed are strict xfails naming it."""
    return [
        pytest.param(
            s.name,
            id=s.name,
            marks=[pytest.mark.xfail(strict=True, reason=PENDING[s.name])]
            if s.name in PENDING
            else [],
        )
        for s in SCENARIOS
    ]


@pytest.mark.parametrize("scenario", scenarios())
def test_every_message_is_answered_exactly_once_after_a_crash_at_the_point(
    crashes: Crashes, scenario: str
) -> None:
    outcome = crashes.outcomes[scenario]
    assert not outcome.problems, outcome.report()


def test_a_tool_that_finished_before_a_crash_mid_batch_keeps_its_result(
    crashes: Crashes,
) -> None:
    outcome = crashes.outcomes["mid_tool_batch"]
    assert outcome.batch_results, outcome.report()
    # The crash came as the first of the two tools finished: only the other was cut short.
    assert kept_and_interrupted(outcome.batch_results) == (1, 1), outcome.batch_results

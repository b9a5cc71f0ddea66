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

pytestmark = pytest.mark.slow

STORES = ["jsonl", "sqlite", "redis"]

LEDGER = "issue 14 pt {n}: {what} (lands with the ledger branch)"
PENDING = {
    "after_delivery_before_record-dispatch": LEDGER.format(
        n=1, what="a dispatch send delivered before its record is sent again on resume"
    ),
    "after_delivery_before_record-text": LEDGER.format(
        n=1, what="a final text answer delivered before the turn end is given again on resume"
    ),
    "mid_child_hand_off": LEDGER.format(
        n=2, what="a child_completed due when the process dies is lost"
    ),
    "mid_announce": LEDGER.format(n=2, what="agent-to-agent steps held in memory vanish"),
}
BATCH_PENDING = LEDGER.format(n=2, what="a tool result is durable only with the next step")
STALE_LOCKS = (
    "issue 14 pt 3: on Redis the restart fails on the killed process's session locks "
    "(lands with the startup branch)"
)
# The scenarios that leave a session with input to continue, so a restart opens it.
LOCKED = {
    "after_accept",
    "after_prompt_write",
    "mid_tool_batch",
    "after_delivery_before_record-dispatch",
    "after_delivery_before_record-text",
}


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


def expect_missing_fixes(request: pytest.FixtureRequest, *reasons: str) -> None:
    """Mark the running test a strict xfail naming the fixes still missing, when any is."""
    missing = "; ".join(reason for reason in reasons if reason)
    if missing:
        request.applymarker(pytest.mark.xfail(strict=True, reason=missing))


def lock_reason(store: str, scenario: str) -> str:
    return STALE_LOCKS if store == "redis" and scenario in LOCKED else ""


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_every_message_is_answered_exactly_once_after_a_crash_at_the_point(
    crashes: Crashes, scenario: str, request: pytest.FixtureRequest
) -> None:
    expect_missing_fixes(request, PENDING.get(scenario, ""), lock_reason(crashes.store, scenario))
    outcome = crashes.outcomes[scenario]
    assert not outcome.problems, outcome.report()


def test_a_tool_that_finished_before_a_crash_mid_batch_keeps_its_result(
    crashes: Crashes, request: pytest.FixtureRequest
) -> None:
    expect_missing_fixes(request, BATCH_PENDING, lock_reason(crashes.store, "mid_tool_batch"))
    outcome = crashes.outcomes["mid_tool_batch"]
    assert outcome.batch_results, outcome.report()
    # The crash came as the first of the two tools finished: only the other was cut short.
    assert kept_and_interrupted(outcome.batch_results) == (1, 1), outcome.batch_results

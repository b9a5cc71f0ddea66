"""A synchronous delegation that parked: followed to its end, and its parent told then.

A ``delegate_task`` child that parks at a call waiting for a person's approval
stops its caller's wait (the call returns saying so). From then nobody waits
for it inside a turn: the pool follows the runs that resume it, and when the
delegation settles the parent session is woken with a ``child_completed``, as
a dispatched child's end wakes its parent (:func:`threads.handoffs.child_completed`).
The wake is a send of the parent's outbound ledger whose id is the
delegation's, recorded before the settlement, so a restart between the two
sends it once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from threads.handoffs import hand_off, reply_of
from threads.pool.outcomes import Outcome
from threads.pool.pool import Delegation, Pool, parked_on
from threads.sessions.delegation import child_usage, mark_settled
from threads.sinks import DropSink
from threads.store.entries import POOL_DONE
from threads.turns import Turn
from threads.wake import SystemCaller, Wake, WakeSource

KIND = "child_completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """A delegation whose parent is told of its end by a wake: where its exchange chain stands."""

    delegation: Delegation
    chain: str = ""
    depth: int = 1  # the child's; the report to its parent goes one deeper


async def follow_reported(pool: Pool, report: Report, turn: Turn) -> None:
    """Follow a resumed child's run: park again, or settle and tell the parent."""
    delegation = report.delegation
    started = time.monotonic()
    result, _ = await pool.follow(delegation, turn)
    if result is not None and parked_on(result):
        await pool.park(delegation, result, lambda t: follow_reported(pool, report, t))
        return
    answer = reply_of(result) if result is not None else ""
    outcome = pool.outcome(delegation, result, answer=answer, runtime=time.monotonic() - started)
    await settle_reported(pool, report, outcome)


async def settle_reported(pool: Pool, report: Report, outcome: Outcome) -> None:
    """Wake the parent with the outcome, then write the settlement (the child's whole cost)."""
    delegation = report.delegation
    manager = pool.manager
    wake = completion(report, outcome)
    ident = f"{delegation.parent_session}-{delegation.receipt}"
    post = hand_off(manager, ident, delegation.parent_key, wake, kind=KIND)
    await pool.on_parent(delegation, lambda s: s.send_out(post))
    session_id = await manager.store.resolve(delegation.child) or ""
    await pool.settle(delegation, outcome, await child_usage(manager, delegation.child, session_id))
    await mark_settled(manager, delegation.child, outcome.status)


def completion(report: Report, outcome: Outcome) -> Wake:
    """The ``child_completed`` wake that tells the parent how its delegation ended."""
    delegation = report.delegation
    done = outcome.status == POOL_DONE
    status = "completed" if done else outcome.status
    answer = outcome.answer.strip() if done else f"the sub-agent {outcome.words}"
    call = f"\ncall: {delegation.call} (delegate_task)" if delegation.call else ""
    return Wake(
        source=WakeSource.CHILD_COMPLETED,
        body=(
            f"child: {delegation.child}\nstatus: {status}{call}\n\n"
            f"{answer or '(the child ended its turn without an answer)'}"
        ),
        caller=SystemCaller(name=KIND),
        sink=DropSink(reason=KIND),
        meta={"child": str(delegation.child)},
        chain=report.chain,
        depth=report.depth + 1,
    )

"""Recover: what a stopped gateway left unsettled in its delegations, settled or resumed.

Run once at start-up, before the manager continues any turn. Every child
session names its parent (its header's ``lineage``, or for older children
the meta ``sessions_spawn`` wrote); every parent's receipts say which
delegations never settled. Each one is taken back by this process's pool:

* never started: a ``sessions_spawn`` waiting for a slot is queued again and
  runs; a ``dispatch`` child's wake is the parent's outbound ledger's to
  complete, and the pool follows it once the child accepts it; a synchronous
  one (``delegate_task``) is settled ``canceled`` — the turn that waited for
  it is gone — and its delegating call is answered with that.
* its child's run ended (the stop came before the settlement): settled from
  the child's record; a synchronous one answers its delegating call with the
  child's answer, so the parent's resumed turn has it and no work is redone.
* its child's run was cut short: an asynchronous one is resumed (the child's
  run continues, with ``threads.continue_on_start``) and settles when it ends;
  a synchronous one is settled ``canceled``, its child's run recorded as
  canceled and not resumed, and its delegating call answered with that.

A child that waits for a person's approval — its session holds an open
approval boundary — is left waiting, whatever kind of delegation it is: its
journey gets the ``parked`` receipt it lacks (the stop came between the park
and the receipt), and the pool follows the run that resumes it once someone
decides, to the settlement. A synchronous delegation that parked has
answered its call already (it said the child waits); from then it is an
asynchronous one, whose end reaches the parent as a ``child_completed``
(:mod:`threads.pool.reports`) — never a delegating call resolved, never a
cut run left canceled because nobody waits for it.

A ``sessions_spawn`` delegation recovered from its record is announced
without an announce step (no model is called for it at start-up).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from threads.errors import InvalidKeyError, NotDelegatingError, NotFoundError
from threads.inbox import CRASHED
from threads.keys import SessionKey
from threads.messages import Usage
from threads.pool.ledger import Journey, journeys
from threads.pool.outcomes import Outcome, last_answer, outcome_of
from threads.pool.pool import DELEGATION, Delegation, Then, waits_for
from threads.pool.reports import Report, follow_reported, settle_reported
from threads.session import Session
from threads.sessions import meta as m
from threads.sessions.delegation import (
    RESTARTED,
    SPAWN_SESSION,
    Delegations,
    Spawn,
    child_usage,
    mark_settled,
)
from threads.sessions.keys import is_subagent
from threads.store.base import Loaded
from threads.store.entries import (
    POOL_CANCELED,
    POOL_DONE,
    POOL_PARKED,
    Entry,
    MessageEntry,
    TurnEntry,
)
from threads.turns import RunResult

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

CANCELED_BY_RESTART = "the gateway restarted while it ran, and the call that waited for it was gone"
PARKED = "parked"
NOT_STARTED = "the gateway restarted before it started, and the call that waited for it was gone"


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovered:
    """What recovery did: how many delegations it settled, resumed, and left waiting.

    ``waiting`` counts children parked at an approval: they run on once decided.
    """

    settled: int = 0
    resumed: int = 0
    waiting: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    """Where a child's run for one delegation stands, as the child's record says."""

    started: bool
    ended: TurnEntry | None


async def recover_delegations(manager: ThreadManager) -> Recovered:
    """Settle or resume every unsettled delegation (see the module)."""
    store = manager.store
    children: dict[str, Loaded] = {}
    parents: set[str] = set()
    for key, session_id in (await store.keys()).items():
        if not _is_child(key):
            continue
        try:
            loaded = await store.load(session_id)
        except NotFoundError:
            continue
        children[key] = loaded
        named = _parent_of(loaded)
        if named:
            parents.add(named)
        elif (parent_key := SessionKey(key).parent) is not None:
            parent_id = await store.resolve(parent_key)
            if parent_id:
                parents.add(parent_id)
    done: dict[str, int] = {SETTLED: 0, RESUMED: 0, WAITING: 0}
    for parent_id in sorted(parents):
        try:
            parent = await store.load(parent_id)
        except NotFoundError:
            continue
        parent_key = SessionKey(parent.header.meta.get("key", parent_id))
        for journey in journeys(parent.entries):
            if journey.settled:
                continue
            delegation = Delegation(
                receipt=journey.receipt,
                parent_key=parent_key,
                parent_session=parent_id,
                child=SessionKey(journey.child),
                prompt=journey.accepted.prompt,
                call=journey.accepted.call,
            )
            child = children.get(journey.child)
            done[await _recover(manager, delegation, journey, child)] += 1
    settled, resumed, waiting = done[SETTLED], done[RESUMED], done[WAITING]
    if settled or resumed or waiting:
        log.info(
            "delegations at start-up: %d settled, %d resumed, %d waiting for an approval",
            settled,
            resumed,
            waiting,
        )
    return Recovered(settled=settled, resumed=resumed, waiting=waiting)


SETTLED, RESUMED, WAITING = "settled", "resumed", "waiting"


async def _recover(
    manager: ThreadManager, delegation: Delegation, journey: Journey, child: Loaded | None
) -> str:
    """Settle, resume or keep waiting one delegation; which of the three it was."""
    pool = manager.pool
    pool.adopt(delegation)
    if child is None:
        gone = Outcome(
            status=POOL_CANCELED, words="canceled (its child session is gone)", answer=""
        )
        await pool.settle(delegation, gone, Usage())
        return SETTLED
    spawn = _spawn_of(delegation, child)
    report = _report_of(delegation, journey, child)
    then = _then(manager, delegation, spawn, report)
    if await _keep_waiting(manager, delegation, journey, child, then):
        return WAITING
    run = _run_of(child.entries, delegation.receipt, journey)
    if delegation.sync and report is None:
        await _settle_sync(manager, delegation, child, run)
        return SETTLED
    if run.ended is not None:
        outcome = _recorded(child.entries, run.ended)
        if spawn is not None:
            await Delegations(manager).finish(spawn, outcome, announce_step=False)
        elif report is not None:
            await settle_reported(pool, report, outcome)
        else:
            await pool.settle(delegation, outcome, run.ended.usage)
        return SETTLED
    if not run.started:
        if spawn is not None:
            await Delegations(manager).run(spawn)
        else:
            # Its send is in the parent's outbound ledger, which completes it: the pool
            # follows the delegation from the moment the child accepts the wake.
            delegation.follow = True
        return RESUMED
    if not manager.config.threads.continue_on_start:
        canceled = Outcome(status=POOL_CANCELED, words=f"canceled ({RESTARTED})", answer="")
        if spawn is not None:
            await Delegations(manager).finish(spawn, canceled, announce_step=False)
        elif report is not None:
            await settle_reported(pool, report, canceled)
        else:
            await pool.settle(delegation, canceled, Usage())
        return SETTLED
    # The child's run was cut short: this process takes it over and resumes it.
    delegation.holding = pool.try_take(delegation)
    thread = await manager.open_thread(delegation.child)
    turn = await thread.session.continue_() if thread is not None else None
    if turn is None:
        gone = Outcome(status=POOL_CANCELED, words=f"canceled ({RESTARTED})", answer="")
        if report is not None:
            await settle_reported(pool, report, gone)
        else:
            await pool.settle(delegation, gone, Usage())
        return SETTLED
    delegation.turn = turn
    manager.spawn(then(turn), name=f"delegation {delegation.child}")
    return RESUMED


def _then(
    manager: ThreadManager, delegation: Delegation, spawn: Spawn | None, report: Report | None
) -> Then:
    """How a (resumed) run of the delegation's child is followed to the settlement."""
    pool = manager.pool
    if spawn is not None:
        return partial(Delegations(manager).resume, spawn)
    if report is not None:
        return partial(follow_reported, pool, report)
    return partial(pool.watch, delegation)


def _report_of(delegation: Delegation, journey: Journey, child: Loaded) -> Report | None:
    """A synchronous delegation that parked (its call answered): its end is reported."""
    if not delegation.sync:
        return None
    meta = child.header.meta
    waits = POOL_PARKED in journey.statuses or _parks(child.entries, delegation.receipt)
    if not waits:
        return None
    return Report(
        delegation=delegation,
        chain=meta.get(m.SPAWN_CHAIN, ""),
        depth=int(meta.get(m.SPAWN_DEPTH, "1")),
    )


def _parks(entries: Sequence[Entry], receipt: str) -> bool:
    """Whether the child's run for the delegation ended parked (the receipt may lag behind)."""
    run = _first_run(entries, receipt)
    return any(
        isinstance(e, TurnEntry) and e.run_id == run and e.stop_reason == PARKED for e in entries
    )


def _ends_parked(entries: Sequence[Entry]) -> bool:
    """Whether the child's last turn parked (its boundary may be open still)."""
    turns = [e for e in entries if isinstance(e, TurnEntry)]
    return bool(turns) and turns[-1].stop_reason == PARKED


async def _keep_waiting(
    manager: ThreadManager, delegation: Delegation, journey: Journey, child: Loaded, then: Then
) -> bool:
    """A child parked at an approval waits on (``parked`` recorded); False if it does not wait."""
    if not _ends_parked(child.entries):
        return False  # not opened: the paths that settle may write the child's record first
    thread = await manager.open_thread(delegation.child)
    if thread is None or not thread.session.approvals.awaiting:
        return False
    if not journey.statuses or journey.statuses[-1] != POOL_PARKED:
        tools = (r.tool for r in thread.session.approvals.pending())
        await manager.pool.record(delegation, POOL_PARKED, stop=waits_for(tools))
    manager.pool.wait_for_resume(delegation, then)
    return True


async def _settle_sync(
    manager: ThreadManager, delegation: Delegation, child: Loaded, run: _Run
) -> None:
    """A synchronous delegation outlived its call: answer the call, settle, never resume."""
    pool = manager.pool
    if run.ended is not None:
        outcome = _recorded(child.entries, run.ended)
    else:
        if run.started:
            await _cancel_cut_run(manager, child)
        words = CANCELED_BY_RESTART if run.started else NOT_STARTED
        outcome = Outcome(status=POOL_CANCELED, words=f"canceled ({words})", answer="")
    done = outcome.status == POOL_DONE
    content = outcome.answer.strip() if done else f"the sub-agent {outcome.words}"

    async def answer(session: Session) -> None:
        try:
            await session.resolve_delegation(
                delegation.call, str(delegation.child), content or "(no answer)", is_error=not done
            )
        except NotDelegatingError as exc:
            log.info("delegation %s: its call is answered already: %s", delegation.child, exc)

    await pool.on_parent(delegation, answer)
    usage = await child_usage(manager, delegation.child, child.header.id)
    await pool.settle(delegation, outcome, usage)
    await mark_settled(manager, delegation.child, outcome.status)


async def _cancel_cut_run(manager: ThreadManager, child: Loaded) -> None:
    """Record a child's cut run as canceled, without resuming it or running what it holds."""
    session = Session.from_loaded(manager.store, child, manager.agent)
    try:
        await session.clear_queue()
        await session.continue_()  # no resume is configured: the cut run is only recorded
    finally:
        await session.close(drain=False)


def _is_child(key: str) -> bool:
    if is_subagent(key):
        return True
    try:
        return SessionKey(key).parent is not None
    except InvalidKeyError:
        return False


def _parent_of(child: Loaded) -> str:
    lineage = child.header.lineage
    if lineage is not None and lineage.parent_session:
        return lineage.parent_session
    return child.header.meta.get(SPAWN_SESSION, "")


def _first_run(entries: Sequence[Entry], receipt: str) -> str:
    """The run id of the child's first run for the delegation ("" when none is tagged)."""
    for e in entries:
        if isinstance(e, MessageEntry) and e.run_id and _delegation_of(e.wake) == receipt:
            return e.run_id
    return ""


def _run_of(entries: Sequence[Entry], receipt: str, journey: Journey) -> _Run:
    """The child's run for the delegation: its prompt carries the receipt in its wake.

    A run cut by a crash is answered by its resume, a run that parked by the
    run that resumed its boundary: each is the next turn.
    """
    prompts = [
        e
        for e in entries
        if isinstance(e, MessageEntry) and e.run_id and _delegation_of(e.wake) == receipt
    ]
    if not prompts:
        # Children of a build that did not tag their wakes: a spawned child's first run.
        prompts = [e for e in entries if isinstance(e, MessageEntry) and e.run_id][:1]
        if not journey.started:
            prompts = []
    if not prompts:
        return _Run(started=False, ended=None)
    run_id = prompts[0].run_id
    turns = [e for e in entries if isinstance(e, TurnEntry)]
    ended = next((t for t in turns if t.run_id == run_id), None)
    while ended is not None and (ended.err == CRASHED or ended.stop_reason == PARKED):
        # Cut by a crash and resumed, or parked and resumed: the next turn answers.
        later = turns[turns.index(ended) + 1 :]
        ended = later[0] if later else None
    return _Run(started=True, ended=ended)


def _delegation_of(wake: Mapping[str, object]) -> str:
    meta = wake.get("meta")
    return str(meta.get(DELEGATION, "")) if isinstance(meta, dict) else ""


def _recorded(entries: Sequence[Entry], turn: TurnEntry) -> Outcome:
    """The delegation's outcome from the turn that answers it."""
    result = RunResult(
        stop_reason=turn.stop_reason, usage=turn.usage, steps=turn.steps, error=turn.err
    )
    return outcome_of(result, answer=last_answer(entries, turn), runtime=0.0)


def _spawn_of(delegation: Delegation, child: Loaded) -> Spawn | None:
    """The ``sessions_spawn`` details a child's header keeps; None for other delegations."""
    meta = child.header.meta
    if m.SPAWNED_BY not in meta or delegation.sync:
        return None
    return Spawn(
        delegation=delegation,
        agent=meta.get("agent", ""),
        label=meta.get(m.LABEL, ""),
        cleanup=meta.get(m.CLEANUP, "keep"),
        chain=meta.get(m.SPAWN_CHAIN, ""),
        depth=int(meta.get(m.SPAWN_DEPTH, "1")),
    )

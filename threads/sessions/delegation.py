"""``sessions_spawn``'s bookkeeping: a child run through the pool, its announce, its end.

The pool (:mod:`threads.pool`) records the journey on the requester's session
— ``accepted`` (the child key and the task) before anything starts,
``running`` once a delegation slot is held and the child's wake is durable —
and this module writes the settlement after the announce was posted. The
child's header names its requester twice: ``lineage`` (the requester's
session, receipt and run) and the meta the session tools read
(``spawned_by``, ``spawn_session``, ``spawn_receipt``). At start-up
:mod:`threads.pool.recovery` finds every delegation that never settled and
settles or resumes it. The post is a send in the requester's outbound
ledger whose id is the delegation's, so a restart never loses an announce
and never posts one twice.

The announce posts Status (from the runtime outcome, never the model's text),
Result and Notes, and a stats line, to the requester's chat; the child's
announce step may answer exactly ``ANNOUNCE_SKIP`` to stay silent. Then
``cleanup = "delete"`` deletes the child session, and ``keep`` leaves it to be
archived ``archive_after_minutes`` after it settled (:func:`meta.is_archived`).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from threads.errors import NotFoundError, ThreadsError
from threads.handoffs import hand_off
from threads.keys import SessionKey
from threads.messages import Usage
from threads.outbound import outgoing
from threads.pool.outcomes import Outcome
from threads.pool.pool import Delegation, parked_on
from threads.session import Session
from threads.session_sink import CaptureSink
from threads.sessions import meta as m
from threads.sessions.agent_to_agent import ANNOUNCE_SKIP, STEP_TIMEOUT, is_skip, settle
from threads.sessions.catalog import Catalog
from threads.sinks import DropSink, OutboundMessage
from threads.tree import usage_of
from threads.turns import Turn
from threads.wake import Cause, SessionCaller, SystemCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

SPAWN_SESSION = "spawn_session"
ANNOUNCE_KIND = "subagent_announce"
RESTARTED = "the gateway restarted while the sub-agent ran; its run was interrupted"
_SECTION = re.compile(r"^\s*(status|result|notes)\s*:\s*", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawn:
    """One spawned child: its pool delegation and what its announce needs."""

    delegation: Delegation
    agent: str
    label: str = ""
    cleanup: str = "keep"
    run_timeout: float = 0.0
    chain: str = ""
    depth: int = 1  # the child's run; its announce step and its report go one deeper

    @property
    def child(self) -> SessionKey:
        return self.delegation.child

    @property
    def requester(self) -> SessionKey:
        return self.delegation.parent_key

    @property
    def name(self) -> str:
        return self.label or str(self.child)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawned:
    """What ``sessions_spawn`` answers: the child's first run id, and whether it waits."""

    run_id: str
    session_id: str
    queued: int  # how many delegations of the requester wait for a slot, this one included


def normalize(reply: str, outcome: Outcome) -> tuple[str, str]:
    """Result and Notes from an announce reply; a Status the model wrote is ignored."""
    sections: dict[str, str] = {}
    matches = list(_SECTION.finditer(reply))
    if not matches:
        return reply.strip() or outcome.answer.strip(), ""
    lead = reply[: matches[0].start()].strip()
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(reply)
        sections[match.group(1).lower()] = reply[match.end() : end].strip()
    result = sections.get("result") or lead or outcome.answer.strip()
    return result, sections.get("notes", "")


class Delegations:
    """Starts ``sessions_spawn`` children and sees each through to its settlement."""

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager
        self.pool = manager.pool
        self.catalog = Catalog.of(manager)

    # -- start

    async def spawn(
        self,
        requester: Session,
        requester_key: SessionKey,
        *,
        child: SessionKey,
        agent: str,
        task: str,
        label: str = "",
        model: str | None = None,
        run_timeout: float = 0.0,
        cleanup: str = "keep",
        cause: Cause | None = None,
        run_id: str = "",
    ) -> Spawned:
        """Record and create the child; it runs now, or once its requester has a slot free.

        ``cause`` is the spawning turn's place in its exchange chain; raises
        :class:`ExchangeRefusedError` (nothing recorded) when the chain may not
        go deeper.
        """
        manager = self.manager
        cause = cause or Cause(chain="", depth=1)
        refusal = manager.chains.refusal(child, cause)
        if refusal is not None:
            raise refusal
        delegation = await self.pool.accept(
            requester, requester_key, child, prompt=task, run=run_id
        )
        session_id = await create_child(
            manager, delegation, agent=agent, label=label, model=model, cleanup=cleanup, cause=cause
        )
        spawn = Spawn(
            delegation=delegation,
            agent=agent,
            label=label,
            cleanup=cleanup,
            run_timeout=run_timeout,
            chain=cause.chain,
            depth=cause.depth,
        )
        waiting = await self.run(spawn)
        return Spawned(run_id=f"{session_id}-t1", session_id=session_id, queued=waiting)

    async def run(self, spawn: Spawn) -> int:
        """Start the child now if a slot is free, else queue it; how many of its requester wait."""
        capture = CaptureSink(caller=spawn.requester)

        async def start() -> Turn:
            _accepted, turn = await self.manager.wake_turn(
                spawn.child, self._task_wake(spawn, capture)
            )
            return turn

        async def then(turn: Turn) -> None:
            await self._watch(spawn, turn, capture)

        if await self.pool.begin(spawn.delegation, start, then) is not None:
            return 0
        return self.pool.waiting(spawn.delegation)

    def _task_wake(self, spawn: Spawn, capture: CaptureSink) -> Wake:
        label = spawn.label
        return Wake(
            source=WakeSource.SESSION,
            body=(
                "[sub-agent task]\n"
                f"Session {spawn.requester} spawned you with sessions_spawn"
                + (f" ({label})" if label else "")
                + ". Do the task below, then finish with your answer as a final text reply or "
                "dispatch(to=caller:session); the gateway reports it to the requester. "
                "You cannot spawn sub-agents.\n\n"
                f"{spawn.delegation.prompt}"
            ),
            caller=SessionCaller(session_key=spawn.requester),
            sink=capture,
            agent=spawn.agent,
            meta={"delegation": spawn.delegation.receipt},
            chain=spawn.chain,
            depth=spawn.depth,
        )

    async def _watch(self, spawn: Spawn, turn: Turn, capture: CaptureSink) -> None:
        started = time.monotonic()
        result, capped = await self.pool.follow(
            spawn.delegation,
            turn,
            spawn.run_timeout or None,
            cap=f"timed out: aborted after runTimeoutSeconds={spawn.run_timeout:g}",
        )
        if result is not None and parked_on(result):
            await self.pool.park(spawn.delegation, result, lambda t: self.resume(spawn, t))
            return
        outcome = self.pool.outcome(
            spawn.delegation,
            result,
            answer=capture.reply,
            runtime=time.monotonic() - started,
            capped=capped,
        )
        await self.finish(spawn, outcome, announce_step=True)

    async def resume(self, spawn: Spawn, turn: Turn) -> None:
        """Follow a child's resumed run (after a restart or a decision) to its settlement."""
        started = time.monotonic()
        result, _ = await self.pool.follow(spawn.delegation, turn)
        if result is not None and parked_on(result):
            await self.pool.park(spawn.delegation, result, lambda t: self.resume(spawn, t))
            return
        outcome = self.pool.outcome(
            spawn.delegation,
            result,
            answer=result.text if result is not None else "",
            runtime=time.monotonic() - started,
        )
        await self.finish(spawn, outcome, announce_step=True)

    # -- settle

    async def finish(self, spawn: Spawn, outcome: Outcome, *, announce_step: bool) -> None:
        """Announce, then write the settlement, then clean up (in that order: see the module)."""
        result, notes = outcome.answer.strip(), ""
        skipped = False
        if announce_step:
            reply = await self._announce_step(spawn, outcome)
            if reply is not None and is_skip(reply, ANNOUNCE_SKIP):
                skipped = True
            elif reply:
                result, notes = normalize(reply, outcome)
        session_id = await self.manager.store.resolve(spawn.child) or ""
        text = self.announcement(spawn, outcome, result, notes, session_id)
        await self._post(spawn, text, skipped)
        usage = await child_usage(self.manager, spawn.child, session_id)
        await self.pool.settle(spawn.delegation, outcome, usage)
        await self.clean_up(spawn, outcome.status)

    def announcement(
        self, spawn: Spawn, outcome: Outcome, result: str, notes: str, session_id: str
    ) -> str:
        usage = outcome.usage
        transcript = (
            "deleted (cleanup=delete)"
            if spawn.cleanup == "delete"
            else self.catalog.transcript_path(session_id) or "not a file (the store is not jsonl)"
        )
        stats = (
            f"Stats: runtime {outcome.runtime:.1f} s · tokens {usage.total_tokens} "
            f"(in {usage.input_tokens} / out {usage.output_tokens}) · "
            f"session {spawn.child} ({session_id or 'deleted'}) · transcript {transcript}"
        )
        return (
            f"Sub-agent {spawn.name} finished.\n"
            f"Status: {outcome.words}\n"
            f"Result: {result or '(no answer)'}\n"
            f"Notes: {notes or 'none'}\n\n"
            f"{stats}"
        )

    async def _announce_step(self, spawn: Spawn, outcome: Outcome) -> str | None:
        capture = CaptureSink(caller=spawn.requester)
        wake = Wake(
            source=WakeSource.SESSION,
            body=(
                "[sub-agent announce step]\n"
                f"Your run is over; the gateway recorded its status as: {outcome.words}.\n"
                f"Write the announcement for {spawn.requester}'s chat as\n"
                "Result: <what you found or did>\nNotes: <caveats, or none>\n"
                f"Reply exactly {ANNOUNCE_SKIP} to post nothing."
            ),
            caller=SessionCaller(session_key=spawn.requester),
            sink=capture,
            meta={"delegation": spawn.delegation.receipt, "a2a": "announce"},
            chain=spawn.chain,
            depth=spawn.depth + 1,
        )
        try:
            _accepted, turn = await self.manager.wake_turn(spawn.child, wake)
            result = await settle(turn, STEP_TIMEOUT)
        except (TimeoutError, ThreadsError) as exc:
            log.info("delegation %s: the announce step gave no reply: %s", spawn.child, exc)
            return None
        if result is not None and not result.ok:
            return None
        return capture.reply

    async def _post(self, spawn: Spawn, text: str, skipped: bool) -> None:
        """To the requester's chat user; a requester with none is woken with it instead."""
        await self.pool.on_parent(
            spawn.delegation,
            lambda s: s.custom(
                ANNOUNCE_KIND,
                {"receipt": spawn.delegation.receipt, "skipped": skipped, "text": text},
            ),
        )
        if skipped:
            return
        # One id per delegation: a post settled again after a restart is not sent twice.
        delegation = spawn.delegation
        ident = f"{delegation.parent_session}-{delegation.receipt}"
        sink = self.manager.user_sink(spawn.requester)
        if sink is not None:
            message = OutboundMessage(text=text, meta={"child": str(spawn.child)})
            post = outgoing(f"{ident}-announce", sink, message, kind="announce")
        else:
            wake = Wake(
                source=WakeSource.CHILD_COMPLETED,
                body=text,
                caller=SystemCaller(name="sessions_spawn"),
                sink=DropSink(reason="sessions_spawn announce"),
                meta={"child": str(spawn.child)},
                chain=spawn.chain,
                depth=spawn.depth + 1,
            )
            post = hand_off(self.manager, ident, spawn.requester, wake, kind="announce")
        await self.pool.on_parent(delegation, lambda s: s.send_out(post))

    async def clean_up(self, spawn: Spawn, status: str) -> None:
        """Delete the child (cleanup=delete) or mark it settled, which starts its archive clock."""
        if spawn.cleanup == "delete":
            await self.manager.forget(spawn.child)
            return
        await mark_settled(self.manager, spawn.child, status)


async def create_child(
    manager: ThreadManager,
    delegation: Delegation,
    *,
    agent: str,
    label: str,
    model: str | None,
    cleanup: str,
    cause: Cause,
) -> str:
    """Create the child's session (its header names its requester) and point its key at it."""
    meta = {
        "key": str(delegation.child),
        "agent": agent,
        m.SPAWNED_BY: str(delegation.parent_key),
        SPAWN_SESSION: delegation.parent_session,
        m.SPAWN_RECEIPT: delegation.receipt,
        m.CLEANUP: cleanup,
        m.SPAWN_DEPTH: str(cause.depth),
    }
    if cause.chain:
        meta[m.SPAWN_CHAIN] = cause.chain
    if label:
        meta[m.LABEL] = label
    if model:
        meta[m.MODEL] = model
    session = await Session.create(
        manager.store,
        manager.agent,
        meta=meta,
        lineage=delegation.lineage,
        options=manager.session_options(),
    )
    await manager.store.point(delegation.child, session.id)
    await session.close()
    return session.id


async def mark_settled(manager: ThreadManager, child: SessionKey, status: str) -> None:
    """Record on the child that its delegation settled (``delegation``, ``settled_at``)."""
    thread = await manager.open_thread(child)
    if thread is not None:
        await thread.session.set_info(
            meta={m.DELEGATION: status, m.SETTLED_AT: datetime.now(UTC).isoformat()}
        )


async def child_usage(manager: ThreadManager, child: SessionKey, session_id: str) -> Usage:
    """The child session's whole cost: every run it made, summaries included."""
    thread = manager.thread(child)
    if thread is not None and thread.session.id == session_id:
        return thread.session.usage().total
    if not session_id:
        return Usage()
    try:
        loaded = await manager.store.load(session_id)
    except NotFoundError:
        return Usage()
    return usage_of(loaded.entries).total

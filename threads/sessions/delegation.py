"""``sessions_spawn``'s bookkeeping: a child run, its pool receipts, its announce, its end.

Every delegation is recorded on the requester's session as pool receipts:
``accepted`` (the child key and the task) before anything starts, ``running``
once the child's wake is durable, then one settlement — ``done``, ``failed``,
``canceled`` or ``capped`` (the step cap, or ``runTimeoutSeconds``) — written
after the announce was posted. The child's header names its requester
(``spawned_by``, ``spawn_session``, ``spawn_receipt``), so at start-up
:func:`settle_unsettled` finds every child whose delegation never settled,
settles it from what its transcript recorded, and announces it. The post is
a send in the requester's outbound ledger whose id is the delegation's, so a
restart never loses an announce and never posts one twice.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from threads.errors import NotFoundError, ThreadsError, TurnError
from threads.handoffs import hand_off
from threads.keys import SessionKey
from threads.messages import Usage
from threads.outbound import outgoing
from threads.session import Session
from threads.session_sink import CaptureSink
from threads.sessions import meta as m
from threads.sessions.agent_to_agent import ANNOUNCE_SKIP, STEP_TIMEOUT, is_skip, settle
from threads.sessions.catalog import Catalog
from threads.sessions.keys import is_subagent
from threads.sinks import DropSink, OutboundMessage
from threads.store.entries import (
    POOL_ACCEPTED,
    POOL_CANCELED,
    POOL_CAPPED,
    POOL_DONE,
    POOL_FAILED,
    POOL_RUNNING,
    POOL_SETTLED,
    Entry,
    InfoEntry,
    MessageEntry,
    PoolReceiptEntry,
    TurnEntry,
)
from threads.turns import RunResult, Turn
from threads.wake import Accepted, Cause, SessionCaller, SystemCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

SPAWN_SESSION = "spawn_session"
ANNOUNCE_KIND = "subagent_announce"
RESTARTED = "the gateway restarted while the sub-agent ran; its run was interrupted"
_SECTION = re.compile(r"^\s*(status|result|notes)\s*:\s*", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Delegation:
    """One spawned child, as recorded on both sides."""

    receipt: str
    requester: SessionKey
    requester_session: str
    child: SessionKey
    agent: str
    label: str = ""
    cleanup: str = "keep"
    run_timeout: float = 0.0
    chain: str = ""
    depth: int = 1  # the child's run; its announce step and its report go one deeper

    @property
    def name(self) -> str:
        return self.label or str(self.child)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a child's run ended, in pool-receipt terms."""

    status: str
    words: str
    answer: str
    stop: str = ""
    usage: Usage = field(default_factory=Usage)
    runtime: float = 0.0


def outcome_of(
    result: RunResult | None, *, answer: str, runtime: float, capped: str = ""
) -> Outcome:
    """The runtime outcome of a child's run (``capped`` names a cap the gateway enforced)."""
    if result is None:
        return Outcome(
            status=POOL_CANCELED,
            words="canceled before it answered",
            answer=answer,
            runtime=runtime,
        )
    if capped:
        status, words = POOL_CAPPED, capped
    elif result.stop_reason == "max_steps":
        status, words = POOL_CAPPED, f"stopped at its step cap after {result.steps} steps"
    elif result.stop_reason in ("canceled", "stopped"):
        status, words = POOL_CANCELED, f"canceled ({result.error or 'stopped'})"
    elif result.error or result.stop_reason == "error":
        status, words = POOL_FAILED, f"failed: {result.error or 'the run ended with an error'}"
    else:
        status, words = POOL_DONE, "completed successfully"
    return Outcome(
        status=status,
        words=words,
        answer=answer or result.text,
        stop=result.stop_reason,
        usage=result.usage,
        runtime=runtime,
    )


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
    """Starts children and sees each delegation through to its settlement."""

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager
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
    ) -> Accepted:
        """Record, create and wake the child; its watcher runs in the background.

        ``cause`` is the spawning turn's place in its exchange chain; raises
        :class:`ExchangeRefusedError` (nothing recorded) when the chain may not
        go deeper.
        """
        manager = self.manager
        cause = cause or Cause(chain="", depth=1)
        refusal = manager.chains.refusal(child, cause)
        if refusal is not None:
            raise refusal
        accepted_receipt = await requester.pool_receipt(
            POOL_ACCEPTED, child=str(child), prompt=task
        )
        meta = {
            "key": str(child),
            "agent": agent,
            m.SPAWNED_BY: str(requester_key),
            SPAWN_SESSION: requester.id,
            m.SPAWN_RECEIPT: accepted_receipt.id,
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
            manager.store, manager.agent, meta=meta, options=manager.session_options()
        )
        await manager.store.point(child, session.id)
        await session.close()
        delegation = Delegation(
            receipt=accepted_receipt.id,
            requester=requester_key,
            requester_session=requester.id,
            child=child,
            agent=agent,
            label=label,
            cleanup=cleanup,
            run_timeout=run_timeout,
            chain=cause.chain,
            depth=cause.depth,
        )
        capture = CaptureSink(caller=requester_key)
        wake = Wake(
            source=WakeSource.SESSION,
            body=(
                "[sub-agent task]\n"
                f"Session {requester_key} spawned you with sessions_spawn"
                + (f" ({label})" if label else "")
                + ". Do the task below, then finish with your answer as a final text reply or "
                "dispatch(to=caller:session); the gateway reports it to the requester. "
                "You cannot spawn sub-agents.\n\n"
                f"{task}"
            ),
            caller=SessionCaller(session_key=requester_key),
            sink=capture,
            agent=agent,
            meta={"delegation": accepted_receipt.id},
            chain=cause.chain,
            depth=cause.depth,
        )
        accepted, turn = await manager.wake_turn(child, wake)
        await requester.pool_receipt(POOL_RUNNING, receipt=accepted_receipt.id, child=str(child))
        manager.spawn(self._watch(delegation, turn, capture), name=f"delegation {child}")
        return accepted

    async def _watch(self, delegation: Delegation, turn: Turn, capture: CaptureSink) -> None:
        started = time.monotonic()
        capped = ""
        result: RunResult | None = None
        try:
            try:
                result = await settle(turn, delegation.run_timeout or None)
            except TimeoutError:
                capped = f"timed out: aborted after runTimeoutSeconds={delegation.run_timeout:g}"
                thread = self.manager.thread(delegation.child)
                if thread is not None:
                    thread.session.interrupt(capped)
                result = await settle(turn, None)
        except TurnError as exc:
            log.info("delegation %s: the child's run did not run: %s", delegation.child, exc)
        outcome = outcome_of(
            result, answer=capture.reply, runtime=time.monotonic() - started, capped=capped
        )
        await self.finish(delegation, outcome, announce_step=True)

    # -- settle

    async def finish(
        self, delegation: Delegation, outcome: Outcome, *, announce_step: bool
    ) -> None:
        """Announce, then write the settlement, then clean up (in that order: see the module)."""
        result, notes = outcome.answer.strip(), ""
        skipped = False
        if announce_step:
            reply = await self._announce_step(delegation, outcome)
            if reply is not None and is_skip(reply, ANNOUNCE_SKIP):
                skipped = True
            elif reply:
                result, notes = normalize(reply, outcome)
        session_id = await self.manager.store.resolve(delegation.child) or ""
        text = self.announcement(delegation, outcome, result, notes, session_id)
        await self._post(delegation, text, skipped)
        await self._on_requester(
            delegation,
            lambda s: s.pool_receipt(
                outcome.status,
                receipt=delegation.receipt,
                child=str(delegation.child),
                stop=outcome.stop,
                usage=outcome.usage,
            ),
        )
        await self.clean_up(delegation, outcome, session_id)

    def announcement(
        self, delegation: Delegation, outcome: Outcome, result: str, notes: str, session_id: str
    ) -> str:
        usage = outcome.usage
        transcript = (
            "deleted (cleanup=delete)"
            if delegation.cleanup == "delete"
            else self.catalog.transcript_path(session_id) or "not a file (the store is not jsonl)"
        )
        stats = (
            f"Stats: runtime {outcome.runtime:.1f} s · tokens {usage.total_tokens} "
            f"(in {usage.input_tokens} / out {usage.output_tokens}) · "
            f"session {delegation.child} ({session_id or 'deleted'}) · transcript {transcript}"
        )
        return (
            f"Sub-agent {delegation.name} finished.\n"
            f"Status: {outcome.words}\n"
            f"Result: {result or '(no answer)'}\n"
            f"Notes: {notes or 'none'}\n\n"
            f"{stats}"
        )

    async def _announce_step(self, delegation: Delegation, outcome: Outcome) -> str | None:
        capture = CaptureSink(caller=delegation.requester)
        wake = Wake(
            source=WakeSource.SESSION,
            body=(
                "[sub-agent announce step]\n"
                f"Your run is over; the gateway recorded its status as: {outcome.words}.\n"
                f"Write the announcement for {delegation.requester}'s chat as\n"
                "Result: <what you found or did>\nNotes: <caveats, or none>\n"
                f"Reply exactly {ANNOUNCE_SKIP} to post nothing."
            ),
            caller=SessionCaller(session_key=delegation.requester),
            sink=capture,
            meta={"delegation": delegation.receipt, "a2a": "announce"},
            chain=delegation.chain,
            depth=delegation.depth + 1,
        )
        try:
            _accepted, turn = await self.manager.wake_turn(delegation.child, wake)
            result = await settle(turn, STEP_TIMEOUT)
        except (TimeoutError, ThreadsError) as exc:
            log.info("delegation %s: the announce step gave no reply: %s", delegation.child, exc)
            return None
        if result is not None and not result.ok:
            return None
        return capture.reply

    async def _post(self, delegation: Delegation, text: str, skipped: bool) -> None:
        """To the requester's chat user; a requester with none is woken with it instead."""
        await self._on_requester(
            delegation,
            lambda s: s.custom(
                ANNOUNCE_KIND,
                {"receipt": delegation.receipt, "skipped": skipped, "text": text},
            ),
        )
        if skipped:
            return
        # One id per delegation: a post settled again after a restart is not sent twice.
        ident = f"{delegation.requester_session}-{delegation.receipt}"
        sink = self.manager.user_sink(delegation.requester)
        if sink is not None:
            message = OutboundMessage(text=text, meta={"child": str(delegation.child)})
            post = outgoing(f"{ident}-announce", sink, message, kind="announce")
        else:
            wake = Wake(
                source=WakeSource.CHILD_COMPLETED,
                body=text,
                caller=SystemCaller(name="sessions_spawn"),
                sink=DropSink(reason="sessions_spawn announce"),
                meta={"child": str(delegation.child)},
                chain=delegation.chain,
                depth=delegation.depth + 1,
            )
            post = hand_off(self.manager, ident, delegation.requester, wake, kind="announce")
        await self._on_requester(delegation, lambda s: s.send_out(post))

    async def clean_up(self, delegation: Delegation, outcome: Outcome, session_id: str) -> None:
        """Delete the child (cleanup=delete) or mark it settled, which starts its archive clock."""
        if delegation.cleanup == "delete":
            await self.manager.forget(delegation.child)
            return
        thread = await self.manager.open_thread(delegation.child)
        if thread is not None:
            await thread.session.set_info(
                meta={m.DELEGATION: outcome.status, m.SETTLED_AT: datetime.now(UTC).isoformat()}
            )

    async def _on_requester(
        self, delegation: Delegation, write: Callable[[Session], Awaitable[object]]
    ) -> None:
        """Write on the requester's session: its live thread's, or the session reopened."""
        thread = await self.manager.open_thread(delegation.requester)
        if thread is not None and thread.session.id == delegation.requester_session:
            await write(thread.session)
            return
        session = await Session.open(
            self.manager.store,
            delegation.requester_session,
            self.manager.agent,
            options=self.manager.session_options(),
        )
        try:
            await write(session)
        finally:
            await session.close()


# -- start-up


async def settle_unsettled(manager: ThreadManager) -> int:
    """Settle and announce every delegation a stopped gateway left open; how many."""
    delegations = Delegations(manager)
    settled = 0
    for key, session_id in (await manager.store.keys()).items():
        if not is_subagent(key):
            continue
        try:
            loaded = await manager.store.load(session_id)
        except NotFoundError:
            continue  # deleted after its delegation (cleanup=delete)
        meta = dict(loaded.header.meta)
        for entry in loaded.entries:
            if isinstance(entry, InfoEntry):
                meta.update(entry.meta)
        if m.DELEGATION in meta or m.SPAWNED_BY not in meta:
            continue
        delegation = Delegation(
            receipt=meta.get(m.SPAWN_RECEIPT, ""),
            requester=SessionKey(meta[m.SPAWNED_BY]),
            requester_session=meta.get(SPAWN_SESSION, ""),
            child=SessionKey(key),
            agent=meta.get("agent", manager.config.default_agent),
            label=meta.get(m.LABEL, ""),
            cleanup=meta.get(m.CLEANUP, "keep"),
            chain=meta.get(m.SPAWN_CHAIN, ""),
            depth=int(meta.get(m.SPAWN_DEPTH, "1")),
        )
        if await _already_settled(manager, delegation):
            await delegations.clean_up(delegation, _recorded(loaded.entries), session_id)
            continue
        thread = manager.thread(key)
        if thread is not None:
            # The manager resumed the interrupted run at start-up; the delegation is over.
            thread.session.interrupt(RESTARTED)
            await thread.session.clear_queue()
        outcome = _recorded(loaded.entries)
        await delegations.finish(delegation, outcome, announce_step=False)
        settled += 1
    return settled


async def _already_settled(manager: ThreadManager, delegation: Delegation) -> bool:
    try:
        loaded = await manager.store.load(delegation.requester_session)
    except NotFoundError:
        return False
    return any(
        isinstance(e, PoolReceiptEntry)
        and e.receipt == delegation.receipt
        and e.status in POOL_SETTLED
        for e in loaded.entries
    )


def _recorded(entries: list[Entry]) -> Outcome:
    """The outcome of a child's first run as its transcript recorded it."""
    prompt = next((e for e in entries if isinstance(e, MessageEntry) and e.run_id), None)
    if prompt is None:
        return Outcome(status=POOL_FAILED, words="failed: the sub-agent never started", answer="")
    turn = next(
        (e for e in entries if isinstance(e, TurnEntry) and e.run_id == prompt.run_id), None
    )
    if turn is None:
        return Outcome(status=POOL_CANCELED, words=f"canceled ({RESTARTED})", answer="")
    result = RunResult(
        stop_reason=turn.stop_reason, usage=turn.usage, steps=turn.steps, error=turn.err
    )
    runtime = (turn.created - prompt.created).total_seconds()
    return outcome_of(result, answer=_last_answer(entries, turn), runtime=runtime)


def _last_answer(entries: list[Entry], turn: TurnEntry) -> str:
    """The child's answer before ``turn``: its last text, or its last dispatch body."""
    for entry in reversed(entries[: entries.index(turn)]):
        if not isinstance(entry, MessageEntry) or entry.message.role != "assistant":
            continue
        for call in entry.message.tool_calls():
            if call.name == "dispatch":
                bodies = [
                    str(s.get("body", ""))
                    for s in call.args.get("sends", [])
                    if isinstance(s, dict)
                ]
                if any(bodies):
                    return "\n\n".join(b for b in bodies if b)
        if entry.message.text().strip():
            return entry.message.text()
    return ""

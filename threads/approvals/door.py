"""A session's approvals: its open boundary, and the door decisions come through.

An :class:`ApprovalDoor` belongs to one session's turn driver. It reads the
boundary from the session's entries (cached until the next write), records
decisions — validated whole, then one append — and, once every parked call
of the boundary is decided, arms the resume: a run with no prompt that
applies the decisions (an approved call runs once, a denied one shows the
model ``DENIED: <reason>``) and goes on as the turn would have. It writes
only through the session's write path, under the session's lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from threads.approvals.boundary import (
    APPROVE,
    DENY,
    STEP_RESUME,
    Boundary,
    expiry_entries,
    fate_of,
    find_boundary,
    resume_started,
)
from threads.approvals.errors import InvalidDecisionError, NotPendingError
from threads.errors import ClosedError, NotRunError
from threads.ids import new_entry_id
from threads.messages import Message, ToolResultPart
from threads.store.entries import (
    ApprovalAuditEntry,
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    Entry,
    GrantEntry,
    GrantRevokedEntry,
    MessageEntry,
)
from threads.turns import Outcome, Policy, Run, Turn

if TYPE_CHECKING:
    from threads.inbox import Chain, Write
    from threads.session import ParkListener, PayloadLoader, Session
    from threads.tree import EntryTree

log = logging.getLogger(__name__)

AUDIT_KINDS = (
    ApprovalRequestEntry,
    ApprovalDecisionEntry,
    ApprovalAuditEntry,
    GrantEntry,
    GrantRevokedEntry,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One person's decision over one request: ``approve`` or ``deny``.

    ``who`` and ``via`` are the audit trail's: who decided, through which
    channel (``telegram``, ``cli``, ``dashboard``…). ``always`` approves and
    asks the owner to mint a grant for the same call (the door records it;
    grants live with the gateway's approvals service).
    """

    request_id: str
    outcome: str
    reason: str = ""
    who: str = ""
    via: str = ""
    always: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """What a decide recorded, and the resume turn when it completed the boundary."""

    decisions: tuple[ApprovalDecisionEntry, ...]
    expired: tuple[ApprovalDecisionEntry, ...]
    resume: Turn | None


class ApprovalDoor:
    """The session's open boundary and its decisions; see the module docstring."""

    def __init__(
        self,
        session: Session,
        *,
        tree: EntryTree,
        lock: asyncio.Lock,
        chain: Chain,
        write: Write,
        kick: Callable[[], None],
        mint_run_id: Callable[[], str],
    ) -> None:
        self._session = session
        self._tree = tree
        self._lock = lock
        self._chain = chain
        self._write = write
        self._kick = kick
        self._mint_run_id = mint_run_id
        self._seen: tuple[str, int] | None = None
        self._boundary: Boundary | None = None
        self._armed: Turn | None = None
        self.payload: Any = None
        """The wake of the run that parked, while this process holds it (else the stored one)."""

    # -- reads

    def boundary(self) -> Boundary | None:
        """The open boundary at the leaf (derived from the entries; cached until a write)."""
        seen = (self._tree.leaf, len(self._tree.entries))
        if seen != self._seen:
            self._boundary = find_boundary(self._tree)
            self._seen = seen
        return self._boundary

    @property
    def awaiting(self) -> bool:
        """A boundary holds the session: new input waits behind it."""
        return self.boundary() is not None

    def pending(self) -> list[ApprovalRequestEntry]:
        """The undecided requests, in call order; they survive restarts (they are entries)."""
        boundary = self.boundary()
        return boundary.pending() if boundary is not None else []

    def holds(self, request_id: str) -> bool:
        """Whether this session made the request (pending or not)."""
        return isinstance(self._tree.by_id.get(request_id), ApprovalRequestEntry)

    def fate(self, request_id: str) -> str:
        """What became of a request that is not pending, in words."""
        return fate_of(self._tree.entries, request_id, self.boundary())

    def audit(self) -> list[Entry]:
        """The approval trail: every request, decision, chain step and grant, in append order."""
        return [e for e in self._tree.entries if isinstance(e, AUDIT_KINDS)]

    # -- decisions

    async def decide(self, decisions: Sequence[Decision], *, now: datetime) -> Decided:
        """Record decisions in one append; arm the resume when they complete the boundary.

        Requests past their expiry are denied first (those denials stand
        whatever follows). Raises :class:`InvalidDecisionError` (empty, an
        unknown outcome, one request twice) and :class:`NotPendingError`
        naming the request's fate; nothing of the batch is recorded then.
        """
        if not decisions:
            raise InvalidDecisionError("no decisions to record")
        async with self._lock:
            if self._session.closed:
                raise ClosedError(self._session.id)
            expired = await self._expire(now)
            boundary = self.boundary()
            entries = self._decision_entries(boundary, decisions)
            await self._write(self._chain(*entries))
            resume = self._arm()
        return Decided(
            decisions=tuple(e for e in entries if isinstance(e, ApprovalDecisionEntry)),
            expired=expired,
            resume=resume,
        )

    async def expire(self, now: datetime) -> tuple[ApprovalDecisionEntry, ...]:
        """Deny the requests strictly past their expiry; resume when that completes the boundary."""
        async with self._lock:
            if self._session.closed:
                return ()
            expired = await self._expire(now)
            self._arm()
        return expired

    def earliest_expiry(self) -> datetime | None:
        """When the next undecided request lapses (None: none does)."""
        times = [r.expiry for r in self.pending() if r.expiry is not None]
        return min(times) if times else None

    async def note(self, entry: ApprovalAuditEntry | GrantEntry | GrantRevokedEntry) -> None:
        """Record one step of the trail: a grant matched, a rule refused, a grant minted or ended."""
        async with self._lock:
            await self._write(self._chain(entry))

    async def _expire(self, now: datetime) -> tuple[ApprovalDecisionEntry, ...]:
        boundary = self.boundary()
        entries = expiry_entries(boundary, now) if boundary is not None else []
        if entries:
            await self._write(self._chain(*entries))
        return tuple(e for e in entries if isinstance(e, ApprovalDecisionEntry))

    def _decision_entries(
        self, boundary: Boundary | None, decisions: Sequence[Decision]
    ) -> list[Entry]:
        seen: set[str] = set()
        out: list[Entry] = []
        for d in decisions:
            if d.outcome not in (APPROVE, DENY):
                raise InvalidDecisionError(
                    f"a decision is approve or deny, not {d.outcome!r} ({d.request_id})"
                )
            if d.request_id in seen:
                raise InvalidDecisionError(f"request {d.request_id} is decided twice in one batch")
            seen.add(d.request_id)
            request = boundary.request(d.request_id) if boundary is not None else None
            if boundary is None or request is None or request.id in boundary.decisions:
                raise NotPendingError(d.request_id, self.fate(d.request_id))
            out.append(
                ApprovalDecisionEntry(
                    id=new_entry_id(),
                    call_id=request.call_id,
                    outcome=d.outcome,
                    reason=d.reason,
                    who=d.who,
                    via=d.via,
                    run_id=request.run_id,
                    request_id=request.id,
                    always=d.always and d.outcome == APPROVE,
                )
            )
        return out

    def _arm(self) -> Turn | None:
        """The resume turn, once every parked call is decided (lock held); the driver runs it."""
        boundary = self.boundary()
        if boundary is None or not boundary.complete:
            return None
        if self._armed is None:
            self._armed = Turn(new_entry_id(), self._mint_run_id(), Policy.QUEUE)
        self._kick()
        return self._armed

    # -- the driver's side (lock held)

    def resume_owed(self) -> bool:
        boundary = self.boundary()
        return boundary is not None and boundary.complete

    async def start_resume(self, load_payload: PayloadLoader | None) -> Run | None:
        """The armed resume's run, once its ``started`` audit (which spends the decisions) is
        written; None, its turn failed, when that write fails (the resume stays owed)."""
        boundary = self.boundary()
        assert boundary is not None
        assert boundary.complete
        turn, self._armed = self._armed, None
        if turn is None:
            turn = Turn(new_entry_id(), self._mint_run_id(), Policy.QUEUE)
        try:
            await self._write(self._chain(resume_started(boundary, turn.run_id)))
        except Exception as exc:
            log.exception("session %s: resume %s was not written", self._session.id, turn.run_id)
            turn.finish(
                Outcome.FAILED,
                error=NotRunError(
                    f"the resume {turn.run_id} of session {self._session.id} did not start "
                    f"({exc}); the decisions stay recorded: it runs at the next decision, send "
                    "or open"
                ),
            )
            return None
        payload, self.payload = self.payload, None
        if payload is None and load_payload is not None and boundary.prompt is not None:
            payload = load_payload(boundary.prompt.wake) if boundary.prompt.wake else None
        return Run(
            session=self._session,
            run_id=turn.run_id,
            turn=turn,
            messages=self._tree.run_context(close_open=False),
            payload=payload,
            policy=Policy.QUEUE,
            resumption=boundary.resolutions(),
        )

    async def close(self, reason: str, *, via: str) -> bool:
        """Deny what waits and close the boundary without a run (a stop); False if none was open."""
        async with self._lock:
            closed = await self.close_locked(reason, via=via)
        if closed:
            self._kick()  # input that waited behind the boundary runs now
        return closed

    async def close_locked(self, reason: str, *, via: str) -> bool:
        """:meth:`close` with the session's lock held (an interrupting send)."""
        entries = self._closing_entries(reason, who=via, via=via)
        if entries:
            await self._write(self._chain(*entries))
        return bool(entries)

    def parked(self, payload: Any, ending: Sequence[Entry], on_park: ParkListener | None) -> None:
        """A turn parked (its end written): keep its wake for the resume, tell the listener."""
        self.payload = payload
        if on_park is not None:
            on_park(self._session, [e for e in ending if isinstance(e, ApprovalRequestEntry)])

    def _closing_entries(self, reason: str, *, who: str, via: str) -> list[Entry]:
        """Deny every undecided call and close the boundary without a run (an interrupt, /stop).

        The calls get their ``DENIED:`` results at once, so the next turn's
        model sees them answered; nothing runs on the boundary's account.
        """
        boundary = self.boundary()
        if boundary is None:
            return []
        entries: list[Entry] = []
        decisions = dict(boundary.decisions)
        for request in boundary.pending():
            decision = ApprovalDecisionEntry(
                id=new_entry_id(),
                call_id=request.call_id,
                outcome=DENY,
                reason=reason,
                who=who,
                via=via,
                run_id=request.run_id,
                request_id=request.id,
            )
            entries.append(decision)
            decisions[request.id] = decision
        closed = Boundary(
            run_id=boundary.run_id,
            requests=boundary.requests,
            calls=boundary.calls,
            decisions=decisions,
            prompt=boundary.prompt,
        )
        started = resume_started(closed, "")
        results = tuple(
            ToolResultPart(
                call_id=r.call.id, name=r.call.name, content=f"DENIED: {reason}", is_error=True
            )
            for r in closed.resolutions()
        )
        armed, self._armed = self._armed, None
        if armed is not None:
            armed.drop()
        return [
            *entries,
            started,
            MessageEntry(id=new_entry_id(), message=Message(role="tool", content=results)),
            ApprovalAuditEntry(
                id=new_entry_id(),
                step=STEP_RESUME,
                outcome="completed",
                detail=f"closed without a run: {reason}",
            ),
        ]

"""The gateway's approvals: every pending request, who may decide, grants, expiry, asking.

The runtime parks calls session by session (:mod:`threads.approvals.door`);
this service is the one view over all of them that people act through —
chat buttons, ``/approve``, ``gateway approvals …`` and the dashboard all
end in :meth:`ApprovalService.decide`. It checks who is deciding (the
person whose message started the turn, a configured approver or an owner;
the CLI and the dashboard are operators), records the decision, mints the
grant an "Always" asks for, and tells its listeners: the gateway asks people
when a request parks (``asks``) and updates the question once it is decided
(``settles``). A session with a pending request stays loaded (it is not
idle), and a restart loads it again, so the live threads are the whole list.

Expiry runs on the service's clock: a timer wakes at the earliest expiry
and denies what lapsed; every decision and listing sweeps first too.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threads.approvals.boundary import APPROVE, DENY
from threads.approvals.door import Decision
from threads.approvals.errors import GrantNotFoundError, NotAllowedError, NotPendingError
from threads.approvals.grants import Grant, GrantBook
from threads.approvals.predicates import exact
from threads.clock import Timer, WallClock
from threads.ids import new_entry_id
from threads.keys import SessionKey, base_channel
from threads.runner import Thread
from threads.session import Session
from threads.sessions.policy import is_owner
from threads.store.entries import (
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    GrantEntry,
    GrantRevokedEntry,
)
from threads.turns import Turn

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

OPERATOR_DOORS = frozenset({"cli", "dashboard"})
"""Doors only operators reach (the control socket, the admin token): they decide anything."""

MIN_ID = 6
"""The shortest request id prefix the CLI accepts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decider:
    """Who is deciding, and through which door: a chat channel, ``cli`` or ``dashboard``."""

    channel: str
    user_id: str = ""
    name: str = ""

    @property
    def label(self) -> str:
        """How the audit trail names them: ``telegram:42 (Ada)``, ``cli (ops)``."""
        who = f"{self.channel}:{self.user_id}" if self.user_id else self.channel
        return f"{who} ({self.name})" if self.name else who

    @property
    def via(self) -> str:
        return base_channel(self.channel) if self.channel not in OPERATOR_DOORS else self.channel


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """One pending request as people see it: where it waits, what it asks, who started it."""

    key: str
    session_id: str
    agent: str
    request: ApprovalRequestEntry
    caller: Mapping[str, str] = field(default_factory=dict)
    sink: Mapping[str, str] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        r = self.request
        return {
            "id": r.id,
            "session_key": self.key,
            "session_id": self.session_id,
            "agent": self.agent,
            "tool": r.tool,
            "args": r.args,
            "args_sha256": r.args_sha256,
            "reason": r.reason,
            "created": r.created.isoformat(),
            "expiry": r.expiry.isoformat() if r.expiry else None,
            "run_id": r.run_id,
            "caller": dict(self.caller),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Settled:
    """A request's decision, as recorded: by whom, through what, the grant it minted, and the
    turn that resumes the conversation when the decision completed its boundary."""

    key: str
    request: ApprovalRequestEntry
    decision: ApprovalDecisionEntry
    grant: Grant | None = None
    resume: Turn | None = None

    def wire(self) -> dict[str, Any]:
        d = self.decision
        return {
            "id": self.request.id,
            "session_key": self.key,
            "tool": self.request.tool,
            "outcome": d.outcome,
            "reason": d.reason,
            "who": d.who,
            "via": d.via,
            "always": d.always,
            "grant": self.grant.id if self.grant else None,
            "decided": d.created.isoformat(),
        }


AskListener = Callable[[Waiting], Awaitable[None]]
SettleListener = Callable[[Settled], Awaitable[None]]


class ApprovalService:
    """Pending requests across the gateway and the one way to decide them."""

    def __init__(
        self, manager: ThreadManager, *, clock: WallClock, grants: GrantBook | None = None
    ) -> None:
        self.manager = manager
        self.config = manager.config
        self.clock = clock
        self.grants = grants
        self.asks: list[AskListener] = []
        self.settles: list[SettleListener] = []
        self._timer: Timer | None = None
        manager.park_listeners.append(self._parked)

    # -- lifetime

    async def start(self) -> None:
        """Deny what lapsed while no gateway ran, and wait for the next expiry."""
        await self.sweep()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- reads

    async def waiting(self) -> list[Waiting]:
        """Every pending request, oldest first (expired ones are denied first)."""
        await self.sweep()
        return sorted(self._waiting(), key=lambda w: w.request.created)

    def _waiting(self) -> list[Waiting]:
        out = []
        for thread in self.manager.threads():
            for request in thread.session.approvals.pending():
                out.append(self.view(thread, request))
        return out

    def view(self, thread: Thread, request: ApprovalRequestEntry) -> Waiting:
        """One of ``thread``'s requests as people see it."""
        boundary = thread.session.approvals.boundary()
        wake = boundary.prompt.wake if boundary is not None and boundary.prompt else {}
        return Waiting(
            key=str(thread.key),
            session_id=thread.session.id,
            agent=thread.agent,
            request=request,
            caller=dict(wake.get("caller", {})),
            sink=dict(wake.get("sink", {})),
        )

    def find(self, request_id: str) -> Waiting:
        """The pending request with this id (or a unique prefix of at least 6 characters)."""
        found = [w for w in self._waiting() if w.request.id == request_id]
        if not found and len(request_id) >= MIN_ID:
            found = [w for w in self._waiting() if w.request.id.startswith(request_id)]
        if len(found) == 1:
            return found[0]
        if found:
            raise NotPendingError(request_id, "several requests start with it; give more of the id")
        raise NotPendingError(
            request_id, "no pending request has this id (decided, expired or never made)"
        )

    async def health(self) -> dict[str, Any]:
        """The ``approvals`` part of ``health``: what waits for a decision."""
        waiting = await self.waiting()
        return {"pending": len(waiting), "requests": [w.wire() for w in waiting[:20]]}

    async def grants_of(self, key: str | None = None) -> list[Grant]:
        if self.grants is None:
            return []
        return await (self.grants.of_key(key) if key else self.grants.all())

    # -- deciding

    def may_decide(self, decider: Decider, waiting: Waiting) -> bool:
        """The CLI and the dashboard, approvers, owners, and the person who started the turn."""
        if decider.channel in OPERATOR_DOORS:
            return True
        platform = base_channel(decider.channel)
        names = {f"{decider.channel}:{decider.user_id}", f"{platform}:{decider.user_id}"}
        if names & set(self.config.approvals.approvers) or is_owner(decider, self.config):
            return True
        caller = waiting.caller
        if caller.get("kind") == "user":
            return caller.get("channel") == platform and caller.get("user_id") == decider.user_id
        # Nobody typed the message that parked (a cron fire, another session): the chat's
        # own person decides in a direct chat.
        key = SessionKey(waiting.key)
        return key.channel == platform and key.parts[1:2] == [decider.user_id]

    async def decide(
        self,
        request_id: str,
        *,
        approve: bool,
        decider: Decider,
        reason: str = "",
        always: bool = False,
        key: str | None = None,
    ) -> Settled:
        """Record one person's decision; approve resumes the turn (``always`` adds a grant).

        ``key`` is the conversation the decision came from (a chat button):
        a request not pending there is named stale with what became of it.
        Raises :class:`NotPendingError` and :class:`NotAllowedError`;
        nothing is recorded then.
        """
        await self.sweep()
        waiting = await self._locate(request_id, key)
        if not self.may_decide(decider, waiting):
            raise NotAllowedError(
                f"{decider.label} may not decide this request: only the person who asked, "
                "an owner or a configured approver (approvals.approvers) can"
            )
        thread = self.manager.thread(waiting.key)
        assert thread is not None
        if not reason and not approve:
            reason = f"{decider.name or decider.label} said no"
        decided = await thread.session.approvals.decide(
            [
                Decision(
                    request_id=waiting.request.id,
                    outcome=APPROVE if approve else DENY,
                    reason=reason,
                    who=decider.label,
                    via=decider.via,
                    always=always,
                )
            ],
            now=self.clock.now(),
        )
        decision = decided.decisions[0]
        grant = await self._mint(thread.session, waiting, decision) if decision.always else None
        settled = Settled(
            key=waiting.key,
            request=waiting.request,
            decision=decision,
            grant=grant,
            resume=decided.resume,
        )
        await self._tell(settled)
        self._schedule()
        return settled

    async def _locate(self, request_id: str, key: str | None) -> Waiting:
        try:
            return self.find(request_id)
        except NotPendingError:
            made = [t for t in self.manager.threads() if t.session.approvals.holds(request_id)]
            if made:
                raise NotPendingError(
                    request_id, made[0].session.approvals.fate(request_id)
                ) from None
            if key is None:
                raise
        thread = await self.manager.open_thread(key)
        if thread is None:
            raise NotPendingError(request_id, "this conversation has no such request")
        door = thread.session.approvals
        request = next((r for r in door.pending() if r.id == request_id), None)
        if request is None:
            raise NotPendingError(request_id, door.fate(request_id))
        return self.view(thread, request)

    async def _mint(
        self, session: Session, waiting: Waiting, decision: ApprovalDecisionEntry
    ) -> Grant | None:
        if self.grants is None:
            return None
        request = waiting.request
        boundary = session.approvals.boundary()
        call = boundary.calls.get(request.call_id) if boundary else None
        grant = await self.grants.mint(
            key=waiting.key,
            tool=call.name if call else request.tool,
            label=request.tool,
            args=(exact(request.args or {}),),
            who=decision.who,
            via=decision.via,
            created=self.clock.now(),
            request_id=request.id,
            session_id=session.id,
        )
        await session.approvals.note(
            GrantEntry(
                id=grant.id,
                tool=grant.tool,
                args=tuple(t.wire() for t in grant.args),
                reason=f"approved always by {decision.who}",
            )
        )
        return grant

    async def revoke(self, grant_id: str) -> Grant:
        """End a grant: the next such call asks again."""
        if self.grants is None:
            raise GrantNotFoundError(grant_id)
        grant = await self.grants.revoke(grant_id)
        thread = self.manager.thread(grant.key)
        if thread is not None and thread.session.id == grant.session_id:
            await thread.session.approvals.note(
                GrantRevokedEntry(id=new_entry_id(), grant_id=grant.id)
            )
        return grant

    # -- expiry

    async def sweep(self) -> None:
        """Deny every request past its expiry now; wait for the next one."""
        now = self.clock.now()
        for thread in self.manager.threads():
            door = thread.session.approvals
            due = door.earliest_expiry()
            if due is None or not now > due:
                continue
            expired = await door.expire(now)
            requests = {r.id: r for r in door.audit() if isinstance(r, ApprovalRequestEntry)}
            for decision in expired:
                request = requests.get(decision.request_id)
                if request is not None:
                    await self._tell(
                        Settled(key=str(thread.key), request=request, decision=decision)
                    )
        self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        times = [
            t for th in self.manager.threads() if (t := th.session.approvals.earliest_expiry())
        ]
        if not times or self.manager.closed:
            return
        delay = max((min(times) - self.clock.now()).total_seconds(), 0.0)
        # Strictly after the expiry: a request lapses after its time, never at it.
        self._timer = self.clock.call_later(delay + 0.001, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self.manager.closed:
            self.manager.spawn(self.sweep(), name="approval expiry")

    # -- telling people

    def _parked(self, session: Session, requests: Sequence[ApprovalRequestEntry]) -> None:
        key = session.header.meta.get("key", "")
        thread = self.manager.thread(key) if key else None
        if thread is None or thread.session is not session:
            return
        for request in requests:
            self.manager.spawn(self._ask(self.view(thread, request)), name="ask for approval")
        self._schedule()

    async def _ask(self, waiting: Waiting) -> None:
        for listener in self.asks:
            try:
                await listener(waiting)
            except Exception:
                log.exception("asking for approval of %s failed", waiting.request.id)

    async def _tell(self, settled: Settled) -> None:
        for listener in self.settles:
            try:
                await listener(settled)
            except Exception:
                log.exception("telling the decision of %s failed", settled.request.id)

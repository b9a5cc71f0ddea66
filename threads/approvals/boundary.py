"""The approval boundary, read from a session's entries: what is parked, what is decided.

A call parks when the approval gate says a person must decide it: the run
ends, and the turn entry (naming the call in ``pending``), one
``approval_request`` (tool, arguments and their SHA-256, expiry) and one
``approval_audit`` (step ``park``) per parked call land in one append. The
call stays without a result on the leaf's path; that is the boundary.

Everything here is derived from the entries, never kept beside them, so a
restart reads the same boundary: the requests on the leaf's path whose call
is still open, and for each the first decision that names it and that no
resume has spent. A resume spends the decisions it applies (its ``resume``
audit entry lists them): on a branch back to the decided boundary the calls
are open again, with no unspent decision, and ask again instead of running
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from threads.approvals.predicates import args_sha256
from threads.ids import new_entry_id
from threads.messages import ToolCallPart
from threads.store.entries import (
    ApprovalAuditEntry,
    ApprovalDecisionEntry,
    ApprovalRequestEntry,
    Entry,
    MessageEntry,
    TurnEntry,
)
from threads.turns import Parked, Resolution

if TYPE_CHECKING:
    from threads.store.base import Loaded
    from threads.tree import EntryTree

# The audit steps (seed 003's, and ``rule`` for a configured rule's refusal).
STEP_PARK = "park"
STEP_GRANT = "grant"
STEP_RULE = "rule"
STEP_EXPIRY = "expiry"
STEP_RESUME = "resume"

APPROVE = "approve"
DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class Boundary:
    """The parked calls on the leaf's path: their requests, calls and unspent decisions.

    ``run_id`` is the run that parked them; ``prompt`` the prompt entry of the
    turn whose line holds them (its wake says where the answer goes).
    """

    run_id: str
    requests: tuple[ApprovalRequestEntry, ...]
    calls: Mapping[str, ToolCallPart]
    decisions: Mapping[str, ApprovalDecisionEntry]
    prompt: MessageEntry | None

    def request(self, request_id: str) -> ApprovalRequestEntry | None:
        return next((r for r in self.requests if r.id == request_id), None)

    def pending(self) -> list[ApprovalRequestEntry]:
        """The requests no decision answers yet, in call order."""
        return [r for r in self.requests if r.id not in self.decisions]

    @property
    def complete(self) -> bool:
        """Every parked call has a decision: the resume is owed."""
        return all(r.id in self.decisions for r in self.requests)

    def resolutions(self) -> tuple[Resolution, ...]:
        """The calls and what the resume does with each, in call order."""
        out = []
        for request in self.requests:
            decision = self.decisions[request.id]
            call = self.calls.get(request.call_id) or ToolCallPart(
                id=request.call_id, name=request.tool, args=request.args or {}
            )
            out.append(Resolution(call=call, outcome=decision.outcome, reason=decision.reason))
        return tuple(out)


def find_boundary(tree: EntryTree) -> Boundary | None:
    """The open boundary at the leaf, or None (no parked call on the leaf's path)."""
    open_calls = tree.open_calls()
    if not open_calls:
        return None
    requests: dict[str, ApprovalRequestEntry] = {}
    calls: dict[str, ToolCallPart] = {}
    prompt: MessageEntry | None = None
    for entry in tree.path_reversed():
        if isinstance(entry, ApprovalRequestEntry):
            if entry.call_id in open_calls and entry.call_id not in requests:
                requests[entry.call_id] = entry
        elif isinstance(entry, MessageEntry):
            for part in entry.message.content:
                if isinstance(part, ToolCallPart) and part.id in requests:
                    calls.setdefault(part.id, part)
            if entry.run_id:
                prompt = entry
                break
    if not requests:
        return None
    order = {call_id: index for index, call_id in enumerate(open_calls)}
    ordered = tuple(sorted(requests.values(), key=lambda r: order.get(r.call_id, 0)))
    decisions = unspent_decisions(tree.entries, {r.id for r in ordered})
    if decisions is None:
        return None  # its resume is running: the calls are being answered
    return Boundary(
        run_id=ordered[0].run_id,
        requests=ordered,
        calls=calls,
        decisions=decisions,
        prompt=prompt,
    )


def has_boundary(loaded: Loaded) -> bool:
    """Whether a stored session holds an open boundary (it must be loaded to be decided)."""
    if not any(isinstance(e, ApprovalRequestEntry) for e in loaded.entries):
        return False
    from threads.tree import EntryTree  # the tree reads this module for unfinished resumes

    tree = EntryTree(loaded.header.id)
    tree.load(loaded.entries, salvaged=True)
    return find_boundary(tree) is not None


def unspent_decisions(
    entries: Iterable[Entry], request_ids: set[str]
) -> dict[str, ApprovalDecisionEntry] | None:
    """request id → the first decision naming it that no resume has applied.

    None while a resume that applied one of them is still running: its calls
    are being answered, so nothing about them is pending (a crash settles
    that resume as interrupted, which answers them).
    """
    entries = list(entries)
    spent: dict[str, str] = {}
    finished: set[str] = set()
    for e in entries:
        if isinstance(e, ApprovalAuditEntry) and e.step == STEP_RESUME:
            spent.update((d, e.run_id) for d in e.decisions)
        elif isinstance(e, TurnEntry):
            finished.add(e.run_id)
    out: dict[str, ApprovalDecisionEntry] = {}
    for entry in entries:
        if not isinstance(entry, ApprovalDecisionEntry) or entry.request_id not in request_ids:
            continue
        resume = spent.get(entry.id)
        if resume is None:
            out.setdefault(entry.request_id, entry)
        elif resume and resume not in finished:
            return None
    return out


def unfinished_resumes(entries: Sequence[Entry], finished: set[str]) -> list[MessageEntry]:
    """Resume runs a dead writer left running, each as the prompt it answers under its run id.

    A resume has no prompt of its own: its turn answers the prompt of the
    turn that parked (through any resumes between), whose wake says where the
    answer goes. The returned entries are that prompt with ``run_id`` the
    resume's, so a restart records the right run as interrupted.
    """
    started = [
        e
        for e in entries
        if isinstance(e, ApprovalAuditEntry)
        and e.step == STEP_RESUME
        and e.outcome == "started"
        and e.run_id
        and e.run_id not in finished
    ]
    if not started:
        return []
    prompts = {e.run_id: e for e in entries if isinstance(e, MessageEntry) and e.run_id}
    decided_run = {e.id: e.run_id for e in entries if isinstance(e, ApprovalDecisionEntry)}
    origin = {
        e.run_id: next((decided_run[d] for d in e.decisions if d in decided_run), "")
        for e in entries
        if isinstance(e, ApprovalAuditEntry) and e.step == STEP_RESUME and e.run_id
    }
    out = []
    for audit in started:
        run_id = origin.get(audit.run_id, "")
        seen: set[str] = set()
        while run_id and run_id not in prompts and run_id not in seen:
            seen.add(run_id)
            run_id = origin.get(run_id, "")
        prompt = prompts.get(run_id)
        if prompt is not None:
            out.append(replace(prompt, run_id=audit.run_id))
    return out


def park_entries(parked: Sequence[Parked], run_id: str) -> list[Entry]:
    """Per parked call: its request and its ``park`` audit entry (unlinked)."""
    out: list[Entry] = []
    for p in parked:
        request = ApprovalRequestEntry(
            id=new_entry_id(),
            call_id=p.call.id,
            tool=p.tool,
            args=dict(p.call.args),
            args_sha256=args_sha256(p.call.args),
            run_id=run_id,
            reason=p.reason,
            expiry=p.expiry,
        )
        out.append(request)
        out.append(
            ApprovalAuditEntry(
                id=new_entry_id(),
                step=STEP_PARK,
                call_id=p.call.id,
                outcome="pending",
                detail=f"{p.tool} waits for a decision: {p.reason}",
                run_id=run_id,
            )
        )
    return out


def expiry_entries(boundary: Boundary, now: datetime) -> list[Entry]:
    """Denials of the undecided requests strictly past their expiry, each audited."""
    out: list[Entry] = []
    for request in boundary.pending():
        if request.expiry is None or not now > request.expiry:
            continue
        out.append(
            ApprovalAuditEntry(
                id=new_entry_id(),
                step=STEP_EXPIRY,
                call_id=request.call_id,
                outcome="denied",
                detail=f"undecided at its expiry {request.expiry.isoformat()}",
                run_id=request.run_id,
            )
        )
        out.append(
            ApprovalDecisionEntry(
                id=new_entry_id(),
                call_id=request.call_id,
                outcome=DENY,
                reason="no one decided in time (the approval request expired)",
                who="expiry",
                via="expiry",
                run_id=request.run_id,
                request_id=request.id,
            )
        )
    return out


def resume_started(boundary: Boundary, run_id: str) -> ApprovalAuditEntry:
    """The audit entry a resume writes before it runs: it spends the decisions it applies."""
    return ApprovalAuditEntry(
        id=new_entry_id(),
        step=STEP_RESUME,
        outcome="started",
        run_id=run_id,
        detail=", ".join(
            f"{r.tool}: {boundary.decisions[r.id].outcome}" for r in boundary.requests
        ),
        decisions=tuple(boundary.decisions[r.id].id for r in boundary.requests),
    )


def resume_ended(turn: TurnEntry) -> ApprovalAuditEntry:
    """The audit entry closing a resume: ``completed``, or ``failed`` with why."""
    failed = bool(turn.err) or turn.canceled
    return ApprovalAuditEntry(
        id=new_entry_id(),
        step=STEP_RESUME,
        outcome="failed" if failed else "completed",
        run_id=turn.run_id,
        detail=turn.err or turn.stop_reason,
    )


def fate_of(entries: Sequence[Entry], request_id: str, boundary: Boundary | None) -> str:
    """What became of a request that is not pending, in words a stale button can say."""
    request = next(
        (e for e in entries if isinstance(e, ApprovalRequestEntry) and e.id == request_id), None
    )
    if request is None:
        return "no such request in this conversation"
    decision = next(
        (
            e
            for e in reversed(entries)
            if isinstance(e, ApprovalDecisionEntry) and e.request_id == request_id
        ),
        None,
    )
    if decision is not None and decision.via == "expiry":
        return "it expired and was denied"
    if decision is not None:
        verb = "approved" if decision.outcome == APPROVE else "denied"
        return f"it was already {verb} by {decision.who or 'someone'}"
    if boundary is not None and any(r.call_id == request.call_id for r in boundary.requests):
        return "it was asked again; use the newest request"
    return "the conversation moved on without it"

"""What a parent session's pool receipts say, and the resolution of a delegating call.

The receipts of one delegation are a journey: one ``accepted`` entry, then
entries linked to it by ``receipt`` — ``running`` each time its child's run
starts, then exactly one settlement. :func:`journeys` reads them back;
recovery looks for the ones without a settlement.

:func:`resolution` is the entries of ``ResolveDelegation``: the outcome of a
synchronous delegation recorded as the result of the call that delegated,
when that call lost its turn (a restart) and still has no result. It is the
one way such a call is answered outside its own turn; the record says who
did it (``thread/pool``, via ``child``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from threads.context import message_of, still_open
from threads.errors import NotDelegatingError
from threads.ids import new_entry_id
from threads.messages import Message, ToolResultPart
from threads.store.entries import (
    POOL_ACCEPTED,
    POOL_RUNNING,
    POOL_SETTLED,
    ApprovalDecisionEntry,
    Entry,
    MessageEntry,
    PoolReceiptEntry,
)
from threads.tree import EntryTree

RESOLVER = "thread/pool"
VIA_CHILD = "child"


@dataclass(slots=True, kw_only=True)
class Journey:
    """One delegation as the parent's receipts record it."""

    accepted: PoolReceiptEntry
    statuses: list[str] = field(default_factory=list)
    settlement: PoolReceiptEntry | None = None

    @property
    def receipt(self) -> str:
        return self.accepted.id

    @property
    def child(self) -> str:
        return self.accepted.child

    @property
    def started(self) -> bool:
        return POOL_RUNNING in self.statuses

    @property
    def settled(self) -> bool:
        return self.settlement is not None


def journeys(entries: Iterable[Entry]) -> list[Journey]:
    """Every delegation recorded in ``entries``, in acceptance order."""
    found: dict[str, Journey] = {}
    for entry in entries:
        if not isinstance(entry, PoolReceiptEntry):
            continue
        if entry.status == POOL_ACCEPTED and not entry.receipt:
            found[entry.id] = Journey(accepted=entry)
            continue
        journey = found.get(entry.receipt)
        if journey is None:
            continue
        journey.statuses.append(entry.status)
        if entry.status in POOL_SETTLED and journey.settlement is None:
            journey.settlement = entry
    return list(found.values())


def resolution(
    tree: EntryTree, *, call_id: str, child: str, content: str, is_error: bool
) -> list[Entry]:
    """The entries answering delegating call ``call_id`` with its child's outcome.

    ``call_id`` must name the delegating call of a delegation to ``child``
    recorded in the session, and have no result on the leaf's path; else
    :class:`NotDelegatingError` names what is wrong and nothing is built.
    """
    accepted = [
        j.accepted
        for j in journeys(tree.entries)
        if j.accepted.call == call_id and j.accepted.child == child
    ]
    if not accepted:
        raise NotDelegatingError(tree.session, call_id, f"it delegates to no child {child}")
    path = tree.path()
    calls = still_open({}, [m for e in path if (m := message_of(e)) is not None])
    if call_id not in calls:
        raise NotDelegatingError(
            tree.session, call_id, "it is not on the conversation's line, or has its result"
        )
    run_id = _run_of(path, call_id)
    return [
        MessageEntry(
            id=new_entry_id(),
            message=Message(
                role="tool",
                content=(
                    ToolResultPart(
                        call_id=call_id, name=calls[call_id], content=content, is_error=is_error
                    ),
                ),
            ),
        ),
        ApprovalDecisionEntry(
            id=new_entry_id(),
            call_id=call_id,
            outcome="resolve_error" if is_error else "resolve",
            content=content,
            who=RESOLVER,
            via=VIA_CHILD,
            run_id=run_id,
        ),
    ]


def _run_of(path: list[Entry], call_id: str) -> str:
    """The run of the turn that made call ``call_id``: the nearest prompt before it."""
    run_id = ""
    for entry in path:
        if isinstance(entry, MessageEntry):
            if entry.run_id:
                run_id = entry.run_id
            if any(c.id == call_id for c in entry.message.tool_calls()):
                return run_id
    return run_id

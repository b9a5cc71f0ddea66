"""A turn that died applying its ``dispatch``: it had ended, and its restart says how.

``dispatch`` records its sends in the outbound ledger before it applies any
of them. A turn whose writer died after that record has chosen its end: on
open it gets the ``dispatch`` tool's result (what was delivered, each send
completed by the restart or marked uncertain), a ``dispatch`` turn entry and
the hand-offs its end makes, instead of a canceled turn and a resume
(:meth:`threads.inbox.Inbox.settle_unfinished`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import orjson

from threads import outbound
from threads.ids import new_entry_id
from threads.messages import Message, ToolResultPart
from threads.store.entries import Entry, MessageEntry, OutboundEntry, TurnEntry
from threads.turns import RunResult

if TYPE_CHECKING:
    from threads.session import Session, SessionOptions

DISPATCHED = (
    "the gateway stopped while this dispatch was being applied; its sends were recorded "
    "first, and the restart completed each (or marked it uncertain when its receiver "
    "could not drop a repeat)"
)


def died_dispatching(
    entries: Sequence[Entry], unfinished: Sequence[MessageEntry], open_calls: Mapping[str, str]
) -> tuple[MessageEntry, str] | None:
    """The unfinished turn that died applying its dispatch, and the call; None if none did."""
    call = next((c for c, name in open_calls.items() if name == "dispatch"), None)
    if call is None:
        return None
    runs = {
        record.run_id
        for record, _done in outbound.states(entries).values()
        if record.kind.startswith(outbound.DISPATCH)
    }
    return next(((p, call) for p in reversed(unfinished) if p.run_id in runs), None)


def settle_dispatched(
    entries: Sequence[Entry],
    prompt: MessageEntry,
    call: str,
    session: Session,
    options: SessionOptions,
) -> tuple[list[Entry], list[OutboundEntry]]:
    """The result and turn entry of a turn that died applying its dispatch; its hand-offs."""
    sends = outbound.of_run(entries, prompt.run_id)
    report = {
        "ok": True,
        "delivered_to": [
            {"to": r.kind.removeprefix(outbound.DISPATCH), "send": r.id, "status": status}
            for r, status in sends
            if r.kind.startswith(outbound.DISPATCH)
        ],
        "note": DISPATCHED,
    }
    result_message = Message(
        role="tool",
        content=(
            ToolResultPart(call_id=call, name="dispatch", content=orjson.dumps(report).decode()),
        ),
    )
    reply = next((r.text for r, _ in sends if r.kind in outbound.CALLER_SENDS), "")
    result = RunResult(
        stop_reason="dispatch",
        data={
            **report,
            "reply": reply,
            "replied_to_caller_session": any(
                r.kind == f"{outbound.DISPATCH}caller:session" for r, _ in sends
            ),
        },
    )
    turn = TurnEntry(id=new_entry_id(), run_id=prompt.run_id, stop_reason="dispatch")
    load, make = options.load_payload, options.hand_offs
    payload = load(prompt.wake) if load is not None and prompt.wake else None
    handed = make(session, prompt.run_id, payload, result) if make is not None else []
    return [MessageEntry(id=new_entry_id(), message=result_message), turn], [
        out.record for out in handed
    ]

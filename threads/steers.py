"""What a steer leaves in its session once a run drains it, or once no run did.

A steer is accepted as a ``queued`` receipt (:meth:`threads.inbox.Inbox.accept_steer`).
A run that drains it writes its ``delivered`` fate and the message itself
(:func:`delivery_entries`); one that ends without draining it defers it to a
turn of its own, written as its ``deferred`` fate and the follow-up's
``accepted`` receipt (:func:`deferral_receipts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from threads.ids import new_entry_id
from threads.store.entries import Entry, MessageEntry, ReceiptEntry, injected_id
from threads.turns import Policy
from threads.wake import injected_message

if TYPE_CHECKING:
    from threads.inbox import Deferral, Pending


def delivery_entries(steers: Sequence[Pending], run_id: str) -> list[Entry]:
    """Per steer drained into run ``run_id``: its ``delivered`` fate, then the message itself.

    A message that is its receipt's marked injected (as a runner's steer is)
    refers to the receipt instead of holding the text again.
    """
    out: list[Entry] = []
    for steer in steers:
        out.append(
            ReceiptEntry(
                id=new_entry_id(), status="delivered", receipt=steer.receipt_id, run_id=run_id
            )
        )
        message = steer.injected or steer.message
        if steer.receipt_id and message == injected_message(steer.message):
            ident, receipt = injected_id(steer.receipt_id), steer.receipt_id
            out.append(MessageEntry(id=ident, message=message, receipt=receipt))
        else:
            out.append(MessageEntry(id=new_entry_id(), message=message))
    return out


def deferral_receipts(deferred: Sequence[Deferral]) -> list[Entry]:
    """Per deferred steer: its ``deferred`` fate, then the follow-up's ``accepted`` receipt."""
    out: list[Entry] = []
    for old, new in deferred:
        out.append(
            ReceiptEntry(
                id=new_entry_id(),
                status="deferred",
                receipt=old.receipt_id,
                turn=new.prompt_id,
                run_id=new.turn.run_id,
            )
        )
        out.append(
            ReceiptEntry(
                id=new.receipt_id,
                status="accepted",
                msg=new.message,
                run_id=new.turn.run_id,
                turn=new.prompt_id,
                policy=Policy.STEER.value,
                wake=new.wake,
            )
        )
    return out

"""Prompts whose lines leave their message to a receipt, made whole again as a session is read.

A queued input's receipt holds its message and wake; the prompt that later
runs it does not write them again (each message is stored once), and a
steer's message is its ``queued`` receipt's, marked injected. Reading a
session in order, :class:`Referrals` keeps the receipts and gives each such
prompt back what its line left out.
"""

from __future__ import annotations

import dataclasses

from threads.messages import Message
from threads.store.entries import (
    RECEIPT_QUEUED,
    Entry,
    MessageEntry,
    ReceiptEntry,
    accepted_id,
)
from threads.wake import injected_message

UNRESOLVED = Message(role="user", content=())
"""The message of a prompt read without the receipt it names (see :class:`Referrals`)."""


class Referrals:
    """Puts back what a prompt's line leaves to its receipt, reading a session in order.

    ``take`` is given every entry as it is decoded; a prompt naming a
    receipt (or, ``"v": 3``, whose id says it) gets that receipt's message
    and wake, and is None when no earlier entry is that receipt (the line
    cannot be read whole).
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, ReceiptEntry] = {}

    def take(self, entry: Entry) -> Entry | None:
        if isinstance(entry, ReceiptEntry):
            if entry.msg is not None:
                self._held[entry.id] = entry
            return entry
        if isinstance(entry, MessageEntry) and entry.message is UNRESOLVED:
            receipt = self._held.get(referred(entry))
            return None if receipt is None else whole(entry, receipt)
        return entry


def referred(prompt: MessageEntry) -> str:
    """The id of the receipt a message read without its message refers to."""
    return prompt.receipt or accepted_id(prompt.id)


def whole(prompt: MessageEntry, receipt: ReceiptEntry) -> MessageEntry:
    """The message with what its receipt holds for it: a steer's, the receipt's message
    marked injected; a prompt's, the message and wake (and, for a line that names no
    receipt, the receipt and its run id, which the ids say)."""
    if prompt.message is not UNRESOLVED or receipt.msg is None:
        return prompt
    if receipt.status == RECEIPT_QUEUED:
        return dataclasses.replace(prompt, message=injected_message(receipt.msg))
    if prompt.receipt:
        return dataclasses.replace(prompt, message=receipt.msg, wake=receipt.wake)
    return dataclasses.replace(
        prompt, message=receipt.msg, wake=receipt.wake, receipt=receipt.id, run_id=receipt.run_id
    )

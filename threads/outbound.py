"""The outbound ledger: every send is recorded before it leaves, and marked once after.

A send — a reply to a user, a ``dispatch`` send, a notice, an announce, a
hand-off to another session — is an :class:`Outgoing`: a pending
:class:`~threads.store.entries.OutboundEntry` and the sink it goes to. The
record is made durable first (with the step that sends it, or in the append
that ends the turn), then the sink is handed the message, which carries the
record's id, then one mark says what became of it (:func:`send`).

A restart that finds a record with no mark cannot tell whether the send
arrived. It repeats it only to a receiver that deduplicates (another
session, which accepts one wake per origin; the web chat, which shows an id
once) and marks any other ``uncertain``, which ``check-session`` and
``health`` show the operator. A send is never repeated blindly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from threads.errors import ManagerClosedError
from threads.ids import new_entry_id
from threads.sinks import Delivery, OutboundMessage, Sink
from threads.store.entries import (
    OUTBOUND_BLOCKED,
    OUTBOUND_DELIVERED,
    OUTBOUND_FAILED,
    OUTBOUND_PENDING,
    OUTBOUND_UNCERTAIN,
    Entry,
    OutboundEntry,
)

log = logging.getLogger(__name__)

EXCERPT = 80
DISPATCH = "dispatch:"  # the kind of a dispatch send is this and its ``to``
CALLER_SENDS = frozenset({f"{DISPATCH}caller:user", f"{DISPATCH}caller:session"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Outgoing:
    """One send on its way: its pending record and the sink it is handed to."""

    record: OutboundEntry
    sink: Sink

    @property
    def message(self) -> OutboundMessage:
        record = self.record
        return OutboundMessage(
            text=record.text,
            meta=record.meta,
            expects_reply=record.expects_reply,
            outbound_id=record.id,
        )


def send_id(run_id: str, step: int, index: int) -> str:
    """The stable id of a turn's send: its session and turn (the run id), step and index."""
    return f"{run_id}-s{step}-{index}"


def loose_id(session_id: str) -> str:
    """The id of a send a session makes outside any turn (a notice after a stop)."""
    return f"{session_id}-{new_entry_id()}"


def outgoing(
    ident: str,
    sink: Sink,
    message: OutboundMessage,
    *,
    kind: str,
    run_id: str = "",
    target: str = "",
    wake: Mapping[str, Any] | None = None,
) -> Outgoing:
    """A send of ``message`` to ``sink``, recorded under ``ident`` (see :func:`send_id`).

    ``kind`` says what the send is (``reply``, ``notice``, ``dispatch:<to>``,
    ``child_completed`` …); a hand-off names the ``target`` session and the
    ``wake`` (its wire form) the message becomes there.
    """
    record = OutboundEntry(
        id=ident,
        status=OUTBOUND_PENDING,
        run_id=run_id,
        kind=kind,
        to=sink.to_wire(),
        target=target,
        wake=dict(wake or {}),
        text=message.text,
        meta=dict(message.meta),
        expects_reply=message.expects_reply,
    )
    return Outgoing(record=record, sink=sink)


def mark(
    record: OutboundEntry, status: str, *, delivered_to: str = "", error: str = ""
) -> OutboundEntry:
    """The entry that settles ``record``: delivered, blocked, failed or uncertain.

    It names the record and nothing the record says already (such as its run:
    a mark is read through its record, :func:`states`).
    """
    return OutboundEntry(
        id=new_entry_id(),
        status=status,
        record=record.id,
        delivered_to=delivered_to,
        error=error,
    )


async def send(out: Outgoing) -> tuple[Delivery | None, OutboundEntry | None]:
    """Hand a recorded send to its sink; what it returned and the mark that records it.

    A sink that raises is a ``failed`` mark (logged). A send refused because
    the gateway is stopping gets no mark: it stays pending, and the next start
    completes it. So does one its receiver only holds in memory for a reader
    not there yet (``Delivery.held``): a restart sends it again, and such a
    receiver shows an id once.
    """
    record = out.record
    try:
        delivery = await out.sink.deliver(out.message)
    except ManagerClosedError as exc:
        log.info("send %s waits for the next start: %s", record.id, exc)
        return None, None
    except Exception as exc:
        log.warning("send %s (%s) to %s failed: %s", record.id, record.kind, record.to, exc)
        return None, mark(record, OUTBOUND_FAILED, error=f"{type(exc).__name__}: {exc}")
    if delivery.held:
        return delivery, None
    if delivery.blocked:
        status = OUTBOUND_BLOCKED
        return delivery, mark(
            record, status, delivered_to=delivery.delivered_to, error=delivery.blocked
        )
    return delivery, mark(record, OUTBOUND_DELIVERED, delivered_to=delivery.delivered_to)


def uncertain(record: OutboundEntry) -> OutboundEntry:
    """The mark of a send a restart found unconfirmed and may not repeat."""
    return mark(
        record,
        OUTBOUND_UNCERTAIN,
        error="the gateway stopped before the send was confirmed, and its receiver cannot "
        "drop a repeat: it may or may not have arrived",
    )


def states(entries: Iterable[Entry]) -> dict[str, tuple[OutboundEntry, OutboundEntry | None]]:
    """Every record, by id, with its mark (None while it is pending), in record order."""
    out: dict[str, tuple[OutboundEntry, OutboundEntry | None]] = {}
    for entry in entries:
        if not isinstance(entry, OutboundEntry):
            continue
        if not entry.record:
            out[entry.id] = (entry, None)
        elif entry.record in out:
            out[entry.record] = (out[entry.record][0], entry)
    return out


def unsettled(entries: Iterable[Entry]) -> list[OutboundEntry]:
    """The records no mark settles: sends a stopped writer may or may not have made."""
    return [record for record, done in states(entries).values() if done is None]


def of_run(entries: Iterable[Entry], run_id: str) -> list[tuple[OutboundEntry, str]]:
    """The sends a run recorded, each with its status."""
    return [
        (record, done.status if done else OUTBOUND_PENDING)
        for record, done in states(entries).values()
        if record.run_id == run_id
    ]


def uncertain_sends(entries: Iterable[Entry]) -> list[dict[str, Any]]:
    """The sends marked uncertain, as ``check-session`` and ``health`` show them."""
    return [
        describe(record, done)
        for record, done in states(entries).values()
        if done is not None and done.status == OUTBOUND_UNCERTAIN
    ]


def describe(record: OutboundEntry, done: OutboundEntry | None = None) -> dict[str, Any]:
    """One send in plain fields: id, what it was, where it went, an excerpt, its status."""
    wire = record.to
    to = record.target or wire.get("target") or wire.get("chat") or wire.get("kind", "")
    channel = wire.get("channel")
    out: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "to": f"{channel}:{to}" if channel else to,
        "text": excerpt(record.text),
        "status": done.status if done else OUTBOUND_PENDING,
        "recorded": record.created.isoformat(),
    }
    if done is not None and done.error:
        out["error"] = done.error
    return out


def excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"

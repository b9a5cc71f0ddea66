"""The thread manager's side of the outbound ledger: hand-offs, repeats after a restart, notes.

A session records and marks its own sends (:mod:`threads.outbound`,
:mod:`threads.deliveries`); what it cannot know on its own comes from here:
what the end of a turn hands to other sessions (:mod:`threads.handoffs`:
``child_completed``, an exchange's next step), how a send a dead process
recorded and never confirmed is rebuilt to be repeated — only when its
receiver drops repeats; any other is listed as delivery uncertain — and what
a resumed turn is told it already sent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from threads import outbound
from threads.handoffs import child_completed
from threads.keys import SessionKey
from threads.outbound import Outgoing
from threads.session_sink import WakeSink
from threads.sessions.agent_to_agent import next_step
from threads.sinks import Sink, dedups
from threads.store.entries import OUTBOUND_PENDING, OutboundEntry
from threads.turns import RunResult
from threads.wake import wake_from_wire

if TYPE_CHECKING:
    from threads.manager import ThreadManager
    from threads.session import Session

log = logging.getLogger(__name__)

ALREADY_SENT = "Already sent during the interrupted turn (do not send these again):"
UNCERTAIN_KEPT = 100  # the uncertain sends health lists, newest last


class Ledger:
    """Hand-offs and repeats for every session of one manager; the uncertain sends it met."""

    def __init__(self, manager: ThreadManager) -> None:
        self.manager = manager
        self.uncertain: list[dict[str, Any]] = []

    def hand_offs(
        self, session: Session, run_id: str, payload: Any, result: RunResult
    ) -> list[Outgoing]:
        """What the end of a turn of ``session`` hands to other sessions."""
        key = _key_of(session)
        completed = child_completed(self.manager, key, run_id, payload, result)
        return [
            *([completed] if completed is not None else []),
            *next_step(self.manager, key, run_id, payload, result),
        ]

    def redeliver(self, session: Session, record: OutboundEntry) -> Outgoing | None:
        """A send a dead process recorded and never confirmed, to repeat; None when it may not be.

        A hand-off is repeated (its target accepts one wake per origin), as is
        a send to a sink that drops repeats; any other is logged and listed as
        uncertain.
        """
        manager = self.manager
        sink: Sink
        if record.target:
            wake = wake_from_wire(record.wake, record.text, manager.resolve_sink)
            fork_of = session if record.kind == f"{outbound.DISPATCH}fork" else None
            sink = WakeSink(
                target=SessionKey(record.target), wake=wake, manager=manager, fork_of=fork_of
            )
        else:
            sink = manager.resolve_sink(record.to)
        if dedups(sink):
            return Outgoing(record=record, sink=sink)
        key = _key_of(session)
        log.warning(
            "session %s: send %s (%s) was recorded but not confirmed before the gateway stopped; "
            "it is not repeated (its receiver cannot drop a repeat): delivery uncertain",
            key,
            record.id,
            record.kind,
        )
        self.uncertain = [
            *self.uncertain[-(UNCERTAIN_KEPT - 1) :],
            {"session_key": str(key), **outbound.describe(record, outbound.uncertain(record))},
        ]
        return None


def already_sent(session: Session, run_id: str) -> str:
    """What a turn resumed after a crash is told it sent before it; "" when nothing."""
    sent = outbound.of_run(session.entries(), run_id)
    if not sent:
        return ""
    lines = [
        f"- {outbound.describe(record)['to']}: {record.text!r} "
        f"({'sent, not confirmed' if status == OUTBOUND_PENDING else status})"
        for record, status in sent
    ]
    return "\n".join([ALREADY_SENT, *lines])


def _key_of(session: Session) -> SessionKey:
    return SessionKey(session.header.meta.get("key", session.id))

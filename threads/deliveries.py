"""A session's deliveries: handing its recorded sends to their sinks, and marking them.

:class:`Deliveries` belongs to one session's :class:`~threads.driver.TurnDriver`
and does the session's half of the outbound ledger (:mod:`threads.outbound`)
once the records are written: it sends what a turn's end recorded, appends
the marks, completes the sends a stopped writer recorded and never marked,
and makes a send outside any turn (record, send, mark). It writes through
the session's write path and takes the session's lock only to write: a send
may wake another session, which may send back to this one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from threads import outbound
from threads.faults import fault
from threads.inbox import Chain, Sync, Write
from threads.outbound import Outgoing
from threads.store.entries import Entry, OutboundEntry
from threads.tree import EntryTree

if TYPE_CHECKING:
    from threads.session import Session, SessionOptions

log = logging.getLogger(__name__)


class Deliveries:
    """The session's sends on their way out, and the ones a stopped writer left unmarked."""

    def __init__(
        self,
        session: Session,
        *,
        tree: EntryTree,
        lock: asyncio.Lock,
        chain: Chain,
        write: Write,
        sync: Sync,
        options: SessionOptions,
    ) -> None:
        self._session = session
        self._tree = tree
        self._lock = lock
        self._chain = chain
        self._write = write
        self._sync = sync
        self._options = options
        self._unsent = list(tree.unmarked.values())
        self._completing = 0

    @property
    def completing(self) -> bool:
        """True while unmarked sends are being completed (the session is not idle)."""
        return self._completing > 0

    def leave_for_later(self, records: Sequence[OutboundEntry]) -> None:
        """Records written but not sent now: the next :meth:`complete_unsent` completes them."""
        self._unsent += records

    async def complete_unsent(self) -> None:
        """Complete the sends a stopped writer recorded and never marked.

        Each is repeated when its receiver drops repeats (the owner's
        ``redeliver`` rebuilds it), else marked ``uncertain``; the marks land
        in one append.
        """
        if not self._unsent:
            return
        records, self._unsent = self._unsent, []
        redeliver = self._options.redeliver
        marks: list[Entry] = []
        self._completing += 1
        try:
            for record in records:
                out = redeliver(self._session, record) if redeliver is not None else None
                if out is None:
                    marks.append(outbound.uncertain(record))
                    continue
                _delivery, done = await outbound.send(out)
                if done is not None:
                    marks.append(done)
            await self._write_marks(marks)
        finally:
            self._completing -= 1

    async def synced(self, sends: list[Outgoing]) -> list[Outgoing]:
        """Flush what was written (``flush_store``); sends whose records may not be durable wait.

        They stay pending, to be completed by the next :meth:`complete_unsent`,
        as a restart would. Called with the lock held.
        """
        try:
            await self._sync()
        except Exception:
            log.exception("session %s: flushing the store failed", self._session.id)
            self.leave_for_later([out.record for out in sends])
            return []
        return sends

    async def send(self, sends: Sequence[Outgoing]) -> None:
        """Hand recorded sends to their sinks, in order, then append their marks."""
        marks: list[Entry] = []
        for out in sends:
            # A hand-off is recorded with the turn's end; a crash here is between the two.
            if out.record.kind == "child_completed":
                fault("mid_child_hand_off")
            elif out.record.kind == "a2a":
                fault("mid_announce")
            delivery, done = await outbound.send(out)
            if delivery is not None:
                fault("after_delivery_before_record")
            if done is not None:
                marks.append(done)
        await self._write_marks(marks)

    async def send_out(self, out: Outgoing) -> OutboundEntry | None:
        """A send outside any turn: recorded durably, sent, marked; the mark (see Session)."""
        if out.record.id in self._tree.by_id:
            return None
        async with self._lock:
            await self._write(self._chain(out.record))
            await self._sync()
        _delivery, done = await outbound.send(out)
        if done is not None:
            await self._write_marks([done])
        return done

    async def _write_marks(self, marks: Sequence[Entry]) -> None:
        """Append what became of sends; a failure leaves them pending (the next start settles).

        The marks are written, not flushed (``durable=False``): a power loss
        that takes them is a crash between the send and its mark, which the
        ledger settles; a killed process keeps them.
        """
        if not marks:
            return
        try:
            async with self._lock:
                await self._write(self._chain(*marks), durable=False)
        except Exception:
            log.exception(
                "session %s: the marks of %d sends were not written", self._session.id, len(marks)
            )

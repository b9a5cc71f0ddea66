"""Stops that stop: ``/stop``, ``stop-session KEY``, ``stop-session --all`` and spent budgets.

A stop ends a thread's turn and the exchange chains it is part of (DESIGN
§11). The chains of the key's running turn and of its queued system wakes are
cut at the depth they reached there: from then on their wakes at that depth or
deeper are refused everywhere, the turns of theirs running in other sessions
end at once, and their queued wakes are dropped (each with a ``dropped``
receipt, so a restart does not run them). A chat user's turn ends at once;
a child's turn winds down at its next step boundary, the soft stop of seed
000; a call waiting for approval is denied (the agent reads why) and runs
nothing. A user's own messages stay queued unless ``drain`` says to drop them too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threads.budget import Overspent
from threads.errors import NoTurnRunningError, ThreadNotLoadedError
from threads.keys import SessionKey
from threads.outbound import loose_id, outgoing
from threads.sinks import OutboundMessage, Sink
from threads.turns import Run, Turn
from threads.wake import UserCaller, Wake

if TYPE_CHECKING:
    from threads.manager import ThreadManager
    from threads.runner import Thread
    from threads.session import Session

log = logging.getLogger(__name__)

BY_OPERATOR = "stopped by an operator"
TOLD_USER = "(Your turn was stopped.)"


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReport:
    """What a stop did: turns ended now, turns winding down, queued wakes dropped, chains cut."""

    ended: tuple[str, ...] = ()
    winding_down: tuple[str, ...] = ()
    dropped: int = 0
    chains: int = 0

    def describe(self) -> str:
        """One plain line for the CLI and the chat."""
        parts = []
        if self.ended:
            parts.append(f"ended the running turn of {_names(self.ended)}")
        if self.winding_down:
            parts.append(f"asked {_names(self.winding_down)} to end at its next step boundary")
        if self.dropped:
            parts.append(f"dropped {self.dropped} queued wake{'s' if self.dropped != 1 else ''}")
        if not parts:
            return "nothing was running or queued"
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "ended": list(self.ended),
            "winding_down": list(self.winding_down),
            "dropped": self.dropped,
            "chains": self.chains,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StopReport:
        """The report :meth:`to_json` made (another gateway node's stop)."""
        return cls(
            ended=tuple(str(k) for k in data.get("ended", [])),
            winding_down=tuple(str(k) for k in data.get("winding_down", [])),
            dropped=int(data.get("dropped", 0)),
            chains=int(data.get("chains", 0)),
        )


def _names(keys: tuple[str, ...]) -> str:
    return ", ".join(keys) if len(keys) <= 3 else f"{', '.join(keys[:3])} and {len(keys) - 3} more"


def _is_user(payload: object) -> bool:
    return isinstance(payload, Wake) and isinstance(payload.caller, UserCaller)


def _cut(cuts: dict[str, int], payload: object) -> None:
    if isinstance(payload, Wake) and payload.chain:
        cuts[payload.chain] = min(cuts.get(payload.chain, payload.depth), payload.depth)


async def stop_key(
    manager: ThreadManager, key: SessionKey, *, drain: bool, by_user: bool
) -> StopReport:
    """Stop ``key``'s turn and the chains of its turn and its queued system wakes.

    Raises :class:`ThreadNotLoadedError` when the key has no thread in memory,
    and :class:`NoTurnRunningError` when its thread has nothing to stop. The
    chat user whose turn an operator ended is told so (``/stop``, ``by_user``,
    is answered by the command itself).
    """
    thread = manager.thread(key)
    if thread is None:
        raise ThreadNotLoadedError(key)
    session = thread.session
    active = session.active_payload
    waiting = session.waiting_payloads()
    cuts: dict[str, int] = {}
    _cut(cuts, active)
    for payload in waiting:
        if not _is_user(payload):
            _cut(cuts, payload)
    parked = session.approvals.awaiting
    if active is None and not cuts and not (drain and waiting) and not parked:
        raise NoTurnRunningError(key, thread.state)
    reason = "stopped by the user" if by_user else BY_OPERATOR
    for chain, depth in cuts.items():
        manager.chains.cut(chain, depth, f"{reason} at {key}")
    report = await _sweep(manager, cuts, spare=thread)
    dropped = await session.drop_queued(lambda payload: drain or not _is_user(payload))
    ended: list[Turn] = []
    ended_keys: list[str] = list(report.ended)
    winding: list[str] = []
    run = session.running
    if parked and await session.approvals.close(reason, via="stop"):
        # A call waiting for approval is the turn: a stop denies it, and nothing runs for it.
        ended_keys.insert(0, str(key))
    if active is not None:
        if not key.is_user_facing and run is not None and session.request_stop():
            winding.append(str(key))
        elif session.interrupt(f"{reason} ({key})"):
            ended_keys.insert(0, str(key))
            if run is not None:
                ended.append(run.turn)
            if not by_user:
                await _tell(session, active)
    await _settled(manager, ended)
    return StopReport(
        ended=tuple(ended_keys),
        winding_down=tuple(winding),
        dropped=report.dropped + dropped,
        chains=len(cuts),
    )


async def stop_all(manager: ThreadManager, *, drain: bool) -> StopReport:
    """Stop every running turn and every queued system wake (and, with ``drain``, user messages)."""
    cuts: dict[str, int] = {}
    for thread in manager.threads():
        _cut(cuts, thread.session.active_payload)
        for payload in thread.session.waiting_payloads():
            if not _is_user(payload):
                _cut(cuts, payload)
    for chain, depth in cuts.items():
        manager.chains.cut(chain, depth, f"{BY_OPERATOR} (stop-session --all)")
    ended: list[Turn] = []
    ended_keys: list[str] = []
    dropped = 0
    for thread in manager.threads():
        session = thread.session
        dropped += await session.drop_queued(lambda payload: drain or not _is_user(payload))
        active, run = session.active_payload, session.running
        if session.approvals.awaiting and await session.approvals.close(
            f"{BY_OPERATOR} (stop-session --all)", via="stop"
        ):
            ended_keys.append(str(thread.key))
        if active is not None and session.interrupt(f"{BY_OPERATOR} (stop-session --all)"):
            ended_keys.append(str(thread.key))
            if run is not None:
                ended.append(run.turn)
            await _tell(session, active)
    await _settled(manager, ended)
    return StopReport(ended=tuple(sorted(ended_keys)), dropped=dropped, chains=len(cuts))


async def _sweep(
    manager: ThreadManager, cuts: dict[str, int], *, spare: Thread | None
) -> StopReport:
    """Drop the cut chains' queued wakes everywhere; end their turns but ``spare``'s."""
    if not cuts:
        return StopReport()
    ended: list[Turn] = []
    ended_keys: list[str] = []
    dropped = 0
    for thread in manager.threads():
        session = thread.session
        dropped += await session.drop_queued(manager.chains.refused)
        if thread is spare:
            continue
        active, run = session.active_payload, session.running
        if manager.chains.refused(active) and session.interrupt(BY_OPERATOR):
            ended_keys.append(str(thread.key))
            if run is not None:
                ended.append(run.turn)
    await _settled(manager, ended)
    return StopReport(ended=tuple(ended_keys), dropped=dropped)


async def _settled(manager: ThreadManager, turns: Iterable[Turn]) -> None:
    """Wait (within the close deadline) until the ended turns are recorded as ended."""
    waiting = [asyncio.ensure_future(turn.wait()) for turn in turns if not turn.done()]
    if not waiting:
        return
    done, pending = await asyncio.wait(
        waiting, timeout=manager.config.threads.close_deadline_seconds
    )
    for future in pending:
        future.cancel()
    for future in done:
        future.exception()  # an ended turn reports how it ended; nothing to raise here


async def _tell(session: Session, payload: object) -> None:
    """Tell the chat user whose turn a stop ended, in one line (through the outbound ledger)."""
    if not _is_user(payload):
        return
    assert isinstance(payload, Wake)
    if payload.sink.drops:
        return
    notice = outgoing(
        loose_id(session.id), payload.sink, OutboundMessage(text=TOLD_USER), kind="notice"
    )
    try:
        await session.send_out(notice)
    except Exception:
        log.exception("telling the user that their turn was stopped failed")


async def overspent(manager: ThreadManager, key: SessionKey, run: Run, over: Overspent) -> None:
    """A turn's session or chain spent its budget: stop the chain, tell the owner.

    The chain is cut from its start, so nothing it set going runs on; the turn
    that found the budget spent ends by itself. The owner is the chat user the
    turn answers, else the user of the chat the session belongs to (a child's
    root); a system session's overspend is logged.
    """
    wake = run.payload if isinstance(run.payload, Wake) else None
    if wake is not None and wake.chain:
        manager.chains.cut(wake.chain, 0, f"the budget ran out: {over.describe()}")
        await _sweep(manager, {wake.chain: 0}, spare=manager.thread(key))
    text = f"(Stopped: {over.describe()}. Try again later.)"
    sink: Sink | None
    if wake is not None and _is_user(wake) and not wake.sink.drops:
        sink = wake.sink
    else:
        sink = manager.user_sink(key.root)
    if sink is None:
        log.warning("session %s: %s; its turn was stopped", key, over.describe())
        return
    log.warning("session %s: %s; its turn was stopped and its user told", key, over.describe())
    # Sent with the end of the turn the budget stops, like any closing notice.
    run.outbox.append(
        outgoing(run.send_id(), sink, OutboundMessage(text=text), kind="notice", run_id=run.run_id)
    )

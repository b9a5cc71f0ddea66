"""Hand-offs: what the end of a turn passes to another session, made durable with that end.

A child's turn ends and its parent is owed a ``child_completed``; a
``sessions_send`` exchange step ends and the other side is owed the next
step. Each is an :class:`~threads.outbound.Outgoing` to a
:class:`~threads.session_sink.WakeSink`, recorded in the append that ends
the turn and sent once it is durable, so a crash between the two still
wakes the target, once (the target accepts one wake per origin).

The ``child_completed`` rule (decision 0004): when a turn of a subagent or
fork that its parent woke ends, the parent gets one, carrying the child's
answer — unless the child replied with ``dispatch(to=caller:session)``
(that reply woke the parent) or a soft stop ended it. A turn parked for an
approval owes nothing yet: the run that resumes it does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threads.keys import SessionKey
from threads.outbound import Outgoing, outgoing
from threads.session_sink import WakeSink
from threads.sinks import DropSink, OutboundMessage
from threads.turns import RunResult
from threads.wake import Cause, SessionCaller, SystemCaller, Wake, WakeSource, wake_to_wire

if TYPE_CHECKING:
    from threads.manager import ThreadManager


def hand_off(
    manager: ThreadManager, run_id: str, target: SessionKey, wake: Wake, *, kind: str
) -> Outgoing:
    """The send that wakes ``target`` with ``wake``; its id is the run's and the kind's.

    A turn hands off at most one of each kind, so the id is stable: a turn
    end settled again after a crash records the same send.
    """
    sink = WakeSink(target=target, wake=wake, manager=manager)
    return outgoing(
        f"{run_id}-{kind}",
        sink,
        OutboundMessage(text=wake.body),
        kind=kind,
        run_id=run_id,
        target=str(target),
        wake=wake_to_wire(wake),
    )


def reply_of(result: RunResult) -> str:
    """What a turn answered its caller: its final text, or its ``dispatch(to=caller:*)`` body."""
    if result.stop_reason == "end_turn":
        return result.text
    reply = result.data.get("reply", "")
    return reply if isinstance(reply, str) else ""


def child_completed(
    manager: ThreadManager, key: SessionKey, run_id: str, payload: Any, result: RunResult
) -> Outgoing | None:
    """The ``child_completed`` a child's turn owes its parent, or None (see the module)."""
    parent = key.parent
    wake = payload if isinstance(payload, Wake) else None
    if parent is None or wake is None or not isinstance(wake.caller, SessionCaller):
        return None
    if wake.caller.session_key != parent or result.stop_reason in ("stopped", "parked"):
        return None  # a soft stop ends silently; a parked turn has not ended its work
    if result.data.get("replied_to_caller_session"):
        return None  # the reply already woke the parent
    if result.error:
        status, answer = "failed", result.error
    else:
        status = "completed"
        answer = result.text.strip() or "(the child ended its turn without an answer)"
    cause = Cause.after(wake)
    completed = Wake(
        source=WakeSource.CHILD_COMPLETED,
        body=f"child: {key}\nstatus: {status}\nrun: {run_id}\n\n{answer}",
        caller=SystemCaller(name="child_completed"),
        sink=DropSink(reason="child_completed"),
        meta={"child": str(key)},
        chain=cause.chain,
        depth=cause.depth,
    )
    return hand_off(manager, run_id, parent, completed, kind="child_completed")

"""Where a fire's output goes, what its wake header says about it, and what became of it.

A job states where its output goes (see :class:`~cron.models.Job`):

* ``deliver_to`` — a chat. The job runs in ``cron:<id>``; the wake's sink is
  that chat's user (through the send policy), so the turn's plain-text answer
  reaches them, and so does its ``dispatch(to=user)`` (the gateway resolves
  ``user`` of ``cron:<id>`` to the job's chat).
* a direct wake — the woken session's own user. Cron cannot be answered (the
  sink drops), and the header says exactly how to reach that user instead.
* neither — a silent job: its output reaches nobody, and the header says so.

The ledger records ``fired`` when the session accepted the wake, and the
delivery separately, once the turn has ended (:func:`delivery_of`):
``delivered``, ``silent`` or ``failed: …``. A :class:`WatchedSink` stands
between the turn and the chat so a text answer's delivery is seen; the
turn's ``dispatch`` report says what its sends did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threads.errors import ClosedError, DroppedError
from threads.keys import SessionKey
from threads.sinks import Delivery, OutboundMessage, Sink, dedups

if TYPE_CHECKING:
    from threads.turns import RunResult, Turn

DELIVERED = "delivered"
SILENT = "silent"
STOPPED = "unknown: the gateway stopped before the turn ended"
_PERSON_SENDS = frozenset({"user", "caller:user", "caller:session"})


def deliver_words(chat: SessionKey) -> str:
    """The wake header's ``delivery`` for a job whose output goes to ``chat``."""
    return (
        f"Caller is cron - this job's output goes to the {chat} user: answer in plain text, "
        "or with dispatch(to=user); dispatch({}) sends nothing"
    )


def direct_words(session: SessionKey) -> str:
    """The wake header's ``delivery`` for a direct wake of ``session``: how to reach its user."""
    if session.is_user_facing:
        return (
            f"Caller is cron - output to caller is dropped. To reach your user ({session}), "
            "end with dispatch(to=user); a plain-text answer reaches nobody"
        )
    return (
        "Caller is cron - output to caller is dropped. This session has no chat user: "
        "a plain-text answer reaches nobody; to tell another session, dispatch(to=session)"
    )


SILENT_WORDS = (
    "Caller is cron - output to caller is dropped. This job delivers to nobody (it has no "
    "--deliver-to): do the task; dispatch({}) ends the turn"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderDropSink:
    """A drop sink whose header words say where output could go instead.

    Its wire form is the plain drop sink's, so a wake restored after a restart
    still drops (with the plain words).
    """

    words: str

    @property
    def drops(self) -> bool:
        return True

    @property
    def dedups(self) -> bool:
        return True  # nothing is shown, however often

    def describe(self) -> str:
        return self.words

    def to_wire(self) -> dict[str, str]:
        return {"kind": "drop", "reason": "cron"}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        return Delivery(delivered_to="dropped", dropped=True)


@dataclass(slots=True, kw_only=True)
class WatchedSink:
    """A chat's sink that remembers what each delivery through it became.

    It is the wake's sink for a ``deliver_to`` job: ``deliveries`` holds each
    delivery's receiver (or why it was blocked), ``errors`` each failure.
    """

    inner: Sink
    words: str
    deliveries: list[Delivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def drops(self) -> bool:
        return self.inner.drops

    @property
    def dedups(self) -> bool:
        return dedups(self.inner)

    def describe(self) -> str:
        return self.words

    def to_wire(self) -> dict[str, str]:
        return self.inner.to_wire()

    async def deliver(self, message: OutboundMessage) -> Delivery:
        try:
            delivery = await self.inner.deliver(message)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            raise
        self.deliveries.append(delivery)
        return delivery


async def delivery_of(turn: Turn, watch: WatchedSink | None) -> str:
    """What became of the output of the turn a fire started, once it has ended."""
    from threads.errors import NotPersistedError, NotRunError

    try:
        result = await turn.wait()
    except DroppedError as exc:
        return f"failed: the wake was dropped before its turn ran ({exc})"
    except ClosedError:
        return "failed: the session closed before the turn ran"
    except NotRunError as exc:
        return f"failed: the turn could not start: {exc}"
    except NotPersistedError as exc:
        return f"failed: {exc}"
    if result is None:
        return "silent: the wake was steered into a running turn, whose answer is its own"
    return judge(result, watch)


def judge(result: RunResult, watch: WatchedSink | None) -> str:
    """``delivered``, ``silent`` or ``failed: …`` for a finished run."""
    if result.stop_reason == "stopped":
        return "failed: the turn was stopped (gateway stop-session or /stop)"
    if result.error or result.stop_reason in ("canceled", "error", "max_steps"):
        return f"failed: {result.error or 'the turn ' + result.stop_reason}"
    watched = _watched(watch)
    if result.stop_reason == "dispatch":
        sends = [s for s in result.data.get("delivered_to", []) if _to_person(s)]
        refused = [_why(s) for s in sends if s.get("blocked") or s.get("error")]
        if refused:
            return f"failed: {refused[0]}"
        if sends or watched == DELIVERED:
            return DELIVERED
        return SILENT
    return watched or SILENT


def _watched(watch: WatchedSink | None) -> str:
    if watch is None:
        return ""
    if watch.errors:
        return f"failed: {watch.errors[0]}"
    blocked = [d.blocked for d in watch.deliveries if d.blocked]
    if blocked:
        return f"failed: blocked: {blocked[0]}"
    return DELIVERED if any(not d.dropped for d in watch.deliveries) else ""


def _to_person(send: Any) -> bool:
    return isinstance(send, dict) and send.get("to") in _PERSON_SENDS


def _why(send: dict[str, Any]) -> str:
    if send.get("blocked"):
        return f"blocked: {send['blocked']}"
    return str(send.get("error", "the send failed"))

"""Agent-to-agent messages: ``sessions_send``'s primary run, reply-back ping-pong and announce.

A send wakes the target with agent-to-agent context and a
:class:`~threads.session_sink.CaptureSink` as its caller's sink, so the
target's reply is read by the waiting tool instead of waking the requester.
After the primary run, the two sessions take turns answering each other
(requester first) until one replies exactly ``REPLY_SKIP``, replies nothing,
or ``session.agent_to_agent.max_ping_pong_turns`` turns have run. Then the
target runs an announce step: exactly ``ANNOUNCE_SKIP`` stays silent,
anything else is posted to the target's channel user (through the send
policy).

Each step is a hand-off (:mod:`threads.handoffs`): :func:`next_step` reads
the ending step's wake and reply and makes the next step's wake, which is
recorded in the append that ends the step and then sent. The exchange lives
in the wakes' meta (who asked whom what, the round, the replies so far), so
a restart between two steps goes on with the next one, once.

Every agent-to-agent wake carries ``a2a_hops`` in its meta: how many
agent-to-agent turns the chain has run, itself included. A chain may run at
most ``1 + max_ping_pong_turns`` of them — a ``sessions_send`` from a turn
already that deep is refused — so a loop through any number of sessions ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from config.models import GatewayConfig
from threads.handoffs import hand_off, reply_of
from threads.keys import SessionKey
from threads.outbound import Outgoing, outgoing
from threads.session_sink import CaptureSink
from threads.sinks import OutboundMessage
from threads.turns import RunResult, Turn
from threads.wake import Accepted, Cause, SessionCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

REPLY_SKIP = "REPLY_SKIP"
ANNOUNCE_SKIP = "ANNOUNCE_SKIP"
HOPS = "a2a_hops"
STEP = "a2a"  # primary | reply | announce
STEP_TIMEOUT = 300.0
# The exchange, carried by each step's wake so the next step can be made from it.
REQUESTER = "a2a_requester"
TARGET = "a2a_target"
REQUEST = "a2a_request"
ROUND = "a2a_round"
FIRST = "a2a_first"
LATEST = "a2a_latest"
DEPTH = "a2a_depth"  # the primary run's exchange depth


def hops_of(payload: Any) -> int:
    """The agent-to-agent depth of the turn a wake started (0: not agent-to-agent)."""
    if not isinstance(payload, Wake):
        return 0
    value = payload.meta.get(HOPS, "0")
    return int(value) if value.isdigit() else 0


def hop_cap(config: GatewayConfig) -> int:
    """How many agent-to-agent turns one chain may run: the primary plus the ping-pong."""
    return 1 + config.session.agent_to_agent.max_ping_pong_turns


def is_skip(reply: str, word: str) -> bool:
    return reply.strip() == word


async def settle(turn: Turn, timeout: float | None) -> RunResult | None:
    """The result of the run a wake became, following a deferred steer to its own turn.

    ``None`` when the wake was steered into another run (that run answers it).
    Raises ``TimeoutError`` (the run goes on) and :class:`TurnError`.
    """
    while True:
        result = await turn.wait(timeout)
        if result is None and turn.next is not None:
            turn = turn.next
            continue
        return result


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """One ``sessions_send``: who asked whom what, and how deep the chain already is."""

    manager: ThreadManager
    requester: SessionKey
    requester_agent: str
    target: SessionKey
    message: str
    hops: int  # of the primary run
    cause: Cause  # the primary run's place in its exchange chain

    async def start(self) -> tuple[Accepted, Turn, CaptureSink]:
        """Wake the target with the message and agent-to-agent context (the primary run).

        The ping-pong and the announce follow from the primary run's end (see
        :func:`next_step`).
        """
        capture = CaptureSink(caller=self.requester)
        wake = Wake(
            source=WakeSource.SESSION,
            body=(
                "[agent-to-agent message]\n"
                f"Session {self.requester} (agent {self.requester_agent}) sent you this with "
                "sessions_send. Your reply — dispatch(to=caller:session) or a final text "
                "answer — is returned to that agent; no user sees it.\n\n"
                f"{self.message}"
            ),
            caller=SessionCaller(session_key=self.requester),
            sink=capture,
            meta={
                STEP: "primary",
                HOPS: str(self.hops),
                REQUESTER: str(self.requester),
                TARGET: str(self.target),
                REQUEST: self.message,
                DEPTH: str(self.cause.depth),
            },
            chain=self.cause.chain,
            depth=self.cause.depth,
        )
        accepted, turn = await self.manager.wake_turn(self.target, wake)
        return accepted, turn, capture


def next_step(
    manager: ThreadManager, key: SessionKey, run_id: str, payload: Any, result: RunResult
) -> list[Outgoing]:
    """What the end of an exchange step hands on: the next reply round, the announce, or its post.

    Nothing for a turn that is not an exchange step (or one woken before
    exchanges were carried by their wakes).
    """
    wake = payload if isinstance(payload, Wake) else None
    if wake is None or wake.meta.get(STEP) not in ("primary", "reply", "announce"):
        return []
    meta = wake.meta
    if REQUESTER not in meta or TARGET not in meta or result.stop_reason == "parked":
        return []  # a parked step goes on when it is resumed
    step = _Step(manager=manager, run_id=run_id, wake=wake)
    reply = reply_of(result) if result.ok else ""
    if meta[STEP] == "announce":
        return step.post(reply)
    if meta[STEP] == "primary":
        if not result.ok:
            return []
        if reply and not is_skip(reply, REPLY_SKIP):
            return step.reply_round(
                0, speaker=step.requester, other=key, incoming=reply, first=reply
            )
        return step.announce(first=reply, latest=reply)
    index = int(meta.get(ROUND, "0"))
    first, incoming = meta.get(FIRST, ""), meta.get(LATEST, "")
    if not reply or is_skip(reply, REPLY_SKIP):
        return step.announce(first=first, latest=incoming)
    caller = wake.caller_session_key
    assert caller is not None
    return step.reply_round(index + 1, speaker=caller, other=key, incoming=reply, first=first)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Step:
    """The exchange an ending step belongs to, and how its next step is made."""

    manager: ThreadManager
    run_id: str
    wake: Wake

    @property
    def requester(self) -> SessionKey:
        return SessionKey(self.wake.meta[REQUESTER])

    @property
    def target(self) -> SessionKey:
        return SessionKey(self.wake.meta[TARGET])

    @property
    def depth(self) -> int:
        value = self.wake.meta.get(DEPTH, "")
        return int(value) if value.isdigit() else self.wake.depth

    def reply_round(
        self, index: int, *, speaker: SessionKey, other: SessionKey, incoming: str, first: str
    ) -> list[Outgoing]:
        """Round ``index + 2`` of the exchange: ``speaker`` answers what ``other`` said."""
        config = self.manager.config
        rounds = config.session.agent_to_agent.max_ping_pong_turns
        hops = hops_of(self.wake) + 1
        if index >= rounds or hops > hop_cap(config):
            return self.announce(first=first, latest=incoming)
        body = (
            f"[agent-to-agent reply · round {index + 2} of {rounds + 1}]\n"
            f"Session {other} replied:\n\n{incoming}\n\n"
            "Answer with dispatch(to=caller:session) to continue the exchange, or "
            f"reply exactly {REPLY_SKIP} to end it."
        )
        meta = {ROUND: str(index), FIRST: first, LATEST: incoming}
        wake = self._wake(speaker, other, body, "reply", hops, self.depth + index + 1, meta)
        return [hand_off(self.manager, self.run_id, speaker, wake, kind="a2a")]

    def announce(self, *, first: str, latest: str) -> list[Outgoing]:
        """The target's announce step, when it has a channel user to tell."""
        if self.manager.user_sink(self.target) is None:
            return []
        body = (
            "[agent-to-agent announce step]\n"
            f"Your exchange with session {self.requester} is over.\n"
            f"Original request: {self.wake.meta.get(REQUEST, '')}\n"
            f"Round-1 reply: {first or '(none)'}\n"
            f"Latest reply: {latest or '(none)'}\n\n"
            "If your channel user should hear about it, reply with the message to post in "
            f"your chat. Reply exactly {ANNOUNCE_SKIP} to stay silent."
        )
        hops = hop_cap(self.manager.config)
        wake = self._wake(self.target, self.requester, body, "announce", hops, self.depth + 1, {})
        return [hand_off(self.manager, self.run_id, self.target, wake, kind="a2a")]

    def post(self, reply: str) -> list[Outgoing]:
        """The announce step's reply, posted to the target's channel user unless it is a skip."""
        sink = self.manager.user_sink(self.target)
        if sink is None or not reply or is_skip(reply, ANNOUNCE_SKIP):
            return []
        message = OutboundMessage(text=reply, meta={"a2a_from": str(self.requester)})
        return [
            outgoing(f"{self.run_id}-announce", sink, message, kind="announce", run_id=self.run_id)
        ]

    def _wake(
        self,
        key: SessionKey,
        caller: SessionKey,
        body: str,
        step: str,
        hops: int,
        depth: int,
        extra: dict[str, str],
    ) -> Wake:
        meta = {
            STEP: step,
            HOPS: str(hops),
            REQUESTER: str(self.requester),
            TARGET: str(self.target),
            REQUEST: self.wake.meta.get(REQUEST, ""),
            DEPTH: str(self.depth),
            **extra,
        }
        return Wake(
            source=WakeSource.SESSION,
            body=body,
            caller=SessionCaller(session_key=caller),
            sink=CaptureSink(caller=caller),
            meta=meta,
            chain=self.wake.chain,
            depth=depth,
        )

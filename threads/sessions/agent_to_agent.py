"""Agent-to-agent messages: ``sessions_send``'s primary run, reply-back ping-pong and announce.

A send wakes the target with agent-to-agent context and a :class:`CaptureSink`
as its caller's sink, so the target's reply is read here instead of waking the
requester. After the primary run, the two sessions take turns answering each
other (requester first) until one replies exactly ``REPLY_SKIP``, replies
nothing, or ``session.agent_to_agent.max_ping_pong_turns`` turns have run.
Then the target runs an announce step: exactly ``ANNOUNCE_SKIP`` stays silent,
anything else is posted to the target's channel user (through the send policy).

Every agent-to-agent wake carries ``a2a_hops`` in its meta: how many
agent-to-agent turns the chain has run, itself included. A chain may run at
most ``1 + max_ping_pong_turns`` of them — a ``sessions_send`` from a turn
already that deep is refused — so a loop through any number of sessions ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from config.models import GatewayConfig
from threads.errors import ExchangeRefusedError, TurnError
from threads.faults import fault
from threads.keys import SessionKey
from threads.sinks import Delivery, OutboundMessage
from threads.turns import RunResult, Turn
from threads.wake import Accepted, Cause, SessionCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)

REPLY_SKIP = "REPLY_SKIP"
ANNOUNCE_SKIP = "ANNOUNCE_SKIP"
HOPS = "a2a_hops"
STEP = "a2a"  # primary | reply | announce
STEP_TIMEOUT = 300.0


@dataclass(slots=True, kw_only=True)
class CaptureSink:
    """Keeps what a run sends its caller, for the gateway to read, waking no one.

    Its wire form is a drop sink: a capture lives only as long as the waiter
    that reads it, and the transcript keeps the reply (``sessions_history``).
    """

    caller: SessionKey
    texts: list[str] = field(default_factory=list)

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        return (
            f"Caller is session {self.caller} — reply with dispatch(to=caller:session); "
            "the reply is handed back to that agent"
        )

    def to_wire(self) -> dict[str, str]:
        return {"kind": "drop", "reason": f"a reply awaited by {self.caller} before a restart"}

    async def deliver(self, message: OutboundMessage) -> Delivery:
        self.texts.append(message.text)
        return Delivery(delivered_to=f"session {self.caller} (agent-to-agent reply)")

    @property
    def reply(self) -> str:
        return "\n\n".join(t for t in self.texts if t.strip())


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

    @property
    def config(self) -> GatewayConfig:
        return self.manager.config

    async def start(self) -> tuple[Accepted, Turn, CaptureSink]:
        """Wake the target with the message and agent-to-agent context (the primary run)."""
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
            meta={STEP: "primary", HOPS: str(self.hops)},
            chain=self.cause.chain,
            depth=self.cause.depth,
        )
        accepted, turn = await self.manager.wake_turn(self.target, wake)
        return accepted, turn, capture

    async def follow_up(self, turn: Turn, capture: CaptureSink) -> None:
        """After the primary run: the reply-back ping-pong, then the announce step."""
        try:
            result = await settle(turn, None)
        except TurnError as exc:
            log.info(
                "sessions_send %s → %s: the primary run did not run: %s",
                self.requester,
                self.target,
                exc,
            )
            return
        if result is not None and not result.ok:
            return
        first = capture.reply
        latest = await self._ping_pong(first) if first and not is_skip(first, REPLY_SKIP) else first
        await self._announce(first, latest)

    async def _ping_pong(self, first: str) -> str:
        rounds = self.config.session.agent_to_agent.max_ping_pong_turns
        speaker, other = self.requester, self.target
        incoming = latest = first
        for index in range(rounds):
            hops = self.hops + index + 1
            if hops > hop_cap(self.config):
                break
            reply = await self._step(
                speaker,
                other,
                (
                    f"[agent-to-agent reply · round {index + 2} of {rounds + 1}]\n"
                    f"Session {other} replied:\n\n{incoming}\n\n"
                    "Answer with dispatch(to=caller:session) to continue the exchange, or "
                    f"reply exactly {REPLY_SKIP} to end it."
                ),
                step="reply",
                hops=hops,
                depth=self.cause.depth + index + 1,
            )
            if reply is None or not reply or is_skip(reply, REPLY_SKIP):
                break
            latest = incoming = reply
            speaker, other = other, speaker
        return latest

    async def _announce(self, first: str, latest: str) -> None:
        sink = self.manager.user_sink(self.target)
        if sink is None:
            return  # the target has no channel user to tell
        reply = await self._step(
            self.target,
            self.requester,
            (
                "[agent-to-agent announce step]\n"
                f"Your exchange with session {self.requester} is over.\n"
                f"Original request: {self.message}\n"
                f"Round-1 reply: {first or '(none)'}\n"
                f"Latest reply: {latest or '(none)'}\n\n"
                "If your channel user should hear about it, reply with the message to post in "
                f"your chat. Reply exactly {ANNOUNCE_SKIP} to stay silent."
            ),
            step="announce",
            hops=hop_cap(self.config),
            depth=self.cause.depth + 1,
        )
        if not reply or is_skip(reply, ANNOUNCE_SKIP):
            return
        await sink.deliver(OutboundMessage(text=reply, meta={"a2a_from": str(self.requester)}))

    async def _step(
        self, key: SessionKey, caller: SessionKey, body: str, *, step: str, hops: int, depth: int
    ) -> str | None:
        """Run one turn in ``key`` as ``caller`` and return its reply (None: no answer)."""
        capture = CaptureSink(caller=caller)
        wake = Wake(
            source=WakeSource.SESSION,
            body=body,
            caller=SessionCaller(session_key=caller),
            sink=capture,
            meta={STEP: step, HOPS: str(hops)},
            chain=self.cause.chain,
            depth=depth,
        )
        fault("mid_announce")
        try:
            _accepted, turn = await self.manager.wake_turn(key, wake)
            result = await settle(turn, STEP_TIMEOUT)
        except (TimeoutError, TurnError, ExchangeRefusedError) as exc:
            log.info("agent-to-agent %s step in %s ended without a reply: %s", step, key, exc)
            return None
        if result is not None and not result.ok:
            return None
        return capture.reply

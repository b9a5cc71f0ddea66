"""A thread: the live runner of one session key.

It owns the key's current :class:`Session`, renders each wake as the prompt
seed 000 describes (a YAML header, then the body), applies the busy policy
configured for the wake's source, and reports its state for
``check_session`` and ``health``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import tzinfo
from typing import Any

from threads.faults import fault
from threads.keys import SessionKey
from threads.messages import Message
from threads.session import Session, SessionState
from threads.sinks import Sink
from threads.turns import Policy, Turn
from threads.wake import Accepted, Wake, WakeSource, prompt_message, render_prompt, wake_to_wire

ThreadState = SessionState


class Thread:
    """One session key's runner: one turn at a time, every wake durable when accepted."""

    def __init__(
        self,
        key: SessionKey,
        session: Session,
        *,
        agent: str,
        tz: tzinfo,
        policies: Mapping[str, str],
        on_turn: Callable[[Thread, Wake, Turn], None] | None = None,
        created: bool = False,
        default_sink: Sink | None = None,
    ) -> None:
        self.key = key
        self.session = session
        self.agent = agent
        self.tz = tz
        self.created = created
        self.default_sink = default_sink
        self._policies = policies
        self._on_turn = on_turn
        self._accepting = 0
        self.last_activity = time.monotonic()
        self.last_wall = time.time()

    def policy_for(self, wake: Wake) -> Policy:
        """The busy policy configured for the wake's source (``queue`` when none is)."""
        return Policy(self._policies.get(wake.source.value, "queue"))

    async def wake(self, wake: Wake, *, policy: Policy | None = None) -> tuple[Accepted, Turn]:
        """Accept one wake: durable in the session before this returns.

        The prompt is the wake rendered with its YAML header; a wake steered
        into a running turn is delivered with ``injected: true`` in its header.
        """
        policy = policy or self.policy_for(wake)
        session = self.session
        prompt = render_prompt(wake, thread=self.key, session_id=session.id, tz=self.tz)

        def injected() -> Message:
            return prompt_message(
                wake,
                render_prompt(
                    wake, thread=self.key, session_id=session.id, tz=self.tz, injected=True
                ),
            )

        # A heartbeat is the gateway's, not anyone's activity: it does not touch the clocks.
        activity = wake.source is not WakeSource.HEARTBEAT
        self._accepting += 1
        if activity:
            self.touch()
        try:
            turn = await session.send(
                prompt_message(wake, prompt),
                policy=policy,
                payload=wake,
                wake=wake_to_wire(wake),
                injected=injected,
            )
        finally:
            self._accepting -= 1
        fault("after_accept")
        if activity:
            self.touch()
        if self._on_turn is not None:
            self._on_turn(self, wake, turn)
        accepted = Accepted(
            key=self.key, session_id=session.id, run_id=turn.run_id, created=self.created
        )
        self.created = False
        return accepted, turn

    def touch(self) -> None:
        self.last_activity = time.monotonic()
        self.last_wall = time.time()

    @property
    def state(self) -> ThreadState:
        """``running`` (a run executes), ``pending`` (input waits) or ``idle``."""
        return self.session.state

    @property
    def evictable(self) -> bool:
        """Idle, with no wake on its way in: closing it now loses nothing."""
        return self._accepting == 0 and self.session.state == "idle"

    def snapshot(self) -> dict[str, Any]:
        """The thread's live state, as ``check_session`` and ``health`` report it.

        A thread held by an approval boundary is ``pending`` and lists the
        requests waiting for a decision under ``awaiting_approval``.
        """
        run = self.session.running
        out: dict[str, Any] = {
            "session_key": str(self.key),
            "session_id": self.session.id,
            "agent": self.agent,
            "state": self.state,
            "pending": self.session.pending_count(),
            "last_activity": self.last_wall,
            "idle_seconds": round(time.monotonic() - self.last_activity, 3),
            "iterations": 0,
            "current_tool": "",
            "elapsed_sec": 0.0,
        }
        if self.session.approvals.awaiting:
            out["awaiting_approval"] = [
                {"id": r.id, "tool": r.tool, "since": r.created.isoformat()}
                for r in self.session.approvals.pending()
            ]
        if run is not None:
            out["iterations"] = run.steps
            out["current_tool"] = run.current_tool
            out["elapsed_sec"] = round(run.elapsed, 3)
            out["run_id"] = run.run_id
        return out

"""Named fault points: the moments a crash test kills the gateway on purpose.

A fault point is one ``fault("name")`` call placed where a crash would hurt
most; :data:`POINTS` lists them and what has happened when each is reached.
The environment arms one: ``GATEWAY_FAULT=name`` kills the process the first
time it reaches that point, ``GATEWAY_FAULT=name:N`` the N-th time. The kill is
a SIGKILL of the process itself — no ``finally``, no flush, no close — which is
what a power cut, the OOM killer or ``kill -9`` leave behind. The crash matrix
(``tests/e2e/test_crash_matrix.py``) and ``bench/faults.py`` run ``gateway run``
armed at each point and check what survives (docs/reliability.md).

Unarmed — the variable unset, as in every real deployment — ``fault`` returns
at once: the variable is read once, when this module is first imported, and an
armed point costs one comparison of names.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from config.loading import ENV_FAULT

POINTS: dict[str, str] = {
    "after_accept": "an input is durable (its receipt or prompt is written); the channel "
    "has not been told it was taken",
    "after_prompt_write": "a turn's prompt is written and its run is about to call the model",
    "mid_tool_batch": "one tool of a step's batch has finished; the others have not",
    "after_delivery_before_record": "a reply or a dispatch send was handed to its channel; "
    "nothing durable says it was delivered",
    "after_turn_end": "a turn's end is durable",
    "mid_child_hand_off": "a child's turn has ended; its parent has not been woken with the answer",
    "mid_announce": "an agent-to-agent exchange is between its steps: a ping-pong reply or "
    "the announce step is due and not yet accepted",
}
"""Every fault point, and the state of things when a crash hits it."""


@dataclass(slots=True)
class Armed:
    """The one point this process kills itself at, on its ``hit``-th pass."""

    point: str
    hit: int = 1
    passes: int = 0


def parse(spec: str) -> Armed | None:
    """The point ``spec`` (``name`` or ``name:N``) arms; None for ""; ``ValueError`` naming the fault."""
    spec = spec.strip()
    if not spec:
        return None
    point, colon, count = spec.partition(":")
    if point not in POINTS:
        raise ValueError(
            f"{ENV_FAULT}={spec!r} names no fault point; the points are: {', '.join(POINTS)}"
        )
    if not colon:
        return Armed(point)
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV_FAULT}={spec!r}: after ':' comes the hit to crash on, 1 or more")
    return Armed(point, int(count))


# The environment is the process's own: read once, so an unarmed point costs nothing.
try:
    _ARMED = parse(os.environ.get(ENV_FAULT, ""))
    _PROBLEM = ""
except ValueError as exc:
    _ARMED, _PROBLEM = None, str(exc)


def fault(point: str) -> None:
    """Kill this process here if ``GATEWAY_FAULT`` arms ``point`` and this is the hit it names."""
    armed = _ARMED
    if armed is None or armed.point != point:
        return
    armed.passes += 1
    if armed.passes < armed.hit:
        return
    os.write(2, f"fault point {point} reached (hit {armed.passes}): killing the process\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)


def armed() -> str:
    """The armed point as ``GATEWAY_FAULT`` gave it, or "" when none is; for a warning at start."""
    return f"{_ARMED.point}:{_ARMED.hit}" if _ARMED is not None else ""


def problem() -> str:
    """Why ``GATEWAY_FAULT`` could not be read (start-up refuses to run with it), or ""."""
    return _PROBLEM

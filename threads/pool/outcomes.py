"""How a delegation ended, in pool-receipt terms: from a live run, or from a child's record.

A child's run ends ``done`` (it answered), ``failed`` (an error), ``canceled``
(a stop, an interrupt, a cancel, a restart) or ``capped`` (its step cap, or a
time limit the gateway enforced). The status comes from the runtime outcome,
never from the model's text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from threads.inbox import CRASHED
from threads.messages import Usage
from threads.store.entries import (
    POOL_CANCELED,
    POOL_CAPPED,
    POOL_DONE,
    POOL_FAILED,
    Entry,
    MessageEntry,
    TurnEntry,
)
from threads.turns import RunResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a child's run ended: the status, a phrase for people, the answer and its cost."""

    status: str
    words: str
    answer: str
    stop: str = ""
    usage: Usage = field(default_factory=Usage)
    runtime: float = 0.0


def outcome_of(
    result: RunResult | None, *, answer: str, runtime: float, capped: str = "", canceled: str = ""
) -> Outcome:
    """The outcome of a child's run; ``capped`` / ``canceled`` name what the pool did to it."""
    if result is None:
        return Outcome(
            status=POOL_CANCELED,
            words=f"canceled ({canceled})" if canceled else "canceled before it answered",
            answer=answer,
            runtime=runtime,
        )
    if canceled:
        status, words = POOL_CANCELED, f"canceled ({canceled})"
    elif capped:
        status, words = POOL_CAPPED, capped
    elif result.stop_reason == "max_steps":
        status, words = POOL_CAPPED, f"stopped at its step cap after {result.steps} steps"
    elif result.stop_reason in ("canceled", "stopped"):
        status, words = POOL_CANCELED, f"canceled ({result.error or 'stopped'})"
    elif result.error or result.stop_reason == "error":
        status, words = POOL_FAILED, f"failed: {result.error or 'the run ended with an error'}"
    else:
        status, words = POOL_DONE, "completed successfully"
    return Outcome(
        status=status,
        words=words,
        answer=answer or result.text,
        stop=result.stop_reason,
        usage=result.usage,
        runtime=runtime,
    )


def answering_turn(entries: Sequence[Entry]) -> TurnEntry | None:
    """The turn that answers a child's delegation: its first one not cut and not parked.

    A run a crash cut short is recorded canceled and resumed, a run that parked
    is resumed once decided; the resume answers in its place. Later turns (the
    announce step) are not the answer.
    """
    turns = [e for e in entries if isinstance(e, TurnEntry)]
    for turn in turns:
        if turn.err != CRASHED and turn.stop_reason != "parked":
            return turn
    return turns[-1] if turns else None


def recorded(entries: Sequence[Entry], *, restarted: str) -> Outcome:
    """A child's outcome as its transcript recorded it (``restarted`` words a cut run)."""
    prompt = next((e for e in entries if isinstance(e, MessageEntry) and e.run_id), None)
    if prompt is None:
        return Outcome(status=POOL_FAILED, words="failed: the sub-agent never started", answer="")
    turn = answering_turn(entries)
    if turn is None:
        return Outcome(status=POOL_CANCELED, words=f"canceled ({restarted})", answer="")
    result = RunResult(
        stop_reason=turn.stop_reason, usage=turn.usage, steps=turn.steps, error=turn.err
    )
    runtime = (turn.created - prompt.created).total_seconds()
    return outcome_of(result, answer=last_answer(entries, turn), runtime=runtime)


def last_answer(entries: Sequence[Entry], turn: TurnEntry) -> str:
    """The child's answer before ``turn``: its last text, or its last dispatch body."""
    for entry in reversed(entries[: list(entries).index(turn)]):
        if not isinstance(entry, MessageEntry) or entry.message.role != "assistant":
            continue
        for call in entry.message.tool_calls():
            if call.name == "dispatch":
                bodies = [
                    str(s.get("body", ""))
                    for s in call.args.get("sends", [])
                    if isinstance(s, dict)
                ]
                if any(bodies):
                    return "\n\n".join(b for b in bodies if b)
        if entry.message.text().strip():
            return entry.message.text()
    return ""

"""``delegate_task``: a synchronous delegation, the child's answer as the tool's result.

Beside ``sessions_spawn`` (asynchronous: it returns at once and the result is
announced later), ``delegate_task`` runs a sub-agent in a session of its own
and waits for it inside the calling turn: the child's answer comes back as
this call's result, the way hermes-agent's ``delegate_task`` answers. The
child starts knowing only the task and the context it is given. It goes
through the pool like every delegation — a slot of its parent's, receipts on
the parent (the call's id on them), a ``lineage`` header naming the parent
session, receipt, run and call — and its turns run on the turn slot the
waiting parent holds. If the calling turn is interrupted, the child is
canceled with it.

A child that parks at a call waiting for a person's approval ends the wait:
the call returns at once saying so (a decision may take a day, and the
parent's turn must not hold on to it), and from then the delegation is
followed like an asynchronous one — its settlement reaches the parent as a
``child_completed`` wake (:mod:`threads.pool.reports`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from threads.agent.tools import ToolContext, ToolOutput, json_text, tool
from threads.errors import ExchangeRefusedError
from threads.keys import SessionKey
from threads.messages import Usage
from threads.pool.outcomes import Outcome
from threads.pool.pool import Delegation, Pool, parked_on
from threads.pool.reports import Report, follow_reported
from threads.session_sink import CaptureSink
from threads.sessions.delegation import child_usage, create_child, mark_settled
from threads.sessions.errors import SessionToolError
from threads.sessions.keys import subagent_key
from threads.sessions.tools import spawn_agent
from threads.store.entries import POOL_DONE
from threads.turns import Turn
from threads.wake import Cause, SessionCaller, Wake, WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

DELEGATE = "delegate_task"
DEFAULT_TIMEOUT = 300
MAX_TIMEOUT = 3600
CANCELED_WITH_CALL = "its delegating call was canceled with the turn that made it"


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="what the sub-agent should do")
    context: str = Field(
        default="",
        description="what the sub-agent needs to know: it does not see this conversation",
    )
    label: str = Field(default="", description="a short name for logs")
    agentId: str | None = Field(
        default=None, description="run it under another agent id (see agents_list)"
    )
    model: str | None = Field(
        default=None, description="the sub-agent's model, provider/model (default: its agent's)"
    )
    timeoutSeconds: float = Field(
        default=DEFAULT_TIMEOUT,
        gt=0,
        le=MAX_TIMEOUT,
        description="give up (and stop the sub-agent) after N seconds",
    )


DESCRIPTION = (
    "Hand a task to a sub-agent and wait for its answer, which comes back as this call's "
    "result: {status, result, childSessionKey, sessionId, tokens}. The sub-agent works in a "
    "session of its own and sees only task and context. Use it when you need the answer to "
    "go on; use sessions_spawn to start work that reports back later. If the sub-agent must "
    "wait for a person's approval, the call returns at once saying so, and the answer comes "
    "later as a message."
)


@tool(DELEGATE, DESCRIPTION, DelegateArgs, timeout=MAX_TIMEOUT + 30)
async def delegate_task_tool(args: DelegateArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    try:
        agent = spawn_agent(manager, ctx, args.agentId, args.model)
    except SessionToolError as exc:
        return ToolOutput(content=str(exc), is_error=True)
    child = subagent_key(agent)
    cause = Cause.after(ctx.run.payload)
    refusal = manager.chains.refusal(child, cause)
    if refusal is not None:
        return ToolOutput(content=str(refusal), is_error=True)
    pool = manager.pool
    delegation = await pool.accept(
        ctx.run.session,
        SessionKey(ctx.key),
        child,
        prompt=args.task,
        call=ctx.call_id,
        run=ctx.run.run_id,
    )
    session_id = await create_child(
        manager,
        delegation,
        agent=agent,
        label=args.label,
        model=args.model,
        cleanup="keep",
        cause=cause,
    )
    capture = CaptureSink(caller=delegation.parent_key)
    wake = Wake(
        source=WakeSource.SESSION,
        body=_task_body(delegation, args),
        caller=SessionCaller(session_key=delegation.parent_key),
        sink=capture,
        agent=agent,
        meta={"delegation": delegation.receipt},
        chain=cause.chain,
        depth=cause.depth,
    )

    async def start() -> Turn:
        _accepted, turn = await manager.wake_turn(child, wake)
        return turn

    started = time.monotonic()
    try:
        with pool.lending(child):
            await pool.take(delegation)
            turn = await pool.start(delegation, start)
            result, capped = await pool.follow(delegation, turn, args.timeoutSeconds)
    except asyncio.CancelledError:
        manager.spawn(_abandon(pool, delegation), name=f"delegation {child} canceled")
        raise
    except ExchangeRefusedError as exc:
        return ToolOutput(content=str(exc), is_error=True)
    if result is not None and parked_on(result):
        report = Report(delegation=delegation, chain=cause.chain, depth=cause.depth)
        await pool.park(delegation, result, lambda t: follow_reported(pool, report, t))
        return _waiting(delegation, result.parked[0].tool, session_id)
    outcome = pool.outcome(
        delegation,
        result,
        answer=capture.reply,
        runtime=time.monotonic() - started,
        capped=capped,
    )
    await pool.settle(delegation, outcome, await child_usage(manager, child, session_id))
    await mark_settled(manager, child, outcome.status)
    return _answer(outcome, delegation, session_id)


def _task_body(delegation: Delegation, args: DelegateArgs) -> str:
    lines = [
        "[delegated task]",
        f"Session {delegation.parent_key} handed you this task with delegate_task and waits "
        "for your answer. Do it, then finish with your answer as a final text reply; it is "
        "returned to that session as the result of its call. You cannot delegate further.",
    ]
    if args.context.strip():
        lines += ["", "Context:", args.context.strip()]
    lines += ["", "Task:", args.task]
    return "\n".join(lines)


def _answer(outcome: Outcome, delegation: Delegation, session_id: str) -> ToolOutput:
    answer: dict[str, Any] = {
        "status": outcome.status,
        "result": outcome.answer.strip(),
        "childSessionKey": str(delegation.child),
        "sessionId": session_id,
        "tokens": outcome.usage.total_tokens,
    }
    if outcome.status != POOL_DONE:
        answer["error"] = f"the sub-agent {outcome.words}"
    return ToolOutput(content=json_text(answer), is_error=outcome.status != POOL_DONE)


def _waiting(delegation: Delegation, tool_name: str, session_id: str) -> ToolOutput:
    """The call's result when its child parked: it waits for a person; the answer comes later."""
    return ToolOutput(
        content=(
            f"The sub-agent {delegation.child} (session {session_id}) waits for a person's "
            f"approval of {tool_name}. Its answer will come to this session as a message "
            "when that is decided; go on without it."
        )
    )


async def _abandon(pool: Pool, delegation: Delegation) -> None:
    """The delegating call was canceled: cancel the child and settle ``canceled``."""
    delegation.canceled = delegation.canceled or CANCELED_WITH_CALL
    turn = delegation.turn
    if turn is None:
        if pool.find(str(delegation.child)) is delegation:
            outcome = pool.outcome(delegation, None, answer="", runtime=0)
            await pool.settle(delegation, outcome, Usage())
        return
    await pool.cancel(str(delegation.child), CANCELED_WITH_CALL)
    result, _ = await pool.follow(delegation, turn)
    outcome = pool.outcome(delegation, result, answer="", runtime=0)
    manager = pool.manager
    session_id = await manager.store.resolve(delegation.child) or ""
    await pool.settle(delegation, outcome, await child_usage(manager, delegation.child, session_id))
    await mark_settled(manager, delegation.child, outcome.status)

"""The session tools (seed 002): list, read, message and spawn sessions.

``sessions_list`` and ``sessions_history`` read; ``sessions_send`` wakes
another session and may wait for its reply; ``sessions_spawn`` starts a
sub-agent and returns at once. A bad call is a tool error that names what was
wrong and how to call again, as ``dispatch``'s are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from threads.agent.loop import AgentLoop
from threads.agent.tools import Tool, ToolContext, ToolOutput, json_text, tool
from threads.errors import ExchangeRefusedError, InvalidKeyError, TurnError
from threads.keys import SessionKey
from threads.sessions import access
from threads.sessions.agent_to_agent import REPLY_SKIP, Exchange, hop_cap, hops_of, settle
from threads.sessions.catalog import HISTORY_DEFAULT, HISTORY_MAX, LIST_DEFAULT, Catalog, transcript
from threads.sessions.delegation import Delegations
from threads.sessions.errors import ArchivedSessionError, RefusedError, SessionToolError
from threads.sessions.keys import Kind, is_subagent, subagent_key
from threads.wake import Cause

if TYPE_CHECKING:
    from threads.manager import ThreadManager

SEND_DEFAULT_TIMEOUT = 30
SEND_MAX_TIMEOUT = 600


def _error(exc: Exception) -> ToolOutput:
    return ToolOutput(content=str(exc), is_error=True)


# -- sessions_list


class ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kinds: list[Kind] | None = Field(
        default=None, description="only these kinds: main, group, cron, hook, node, other"
    )
    limit: int = Field(default=LIST_DEFAULT, ge=1, description="most rows to return (max 500)")
    activeMinutes: int | None = Field(
        default=None, ge=1, description="only sessions updated in the last N minutes"
    )
    messageLimit: int = Field(
        default=0, ge=0, description="include each session's last N messages (0: none; max 50)"
    )


@tool(
    "sessions_list",
    "List sessions, newest first: key, kind, channel, sessionId, updatedAt (ms), model, tokens, "
    "sendPolicy, lastChannel/lastTo, transcriptPath, and with messageLimit > 0 their last "
    "messages (tool results left out: read those with sessions_history).",
    ListArgs,
)
async def sessions_list_tool(args: ListArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    config = manager.config
    rows = await Catalog.of(manager).rows(
        kinds=args.kinds,
        limit=args.limit,
        active_minutes=args.activeMinutes,
        message_limit=args.messageLimit,
        visible=lambda view: access.visible(ctx.key, ctx.agent, config, view.key, view.meta),
    )
    return ToolOutput(content=json_text({"count": len(rows), "sessions": rows}))


# -- sessions_history


class HistoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sessionKey: str = Field(
        description="a session key (main, telegram:123, agent:<id>:discord:group:<id>, …) or a "
        "sessionId (s_…) from sessions_list"
    )
    limit: int = Field(default=HISTORY_DEFAULT, ge=1, description="most messages (max 500)")
    includeTools: bool = Field(default=False, description="include tool-result messages")


@tool(
    "sessions_history",
    "Read one session's transcript: its last messages in the stored form (role, content parts, "
    "id, created). Tool results are left out unless includeTools is true.",
    HistoryArgs,
)
async def sessions_history_tool(args: HistoryArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    catalog = Catalog.of(manager)
    try:
        resolved = await catalog.resolve(args.sessionKey)
        view = await catalog.view(resolved.key, resolved.session_id)
        access.require_visible(ctx.key, ctx.agent, manager.config, resolved.key, view.meta)
    except (SessionToolError, InvalidKeyError) as exc:
        return _error(exc)
    messages = transcript(
        view.path, limit=min(args.limit, HISTORY_MAX), include_tools=args.includeTools
    )
    return ToolOutput(
        content=json_text(
            {"sessionKey": str(resolved.key), "sessionId": view.id, "messages": messages}
        )
    )


# -- sessions_send


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sessionKey: str = Field(description="the target: a session key or a sessionId (s_…)")
    message: str = Field(min_length=1, description="what to tell the other session's agent")
    timeoutSeconds: float = Field(
        default=SEND_DEFAULT_TIMEOUT,
        ge=0,
        le=SEND_MAX_TIMEOUT,
        description="wait up to N seconds for the reply; 0 sends without waiting",
    )


SEND_DESCRIPTION = f"""Send a message to another session's agent.
timeoutSeconds 0: returns {{runId, status: "accepted"}} at once. N > 0: waits up to N s and returns {{runId, status: "ok", reply}}, {{runId, status: "timeout", error}} (the run goes on: read it later with sessions_history) or {{runId, status: "error", error}}.
Afterwards the two agents may reply to each other a few rounds (reply exactly {REPLY_SKIP} to stop), then the target may announce the exchange to its own chat."""


@tool("sessions_send", SEND_DESCRIPTION, SendArgs, timeout=SEND_MAX_TIMEOUT + 30)
async def sessions_send_tool(args: SendArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    config = manager.config
    catalog = Catalog.of(manager)
    requester = SessionKey(ctx.key)
    try:
        resolved = await catalog.resolve(args.sessionKey)
        view = await catalog.view(resolved.key, resolved.session_id)
        access.require_visible(ctx.key, ctx.agent, config, resolved.key, view.meta)
        if resolved.key == requester:
            raise RefusedError(
                f"{resolved.key} is this session: a session cannot send to itself; "
                "name another session (sessions_list shows them)"
            )
        if catalog.archived(view):
            raise ArchivedSessionError(resolved.key)
        hops = hops_of(ctx.run.payload) + 1
        if hops > hop_cap(config):
            raise RefusedError(
                f"agent-to-agent limit reached: this turn is already {hops - 1} agent-to-agent "
                f"turns deep and a chain may run {hop_cap(config)} (1 + "
                "session.agent_to_agent.max_ping_pong_turns); answer your caller instead"
            )
    except (SessionToolError, InvalidKeyError) as exc:
        return _error(exc)
    exchange = Exchange(
        manager=manager,
        requester=requester,
        requester_agent=ctx.agent,
        target=resolved.key,
        message=args.message,
        hops=hops,
        cause=Cause.after(ctx.run.payload),
    )
    try:
        accepted, turn, capture = await exchange.start()
    except ExchangeRefusedError as exc:
        return _error(exc)
    answer: dict[str, Any] = {"runId": accepted.run_id, "sessionKey": str(resolved.key)}
    if args.timeoutSeconds == 0:
        return ToolOutput(content=json_text({**answer, "status": "accepted"}))
    try:
        result = await settle(turn, args.timeoutSeconds)
    except TimeoutError:
        answer.update(
            status="timeout",
            error=f"no reply from {resolved.key} within {args.timeoutSeconds:g} s; its run goes "
            f"on — read the answer later with sessions_history(sessionKey={str(resolved.key)!r})",
        )
    except TurnError as exc:
        answer.update(status="error", error=f"the run did not happen: {exc}")
    else:
        if result is not None and not result.ok:
            answer.update(
                status="error", error=result.error or f"the run ended with {result.stop_reason}"
            )
        else:
            answer.update(status="ok", reply=capture.reply)
    return ToolOutput(content=json_text(answer))


# -- sessions_spawn


class SpawnArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, description="what the sub-agent should do")
    label: str = Field(default="", description="a short name for logs and the announce")
    agentId: str | None = Field(
        default=None, description="spawn under another agent id (see agents_list)"
    )
    model: str | None = Field(
        default=None, description="the sub-agent's model, provider/model (default: its agent's)"
    )
    runTimeoutSeconds: float = Field(
        default=0, ge=0, description="abort the sub-agent's run after N seconds (0: no limit)"
    )
    cleanup: Literal["delete", "keep"] = Field(
        default="keep", description="delete the sub-agent's session after the announce, or keep it"
    )


@tool(
    "sessions_spawn",
    "Start a sub-agent on a task in its own session (agent:<agentId>:subagent:<uuid>) and return "
    'at once with {status: "accepted", runId, childSessionKey}. When it finishes, its result is '
    "announced to your chat (Status / Result / Notes and a stats line).",
    SpawnArgs,
)
async def sessions_spawn_tool(args: SpawnArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    try:
        agent = spawn_agent(manager, ctx, args.agentId, args.model)
    except SessionToolError as exc:
        return _error(exc)
    child = subagent_key(agent)
    try:
        spawned = await Delegations(manager).spawn(
            ctx.run.session,
            SessionKey(ctx.key),
            child=child,
            agent=agent,
            task=args.task,
            label=args.label,
            model=args.model,
            run_timeout=float(args.runTimeoutSeconds),
            cleanup=args.cleanup,
            cause=Cause.after(ctx.run.payload),
            run_id=ctx.run.run_id,
        )
    except ExchangeRefusedError as exc:
        return _error(exc)
    answer: dict[str, Any] = {
        "status": "accepted",
        "runId": spawned.run_id,
        "childSessionKey": str(child),
        "sessionId": spawned.session_id,
    }
    if spawned.queued:
        answer["queued"] = (
            f"{spawned.queued} of your sub-agents wait for a slot (at most "
            f"{manager.pool.size} run at once); this one starts when one finishes"
        )
    return ToolOutput(content=json_text(answer))


def spawn_agent(
    manager: ThreadManager, ctx: ToolContext, agent_id: str | None, model: str | None
) -> str:
    """The agent a child of this turn runs under; :class:`RefusedError` says why it may not.

    A sub-agent spawns nothing; ``agent_id`` must be in the requester's
    allow list; ``model`` must name a configured provider.
    """
    if is_subagent(ctx.key):
        raise RefusedError(
            "a sub-agent cannot start sub-agents; do the work yourself, or answer your "
            "requester and let it delegate"
        )
    agent = agent_id or ctx.agent
    allowed = allowed_agents(manager, ctx.agent)
    if agent not in allowed:
        raise RefusedError(
            f"agentId {agent!r} is not allowed for agent {ctx.agent!r}; allowed: "
            f"{sorted(allowed)} (agents.<name>.subagents.allow_agents; ['*'] allows any)"
        )
    if model is not None:
        loop = manager.agent
        models = loop.models if isinstance(loop, AgentLoop) else None
        if models is None or not models.valid(model):
            known = models.providers() if models is not None else []
            raise RefusedError(
                f"model {model!r} is not valid: use provider/model with a configured "
                f"provider (configured: {known or ['echo']}) or 'echo', or leave it out"
            )
    return agent


def allowed_agents(manager: ThreadManager, agent: str) -> set[str]:
    """The agent ids ``agent`` may spawn under: itself, and its allow list (``*``: any)."""
    config = manager.config
    allow = config.agents[agent].subagents.allow_agents if agent in config.agents else []
    if "*" in allow:
        return set(config.agents)
    return {agent, *(a for a in allow if a in config.agents)}


# -- agents_list


class AgentsListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@tool(
    "agents_list",
    "List the configured agents and which of them you may spawn with sessions_spawn(agentId).",
    AgentsListArgs,
)
async def agents_list_tool(args: AgentsListArgs, ctx: ToolContext) -> ToolOutput:
    manager: ThreadManager = ctx.services
    config = manager.config
    allowed = allowed_agents(manager, ctx.agent)
    agents = [
        {
            "agentId": name,
            "model": config.model_for(name),
            "sandboxed": agent.sandboxed,
            "spawnAllowed": name in allowed and not is_subagent(ctx.key),
        }
        for name, agent in sorted(config.agents.items())
    ]
    return ToolOutput(content=json_text({"requester": ctx.agent, "agents": agents}))


SESSION_TOOLS: list[Tool[Any]] = [
    sessions_list_tool,
    sessions_history_tool,
    sessions_send_tool,
    sessions_spawn_tool,
    agents_list_tool,
]

"""Thread operations as tools: ``check_session`` and ``health`` (seed 000)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from threads.agent.tools import ToolContext, json_text, tool
from threads.errors import InvalidKeyError
from threads.keys import SessionKey


class CheckSessionArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_key: str = Field(description="the session key, e.g. cli:threads:find-news")


class HealthArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


@tool(
    "check_session",
    "Inspect a session by key: whether it exists on disk (message count, size, last modified, "
    "agent) and, when its thread is loaded, its state (running/pending/idle), iterations, "
    "current tool and elapsed seconds. Use it to follow up on a child you dispatched.",
    CheckSessionArgs,
)
async def check_session_tool(args: CheckSessionArgs, ctx: ToolContext) -> str:
    try:
        key = SessionKey(args.session_key)
    except InvalidKeyError as exc:
        return json_text({"error": str(exc)})
    return json_text(await ctx.services.check_session(key))


@tool(
    "health",
    "List every active thread (session key, agent, state, pending count, last activity, current "
    "tool) with provider, session, cron, channel and memory figures.",
    HealthArgs,
)
async def health_tool(args: HealthArgs, ctx: ToolContext) -> str:
    return json_text(await ctx.services.health())

"""The agent's cron tools: a one-time self check-in, and listing and removing its check-ins.

A check-in is what ``gateway cron set-at --direct-wake`` sets: at the given
time it wakes the calling session itself, with ``source: cron`` and a drop
sink whose header tells the agent how to reach its user.
Agents get these tools when their config says ``cron_tools = true``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cron import CronError, CronService, JobView
from threads.agent.tools import Tool, ToolContext, ToolOutput, json_text, tool

GROUP = "cron"


class CheckInArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: str = Field(
        description="when to wake this session: RFC 3339 with an offset, e.g. 2026-12-01T09:00:00+01:00"
    )
    task: str = Field(
        description="what to do then (the wake's body), e.g. 'Check if the user responded'"
    )
    job_id: str | None = Field(
        default=None, description="an id to reuse or replace; default: a new self-checkin-… id"
    )


class ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RemoveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str = Field(description="the id of one of this session's check-ins")


def _row(view: JobView) -> dict[str, Any]:
    return {
        "job_id": view.job.id,
        "at": view.job.at.isoformat() if view.job.at else None,
        "task": view.job.task,
        "enabled": view.job.enabled,
        "next_fire": view.next_fire.isoformat() if view.next_fire else None,
        "last_status": view.last_status,
    }


def cron_tools(service: CronService) -> list[Tool[Any]]:
    """The three cron tools, bound to the gateway's cron service."""

    @tool(
        "schedule_check_in",
        "Wake this session once, later: at `at` (RFC 3339 with offset) you receive `task` as a "
        "cron wake (its caller cannot be answered; use dispatch(to=user) or dispatch({})).",
        CheckInArgs,
    )
    async def schedule_check_in(args: CheckInArgs, ctx: ToolContext) -> ToolOutput:
        try:
            view = await service.set_check_in(ctx.key, args.at, args.task, job_id=args.job_id)
        except (CronError, ValueError) as exc:
            return ToolOutput(content=str(exc), is_error=True)
        return ToolOutput(content=json_text({"scheduled": _row(view)}))

    @tool("list_check_ins", "List this session's scheduled check-ins.", ListArgs)
    async def list_check_ins(args: ListArgs, ctx: ToolContext) -> str:
        return json_text({"check_ins": [_row(v) for v in await service.list_check_ins(ctx.key)]})

    @tool("remove_check_in", "Cancel one of this session's check-ins by job id.", RemoveArgs)
    async def remove_check_in(args: RemoveArgs, ctx: ToolContext) -> ToolOutput:
        try:
            await service.remove_check_in(ctx.key, args.job_id)
        except CronError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        return ToolOutput(content=json_text({"removed": args.job_id}))

    tools: list[Tool[Any]] = [schedule_check_in, list_check_ins, remove_check_in]
    return [t.in_group(GROUP) for t in tools]

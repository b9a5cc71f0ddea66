"""``read_file``, ``write_file`` and ``list_files``: an agent's files, in its own workspace.

Each agent has one directory (see :mod:`threads.tools.workspace` for what is
refused); reads, writes and listings are capped by ``[tools.files]``. The
disk work runs in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from config.tools import FilesToolConfig
from threads.agent.tools import Tool, ToolContext, ToolOutput, tool
from threads.tools.workspace import Workspace, WorkspaceError

GROUP = "files"

WorkspaceOf = Callable[[str], Path]
"""The workspace directory of an agent, by agent name."""


class ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="the file, relative to your workspace, e.g. 'notes/todo.md'")
    offset: int = Field(default=0, ge=0, description="the byte to start at (to read on)")


class WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="the file, relative to your workspace; missing directories are made"
    )
    content: str = Field(description="the text to write")
    append: bool = Field(default=False, description="add to the end instead of replacing the file")


class ListArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(default=".", description="the directory, relative to your workspace")
    recursive: bool = Field(default=False, description="list everything below it too")


def files_tools(settings: FilesToolConfig, workspace_of: WorkspaceOf) -> list[Tool[Any]]:
    """The three files tools, each agent confined to ``workspace_of(agent)``."""

    def workspace(ctx: ToolContext) -> Workspace:
        return Workspace(workspace_of(ctx.agent))

    @tool(
        "read_file",
        "Read a text file from your workspace (your own directory; paths are relative to it). "
        f"At most {settings.max_read_bytes} bytes come back per call; read on with offset.",
        ReadArgs,
        opt_in=True,
    )
    async def read_file(args: ReadArgs, ctx: ToolContext) -> ToolOutput:
        limit = settings.max_read_bytes
        try:
            data, size = await asyncio.to_thread(
                workspace(ctx).read, args.path, offset=args.offset, limit=limit
            )
        except WorkspaceError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        if b"\0" in data[:8192]:
            return ToolOutput(
                content=f"{args.path!r} is a binary file ({size} bytes); read_file shows text only",
                is_error=True,
            )
        text = data.decode("utf-8", errors="replace")
        end = args.offset + len(data)
        if args.offset or end < size:
            text += f"\n[bytes {args.offset}-{end} of {size}"
            text += f"; call read_file with offset={end} for more]" if end < size else "]"
        return ToolOutput(content=text)

    @tool(
        "write_file",
        "Write a text file in your workspace (replacing it, or appending with append=true). "
        f"At most {settings.max_write_bytes} bytes per call.",
        WriteArgs,
        opt_in=True,
    )
    async def write_file(args: WriteArgs, ctx: ToolContext) -> ToolOutput:
        data = args.content.encode()
        if len(data) > settings.max_write_bytes:
            return ToolOutput(
                content=f"the content is {len(data)} bytes, over the cap of "
                f"{settings.max_write_bytes} ([tools.files] max_write_bytes); write it in parts "
                "with append=true",
                is_error=True,
            )
        try:
            size = await asyncio.to_thread(
                workspace(ctx).write, args.path, data, append=args.append
            )
        except WorkspaceError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        verb = "appended" if args.append else "wrote"
        return ToolOutput(content=f"{verb} {len(data)} bytes to {args.path} (now {size} bytes)")

    @tool(
        "list_files",
        "List a directory of your workspace: names, with a trailing / for directories and the "
        "size of files.",
        ListArgs,
        opt_in=True,
    )
    async def list_files(args: ListArgs, ctx: ToolContext) -> ToolOutput:
        try:
            entries, more = await asyncio.to_thread(
                workspace(ctx).list,
                args.path,
                recursive=args.recursive,
                limit=settings.max_list_entries,
            )
        except WorkspaceError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        lines = []
        for entry in entries:
            if entry.kind == "dir":
                lines.append(f"{entry.path}/")
            elif entry.kind == "file":
                lines.append(f"{entry.path}  {entry.size} bytes")
            else:
                lines.append(f"{entry.path}  ({entry.kind})")
        if more:
            lines.append(f"[more entries not shown: the listing stops at {len(entries)}]")
        return ToolOutput(content="\n".join(lines) or "(empty)")

    tools: list[Tool[Any]] = [read_file, write_file, list_files]
    return [t.in_group(GROUP) for t in tools]

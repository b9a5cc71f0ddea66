"""``run_command``: a program run in the agent's workspace, bounded in time and output.

The model gives an argv list, run without a shell (``[tools.run_command]
shell = true`` takes one command line for ``/bin/sh -c`` instead). The
program runs in the agent's workspace, in a session of its own, with stdin
closed and an environment of only the variables ``env_passthrough`` names
(the gateway's own environment holds its API keys), plus ``HOME`` set to
the workspace. Output (stdout and stderr together) past ``max_output_bytes``
is read and dropped, so the program never blocks on a full pipe; at the
timeout its whole process group is killed and the model gets what it printed.

The tool requires approval unless ``requires_approval = false``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from config.tools import RunCommandConfig
from threads.agent.tools import Tool, ToolContext, ToolOutput
from threads.tools.files import WorkspaceOf
from threads.tools.workspace import Workspace

GROUP = "shell"
NAME = "run_command"


class ArgvArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(
        min_length=1,
        description="the program and its arguments, e.g. ['ls', '-la'] (no shell: no pipes or globs)",
    )


class ShellArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, description="a command line for /bin/sh -c")


def command_env(settings: RunCommandConfig, home: str, env: Mapping[str, str]) -> dict[str, str]:
    """The environment a command gets: the passed-through variables that are set, and HOME."""
    out = {name: env[name] for name in settings.env_passthrough if name in env}
    out["HOME"] = home
    return out


async def run(
    argv: list[str], *, cwd: str, env: dict[str, str], settings: RunCommandConfig
) -> ToolOutput:
    """Run ``argv``; the output the model gets: exit status and what it printed."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except FileNotFoundError:
        return ToolOutput(content=f"no such program: {argv[0]!r}", is_error=True)
    except PermissionError:
        return ToolOutput(content=f"{argv[0]!r} may not be run (permission denied)", is_error=True)
    assert process.stdout is not None
    cap = settings.max_output_bytes
    kept = bytearray()
    total = 0
    timed_out = False

    async def read() -> None:
        nonlocal total
        assert process.stdout is not None
        while chunk := await process.stdout.read(65_536):
            total += len(chunk)
            if len(kept) < cap:
                kept.extend(chunk[: cap - len(kept)])

    try:
        async with asyncio.timeout(settings.timeout_seconds):
            await read()
            await process.wait()
    except TimeoutError:
        timed_out = True
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    text = kept.decode("utf-8", errors="replace")
    if total > cap:
        text += f"\n[output cut: {total} bytes printed, the first {cap} shown]"
    if timed_out:
        status = (
            f"killed after {settings.timeout_seconds:g} s ([tools.run_command] timeout_seconds)"
        )
        return ToolOutput(content=f"{status}\n{text}".rstrip(), is_error=True)
    code = process.returncode
    status = (
        f"exit code {code}"
        if code is not None and code >= 0
        else f"killed by signal {-(code or 0)}"
    )
    return ToolOutput(content=f"{status}\n{text}".rstrip(), is_error=code != 0)


def run_command_tool(settings: RunCommandConfig, workspace_of: WorkspaceOf) -> Tool[Any]:
    """The ``run_command`` tool with the operator's limits, in each agent's workspace."""

    async def start(argv: list[str], ctx: ToolContext) -> ToolOutput:
        workspace = Workspace(workspace_of(ctx.agent))
        await asyncio.to_thread(workspace.ensure)
        root = str(workspace.root)
        return await run(
            argv, cwd=root, env=command_env(settings, root, os.environ), settings=settings
        )

    description = (
        "Run a program in your workspace and get its exit code and output "
        f"(stdout and stderr; at most {settings.max_output_bytes} bytes; killed after "
        f"{settings.timeout_seconds:g} s)."
    )
    common: dict[str, Any] = {
        "timeout": settings.timeout_seconds + 5,
        "opt_in": True,
        "requires_approval": settings.requires_approval,
        "group": GROUP,
    }
    if settings.shell:

        async def shell(args: ShellArgs, ctx: ToolContext) -> ToolOutput:
            return await start(["/bin/sh", "-c", args.command], ctx)

        return Tool(
            name=NAME,
            description=description + " The command line runs in /bin/sh.",
            args=ShellArgs,
            handler=shell,
            **common,
        )

    async def direct(args: ArgvArgs, ctx: ToolContext) -> ToolOutput:
        return await start(args.argv, ctx)

    return Tool(
        name=NAME,
        description=description + " No shell: give the program and its arguments as a list.",
        args=ArgvArgs,
        handler=direct,
        **common,
    )

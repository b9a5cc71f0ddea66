"""run_command: off unless chosen, parked until approved, bounded in time and output."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from tests.threads.tools.conftest import Caller, tools_config
from threads.agent.tools import ToolRegistry
from threads.tools import builtin_tools


def caller(tmp_path: Path, *, auto_approve: bool = True, **run_command: Any) -> Caller:
    agent = {"auto_approve": ["run_command"]} if auto_approve else {}
    return Caller(
        tools_config(tmp_path, agents={"default": agent}, tools={"run_command": run_command})
    )


def test_no_built_in_tool_is_offered_to_an_agent_that_does_not_name_it(tmp_path: Path) -> None:
    registry = ToolRegistry(builtin_tools(tools_config(tmp_path)))
    assert registry.select(["*"])[0] == {}
    chosen, _ = registry.select(["*", "read_file", "run_command"])
    assert set(chosen) == {"read_file", "run_command"}


async def test_a_command_requiring_approval_parks_instead_of_running(tmp_path: Path) -> None:
    output = await caller(tmp_path, auto_approve=False)("run_command", argv=["touch", "ran"])
    assert output.parked is not None
    assert output.parked.tool == "run_command"
    assert output.parked.reason == "tool requires approval"
    assert not (tmp_path / "data" / "workspaces" / "default" / "ran").exists()


async def test_with_requires_approval_off_any_agent_that_has_it_runs_it(tmp_path: Path) -> None:
    call = caller(tmp_path, auto_approve=False, requires_approval=False)
    output = await call("run_command", argv=["echo", "hi"])
    assert output.content == "exit code 0\nhi"


async def test_a_command_runs_in_the_workspace_without_a_shell(tmp_path: Path) -> None:
    call = caller(tmp_path)
    output = await call("run_command", argv=["sh", "-c", "pwd; echo $HOME"])
    workspace = tmp_path / "data" / "workspaces" / "default"
    assert output.content == f"exit code 0\n{workspace}\n{workspace}"
    literal = await call("run_command", argv=["echo", "$HOME", "*", "a;b"])
    assert literal.content == "exit code 0\n$HOME * a;b"


async def test_the_gateways_secrets_do_not_reach_the_command(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    output = await caller(tmp_path)("run_command", argv=["env"])
    assert "sk-secret" not in output.content
    assert "PATH=" in output.content


async def test_a_failing_command_reports_its_exit_code(tmp_path: Path) -> None:
    output = await caller(tmp_path)("run_command", argv=["sh", "-c", "echo oops >&2; exit 3"])
    assert output.is_error
    assert output.content == "exit code 3\noops"


async def test_a_missing_program_is_named(tmp_path: Path) -> None:
    output = await caller(tmp_path)("run_command", argv=["no-such-program-xyz"])
    assert output.content == "no such program: 'no-such-program-xyz'"


async def test_output_past_the_cap_is_cut_and_says_how_much_there_was(tmp_path: Path) -> None:
    call = caller(tmp_path, max_output_bytes=100)
    output = await call("run_command", argv=[sys.executable, "-c", "print('z' * 100_000)"])
    assert output.content == "exit code 0\n" + "z" * 100 + (
        "\n[output cut: 100001 bytes printed, the first 100 shown]"
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    call = caller(tmp_path, timeout_seconds=0.5)
    script = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True); time.sleep(60)"
    )
    output = await call("run_command", argv=[sys.executable, "-c", script])
    assert output.is_error
    status, pid = output.content.split("\n")
    assert status == "killed after 0.5 s ([tools.run_command] timeout_seconds)"
    async with asyncio.timeout(10):
        while alive(int(pid)):
            await asyncio.sleep(0.01)


async def test_a_shell_may_be_allowed_in_config(tmp_path: Path) -> None:
    call = caller(tmp_path, shell=True)
    output = await call("run_command", command="echo a | tr a b")
    assert output.content == "exit code 0\nb"
    wrong = await call("run_command", argv=["ls"])
    assert wrong.is_error
    assert "command" in wrong.content

"""Every ``gateway`` command in docs/cron.md runs, in order, against a running gateway.

``sh`` blocks hold commands that must succeed; ``console`` blocks hold
``$ command`` lines followed by exactly what the command prints (on stdout and
stderr) when it fails, as the page shows. The gateway runs in-process on the
wall clock with the offline echo model, so ``run-now`` of the page's
``--deliver-to cli`` job must put its text in the terminal.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from gateway.app import Gateway
from tests.gateway.conftest import Replies, make_config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cron.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Example:
    argv: list[str]
    expected: list[str] | None  # None: must succeed; else the exact lines printed


def examples(text: str) -> list[Example]:
    found: list[Example] = []
    for language, body in FENCE.findall(text):
        if language == "sh":
            joined = body.replace("\\\n", " ")
            for line in joined.splitlines():
                argv = shlex.split(line, comments=True)
                if argv and argv[0] == "gateway":
                    found.append(Example(argv[1:], None))
        elif language == "console":
            current: Example | None = None
            for line in body.splitlines():
                if line.startswith("$ "):
                    argv = shlex.split(line[2:])
                    assert argv[0] == "gateway", line
                    current = Example(argv[1:], [])
                    found.append(current)
                elif current is not None and current.expected is not None:
                    current.expected.append(line)
    return found


async def run(config: Path, argv: list[str]) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *argv, "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


def test_the_page_has_examples_of_every_kind() -> None:
    found = examples(DOC.read_text())
    commands = {" ".join(e.argv[:2]) for e in found}
    assert {"cron set-cron", "cron set-at", "cron set-every", "cron run-now", "cron explain"} <= (
        commands
    )
    assert any(e.expected for e in found)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a process per example: seconds each on a loaded machine
async def test_every_command_in_docs_cron_md_works_as_shown(tmp_path: Path) -> None:
    config = make_config(
        tmp_path,
        agents={"default": {}, "researcher": {"instructions": "You research."}},
        channels={"web": {"enabled": False}},
        cron={"poll_seconds": 0.1},
    )
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{config.data_dir}"\n'
        '[agents.default]\n[agents.researcher]\ninstructions = "You research."\n'
        "[channels.web]\nenabled = false\n[http]\nport = 0\n"
    )
    async with Gateway(config) as gw:
        assert gw.cli is not None
        replies = Replies()
        gw.cli.listeners.append(replies)
        await gw.cli.submit("hello")  # the terminal's session exists: a direct wake needs one
        await replies.wait(1)
        for example in examples(DOC.read_text()):
            code, out, err = await run(path, example.argv)
            if example.expected is None:
                assert code == 0, (example.argv, out, err)
            else:
                assert code != 0, example.argv
                assert (out + err).splitlines() == example.expected, example.argv
        texts = await replies.wait(2)
        assert texts[1].endswith("Greet the user")
        code, out, err = await run(path, ["cron", "runs", "hello", "--json"])
        assert code == 0, err
        (record,) = orjson.loads(out)["runs"]
        assert (record["status"], record["via"], record["delivery"]) == (
            "fired",
            "run-now",
            "delivered",
        )

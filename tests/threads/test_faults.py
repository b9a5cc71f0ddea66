"""Fault points: armed by GATEWAY_FAULT, they SIGKILL the process at the named point and hit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from config.loading import ENV_FAULT, ENV_PREFIX
from threads.faults import POINTS, Armed, parse

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("threads", "channels", "cron", "gateway")
CALL = re.compile(r"""\bfault\(["']([a-z_]+)["']\)""")


def run_with(spec: str | None, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    if spec is not None:
        env[ENV_FAULT] = spec
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=60, check=False,
    )  # fmt: skip


TWICE = (
    "from threads.faults import fault\n"
    "fault('after_accept'); print('one', flush=True)\n"
    "fault('after_accept'); print('two', flush=True)\n"
)


def test_an_armed_point_kills_the_process_on_the_hit_it_names() -> None:
    result = run_with("after_accept:2", TWICE)
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == "one\n"
    assert result.stderr == "fault point after_accept reached (hit 2): killing the process\n"


def test_a_bare_name_kills_at_the_first_hit() -> None:
    result = run_with("after_accept", TWICE)
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == ""


@pytest.mark.parametrize("spec", [None, "after_turn_end"])
def test_unarmed_or_armed_elsewhere_a_point_does_nothing(spec: str | None) -> None:
    result = run_with(spec, TWICE)
    assert (result.returncode, result.stdout) == (0, "one\ntwo\n")


def test_the_spec_names_a_point_and_optionally_a_hit() -> None:
    assert parse("") is None
    assert parse(" mid_announce ") == Armed("mid_announce")
    assert parse("after_turn_end:3") == Armed("after_turn_end", 3)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("after_acept", "'after_acept' names no fault point; the points are: after_accept, "),
        ("after_accept:0", "after ':' comes the hit to crash on, 1 or more"),
        ("after_accept:x", "after ':' comes the hit to crash on, 1 or more"),
    ],
)
def test_a_spec_that_is_not_a_point_is_refused_naming_the_points(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        parse(spec)


def test_gateway_run_refuses_to_start_with_an_unknown_fault_point_in_one_line(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[ENV_FAULT] = "after_everything"
    env["GATEWAY_DATA_DIR"] = str(tmp_path / "data")
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "run"], capture_output=True, text=True, cwd=tmp_path,
        env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith(
        "error: GATEWAY_FAULT='after_everything' names no fault point; the points are: "
    )
    assert result.stderr.count("\n") == 1


def test_every_point_is_placed_in_the_code_and_every_call_names_a_point() -> None:
    placed = {
        name
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path != ROOT / "threads" / "faults.py"  # its docstring shows a call
        for name in CALL.findall(path.read_text())
    }
    assert placed == set(POINTS)

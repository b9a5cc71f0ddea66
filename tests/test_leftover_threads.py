"""A run whose tests left a thread waiting for ever still ends, and says which thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LEAKING = """
import threading

def test_leaves_a_thread_waiting() -> None:
    threading.Thread(target=threading.Event().wait, name="left-waiting").start()
"""

CLEAN = """
import threading

def test_joins_its_thread() -> None:
    thread = threading.Thread(target=lambda: None, name="joined")
    thread.start()
    thread.join()
"""


def run(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    environment = os.environ | {"PYTHONPATH": str(ROOT), "TESTS_LEFTOVER_GRACE": "0.2"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, "-p", "tests.conftest", "test_probe.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,  # the hang this guards against would end here, as a failure
    )


def test_a_thread_left_waiting_ends_the_run_with_a_failure_naming_it(tmp_path: Path) -> None:
    done = run(tmp_path, LEAKING)
    assert done.returncode == 1
    assert "1 passed" in done.stdout
    assert "a test left running would keep pytest from exiting: left-waiting" in done.stderr


def test_a_run_that_leaves_nothing_running_ends_as_it_would(tmp_path: Path) -> None:
    done = run(tmp_path, CLEAN)
    assert done.returncode == 0, done.stderr
    assert "would keep pytest from exiting" not in done.stderr

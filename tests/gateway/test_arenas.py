"""One C heap for a serving process's threads: what an open frees, the next one reuses."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.arenas import ENVIRONMENT, settle_arenas

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's"
)

# Starts four threads that each allocate (as the threads that open sessions do), then
# prints how many arenas glibc's malloc_info reports.
PROBE = """
import ctypes, ctypes.util, sys, threading
from gateway.arenas import settle_arenas

settled = settle_arenas() if sys.argv[1] == "settled" else False
held = []

def allocate():
    for _ in range(64):
        held.append(bytearray(4096))

threads = [threading.Thread(target=allocate) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
out = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
with open(sys.argv[2]) as info:
    print(settled, info.read().count("<heap nr="))
"""


def arenas(tmp_path: Path, mode: str, **env: str) -> tuple[str, int]:
    """(whether the probe settled the arenas, how many it ended with)."""
    environment = {k: v for k, v in os.environ.items() if k != ENVIRONMENT} | env
    root = Path(__file__).resolve().parents[2]
    environment["PYTHONPATH"] = str(root)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(tmp_path / f"{mode}.xml")],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    settled, count = done.stdout.split()
    return settled, int(count)


def test_threads_started_after_the_setting_allocate_from_the_main_arena(tmp_path: Path) -> None:
    assert arenas(tmp_path, "settled") == ("True", 1)
    settled, count = arenas(tmp_path, "plain")
    assert settled == "False"
    assert count > 1  # each thread took an arena of its own


def test_an_operators_own_setting_is_left_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENVIRONMENT, "4")
    assert settle_arenas() is False
    assert arenas(tmp_path, "settled", **{ENVIRONMENT: "4"})[0] == "False"

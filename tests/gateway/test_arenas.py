"""One C heap for a serving process's threads: what an open frees, the next one reuses."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import gateway.arenas as heap_module
from gateway.arenas import ENVIRONMENT, TRIM_AFTER_ENTRIES, FreedMemory, settle_arenas

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


def probe(source: str, *args: str, **env: str) -> list[str]:
    """What a child running ``source`` with ``args`` printed, split into words (the
    operator's ``MALLOC_ARENA_MAX`` left out of its environment unless given)."""
    environment = {k: v for k, v in os.environ.items() if k != ENVIRONMENT} | env
    environment["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", source, *args],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
        timeout=60,
    )
    return done.stdout.split()


def arenas(tmp_path: Path, mode: str, **env: str) -> tuple[str, int]:
    """(whether the probe settled the arenas, how many it ended with)."""
    settled, count = probe(PROBE, mode, str(tmp_path / f"{mode}.xml"), **env)
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


# Leaves the heap holding free pages between live chunks (as a long open does once its
# file and decode are freed), then prints the resident kilobytes before and after
# FreedMemory.released for the entries given.
TRIM_PROBE = """
import ctypes, sys
from gateway.arenas import FreedMemory

ctypes.CDLL(None).mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: every chunk here in the heap
chunks = [bytearray(b"x" * (256 << 10)) for _ in range(128)]
del chunks[::2]  # every other one freed: free pages with live chunks on both sides

def resident_kb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4

before = resident_kb()
FreedMemory().released(int(sys.argv[1]))
print(before, resident_kb())
"""


def resident_around_release(entries: int) -> tuple[int, int]:
    before, after = probe(TRIM_PROBE, str(entries))
    return int(before), int(after)


def test_a_long_open_hands_the_pages_its_heap_holds_free_back() -> None:
    before, after = resident_around_release(TRIM_AFTER_ENTRIES)
    assert before - after > 8 * 1024  # most of the 16 MB freed


def test_a_short_open_leaves_the_heap_as_it_is() -> None:
    before, after = resident_around_release(TRIM_AFTER_ENTRIES - 1)
    assert abs(before - after) < 1024


def test_what_an_eviction_frees_is_handed_back_again_after_the_next_full_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap_module, "_trim", lambda: trims.append(0))  # glibc's, at its edge
    freed = FreedMemory()
    freed.released(TRIM_AFTER_ENTRIES - 1)
    freed(phase="stop", info={"generation": 2})
    assert trims == []  # too little read or let go: nothing pending
    freed.released(TRIM_AFTER_ENTRIES)
    assert trims == [0]
    freed(phase="start", info={"generation": 2})
    freed(phase="stop", info={"generation": 1})
    assert trims == [0]
    freed(phase="stop", info={"generation": 2})
    assert trims == [0, 0]
    freed(phase="stop", info={"generation": 2})
    assert trims == [0, 0]  # once per release


async def test_a_watching_release_leaves_the_collector_when_stopped() -> None:
    freed = FreedMemory()
    freed.watch()
    assert freed in gc.callbacks
    await freed.stop()
    assert freed not in gc.callbacks

"""Shared test helpers: service availability and the CI rule for skipping; threads left behind."""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
import threading
import time
from concurrent.futures import thread as pool_threads

import pytest

LEFTOVER_GRACE = 10.0
"""Seconds the threads the tests left running get to end before the run ends without them."""

_STATUS = pytest.StashKey[int]()


def service_up(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a service is absent, except in CI, where its absence is a failure."""
    if service_up(host, port):
        return
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not reachable at {host}:{port}, and CI requires it")
    pytest.skip(f"{name} is not running at {host}:{port} (set CI=1 to make this a failure)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the run even when a test left a thread running that would keep the process alive.

    A test that fails before it closes what it opened (a gateway, an
    aiosqlite connection) can leave a thread that is not a daemon waiting for
    ever, and the interpreter waits for it at exit: the run would hang after
    its summary. Such threads get :data:`LEFTOVER_GRACE` seconds (the
    environment's ``TESTS_LEFTOVER_GRACE``, if set), then their
    stacks are printed and the process exits with the run's status (1 when
    the tests passed: something was left open).
    """
    grace = float(os.environ.get("TESTS_LEFTOVER_GRACE", LEFTOVER_GRACE))
    deadline = time.monotonic() + grace
    left = leftover_threads()
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [thread for thread in left if thread.is_alive()]
    if not left:
        return
    names = ", ".join(thread.name for thread in left)
    sys.stdout.flush()
    sys.stderr.write(
        f"\n{len(left)} thread(s) a test left running would keep pytest from exiting: {names}\n"
    )
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(config.stash.get(_STATUS, 1) or 1)


def leftover_threads() -> list[threading.Thread]:
    """Running threads the interpreter would wait for at exit, bar thread pools' workers
    (an exit hook of the pools ends those)."""
    workers = getattr(pool_threads, "_threads_queues", {})
    return [
        thread
        for thread in threading.enumerate()
        if thread is not threading.main_thread()
        and not thread.daemon
        and thread.is_alive()
        and thread not in workers
    ]

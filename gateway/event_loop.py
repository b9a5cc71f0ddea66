"""The event loop a gateway process runs on (decision perf-48).

uvloop's, where it is installed (a dependency on Linux and macOS): the same
asyncio API over libuv, its transports, handles and scheduling in C, which
take a sixth or more off a turn's event-loop CPU. asyncio's own otherwise,
or when the operator says so with ``GATEWAY_EVENT_LOOP=asyncio`` (the
escape hatch uvicorn's ``--loop asyncio`` is). The tests run on the loop
this module picks, so ``GATEWAY_EVENT_LOOP=asyncio make test`` tests the other.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from gateway.errors import StartupError

ENVIRONMENT = "GATEWAY_EVENT_LOOP"
LOOPS = ("uvloop", "asyncio")

T = TypeVar("T")


def loop_name() -> str:
    """The loop this process runs on: the operator's choice, else uvloop where it is installed."""
    chosen = os.environ.get(ENVIRONMENT, "").strip().lower()
    if chosen and chosen not in LOOPS:
        raise StartupError(
            f"{ENVIRONMENT}={os.environ[ENVIRONMENT]!r} is not one of {', '.join(LOOPS)}"
        )
    if chosen == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if chosen == "uvloop":
            raise StartupError(f"{ENVIRONMENT}=uvloop, but uvloop is not installed") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes a new event loop of :func:`loop_name`'s kind."""
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on the loop :func:`loop_name` picks."""
    try:
        factory = loop_factory()
    except StartupError:
        main.close()  # never awaited: no warning about it beside the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)

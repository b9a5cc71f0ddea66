"""One owner for many lifetimes: cleanups run in reverse, every failure collected."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Cleanup = Callable[[], Awaitable[object]]


class Lifetimes:
    """A stack of named async cleanups.

    ``aclose`` runs them newest first; a failing cleanup does not stop the
    others, and every failure is raised together as an ``ExceptionGroup``.
    """

    def __init__(self) -> None:
        self._stack: list[tuple[str, Cleanup]] = []

    def push(self, name: str, cleanup: Cleanup) -> None:
        self._stack.append((name, cleanup))

    async def aclose(self) -> None:
        failures: list[Exception] = []
        while self._stack:
            name, cleanup = self._stack.pop()
            try:
                await cleanup()
            except Exception as exc:
                log.exception("stopping %s failed", name)
                exc.add_note(f"while stopping {name}")
                failures.append(exc)
        if failures:
            raise ExceptionGroup("the gateway did not stop cleanly", failures)

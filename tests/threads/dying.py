"""A store that dies: the runtime over it stops at a chosen point, as a SIGKILL leaves it.

:class:`DyingStore` wraps a real store. Once it dies — :meth:`DyingStore.kill`,
or right after an append a predicate picks has landed — no call through it
returns: what reached the real store stays, nothing after it happens, and
the runtime above is frozen mid-step as a killed process would be. The test
then closes the real store (a killed process's locks are gone), opens a new
one over the same place and starts a new runtime on it: the restart. At the
end :meth:`DyingStore.reap` ends the frozen calls with an error so the dead
runtime's tasks finish.

The ``crash_backend`` fixture (``tests/threads/conftest.py``) gives the three
stores a process can die on: jsonl, sqlite and redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from threads.errors import StoreError
from threads.store.entries import Entry

Predicate = Callable[[str, Sequence[Entry]], bool]

# The store methods a wrapper at the transport boundary passes through.
STORE_CALLS = (
    "create",
    "append",
    "load",
    "list",
    "delete",
    "resolve",
    "point",
    "unpoint",
    "keys",
    "flush",
    "release",
    "acquire",
    "yield_lease",
)


class DyingStore:
    """A real store until it dies; then every call through it hangs until reaped."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dead = False
        self.died = asyncio.Event()
        self.calls: list[tuple[str, str]] = []  # (method, session) in call order
        self._reaped = asyncio.Event()
        self._dies_after: Predicate | None = None

    def die_after(self, predicate: Predicate) -> None:
        """Die right after an append ``predicate(session, entries)`` picks has landed."""
        self._dies_after = predicate

    def kill(self) -> None:
        self.dead = True
        self.died.set()

    def reap(self) -> None:
        """End the frozen calls with an error, so the dead runtime's tasks can finish."""
        self._reaped.set()

    async def wait_dead(self) -> None:
        async with asyncio.timeout(20):
            await self.died.wait()

    async def _hang(self) -> NoReturn:
        await self._reaped.wait()
        raise StoreError("the process was killed")

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            await self._hang()
        session = str(args[0]) if args else ""
        self.calls.append((name, session))
        result = await getattr(self.inner, name)(*args, **kwargs)
        picks = self._dies_after
        if name == "append" and picks is not None and picks(args[0], args[1]):
            self.kill()
        if self.dead:
            await self._hang()
        return result

    async def close(self) -> None:
        """A dead process closes nothing; the test closes the real store itself."""


def _forward(name: str) -> Callable[..., Any]:
    async def method(self: DyingStore, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, *args, **kwargs)

    method.__name__ = name
    return method


for _name in STORE_CALLS:
    setattr(DyingStore, _name, _forward(_name))

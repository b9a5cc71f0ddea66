"""A store that counts: the calls reaching a real store, and how many were in flight at once.

:class:`CountingStore` wraps a real store at the transport boundary. A batch
of wakes that shares the store's rounds has its calls in flight together (a
file store's writer takes every call made in one loop iteration as one
round): ``most["append"]`` is the largest number of appends that were waiting
for the store at the same moment, ``most["prompt"]`` the same for appends
that start a turn (a wake's prompt). ``hold(session)`` keeps one session's
appends from reaching the store until :meth:`free` — a slow disk for one
file.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.threads.dying import STORE_CALLS
from threads.store.entries import MessageEntry


class CountingStore:
    """A real store, its calls counted; one session's appends can be held back."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.prompted: list[str] = []  # sessions, in the order their prompts landed
        self._held: set[str] = set()
        self._released = asyncio.Event()

    def hold(self, session: str) -> None:
        self._held.add(session)
        self._released.clear()

    def free(self) -> None:
        self._held.clear()
        self._released.set()

    def reset(self) -> None:
        self.calls.clear()
        self.most.clear()
        self.prompted.clear()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        counted = [name]
        if name == "append" and any(isinstance(e, MessageEntry) and e.run_id for e in args[1]):
            counted.append("prompt")
        for what in counted:
            self.calls[what] += 1
            self.in_flight[what] += 1
            self.most[what] = max(self.most[what], self.in_flight[what])
        try:
            if name == "append" and args[0] in self._held:
                await self._released.wait()
            result = await getattr(self.inner, name)(*args, **kwargs)
        finally:
            for what in counted:
                self.in_flight[what] -= 1
        if "prompt" in counted:
            self.prompted.append(str(args[0]))
        return result

    async def close(self) -> None:
        await self.inner.close()


def _forward(name: str) -> Callable[..., Any]:
    async def method(self: CountingStore, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, *args, **kwargs)

    method.__name__ = name
    return method


for _name in STORE_CALLS:
    setattr(CountingStore, _name, _forward(_name))

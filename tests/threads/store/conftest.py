"""Backends under test: every conformance test runs once per backend.

Redis tests share one server, and other suites (another checkout, another
engineer's run) may use it at the same time: each test writes under a key
prefix of its own and deletes only that prefix's keys afterwards. Nothing
here flushes a database.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.process import delete_keys
from tests.conftest import require_service
from threads.store.base import Pause, SessionStore, StoreOptions
from threads.store.jsonl import JsonlStore
from threads.store.memory import MemoryStore
from threads.store.redis import RedisStore
from threads.store.sqlite import SqliteStore

REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 1
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"
BACKENDS = ["memory", "jsonl", "sqlite", "redis"]


def redis_prefix() -> str:
    """A key prefix no other test, run or checkout uses."""
    return f"test-{secrets.token_hex(8)}:"


async def delete_prefix(prefix: str) -> None:
    """Delete the keys under ``prefix``, and only those."""
    await delete_keys(REDIS_URL, prefix)


@dataclass
class Backend:
    """One backend's location; ``open`` makes another Storage value over it."""

    name: str
    location: str  # a directory, a file or a Redis key prefix
    shared: bool  # whether a second Storage value sees the same sessions
    stores: list[SessionStore] = field(default_factory=list)

    def open(
        self,
        options: StoreOptions | None = None,
        *,
        pause: Pause | None = None,
        poll_interval: float | None = None,
    ) -> Any:
        """Another store over this backend's location.

        ``pause`` is the backend's test seam; ``poll_interval`` how often its
        watchers look for another store's writes (memory has no other store).
        """
        polling = {} if poll_interval is None else {"poll_interval": poll_interval}
        store: SessionStore
        if self.name == "memory":
            store = MemoryStore(options, pause=pause)
        elif self.name == "jsonl":
            store = JsonlStore(self.location, options, pause=pause, **polling)
        elif self.name == "sqlite":
            store = SqliteStore(self.location, options, pause=pause, **polling)
        else:
            store = RedisStore(REDIS_URL, options, prefix=self.location, pause=pause, **polling)
        self.stores.append(store)
        return store

    async def close_all(self) -> None:
        for store in reversed(self.stores):
            await store.close()
        self.stores.clear()


def backend_location(name: str, tmp_path: Path) -> str:
    if name == "memory":
        return ""
    if name == "jsonl":
        return str(tmp_path / "sessions")
    if name == "sqlite":
        return str(tmp_path / "gateway.db")
    return redis_prefix()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name: str = request.param
    if name == "redis":
        require_service("redis", REDIS_HOST, REDIS_PORT)
    found = Backend(name=name, location=backend_location(name, tmp_path), shared=name != "memory")
    try:
        yield found
    finally:
        try:
            await found.close_all()
        finally:
            if name == "redis":
                await delete_prefix(found.location)


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


@pytest.fixture
def open_backend(backend: Backend) -> Callable[..., Any]:
    return backend.open

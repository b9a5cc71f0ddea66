"""Backends under test: every conformance test runs once per backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_service
from threads.store import open_store
from threads.store.base import SessionStore, StoreOptions

REDIS_HOST, REDIS_PORT, REDIS_DB = "127.0.0.1", 6379, 1
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"
BACKENDS = ["memory", "jsonl", "sqlite", "redis"]


@dataclass
class Backend:
    """One backend's location; ``open`` makes another Storage value over it."""

    name: str
    url: str
    shared: bool  # whether a second Storage value sees the same sessions
    stores: list[SessionStore] = field(default_factory=list)

    def open(self, options: StoreOptions | None = None) -> Any:
        store = open_store(self.url, options)
        self.stores.append(store)
        return store

    async def close_all(self) -> None:
        for store in reversed(self.stores):
            await store.close()
        self.stores.clear()


async def flush_redis() -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    try:
        await client.flushdb()
    finally:
        await client.aclose()


def backend_url(name: str, tmp_path: Path) -> str:
    if name == "memory":
        return "memory://"
    if name == "jsonl":
        return f"jsonl://{tmp_path / 'sessions'}"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'gateway.db'}"
    return REDIS_URL


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name: str = request.param
    if name == "redis":
        require_service("redis", REDIS_HOST, REDIS_PORT)
        await flush_redis()
    found = Backend(name=name, url=backend_url(name, tmp_path), shared=name != "memory")
    try:
        yield found
    finally:
        await found.close_all()


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.open()


@pytest.fixture
def open_backend(backend: Backend) -> Callable[..., Any]:
    return backend.open

"""State-store backends under test: every conformance test runs once per backend.

Redis tests write under a key prefix of their own and delete only that
prefix's keys afterwards (other suites share the server). A Redis test skips
only when Redis is absent and ``CI`` is unset.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.threads.store.conftest import REDIS_HOST, REDIS_PORT, REDIS_URL, delete_prefix
from threads.state import StateStore, open_state_store
from threads.state.base import Clock, utc_now

BACKENDS = ["memory", "sqlite", "redis"]


@dataclass
class StateBackend:
    """One backend's location; ``open`` makes another store value over it."""

    name: str
    url: str
    prefix: str = ""
    opened: list[StateStore] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Whether a second store value sees the first one's values."""
        return self.name != "memory"

    async def open(self, clock: Clock = utc_now) -> StateStore:
        store = await open_state_store(self.url, clock=clock, redis_prefix=self.prefix or None)
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in reversed(self.opened):
            await store.close()
        self.opened.clear()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateBackend]:
    name: str = request.param
    if name == "memory":
        found = StateBackend(name=name, url="memory://")
    elif name == "sqlite":
        found = StateBackend(name=name, url=f"sqlite:///{tmp_path / 'data' / 'gateway.db'}")
    else:
        require_service("redis", REDIS_HOST, REDIS_PORT)
        prefix = f"test-state-{secrets.token_hex(8)}:"
        found = StateBackend(name=name, url=REDIS_URL, prefix=prefix)
    try:
        yield found
    finally:
        await found.close_all()
        if found.prefix:
            await delete_prefix(found.prefix)


@pytest.fixture
async def state(backend: StateBackend) -> StateStore:
    return await backend.open()

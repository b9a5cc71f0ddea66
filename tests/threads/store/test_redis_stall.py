"""A Redis that stops answering fails the call, it does not hang it (no real Redis needed).

The server here accepts connections and reads what it is sent, and never
answers: a stalled server, or a link that died without a reset.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from cron.errors import StoreError
from cron.redis_store import RedisJobStore
from threads.errors import UnavailableError
from threads.state.errors import StateStoreError
from threads.state.redis import RedisStateStore
from threads.store.redis import RedisStore

HANG = 30.0  # a hang guard, never a measure


@pytest.fixture
async def stalled() -> AsyncIterator[str]:
    """The URL of a server that never answers."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):
            pass
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.close()


async def test_a_session_store_call_to_a_stalled_redis_is_unavailable(
    stalled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.store.redis.SOCKET_TIMEOUT", 0.2)
    store = RedisStore(stalled)
    try:
        with pytest.raises(UnavailableError):
            await asyncio.wait_for(store.resolve("telegram:42"), HANG)
    finally:
        await store.close()


async def test_opening_the_state_and_cron_stores_on_a_stalled_redis_fails(
    stalled: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.state.redis.SOCKET_TIMEOUT", 0.2)
    monkeypatch.setattr("cron.redis_store.SOCKET_TIMEOUT", 0.2)
    with pytest.raises(StateStoreError, match="cannot reach Redis"):
        await asyncio.wait_for(RedisStateStore.open(stalled), HANG)
    with pytest.raises(StoreError, match="cannot reach Redis"):
        await asyncio.wait_for(RedisJobStore.open(stalled), HANG)

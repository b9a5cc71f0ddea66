"""Locks name their owner (node id and boot): a later boot of the node takes its own over at once.

The shared backends (SQLite's lock row, Redis's lock key) are the ones whose
locks outlive a killed process; jsonl's ``flock`` dies with its process.
A store that is never closed here stands for a process that was killed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.threads.store.conftest import (
    REDIS_HOST,
    REDIS_PORT,
    Backend,
    backend_location,
    delete_prefix,
)
from tests.threads.store.helpers import header, msg, texts
from threads.errors import LockedError
from threads.node import NodeIdentity
from threads.store.base import StoreOptions

BOOT_1 = StoreOptions(node=NodeIdentity(node_id="n_here", boot=1))
BOOT_2 = StoreOptions(node=NodeIdentity(node_id="n_here", boot=2))
OTHER_NODE = StoreOptions(node=NodeIdentity(node_id="n_there", boot=7))


@pytest.fixture(params=["sqlite", "redis"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name: str = request.param
    if name == "redis":
        require_service("redis", REDIS_HOST, REDIS_PORT)
    found = Backend(name=name, location=backend_location(name, tmp_path), shared=True)
    try:
        yield found
    finally:
        try:
            await found.close_all()
        finally:
            if name == "redis":
                await delete_prefix(found.location)


async def test_a_lock_an_earlier_boot_of_this_node_left_is_taken_over_at_once(
    shared: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    killed = shared.open(BOOT_1)
    h = header()
    await killed.create(h)  # takes the lock, and its process never lets go
    await killed.append(h.id, [msg("before the crash")])
    restarted = shared.open(BOOT_2)
    with caplog.at_level(logging.WARNING):
        await restarted.append(h.id, [msg("after the restart")])
    assert texts((await restarted.load(h.id)).entries) == ["before the crash", "after the restart"]
    assert any(
        h.id in r.getMessage() and "took over the lock" in r.getMessage() for r in caplog.records
    )


async def test_a_lock_of_another_node_is_a_locked_error_naming_it(shared: Backend) -> None:
    there = shared.open(OTHER_NODE)
    h = header()
    await there.create(h)
    here = shared.open(BOOT_2)
    with pytest.raises(LockedError, match=f"session {h.id} is locked by .*node n_there .*boot 7"):
        await here.append(h.id, [msg("mine?")])


async def test_a_lock_of_the_same_boot_is_another_live_store_of_this_process(
    shared: Backend,
) -> None:
    first = shared.open(BOOT_2)
    h = header()
    await first.create(h)
    second = shared.open(BOOT_2)
    with pytest.raises(LockedError):
        await second.append(h.id, [msg("second writer")])


async def test_without_a_node_a_killed_writers_lock_is_not_taken_over(shared: Backend) -> None:
    killed = shared.open()
    h = header()
    await killed.create(h)
    with pytest.raises(LockedError):
        await shared.open(BOOT_2).append(h.id, [msg("too soon")])

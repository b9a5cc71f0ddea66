"""A JSONL append can be begun at once and settled by a future: no task per session write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.threads.conftest import HandAgent
from tests.threads.store.helpers import fsync_refused, header, msg, texts
from threads.errors import UnavailableError
from threads.session import Session
from threads.store.base import Queued
from threads.store.jsonl import JsonlStore


async def test_a_queued_append_lands_as_append_would_and_a_refusal_is_the_stores(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    assert isinstance(store, Queued)
    h = header()
    assert store.append_queued(h.id, [msg("too early")]) is None  # nothing recovered yet
    await store.create(h)
    landed = store.append_queued(h.id, [msg("one"), msg("two")])
    assert landed is not None
    lines = await landed
    assert lines is not None
    assert len(lines) == 2
    with fsync_refused():
        refused = store.append_queued(h.id, [msg("refused")])
        assert refused is not None
        with pytest.raises(UnavailableError):
            await refused
    await store.close()
    again = JsonlStore(tmp_path)
    assert texts((await again.load(h.id)).entries) == ["one", "two"]
    await again.close()


async def test_a_sessions_write_on_jsonl_starts_no_task(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    session = await Session.create(store, HandAgent())
    loop = asyncio.get_running_loop()
    started: list[Any] = []
    loop.set_task_factory(
        lambda loop, coro, **kw: started.append(coro) or asyncio.Task(coro, loop=loop, **kw)
    )
    try:
        await session.custom("note", {"n": 1})
    finally:
        loop.set_task_factory(None)
    assert started == []
    assert session.entry_count == 1
    await store.close()

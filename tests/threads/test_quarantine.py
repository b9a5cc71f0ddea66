"""A session that cannot be read is set aside; start-up and every other session go on."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.threads.conftest import (
    accepted_and_never_run,
    make_runtime,
    plant,
    stored,
    turn_entries,
)
from threads.errors import QuarantinedError
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message
from threads.node import NodeIdentity
from threads.store import open_store
from threads.store.base import SessionStore, StoreOptions
from threads.store.entries import Header, MessageEntry
from threads.testing.scripted import ScriptedModel

BROKEN = "telegram:1"
FINE = "telegram:2"

DAMAGE = {
    "a garbage line": b"this is not json\n",
    "a newer format": b'{"type":"hologram","v":9,"id":"e_new","parent":"","created":1}\n',
}


def _header(key: str) -> Header:
    return Header(
        id=new_session_id(), created=datetime.now(UTC), meta={"key": key, "agent": "default"}
    )


async def _damaged(store: SessionStore, key: str, damage: bytes) -> str:
    h = _header(key)
    await plant(store, h, [MessageEntry(id=new_entry_id(), message=Message.user("hello"))])
    await store.inject(h.id, damage)  # type: ignore[attr-defined]
    await store.point(key, h.id)
    return h.id


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
async def test_a_session_that_cannot_be_read_is_set_aside_and_every_other_session_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    broken = await _damaged(store, BROKEN, DAMAGE[damage])
    fine = await accepted_and_never_run(store, FINE, "still here?", chat="fine chat")
    # No recovery record: the last run died, so start-up looks at every key.
    with caplog.at_level(logging.ERROR, logger="threads.quarantine"):
        rt = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")

    (reply,) = await rt.inbox("fine chat").wait()
    assert reply.endswith("still here?")
    thread = rt.manager.thread(FINE)
    assert thread is not None
    await thread.session.wait_idle()
    assert len(turn_entries(await stored(store, fine))) == 1

    where = str(tmp_path / "sessions" / f"{broken}.jsonl")
    (logged,) = [r.getMessage() for r in caplog.records]
    assert f"session key {BROKEN}: session {broken} cannot be read" in logged
    assert f"{where}, line 3" in logged

    health = await rt.manager.health()
    (listed,) = health["sessions"]["quarantined"]
    assert (listed["session_key"], listed["session_id"]) == (BROKEN, broken)
    assert (listed["where"], listed["line"]) == (where, 3)
    checked = await rt.manager.check_session(BROKEN)
    assert checked["exists"] is True
    assert checked["quarantined"]["where"] == where

    with pytest.raises(QuarantinedError, match=f"session {broken} of {BROKEN} cannot be read"):
        await rt.manager.wake(BROKEN, rt.user_wake("anyone there?"))
    await rt.manager.close()
    await store.close()


async def test_new_points_a_quarantined_key_at_a_fresh_session_and_keeps_the_old_one(
    tmp_path: Path,
) -> None:
    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    broken = await _damaged(store, BROKEN, DAMAGE["a garbage line"])
    rt = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    assert rt.manager.quarantine.get(BROKEN) is not None

    fresh = await rt.manager.new_session(BROKEN)
    await rt.manager.wake(BROKEN, rt.user_wake("a fresh start"))
    (reply,) = await rt.inbox("user").wait()
    assert reply.endswith("a fresh start")
    assert (await rt.manager.health())["sessions"]["quarantined"] == []
    assert fresh != broken
    assert (tmp_path / "sessions" / f"{broken}.jsonl").exists()
    await rt.manager.close()
    await store.close()


async def test_a_session_met_by_a_wake_after_start_up_is_set_aside_too(tmp_path: Path) -> None:
    store = open_store(f"jsonl://{tmp_path / 'sessions'}")
    rt = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    broken = await _damaged(store, BROKEN, DAMAGE["a garbage line"])
    with pytest.raises(QuarantinedError):
        await rt.manager.wake(BROKEN, rt.user_wake("hello?"))
    record = rt.manager.quarantine.get(BROKEN)
    assert record is not None
    assert (record.session_id, record.line) == (broken, 3)
    # Set aside once: the next wake is refused without loading it again.
    with pytest.raises(QuarantinedError):
        await rt.manager.wake(BROKEN, rt.user_wake("hello again?"))
    await rt.manager.close()
    await store.close()


async def test_a_session_another_live_node_holds_is_one_line_and_the_others_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    there = open_store(
        f"sqlite:///{tmp_path / 'gateway.db'}",
        StoreOptions(node=NodeIdentity(node_id="n_there", boot=4)),
    )
    held = await accepted_and_never_run(there, BROKEN, "held elsewhere", chat="held chat")
    await there.acquire(held, object())  # type: ignore[attr-defined]
    here = open_store(
        f"sqlite:///{tmp_path / 'gateway.db'}",
        StoreOptions(node=NodeIdentity(node_id="n_here", boot=1)),
    )
    fine = await accepted_and_never_run(here, FINE, "still here?", chat="fine chat")
    recovery = tmp_path / "recovery.json"
    with caplog.at_level(logging.WARNING, logger="threads.restart"):
        rt = await make_runtime(here, ScriptedModel(), recovery_path=recovery)
    (reply,) = await rt.inbox("fine chat").wait()
    assert reply.endswith("still here?")
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        f"session key {BROKEN} not continued here: session {held} is locked by another "
        "store, node n_there (boot 4, pid " + line.rsplit("pid ", 1)[1]
    )
    assert rt.manager.thread(BROKEN) is None
    thread = rt.manager.thread(FINE)
    assert thread is not None
    await thread.session.wait_idle()
    assert len(turn_entries(await stored(here, fine))) == 1
    await rt.manager.close()
    # The next start looks at it again.
    assert orjson.loads(recovery.read_bytes())["pending"] == [BROKEN]
    await here.close()
    await there.close()

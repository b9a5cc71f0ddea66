"""The thread manager: lazy threads through the key index, the turn cap, eviction, close, restart, check_session, health."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from tests.threads.conftest import (
    Blocker,
    HandAgent,
    gateway_config,
    make_runtime,
    prompts,
    receipts,
    stored,
    system_wake,
    texts,
    turn_entries,
)
from threads.errors import ManagerClosedError, NoTurnRunningError, ThreadNotLoadedError
from threads.llm.base import ModelRequest, ModelResponse
from threads.messages import Message
from threads.session import Session
from threads.store import open_store
from threads.store.base import Loaded, SessionStore
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel, call, dispatch

KEY = "telegram:42"


@pytest.fixture
async def memory_store() -> AsyncIterator[SessionStore]:
    store = open_store("memory://")
    yield store
    await store.close()


async def _until(predicate: object, what: str) -> None:
    """Poll ``predicate()`` until it holds, with a deadline (for state that has no event)."""
    assert callable(predicate)
    try:
        async with asyncio.timeout(10):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


# -- wake: lazy threads and the key index


async def test_a_first_wake_creates_the_session_and_points_the_key_at_it(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    assert rt.manager.thread(KEY) is None
    assert await memory_store.resolve(KEY) is None
    first = await rt.manager.wake(KEY, system_wake("hello"))
    assert first.created
    assert await memory_store.resolve(KEY) == first.session_id
    assert first.run_id == f"{first.session_id}-t1"
    thread = rt.manager.thread(KEY)
    assert thread is not None
    meta = dict(thread.session.header.meta)
    assert meta.pop("weft.public_id").startswith("p_")  # every session gets a public id
    assert meta == {"key": KEY, "agent": "default"}
    second = await rt.manager.wake(KEY, system_wake("again"))
    assert not second.created
    assert second.session_id == first.session_id
    await rt.manager.close()


async def test_a_key_whose_session_is_stored_is_loaded_through_the_key_index(
    memory_store: SessionStore,
) -> None:
    old = await Session.create(memory_store, HandAgent(), meta={"key": KEY, "agent": "default"})
    await old.append_messages([Message.user("remember the blue door")])
    await old.close()
    await memory_store.point(KEY, old.id)
    rt = await make_runtime(memory_store, ScriptedModel())
    accepted, turn = await rt.manager.wake_turn(KEY, system_wake("what door?"))
    await turn.wait(10)
    assert not accepted.created
    assert accepted.session_id == old.id
    assert rt.model.requests[0].messages[0].text() == "remember the blue door"
    await rt.manager.close()


async def test_a_session_opened_from_the_store_is_told_with_its_entries_and_a_new_one_is_not(
    memory_store: SessionStore,
) -> None:
    old = await Session.create(memory_store, HandAgent(), meta={"key": KEY, "agent": "default"})
    await old.append_messages([Message.user("one"), Message.assistant("two")])
    await old.close()
    await memory_store.point(KEY, old.id)
    rt = await make_runtime(memory_store, ScriptedModel())
    opened: list[int] = []
    rt.manager.release_listeners.append(opened.append)
    await rt.manager.open_thread(KEY)
    assert opened == [old.entry_count] == [2]
    await rt.manager.open_thread("telegram:43", create=True)
    assert opened == [2]
    await rt.manager.close()


async def test_an_eviction_sweep_is_told_with_the_entries_its_sessions_held(
    memory_store: SessionStore,
) -> None:
    for key, said in (("telegram:1", ["a", "b"]), ("telegram:2", ["c", "d", "e"])):
        old = await Session.create(memory_store, HandAgent(), meta={"key": key, "agent": "default"})
        await old.append_messages([Message.user(text) for text in said])
        await old.close()
        await memory_store.point(key, old.id)
    rt = await make_runtime(memory_store, ScriptedModel())
    await rt.manager.open_thread("telegram:1")
    await rt.manager.open_thread("telegram:2")
    told: list[int] = []
    rt.manager.release_listeners.append(told.append)
    assert await rt.manager.evict_idle(0) == 2
    assert told == [5]  # one sweep, both sessions' entries
    assert await rt.manager.evict_idle(0) == 0
    assert told == [5]  # a sweep that closes nothing tells nothing
    await rt.manager.close()


async def test_a_wake_to_a_closed_manager_is_refused_naming_the_key(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    await rt.manager.close()
    with pytest.raises(ManagerClosedError, match=f"manager is closed; wake for {KEY} refused"):
        await rt.manager.wake(KEY, system_wake("late"))


class HeldStore(MemoryStore):
    """A memory store one of whose calls (``load`` or ``point``) waits until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.held = ""
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def _gate(self, call: str) -> None:
        if self.held == call:
            self.held = ""
            self.reached.set()
            await self.release.wait()

    async def load(self, session: str) -> Loaded:
        await self._gate("load")
        return await super().load(session)

    async def point(self, key: str, session_id: str, *, durable: bool = True) -> None:
        await self._gate("point")
        await super().point(key, session_id, durable=durable)


@pytest.mark.parametrize("held", ["load", "point"], ids=["loading", "creating"])
async def test_a_wake_racing_close_is_refused_or_closed_with_the_rest(held: str) -> None:
    store = HeldStore()
    if held == "load":
        old = await Session.create(store, HandAgent(), meta={"key": KEY, "agent": "default"})
        await old.append_messages([Message.user("before")])
        await old.close()
        await store.point(KEY, old.id)
    rt = await make_runtime(store, ScriptedModel())
    store.held = held
    waking = asyncio.create_task(rt.manager.wake_turn(KEY, system_wake("late")))
    async with asyncio.timeout(10):
        await store.reached.wait()  # past the closed check, its session half started
    closing = asyncio.create_task(rt.manager.close())
    await _until(lambda: rt.manager.closed, "the manager is closing")
    for _ in range(50):
        await asyncio.sleep(0)
    assert not closing.done()  # close waits for the thread still starting
    store.release.set()
    await closing
    assert waking.done()
    with pytest.raises(ManagerClosedError, match=f"wake for {KEY} refused"):
        await waking
    assert rt.manager.threads() == []
    assert rt.model.requests == []
    session_id = await store.resolve(KEY)
    assert session_id is not None
    assert not any(t.endswith("late") for t in texts(await stored(store, session_id)))
    # The session opened during close was closed: its writer lease is free again.
    again = await Session.open(store, session_id, HandAgent())
    await again.append_messages([Message.user("after")])
    await again.close()


# -- the turn cap


def _block_then_end(request: ModelRequest) -> ModelResponse:
    return dispatch() if request.messages[-1].role == "tool" else call("block")


async def test_the_default_turn_cap_is_32() -> None:
    assert gateway_config().threads.max_concurrent_turns == 32


async def test_no_more_turns_run_at_once_than_the_configured_cap(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(
        memory_store,
        ScriptedModel(default=_block_then_end),
        config=gateway_config(max_concurrent_turns=2),
        tools=[blocker.tool()],
    )
    keys = ["cron:a", "cron:b", "cron:c"]
    for key in keys:
        await rt.manager.wake(key, system_wake("work"))
    await blocker.reached(2)
    await _until(
        lambda: sum(t.session.running is not None for t in rt.manager.threads()) == 3,
        "all three turns are started",
    )
    for _ in range(20):
        await asyncio.sleep(0)
    states = sorted(t.state for t in rt.manager.threads())
    assert states == ["pending", "running", "running"]
    assert len(blocker.calls) == 2
    health = await rt.manager.health()
    assert health["threads"]["turns_in_flight"] == 2
    blocker.release.set()
    for thread in rt.manager.threads():
        await thread.session.wait_idle()
    assert len(blocker.calls) == 3
    await rt.manager.close()


# -- eviction


async def test_idle_threads_are_evicted_after_the_configured_time_and_their_sessions_stay(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(
        memory_store, ScriptedModel(), config=gateway_config(idle_evict_seconds=0.05)
    )
    accepted, turn = await rt.manager.wake_turn(KEY, system_wake("first"))
    await turn.wait(10)
    await _until(lambda: rt.manager.thread(KEY) is None, "the idle thread is evicted")
    assert await memory_store.resolve(KEY) == accepted.session_id
    state = await rt.manager.check_session(KEY)
    assert (state["exists"], state["thread_active"]) == (True, False)
    again, turn = await rt.manager.wake_turn(KEY, system_wake("second"))
    await turn.wait(10)
    assert again.session_id == accepted.session_id
    assert not again.created
    assert [
        m.text().rsplit("\n", 1)[-1] for m in rt.model.requests[-1].messages if m.role == "user"
    ] == [
        "first",
        "second",
    ]
    await rt.manager.close()


async def test_a_thread_with_a_turn_running_or_input_waiting_is_not_evicted(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(memory_store, ScriptedModel(), tools=[blocker.tool()])
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("busy"))
    await rt.manager.wake(KEY, system_wake("waiting"))
    await blocker.reached()
    assert await rt.manager.evict_idle(0) == 0
    assert rt.manager.thread(KEY) is not None
    blocker.release.set()
    thread = rt.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    assert await rt.manager.evict_idle(0) == 1
    assert rt.manager.thread(KEY) is None
    await rt.manager.close()


# -- close and restart


async def _jsonl(path: Path) -> SessionStore:
    return open_store(f"jsonl://{path}")


async def test_close_lets_the_running_turn_finish_and_leaves_queued_wakes_durable(
    tmp_path: Path,
) -> None:
    store = await _jsonl(tmp_path / "sessions")
    blocker = Blocker()
    rt = await make_runtime(
        store, ScriptedModel(), tools=[blocker.tool()], recovery_path=tmp_path / "recovery.json"
    )
    rt.model.add(call("block"), dispatch())
    _, running = await rt.manager.wake_turn(KEY, system_wake("running"))
    await blocker.reached()
    await rt.manager.wake(KEY, system_wake("queued one"))
    await rt.manager.wake(KEY, system_wake("queued two"))
    closing = asyncio.create_task(rt.manager.close())
    await _until(lambda: rt.manager.closed, "the manager is closing")
    blocker.release.set()
    await closing
    assert running.outcome == "answered"
    session_id = await store.resolve(KEY)
    assert session_id is not None
    entries = await stored(store, session_id)
    assert [p.message.text().rsplit("\n", 1)[-1] for p in prompts(entries)] == ["running"]
    assert len(receipts(entries, "accepted")) == 2
    assert orjson.loads((tmp_path / "recovery.json").read_bytes()) == {
        "clean": True,
        "pending": [KEY],
    }
    await store.close()

    store = await _jsonl(tmp_path / "sessions")
    again = await make_runtime(store, ScriptedModel(), recovery_path=tmp_path / "recovery.json")
    thread = again.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    entries = await stored(store, session_id)
    assert [p.message.text().rsplit("\n", 1)[-1] for p in prompts(entries)] == [
        "running",
        "queued one",
        "queued two",
    ]
    assert [t.canceled for t in turn_entries(entries)] == [False, False, False]
    await again.manager.close()
    await store.close()


async def test_close_cancels_a_turn_still_running_at_the_deadline_and_records_it(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(
        memory_store,
        ScriptedModel(),
        config=gateway_config(close_deadline_seconds=0.05),
        tools=[blocker.tool()],
    )
    rt.model.add(call("block"))
    _, turn = await rt.manager.wake_turn(KEY, system_wake("never ends"))
    await blocker.reached()
    await rt.manager.close()
    assert turn.outcome == "canceled"
    session_id = await memory_store.resolve(KEY)
    assert session_id is not None
    entries = await stored(memory_store, session_id)
    (entry,) = turn_entries(entries)
    assert entry.canceled
    assert entry.err == "the session is closing"
    assert "no result recorded: the call was interrupted" in str(entries[-2])


async def test_without_continue_on_start_nothing_runs_and_the_keys_wait_for_a_later_start(
    tmp_path: Path,
) -> None:
    recovery = tmp_path / "recovery.json"
    store = await _jsonl(tmp_path / "sessions")
    blocker = Blocker()
    rt = await make_runtime(store, ScriptedModel(), tools=[blocker.tool()], recovery_path=recovery)
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("running"))
    await blocker.reached()
    await rt.manager.wake(KEY, system_wake("left queued"))
    thread = rt.manager.thread(KEY)
    assert thread is not None
    closing = asyncio.create_task(rt.manager.close())
    # Release the running turn only once the close has begun: the queue must not start.
    async with asyncio.timeout(5):
        while not thread.session.closed:
            await asyncio.sleep(0)
    blocker.release.set()
    await closing
    await store.close()

    store = await _jsonl(tmp_path / "sessions")
    idle = await make_runtime(
        store,
        ScriptedModel(),
        config=gateway_config(continue_on_start=False),
        recovery_path=recovery,
    )
    assert idle.manager.threads() == []
    await idle.manager.close()
    assert orjson.loads(recovery.read_bytes())["pending"] == [KEY]
    await store.close()

    store = await _jsonl(tmp_path / "sessions")
    later = await make_runtime(store, ScriptedModel(), recovery_path=recovery)
    thread = later.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    entries = await stored(store, thread.session.id)
    assert texts(entries).count(next(t for t in texts(entries) if t.endswith("left queued"))) == 1
    assert len(turn_entries(entries)) == 2
    await later.manager.close()
    await store.close()


# -- check_session and health


async def test_check_session_reports_seed_000s_three_states_with_their_fields(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(memory_store, ScriptedModel(), tools=[blocker.tool()])
    assert await rt.manager.check_session(KEY) == {
        "session_key": KEY,
        "exists": False,
        "thread_active": False,
    }
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("work"))
    await rt.manager.wake(KEY, system_wake("more"))
    await blocker.reached()
    live = await rt.manager.check_session(KEY)
    assert live["exists"]
    assert live["thread_active"]
    assert live["thread_state"] == "running"
    assert live["thread_iterations"] == 1
    assert live["thread_current_tool"] == "block"
    assert live["thread_elapsed_sec"] >= 0
    assert live["thread_pending"] == 1
    assert live["agent"] == "default"
    assert live["message_count"] == 2  # the prompt, and the call made durable before it runs
    assert live["size_bytes"] > 0
    datetime.fromisoformat(live["last_modified"])
    blocker.release.set()
    thread = rt.manager.thread(KEY)
    assert thread is not None
    await thread.session.wait_idle()
    idle = await rt.manager.check_session(KEY)
    assert (idle["thread_state"], idle["thread_current_tool"]) == ("idle", "")
    await rt.manager.evict_idle(0)
    stored_only = await rt.manager.check_session(KEY)
    assert (stored_only["exists"], stored_only["thread_active"]) == (True, False)
    assert "thread_state" not in stored_only
    assert stored_only["message_count"] == idle["message_count"]
    assert stored_only["size_bytes"] == idle["size_bytes"]
    await rt.manager.close()


async def test_health_lists_every_active_thread_with_store_model_channel_cron_and_process_figures(
    memory_store: SessionStore,
) -> None:
    blocker = Blocker()
    rt = await make_runtime(memory_store, ScriptedModel(), tools=[blocker.tool()])

    async def cron_figures() -> dict[str, int]:
        return {"jobs": 3}

    rt.manager.health_sources["channels"] = lambda: {"telegram": {"running": True}}
    rt.manager.health_sources["cron"] = cron_figures
    rt.model.add(call("block"), dispatch())
    await rt.manager.wake(KEY, system_wake("work"))
    await blocker.reached()
    idle_turn = (await rt.manager.wake_turn("cron:daily", system_wake("tick")))[1]
    await idle_turn.wait(10)
    health = await rt.manager.health()
    by_key = {t["session_key"]: t for t in health["all_threads"]}
    assert set(by_key) == {KEY, "cron:daily"}
    busy = by_key[KEY]
    assert (busy["agent"], busy["state"], busy["pending"], busy["current_tool"]) == (
        "default",
        "running",
        0,
        "block",
    )
    assert by_key["cron:daily"]["state"] == "idle"
    assert isinstance(busy["last_activity"], float)
    assert health["threads"]["active"] == 2
    assert health["threads"]["running"] == 1
    assert health["sessions"]["keys"] == 2
    assert health["sessions"]["backend"] == "MemoryStore"
    assert health["provider"]["providers"] == ["scripted"]
    assert health["process"]["rss_bytes"] > 0
    assert health["channels"] == {"telegram": {"running": True}}
    assert health["cron"] == {"jobs": 3}
    blocker.release.set()
    await rt.manager.close()


async def test_stop_session_asks_the_running_turn_to_end_and_names_a_key_with_no_thread(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    with pytest.raises(ThreadNotLoadedError, match="no thread is loaded for session cron:x"):
        await rt.manager.stop("cron:x")
    await rt.manager.close()


async def test_stop_session_of_a_loaded_idle_thread_says_it_is_not_running_a_turn(
    memory_store: SessionStore,
) -> None:
    rt = await make_runtime(memory_store, ScriptedModel())
    _, turn = await rt.manager.wake_turn(KEY, system_wake("done quickly"))
    await turn.wait(10)
    assert rt.manager.thread(KEY) is not None
    with pytest.raises(
        NoTurnRunningError, match=f"session {KEY} is not running a turn .*loaded and idle"
    ) as refused:
        await rt.manager.stop(KEY)
    assert "no thread is loaded" not in str(refused.value)
    await rt.manager.close()


async def test_a_wake_during_its_threads_eviction_waits_for_the_lease_and_loses_nothing(
    tmp_path: Path,
) -> None:
    store = await _jsonl(tmp_path / "sessions")
    rt = await make_runtime(store, ScriptedModel())
    first = await rt.manager.wake_turn(KEY, system_wake("before"))
    await first[1].wait(10)
    evicting = asyncio.create_task(rt.manager.evict_idle(0))
    await asyncio.sleep(0)  # one step: the thread is gone from the map, its close under way
    assert rt.manager.thread(KEY) is None
    accepted, turn = await rt.manager.wake_turn(KEY, system_wake("during"))
    assert await evicting == 1
    await turn.wait(10)
    assert accepted.session_id == first[0].session_id
    assert turn.outcome == "answered"
    entries = await stored(store, accepted.session_id)
    assert [p.message.text().rsplit("\n", 1)[-1] for p in prompts(entries)] == ["before", "during"]
    await rt.manager.close()
    await store.close()


async def test_sessions_share_the_managers_callbacks_and_keep_their_own_gate(
    memory_store: SessionStore,
) -> None:
    # Each bound method a live session holds is one more object for every collection to walk.
    rt = await make_runtime(memory_store, ScriptedModel())
    first, second = rt.manager.session_options("cli:a"), rt.manager.session_options("cli:b")
    for name in ("load_payload", "resume", "hand_offs", "redeliver", "on_held", "siblings"):
        assert getattr(first, name) is getattr(second, name), name
    assert first.gate is not second.gate
    assert first.siblings() == second.siblings() == 0
    await rt.manager.close()

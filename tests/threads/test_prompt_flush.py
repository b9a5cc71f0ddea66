"""An idle session's prompt is made durable with its turn's end when that comes soon (perf-16)."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from tests.threads.conftest import DEADLINE, make_runtime, system_wake
from tests.threads.store.test_jsonl import Spy
from threads.errors import UnavailableError
from threads.store.jsonl import JsonlStore
from threads.testing.scripted import ScriptedModel, say

KEY = "telegram:42"


async def test_a_quick_turns_prompt_and_end_share_one_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", DEADLINE)  # the end comes first
    store = JsonlStore(tmp_path / "sessions")
    runtime = await make_runtime(store, ScriptedModel(say("one"), say("two")))
    try:
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("a"))
        await turn.wait(DEADLINE)
        syncs = Spy(monkeypatch, "fsync")
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("b"))
        await turn.wait(DEADLINE)
        assert len(syncs.calls) == 1  # the prompt, the turn's end and its reply's record
    finally:
        await runtime.manager.close()
        await store.close()


async def test_a_first_contacts_session_prompt_and_answer_share_one_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", DEADLINE)  # the end comes first
    store = JsonlStore(tmp_path / "sessions")
    runtime = await make_runtime(store, ScriptedModel(say("one"), say("two")))
    try:
        _accepted, turn = await runtime.manager.wake_turn("telegram:1", runtime.user_wake("a"))
        await turn.wait(DEADLINE)  # the store's log is open
        syncs = Spy(monkeypatch, "fsync")
        accepted, turn = await runtime.manager.wake_turn("telegram:2", runtime.user_wake("b"))
        await turn.wait(DEADLINE)
        assert accepted.created
        assert len(syncs.calls) == 1  # the header, the key, the prompt, the answer
    finally:
        await runtime.manager.close()
        await store.close()


async def test_a_send_returns_with_its_prompt_durable_while_the_model_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", 0.001)
    store = JsonlStore(tmp_path / "sessions")
    model = ScriptedModel(say("one"), say("two"))
    runtime = await make_runtime(store, model)
    try:
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("hello"))
        await turn.wait(DEADLINE)
        model.gate = asyncio.Event()  # the model answers once the test says so
        syncs = Spy(monkeypatch, "fsync")
        _accepted, turn = await asyncio.wait_for(
            runtime.manager.wake_turn(KEY, runtime.user_wake("still thinking?")), DEADLINE
        )
        assert not turn.done()
        assert len(syncs.calls) == 1  # the prompt's own flush: the turn's end is not near
        session_id = await store.resolve(KEY)
        assert b"still thinking?" in (tmp_path / "sessions" / f"{session_id}.jsonl").read_bytes()
        model.gate.set()
        await turn.wait(DEADLINE)
        assert len(syncs.calls) == 2
    finally:
        await runtime.manager.close()
        await store.close()


async def test_a_prompt_whose_flush_is_refused_is_not_accepted_and_its_turn_is_canceled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", 0.001)
    store = JsonlStore(tmp_path / "sessions")
    model = ScriptedModel(say("one"), say("two"))
    runtime = await make_runtime(store, model)
    try:
        _accepted, turn = await runtime.manager.wake_turn(KEY, runtime.user_wake("hello"))
        await turn.wait(DEADLINE)
        model.gate = asyncio.Event()
        real = os.fsync

        def refused(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", refused)
        with pytest.raises(UnavailableError):
            await runtime.manager.wake_turn(KEY, runtime.user_wake("lost?"))
        monkeypatch.setattr(os, "fsync", real)
        model.gate.set()
        thread = runtime.manager.thread(KEY)
        assert thread is not None
        await asyncio.wait_for(thread.session.wait_idle(), DEADLINE)
        assert model.remaining == 1  # the canceled turn never got its answer
    finally:
        await runtime.manager.close()
        await store.close()


async def test_a_batch_of_wakes_whose_turns_are_held_does_not_wait_for_a_turns_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Were a held turn's prompt to wait for its turn's end, the batch would wait this long.
    monkeypatch.setattr("threads.session.PROMPT_FLUSH_WITHIN", DEADLINE * 10)
    store = JsonlStore(tmp_path / "sessions")
    runtime = await make_runtime(store, ScriptedModel())
    keys = [f"telegram:{n}" for n in range(4)]
    try:
        for key in keys:
            _accepted, turn = await runtime.manager.wake_turn(key, runtime.user_wake("hello"))
            await turn.wait(DEADLINE)
        results = await asyncio.wait_for(
            runtime.manager.wake_many([(key, system_wake("tick")) for key in keys]), DEADLINE
        )
        assert all(result.error is None for result in results)
    finally:
        await runtime.manager.close()
        await store.close()

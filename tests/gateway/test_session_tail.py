"""``gateway sessions tail``: a session followed as it is written, on every backend."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from datetime import UTC
from pathlib import Path

import pytest

from gateway.session_tail import follow
from tests.gateway.terminal_driver import STOP_WITHIN, Background, gateway_env
from tests.threads.store.conftest import Backend, backend
from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, ToolCallPart, ToolResultPart, Usage
from threads.store.entries import (
    Entry,
    Header,
    MessageEntry,
    PoolReceiptEntry,
    ReceiptEntry,
    TurnEntry,
)
from threads.store.jsonl import JsonlStore
from threads.wake import UserCaller, Wake, WakeSource, render_prompt

__all__ = ["backend"]  # the store tests' fixture: every backend, Redis when it runs


def prompt(text: str) -> Message:
    wake = Wake(
        source=WakeSource.TELEGRAM, body=text, caller=UserCaller(channel="telegram", user_id="7")
    )
    return Message.user(render_prompt(wake, thread="telegram:7", session_id="s_x"))


def a_turn(session_id: str) -> list[Entry]:
    """One turn as a gateway writes it: prompt, a tool call and its result, the answer, the end."""
    call = ToolCallPart(id="c1", name="web_fetch", args={"url": "https://example.org"})
    entries: list[Entry] = [
        MessageEntry(
            id=new_entry_id(), message=prompt("what is on example.org?"), run_id=f"{session_id}-t1"
        ),
        MessageEntry(id=new_entry_id(), message=Message(role="assistant", content=(call,))),
        MessageEntry(
            id=new_entry_id(),
            message=Message(
                role="tool",
                content=(
                    ToolResultPart(call_id="c1", name="web_fetch", content="Example\nDomain"),
                ),
            ),
        ),
        MessageEntry(id=new_entry_id(), message=Message.assistant("It says\nExample Domain.")),
        TurnEntry(
            id=new_entry_id(),
            run_id=f"{session_id}-t1",
            stop_reason="end_turn",
            steps=2,
            usage=Usage(input_tokens=90, output_tokens=10),
        ),
    ]
    parent = ""
    linked = []
    for entry in entries:
        linked.append(dataclasses.replace(entry, parent=parent))
        parent = entry.id
    return linked


READABLE = [
    "user (telegram): what is on example.org?",
    '→ web_fetch({"url":"https://example.org"})',
    "← web_fetch: Example Domain",
    "assistant: It says Example Domain.",
    "· turn t1 end_turn (2 steps, 100 tokens)",
]


async def until(lines: list[str], count: int) -> None:
    async with asyncio.timeout(10):
        while len(lines) < count:
            await asyncio.sleep(0.005)  # polling the printed lines, with a deadline


async def test_tail_prints_the_backlog_then_each_entry_as_another_writer_appends_it(
    backend: Backend,
) -> None:
    writer = backend.open()
    reader = backend.open(poll_interval=0.01) if backend.shared else writer
    session_id = new_session_id()
    await writer.create(Header(id=session_id))
    first, *rest = a_turn(session_id)
    await writer.append(session_id, [first])
    lines: list[str] = []
    task = asyncio.create_task(follow(reader, session_id, last=10, tz=UTC, write=lines.append))
    try:
        await until(lines, 1)
        await writer.append(session_id, rest[:2])
        await until(lines, 3)
        await writer.append(session_id, rest[2:])
        await until(lines, 5)
        assert [line.split(" ", 1)[1] for line in lines] == READABLE
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_tail_starts_at_the_last_entries_and_words_queues_and_delegations(
    backend: Backend,
) -> None:
    store = backend.open()
    session_id = new_session_id()
    await store.create(Header(id=session_id))
    accepted = PoolReceiptEntry(
        id=new_entry_id(), status="accepted", child="agent:default:subagent:1", prompt="dig"
    )
    await store.append(
        session_id,
        [
            *a_turn(session_id),
            ReceiptEntry(id=new_entry_id(), status="queued", msg=prompt("and also this")),
            accepted,
            PoolReceiptEntry(
                id=new_entry_id(),
                status="done",
                receipt=accepted.id,
                child=accepted.child,
                stop="dug it",
            ),
        ],
    )
    lines: list[str] = []
    task = asyncio.create_task(follow(store, session_id, last=3, tz=UTC, write=lines.append))
    try:
        await until(lines, 3)
        assert [line.split(" ", 1)[1] for line in lines] == [
            "· steer: and also this",
            "· delegated to agent:default:subagent:1: dig",
            "· delegation to agent:default:subagent:1 done: dug it",
        ]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_gateway_sessions_tail_follows_a_key_until_ctrl_c(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "data" / "sessions")
    session_id = new_session_id()
    await store.create(Header(id=session_id, meta={"key": "cli"}))
    await store.point("cli", session_id)
    first, *rest = a_turn(session_id)
    await store.append(session_id, [first])
    tail = Background(["sessions", "tail", "main"], cwd=tmp_path, env=gateway_env(tmp_path))
    try:
        await asyncio.to_thread(tail.expect, READABLE[0])
        await store.append(session_id, rest)
        await asyncio.to_thread(tail.expect, READABLE[-1])
        tail.signal(signal.SIGINT)
        assert await asyncio.to_thread(tail.ended_within, STOP_WITHIN) == 0
        assert [line.split(" ", 1)[1] for line in tail.text.splitlines()] == READABLE
        assert "Traceback" not in tail.stderr
    finally:
        tail.close()
        await store.close()


async def test_tail_of_an_unknown_key_fails_naming_it(tmp_path: Path) -> None:
    tail = Background(["sessions", "tail", "telegram:404"], cwd=tmp_path, env=gateway_env(tmp_path))
    try:
        assert await asyncio.to_thread(tail.ended_within, STOP_WITHIN) == 1
        assert "session key 'telegram:404' names no session" in tail.stderr
    finally:
        tail.close()

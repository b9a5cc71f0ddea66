"""Small builders the store tests share."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from threads.ids import new_entry_id, new_session_id
from threads.messages import Message, ToolCallPart, Usage
from threads.store.entries import ENTRY_KINDS, Entry, Header, InfoEntry, MessageEntry

T0 = datetime(2025, 1, 1, tzinfo=UTC)
WAIT = 10.0  # seconds a test waits on an event before it fails

# A valid value per entry field annotation.
GOOD: dict[str, Any] = {
    "str": "x",
    "int": 1,
    "bool": True,
    "datetime": T0,
    "datetime | None": T0,
    "tuple[str, ...]": ("a",),
    "Mapping[str, str]": {"a": "b"},
    "Mapping[str, JSON]": {"a": 1},
    "JSON": {"a": 1},
    "Message": Message.user("x"),
    "Message | None": Message.user("x"),
    "Usage": Usage(input_tokens=1),
    "tuple[ToolCallPart, ...]": (ToolCallPart(id="c", name="t"),),
    "tuple[Mapping[str, JSON], ...]": ({"a": 1},),
}


def every_field(entry_type: str, /, **values: Any) -> Entry:
    """An entry ``e_1`` of ``entry_type`` with a valid value in every field, but ``values``."""
    cls = ENTRY_KINDS[entry_type]
    fields = {
        f.name: GOOD[str(f.type)]
        for f in dataclasses.fields(cls)
        if f.name not in ("id", "created", "parent")
    }
    return cls(id="e_1", parent="e_0", created=T0, **(fields | values))


def header(session: str | None = None, *, created: datetime | None = None, **meta: str) -> Header:
    return Header(
        id=new_session_id() if session is None else session,
        created=created or datetime.now(UTC),
        meta=dict(meta),
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def msg(text: str, parent: str = "", **extra: Any) -> MessageEntry:
    return MessageEntry(id=new_entry_id(), parent=parent, message=Message.user(text), **extra)


def info(title: str) -> InfoEntry:
    return InfoEntry(id=new_entry_id(), title=title)


def texts(entries: list[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]


async def next_entry(stream: Any) -> Entry:
    """A watcher's next entry, within a deadline."""
    return await asyncio.wait_for(anext(stream), WAIT)


def entry_line(**fields: Any) -> bytes:
    """A raw entry line, as a damaged disk or another build might have left it."""
    base = {"id": "e_raw", "created": "2025-01-01T00:00:00Z"}
    return orjson.dumps({**base, **fields}) + b"\n"


class Gate:
    """The test side of a backend's ``pause`` seam at ``"append:started"``.

    It counts the appends the backend started, and can hold the first of them
    there (``hold_first``) or cancel a caller's task as its append starts
    (``cancel``). On a writer thread (jsonl, sqlite) it blocks; on the event
    loop (memory, redis) it hands the started write an awaitable.
    """

    def __init__(self, *, hold_first: bool = False) -> None:
        self.loop = asyncio.get_running_loop()
        self.hold_first = hold_first
        self.cancel: asyncio.Task[Any] | None = None
        self.started = 0
        self._reached = asyncio.Event()
        self._open = threading.Event()
        self._open_on_loop = asyncio.Event()

    def __call__(self, point: str) -> Awaitable[None] | None:
        if point != "append:started":
            return None
        on_loop = self._on_loop()
        self.started += 1
        first = self.started == 1
        if on_loop:
            self._reached.set()
        else:
            self.loop.call_soon_threadsafe(self._reached.set)
        if self.cancel is not None:
            self._cancel(self.cancel, on_loop)
        if self.hold_first and first:
            if on_loop:
                return self._open_on_loop.wait()
            assert self._open.wait(WAIT), "the test never let the held append go on"
        return None

    async def reached(self) -> None:
        """Wait until the backend has started an append."""
        await asyncio.wait_for(self._reached.wait(), WAIT)

    def release(self) -> None:
        """Let the held append go on."""
        self._open.set()
        self._open_on_loop.set()

    def _cancel(self, task: asyncio.Task[Any], on_loop: bool) -> None:
        if on_loop:
            task.cancel()
            return
        # Off the loop: cancel there, and hold the write until the caller has seen it.
        done = threading.Event()

        def cancel() -> None:
            task.cancel()
            task.add_done_callback(lambda _: done.set())

        self.loop.call_soon_threadsafe(cancel)
        assert done.wait(WAIT), "the cancelled caller never finished"

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False


@contextmanager
def fsync_refused(code: int = errno.ENOSPC) -> Iterator[None]:
    """Every ``os.fsync`` fails with ``code`` (a full disk by default) until the block ends."""

    def refused(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", refused)
        yield


class File:
    """A sync target of a committer's round that counts its syncs."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1

"""A message the gateway does not take gets an error frame, and the socket stays open."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from channels.base import Inbound
from channels.web import WebChannel
from gateway.app import Gateway
from tests.channels.conftest import browser, open_chat, receive, served
from tests.gateway.conftest import make_config
from threads.errors import (
    BusyError,
    CorruptError,
    InvalidKeyError,
    LockedError,
    ManagerClosedError,
)
from threads.ids import new_session_id
from threads.sinks import OutboundMessage
from threads.store.codec import encode_header
from threads.store.entries import Entry, Header
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel

INTERNALS = ("/", "\\", "://", "Error", "Exception", "Traceback", "s_", "web:")


class FailingStore(MemoryStore):
    """A memory store whose appends fail while ``failure`` is set, as a full disk would."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: Exception | None = None

    async def append(self, session: str, entries: Sequence[Entry], *, durable: bool = True) -> None:
        if self.failure is not None:
            raise self.failure
        await super().append(session, entries, durable=durable)


def assert_plain(line: str) -> None:
    """One line for a person: nothing of the gateway's insides."""
    assert line
    assert "\n" not in line
    for inside in INTERNALS:
        assert inside not in line, inside


async def test_a_store_failure_is_an_error_frame_and_the_chat_goes_on(tmp_path: Path) -> None:
    store = FailingStore()
    async with (
        Gateway(make_config(tmp_path), store=store, control=False) as gw,
        browser() as http,
    ):
        assert gw.web is not None
        async with open_chat(http, gw.web) as (ws, _):
            await ws.send_json({"text": "first"})
            await receive(ws, "reply")
            await gw.wait_idle()
            store.failure = OSError(28, "No space left on device", "/srv/data/sessions/x.jsonl")
            await ws.send_json({"text": "lost to a full disk"})
            error = (await receive(ws, "error"))["error"]
            assert "could not be saved" in error
            assert_plain(error)
            store.failure = None
            await ws.send_json({"text": "after the disk was freed"})
            assert (await receive(ws, "reply"))["text"].endswith("after the disk was freed")


async def test_a_full_inbox_is_an_error_frame_and_the_chat_goes_on(tmp_path: Path) -> None:
    model = ScriptedModel()
    model.gate = asyncio.Event()
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
        threads={"inbox_size": 1, "busy_policy": {"web": "queue"}},
    )
    async with (
        Gateway(config, model_clients={"scripted": model}, control=False) as gw,
        browser() as http,
    ):
        assert gw.web is not None
        async with open_chat(http, gw.web) as (ws, _):
            await ws.send_json({"text": "one"})
            await model.called.wait()
            await ws.send_json({"text": "two"})  # waits in the inbox: now it is full
            await ws.send_json({"text": "three"})
            error = (await receive(ws, "error"))["error"]
            assert "busy" in error
            assert_plain(error)
            model.gate.set()
            replies = [(await receive(ws, "reply"))["text"] for _ in range(2)]
            assert replies[0].endswith("one")
            assert replies[1].endswith("two")
            await ws.send_json({"text": "four"})
            assert (await receive(ws, "reply"))["text"].endswith("four")


async def test_a_corrupt_conversation_is_an_error_frame_and_new_starts_afresh(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    async with (
        Gateway(make_config(tmp_path), store=store, control=False) as gw,
        browser() as http,
    ):
        assert gw.web is not None
        async with open_chat(http, gw.web) as (ws, chat):
            session = new_session_id()
            header = encode_header(Header(id=session, created=datetime.now(UTC)))
            await store.plant(session, header + b'{"type":"message","id":\n{"type":"info"}\n')
            await store.point(f"web:{chat}", session)
            await ws.send_json({"text": "into a damaged history"})
            error = (await receive(ws, "error"))["error"]
            assert "cannot be read" in error
            assert_plain(error.replace("/new", "new"))
            await ws.send_json({"text": "/new"})
            assert (await receive(ws, "reply"))["text"].startswith("Started a new conversation")
            await ws.send_json({"text": "on a clean page"})
            assert (await receive(ws, "reply"))["text"].endswith("on a clean page")


async def test_a_closing_manager_is_an_error_frame(tmp_path: Path) -> None:
    async with (
        Gateway(make_config(tmp_path), control=False) as gw,
        browser() as http,
    ):
        assert gw.web is not None
        async with open_chat(http, gw.web) as (ws, _):
            await gw.manager.close()  # what a shutdown does before the channels stop
            await ws.send_json({"text": "too late"})
            error = (await receive(ws, "error"))["error"]
            assert "shutting down" in error
            assert_plain(error)
            await ws.send_json({"text": "/help"})
            assert (await receive(ws, "reply"))["text"].startswith("Commands:")


class Refusing:
    """An inbound handler that raises the errors it is given, one per message, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.taken: list[Inbound] = []
        self.channel = WebChannel(port=0)

    async def __call__(self, inbound: Inbound) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.taken.append(inbound)
        await self.channel.deliver(inbound.chat_id, OutboundMessage(text=f"took {inbound.text}"))


@asynccontextmanager
async def refusing_chat(
    *errors: Exception,
) -> AsyncIterator[tuple[Refusing, aiohttp.ClientWebSocketResponse, str]]:
    """A web channel alone, its handler raising ``errors``; yields (handler, socket, chat)."""
    handler = Refusing(*errors)
    await handler.channel.start(handler)
    try:
        async with (
            served(handler.channel),
            browser() as http,
            open_chat(http, handler.channel) as (ws, chat),
        ):
            yield handler, ws, chat
    finally:
        await handler.channel.stop()


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (BusyError("s_01ABC", "send refused: the inbox is full (256 waiting)"), "busy"),
        (CorruptError("s_01ABC", line=3, cause="bad JSON"), "cannot be read"),
        (LockedError("s_01ABC", "pid 4242"), "could not be saved"),
        (PermissionError(13, "Permission denied", "/srv/data/sessions"), "could not be saved"),
        (InvalidKeyError("web:x", "too long"), "reload the page"),
        (ManagerClosedError("web:x"), "shutting down"),
        (RuntimeError("connect to redis://:hunter2@db:6379 failed"), "Something went wrong"),
    ],
)
async def test_each_refusal_is_one_plain_line_and_the_socket_stays_open(
    error: Exception, says: str
) -> None:
    async with refusing_chat(error) as (handler, ws, _):
        await ws.send_json({"text": "refused"})
        line = (await receive(ws, "error"))["error"]
        await ws.send_json({"text": "taken"})
        assert (await receive(ws, "reply"))["text"] == "took taken"
    assert says in line
    assert_plain(line.replace("/new", "new"))
    assert [i.text for i in handler.taken] == ["taken"]


async def test_an_unexpected_failure_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = RuntimeError("boom at /srv/internal")
    async with refusing_chat(error) as (_, ws, chat):
        await ws.send_json({"text": "refused"})
        await receive(ws, "error")
    (record,) = [r for r in caplog.records if r.name.startswith("channels.web")]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[1] is error
    assert f"web:{chat}" in record.getMessage()


async def test_a_known_refusal_is_logged_with_its_cause(caplog: pytest.LogCaptureFixture) -> None:
    error = LockedError("s_01ABC", "pid 4242")
    async with refusing_chat(error) as (_, ws, chat):
        await ws.send_json({"text": "refused"})
        await receive(ws, "error")
    (record,) = [r for r in caplog.records if r.name.startswith("channels.web")]
    assert record.levelno == logging.WARNING
    assert f"web:{chat}" in record.getMessage()
    assert "locked by pid 4242" in record.getMessage()

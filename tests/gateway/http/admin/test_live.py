"""What the admin API pushes: a session's new entries, and the live threads view."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.gateway.http.admin.conftest import TOKEN, AdminRig, events
from tests.gateway.test_thread_ops_cli import Digging
from threads.testing.scripted import call, say

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def next_event(stream: AsyncIterator[tuple[str, Any]], name: str) -> Any:
    async with asyncio.timeout(10):
        async for event, data in stream:
            if event == name:
                return data
    raise AssertionError(f"the stream ended before a {name!r} event")


async def test_the_tail_pushes_each_new_entry_as_it_is_written(rig: AdminRig) -> None:
    rig.script.add("telegram:1", say("first answer"), say("second answer"))
    await rig.talk("telegram:1", "first")
    history = await rig.api.ok("GET", "/sessions/telegram:1/history")
    url = f"{rig.base}/sessions/telegram:1/tail?after={history['last_entry']}"
    async with rig.api.http.get(url, headers=AUTH) as answer:
        assert answer.status == 200
        assert answer.content_type == "text/event-stream"
        stream = events(answer)
        talking = asyncio.ensure_future(rig.talk("telegram:1", "second <script>"))
        prompt = await next_event(stream, "entry")
        assert prompt["role"] == "user"
        assert prompt["content"][0]["text"].endswith("second <script>")
        reply = await next_event(stream, "entry")
        assert reply["content"] == [{"type": "text", "text": "second answer"}]
        turn = await next_event(stream, "entry")
        assert (turn["type"], turn["stop_reason"]) == ("turn", "end_turn")
        await talking


async def test_a_tail_from_nothing_starts_at_the_newest_entry(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "old news")
    async with rig.api.http.get(f"{rig.base}/sessions/telegram:1/tail", headers=AUTH) as answer:
        stream = events(answer)
        talking = asyncio.ensure_future(rig.talk("telegram:1", "fresh"))
        first = await next_event(stream, "entry")
        assert first["content"][0]["text"].endswith("fresh")
        await talking


async def test_a_tail_of_an_unknown_session_or_entry_is_404(rig: AdminRig) -> None:
    status, _ = await rig.api.get("/sessions/telegram:404/tail")
    assert status == 404
    await rig.talk("telegram:1", "hi")
    status, body = await rig.api.get("/sessions/telegram:1/tail?after=e_nope")
    assert status == 404
    assert "holds no entry 'e_nope'" in body["error"]["message"]


async def test_the_tail_needs_the_token(rig: AdminRig) -> None:
    await rig.talk("telegram:1", "hi")
    async with rig.api.http.get(f"{rig.base}/sessions/telegram:1/tail") as answer:
        assert answer.status == 401


async def test_the_live_view_pushes_a_thread_that_starts_running(rig: AdminRig) -> None:
    rig.script.add("telegram:1", call("dig"), say("dug"))
    async with rig.api.http.get(f"{rig.base}/live", headers=AUTH) as answer:
        assert answer.status == 200
        stream = events(answer)
        first = await next_event(stream, "threads")
        assert first["threads"] == []
        metrics = await next_event(stream, "metrics")
        assert len(metrics["points"]) == 60
        talking = asyncio.ensure_future(rig.talk("telegram:1", "dig"))
        while True:
            view = await next_event(stream, "threads")
            if view["threads"] and view["threads"][0]["current_tool"] == "dig":
                break
        assert view["threads"][0]["state"] == "running"
        Digging.release.set()
        while True:
            view = await next_event(stream, "threads")
            if view["threads"][0]["state"] == "idle":
                break
        await talking


async def test_closing_the_gateway_ends_open_streams(rig: AdminRig) -> None:
    assert rig.gateway.admin is not None
    http = aiohttp.ClientSession()
    try:
        answer = await http.get(f"{rig.base}/live", headers=AUTH)
        stream = events(answer)
        await next_event(stream, "threads")
        assert rig.gateway.admin.streams.open == 1
        await rig.gateway.admin.close()
        arrived: list[tuple[str, Any]] = []
        async with asyncio.timeout(10):
            async for event in stream:
                arrived.append(event)  # what was on its way still arrives; then the stream ends
        assert arrived[-1] == ("end", {"message": "the gateway is shutting down"})
        assert rig.gateway.admin.streams.open == 0
        status, _body = await rig.api.get("/live")
        assert status == 503
        answer.release()
    finally:
        await http.close()


async def test_a_reader_that_goes_away_is_let_go(rig: AdminRig) -> None:
    admin = rig.gateway.admin
    assert admin is not None
    admin.streams.heartbeat = 0.05  # a reader that left is found at the next heartbeat
    async with aiohttp.ClientSession() as http:
        answer = await http.get(f"{rig.base}/live", headers=AUTH)
        await next_event(events(answer), "threads")
        assert admin.streams.open == 1
        answer.close()
    async with asyncio.timeout(10):
        while admin.streams.open:
            await asyncio.sleep(0.01)  # polling with a deadline: no event marks the end
    assert admin.live.watching == 0

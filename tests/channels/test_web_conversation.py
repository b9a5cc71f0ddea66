"""One conversation per chat, in every tab: history on connect, streaming, /new, files."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import aiohttp
from aiohttp import hdrs

from channels.base import ApprovalAsk
from tests.channels.conftest import browser, open_chat, receive
from tests.channels.web_rig import chat_config, chat_gateway, frames_until, kind, say
from threads.messages import FilePart
from threads.sinks import OutboundMessage
from threads.store.entries import MessageEntry
from threads.testing.fake_model import Reply
from threads.testing.fake_openai import FakeOpenAIServer
from threads.testing.scripted import ScriptedModel, call, dispatch
from threads.testing.scripted import say as answer

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


async def test_a_page_that_connects_is_shown_the_conversation_so_far(tmp_path: Path) -> None:
    model = ScriptedModel(
        call("health"),
        answer("## Done\n\nAll **well**"),
        dispatch(("caller:user", "second answer")),
    )
    async with chat_gateway(chat_config(tmp_path), model=model) as rig, browser() as http:
        async with open_chat(http, rig.web) as (ws, _):
            first = await receive(ws, "history")
            assert first == {"type": "history", "items": [], "more": False}
            await say(ws, "how are things?\nline two", id="m-1")
            sent = [await receive(ws, "reply")]
            await say(ws, "and now?", id="m-2")
            sent.append(await receive(ws, "reply"))
            await rig.gateway.wait_idle()
        async with open_chat(http, rig.web) as (ws, _):
            history = await receive(ws, "history")
    user, tools, bot, user2, bot2 = history["items"]
    assert user == {"role": "user", "text": "how are things?\nline two", "files": [], "id": "m-1"}
    assert tools["role"] == "tools"
    assert [c["name"] for c in tools["calls"]] == ["health"]
    assert tools["calls"][0]["summary"].startswith("health() → ")
    assert bot["role"] == "bot"
    assert bot["text"] == "## Done\n\nAll **well**"
    # An answer in the history carries the id it was sent under: the page shows an id once.
    assert [bot["id"], bot2["id"]] == [f["id"] for f in sent]
    assert "<h2>Done</h2>" in bot["html"]
    assert user2["id"] == "m-2"
    assert bot2["text"] == "second answer"
    assert history["more"] is False


async def test_a_message_waiting_behind_a_running_turn_is_part_of_the_conversation(
    tmp_path: Path,
) -> None:
    model = ScriptedModel()
    model.gate = asyncio.Event()
    async with (
        chat_gateway(chat_config(tmp_path), model=model) as rig,
        browser() as http,
        open_chat(http, rig.web) as (ws, _),
    ):
        await say(ws, "first", id="m-1")
        await model.called.wait()
        await say(ws, "second, while the first runs", id="m-2")
        await frames_until(ws, kind("ack", id="m-2"))
        async with open_chat(http, rig.web) as (other, _):
            history = await receive(other, "history")
        model.gate.set()
    assert [(i["role"], i.get("id")) for i in history["items"]] == [
        ("user", "m-1"),
        ("user", "m-2"),
    ]


async def test_the_history_shows_the_last_items_and_says_there_are_more(tmp_path: Path) -> None:
    config = chat_config(tmp_path, channels={"cli": {"enabled": False}, "web": {"history": 3}})
    async with chat_gateway(config, model=ScriptedModel()) as rig, browser() as http:
        async with open_chat(http, rig.web) as (ws, _):
            for n in range(3):
                await say(ws, f"message {n}", id=f"m-{n}")
                await receive(ws, "reply")
            await rig.gateway.wait_idle()
        async with open_chat(http, rig.web) as (ws, _):
            history = await receive(ws, "history")
    assert [(i["role"], i["id"].startswith("m-")) for i in history["items"]] == [
        ("bot", False),
        ("user", True),
        ("bot", False),
    ]
    assert history["items"][1]["id"] == "m-2"
    assert history["more"] is True


async def test_every_tab_of_a_chat_sees_what_the_person_wrote_and_the_answers(
    tmp_path: Path,
) -> None:
    async with (
        chat_gateway(chat_config(tmp_path), model=ScriptedModel()) as rig,
        browser() as http,
        open_chat(http, rig.web) as (one, chat),
        open_chat(http, rig.web) as (two, same),
    ):
        assert same == chat
        await say(one, "from tab one", id="m-1")
        said = (await frames_until(two, kind("user")))[-1]
        assert said == {"type": "user", "id": "m-1", "text": "from tab one", "files": []}
        assert (await receive(two, "reply"))["text"].endswith("from tab one")
        frames = await frames_until(one, kind("reply"))
        assert all(f["type"] != "user" for f in frames)  # its own tab shows it already


async def test_new_clears_every_tab_and_its_answer_follows(tmp_path: Path) -> None:
    async with (
        chat_gateway(chat_config(tmp_path), model=ScriptedModel()) as rig,
        browser() as http,
        open_chat(http, rig.web) as (one, _),
    ):
        await say(one, "before", id="m-1")
        await receive(one, "reply")
        async with open_chat(http, rig.web) as (two, _):
            assert (await receive(two, "history"))["items"]
            await say(one, "/new", id="m-2")
            for ws in (one, two):
                cleared = await receive(ws, "history")
                assert cleared["items"] == []
                reply = await receive(ws, "reply")
                assert reply["text"].startswith("Started a new conversation")
            await frames_until(one, kind("ack", id="m-2"))
        async with open_chat(http, rig.web) as (three, _):
            assert (await receive(three, "history"))["items"] == []


async def test_a_turn_shows_typing_then_its_answer_as_written_then_the_answer(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()
    reply = Reply(text="## Result\n\nall **good**", chunks=["## Res", "ult\n\nall **go", "od**"])
    async with FakeOpenAIServer() as server:
        server.script(Reply(**{**_fields(reply), "gate": gate}))
        config = chat_config(tmp_path, base_url=server.base_url)
        async with (
            chat_gateway(config) as rig,
            browser() as http,
            open_chat(http, rig.web) as (ws, _),
        ):
            await say(ws, "go", id="m-1")
            before = await frames_until(ws, kind("draft"))
            assert "typing" in [f["type"] for f in before]
            draft = before[-1]["html"]
            while "<strong>good</strong>" not in draft:
                draft = (await receive(ws, "draft"))["html"]
            assert "<h2>Result</h2>" in draft
            gate.set()
            rest = await frames_until(ws, kind("end"))
    answers = [f for f in rest if f["type"] == "reply"]
    assert [a["text"] for a in answers] == ["## Result\n\nall **good**"]
    assert "<strong>good</strong>" in answers[0]["html"]
    assert [f["type"] for f in rest].index("reply") < len(rest) - 1


async def test_each_tool_is_shown_as_it_starts_and_ends_but_dispatch_is_the_answer(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(call("health", call_id="c-1"), dispatch(("caller:user", "fine")))
    model.gate = asyncio.Event()  # a turn long enough to be shown
    async with (
        chat_gateway(chat_config(tmp_path), model=model) as rig,
        browser() as http,
        open_chat(http, rig.web) as (ws, _),
    ):
        await say(ws, "how are you?", id="m-1")
        await frames_until(ws, kind("typing"))
        model.gate.set()
        frames = await frames_until(ws, kind("end"))
    tools = [f for f in frames if f["type"] == "tool"]
    assert tools[0] == {"type": "tool", "id": "c-1", "name": "health"}
    assert tools[1]["id"] == "c-1"
    assert tools[1]["summary"].startswith("health → {")
    assert tools[1]["error"] is False
    assert len(tools) == 2
    assert [f["text"] for f in frames if f["type"] == "reply"] == ["fine"]


async def test_a_commands_answer_mid_turn_stands_apart_from_the_streamed_answer(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()
    async with FakeOpenAIServer() as server:
        server.script(Reply(text="slow and steady", chunks=["slow ", "and steady"], gate=gate))
        config = chat_config(tmp_path, base_url=server.base_url)
        async with (
            chat_gateway(config) as rig,
            browser() as http,
            open_chat(http, rig.web) as (ws, _),
        ):
            await say(ws, "go", id="m-1")
            await frames_until(ws, kind("draft"))
            await say(ws, "/status", id="m-2")
            status = (await frames_until(ws, kind("reply")))[-1]
            assert status["apart"] is True
            gate.set()
            rest = await frames_until(ws, kind("end"))
    (answer,) = [f for f in rest if f["type"] == "reply"]
    assert answer["text"] == "slow and steady"
    assert "apart" not in answer


def _fields(reply: Reply) -> dict[str, object]:
    return {name: getattr(reply, name) for name in reply.__slots__}


async def test_a_reply_that_waited_for_the_page_is_shown_once(tmp_path: Path) -> None:
    async with chat_gateway(chat_config(tmp_path), model=ScriptedModel()) as rig, browser() as http:
        async with open_chat(http, rig.web) as (ws, chat):
            await say(ws, "hello", id="m-1")
            await receive(ws, "reply")
        await rig.web.deliver(chat, OutboundMessage(text="a notice for later"))
        await rig.gateway.wait_idle()
        async with open_chat(http, rig.web) as (ws, _):
            frames = await frames_until(ws, kind("reply"))
    assert [f["type"] for f in frames] == ["history", "reply"]
    assert frames[-1]["text"] == "a notice for later"


async def test_a_file_is_kept_for_its_chat_shown_to_it_alone(tmp_path: Path) -> None:
    config = chat_config(tmp_path)
    async with chat_gateway(config, model=ScriptedModel()) as rig:
        async with browser() as http, open_chat(http, rig.web) as (ws, chat):
            files = [("chart.png", "image/png", PNG), ("notes.html", "text/html", b"<script>")]
            await say(ws, "see attached", id="m-1", files=files)
            await frames_until(ws, kind("ack", id="m-1"))
            await receive(ws, "reply")
            (prompt,) = [
                e
                for e in await rig.session_entries(chat)
                if isinstance(e, MessageEntry) and e.message.role == "user"
            ]
            parts = [p for p in prompt.message.content if isinstance(p, FilePart)]
            assert [(p.name, p.media_type, p.size) for p in parts] == [
                ("chart.png", "image/png", len(PNG)),
                ("notes.html", "text/html", 8),
            ]
            assert all(p.url.startswith(f"web://web/{chat}/") for p in parts)
            assert await rig.gateway.media.prepare([prompt.message]) != [prompt.message]
            folder = config.data_dir / "media" / "web" / chat
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
            assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in folder.iterdir())
            png, html = (f"{rig.web.url}files/{p.url.rsplit('/', 1)[1]}" for p in parts)
            async with http.get(png) as response:
                assert response.status == 200
                assert response.content_type == "image/png"
                assert await response.read() == PNG
            async with http.get(html) as response:
                assert response.content_type == "application/octet-stream"
                assert response.headers[hdrs.CONTENT_DISPOSITION] == "attachment"
                assert "sandbox" in response.headers["Content-Security-Policy"]
            await rig.gateway.wait_idle()
            async with open_chat(http, rig.web) as (again, _):
                (item, _reply) = (await receive(again, "history"))["items"]
            assert [f["url"] for f in item["files"]] == [
                png.removeprefix(rig.web.url[:-1]),
                html.removeprefix(rig.web.url[:-1]),
            ]
        async with aiohttp.ClientSession() as stranger:
            await stranger.get(rig.web.url)  # a chat of its own
            async with stranger.get(png) as response:
                assert response.status == 404


async def test_an_open_approval_question_is_shown_to_every_tab_that_connects_until_decided(
    tmp_path: Path,
) -> None:
    async with chat_gateway(chat_config(tmp_path), model=ScriptedModel()) as rig, browser() as http:
        async with open_chat(http, rig.web) as (_, chat):
            pass
        ask = ApprovalAsk(request_id="r-1", text="May the agent run deploy?")
        assert await rig.web.ask_approval(chat, ask) == "r-1"
        async with open_chat(http, rig.web) as (ws, _):
            frames = await frames_until(ws, kind("approval"))
            assert [f["type"] for f in frames] == ["history", "approval"]
            assert frames[-1]["text"] == "May the agent run deploy?"
            assert [label for _, label in frames[-1]["buttons"]] == ["Approve", "Always", "Deny"]
            await rig.web.settle_approval(chat, "r-1", "Approved.")
            settled = await receive(ws, "approval_settled")
            assert settled == {"type": "approval_settled", "id": "r-1", "text": "Approved."}
            await say(ws, "after", id="m-1")
            await receive(ws, "reply")
        async with open_chat(http, rig.web) as (ws, _):
            frames = await frames_until(ws, kind("history"))
            await say(ws, "again", id="m-2")
            frames += await frames_until(ws, kind("reply"))
    assert "approval" not in [f["type"] for f in frames]

"""Telegram end to end: the real adapter and python-telegram-bot against the fake Bot API."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from channels.telegram.adapter import SECRET_HEADER
from gateway.testing.ports import free_port
from tests.gateway.telegram_rig import BOT, TelegramRig, telegram_gateway
from threads.llm.base import DeltaCallback, ModelRequest, ModelResponse
from threads.messages import FilePart
from threads.testing.scripted import ScriptedModel, dispatch, say


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-telegram-bot warns on int durations unless opted in; warnings are errors here.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


async def test_a_direct_message_gets_the_models_answer(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "Hello **Ann**!")))
        rig.fake.send_dm(ann, "hi there")
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.text == "Hello Ann!"
        assert reply.parse_mode == "HTML"
        (request,) = rig.script.requests[f"telegram:{ann.id}"]
        prompt = request.messages[-1].text()
        assert "source: telegram" in prompt
        assert prompt.endswith("hi there")
        assert "sender_name: Ann" in prompt


async def test_the_commands_are_registered_and_answered_without_a_turn(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        names = [name for name, _about in rig.fake.commands()]
        assert names == ["new", "reset", "stop", "status", "compact", "send", "help"]
        ann = rig.fake.user("Ann")
        rig.fake.send_dm(ann, "/status")
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.text == "No conversation yet: send a message to start one."
        assert rig.script.requests == {}


async def test_an_answer_while_the_model_works_shows_typing(tmp_path: Path) -> None:
    model_gate = asyncio.Event()
    model = ScriptedModel(default=dispatch(("caller:user", "done")))
    model.gate = model_gate
    async with telegram_gateway(tmp_path, model=model) as rig:
        ann = rig.fake.user("Ann")
        rig.fake.send_dm(ann, "think hard")
        await rig.fake.wait_until(lambda: rig.fake.chat_actions(ann) or None)
        (action,) = rig.fake.chat_actions(ann)[:1]
        assert action.action == "typing"
        model_gate.set()
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.text == "done"


LONG_ANSWER = "\n\n".join(
    [
        "## Result",
        *(
            f"Paragraph {n}: " + "words that go on " * 60 + f"\n\n```python\nprint({n})\n```"
            for n in range(12)
        ),
        "| name | value |\n|---|---|\n" + "\n".join(f"| row {n} | {n * n} |" for n in range(20)),
        "The end.",
    ]
)


async def test_a_long_answer_with_code_and_a_table_arrives_as_ordered_valid_chunks(
    tmp_path: Path,
) -> None:
    assert len(LONG_ANSWER) > 10_000
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", LONG_ANSWER)))
        rig.fake.send_dm(ann, "tell me everything")
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        sent = rig.fake.sent(ann)
        assert len(sent) >= 3
        assert all(m.parse_mode == "HTML" for m in sent)  # the fake accepted every chunk's HTML
        shown = "\n".join(m.text or "" for m in sent)
        positions = [shown.index(f"print({n})") for n in range(12)]
        assert positions == sorted(positions)
        assert shown.index("Result") < shown.index("row 19") < shown.index("The end.")


async def test_html_telegram_refuses_is_sent_again_as_plain_text(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.fake.fail_next(
            "sendMessage",
            status=400,
            description='Bad Request: can\'t parse entities: Unsupported start tag "b" at byte offset 0',
        )
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "**bold** answer")))
        rig.fake.send_dm(ann, "hi")
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.parse_mode is None
        assert reply.text == "bold answer"


async def test_a_rate_limit_delays_the_reply_but_neither_loses_nor_doubles_it(
    tmp_path: Path,
) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.fake.fail_next("sendMessage", status=429, retry_after=1)
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "patience")))
        rig.fake.send_dm(ann, "hi")
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        assert [m.text for m in rig.fake.sent(ann)] == ["patience"]
        statuses = [c.status for c in rig.fake.calls("sendMessage")]
        assert statuses == [429, 200]


async def test_a_message_during_a_long_turn_is_steered_into_it(tmp_path: Path) -> None:
    model = ScriptedModel(say("first thoughts"), dispatch(("caller:user", "both handled")))
    model.gate = asyncio.Event()
    async with telegram_gateway(tmp_path, model=model) as rig:
        ann = rig.fake.user("Ann")
        rig.fake.send_dm(ann, "first")
        await rig.fake.wait_until(lambda: model.requests or None, what="the model call")
        rig.fake.send_dm(ann, "and also this")
        thread = await wait_for_steer(rig, f"telegram:{ann.id}")
        assert thread
        model.gate.set()
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        # The streamed first thoughts showed as a draft, which the answer replaced.
        (reply,) = rig.fake.sent(ann)
        assert reply.text == "both handled"
        assert reply.versions == ("first thoughts", "both handled")
        assert len(model.requests) == 2
        steered = model.requests[1].messages[-1].text()
        assert "injected: true" in steered
        assert steered.endswith("and also this")


async def wait_for_steer(rig: TelegramRig, key: str) -> bool:
    def steered() -> bool:
        thread = rig.gateway.manager.thread(key)
        return thread is not None and thread.session.has_steers()

    await eventually(steered, "the steer")
    return True


async def eventually(check: Callable[[], object], what: str) -> None:
    """Poll ``check`` on our side of the wire until it holds, failing after a deadline."""
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


async def test_the_same_update_twice_runs_one_turn(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "once")))
        sent = rig.fake.send_dm(ann, "hello")
        original = next(m for m in rig.fake.history(ann) if m["message_id"] == sent.message_id)
        rig.fake.inject("message", dict(original))
        await rig.fake.wait_for_sent(ann, 1)
        await rig.fake.wait_until(lambda: rig.fake.pending_updates() == [] or None)
        await rig.gateway.wait_idle()
        assert len(rig.script.requests[f"telegram:{ann.id}"]) == 1
        assert len(rig.fake.sent(ann)) == 1


async def test_a_photo_reaches_the_model_as_an_image(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "a cat")))
        rig.fake.send_photo(ann, b"\xff\xd8\xff fake jpeg", caption="what is this?")
        await rig.fake.wait_for_sent(ann, 1)
        (request,) = rig.script.requests[f"telegram:{ann.id}"]
        prompt = request.messages[-1]
        assert prompt.text().endswith("what is this?")
        (image,) = [p for p in prompt.content if isinstance(p, FilePart)]
        assert image.media_type == "image/jpeg"
        assert (
            image.url
            == "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff fake jpeg").decode()
        )
        # The transcript keeps the reference, never the bytes or a URL with the token.
        thread = rig.gateway.manager.thread(f"telegram:{ann.id}")
        assert thread is not None
        stored = [p for m in thread.session.context() for p in m.content if isinstance(p, FilePart)]
        assert [p.url.split("/")[:3] for p in stored] == [["telegram:", "", "telegram"]]
        assert rig.fake.token not in stored[0].url


async def test_a_second_poller_of_the_token_stops_this_account_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with telegram_gateway(tmp_path) as rig:
        rig.fake.conflict_polling = True
        rig.fake.send_dm(rig.fake.user("Ann"), "ends the poll in flight")
        await eventually(lambda: rig.channel.stopped_reason, "the stop")
        await eventually(lambda: not rig.channel._app.updater.running, "polling to end")  # type: ignore[union-attr]
        health = await rig.gateway.manager.health()
        assert health["channels"]["telegram"]["running"] is False
        assert "409" in health["channels"]["telegram"]["stopped"]
        lines = [r.getMessage() for r in caplog.records if "409 Conflict" in r.getMessage()]
        assert len(lines) == 1
        assert f"@{BOT}" in lines[0]


class Streaming:
    """A model that streams its answer in parts, each part released by the test."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts
        self.release = [asyncio.Event() for _ in parts]

    async def complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None = None
    ) -> ModelResponse:
        for part, go in zip(self.parts, self.release, strict=True):
            await go.wait()
            if on_delta is not None:
                on_delta(part)
        return say("".join(self.parts))

    async def close(self) -> None:
        return None


async def test_a_streamed_answer_grows_in_one_message_the_final_text_replaces(
    tmp_path: Path,
) -> None:
    model = Streaming("Hello", ", Ann", " — here is your answer.")
    async with telegram_gateway(tmp_path, model=model, telegram={"edit_seconds": 0.0}) as rig:
        ann = rig.fake.user("Ann")
        rig.fake.send_dm(ann, "hi")
        model.release[0].set()
        (draft,) = await rig.fake.wait_for_sent(ann, 1)
        assert draft.text == "Hello"
        model.release[1].set()
        await rig.fake.wait_until(lambda: rig.fake.sent(ann)[0].edits or None)
        model.release[2].set()
        await rig.gateway.wait_idle()
        (message,) = rig.fake.sent(ann)  # one message, edited in place
        assert message.text == "Hello, Ann — here is your answer."
        assert message.versions[0] == "Hello"
        assert "Hello, Ann" in message.versions


async def test_a_session_reaches_a_telegram_user_by_channel_and_user_id(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        assert rig.gateway.cli is not None
        # A bot can write only to people who wrote to it first (Telegram's rule).
        rig.script.add(f"telegram:{ann.id}", dispatch())
        rig.fake.send_dm(ann, "hello bot")
        await eventually(lambda: rig.script.requests.get(f"telegram:{ann.id}"), "Ann's turn")
        await rig.gateway.wait_idle()
        rig.script.add(
            "cli",
            dispatch(
                {
                    "to": "session",
                    "params": {"channel": "telegram", "user_id": str(ann.id)},
                    "body": "Please greet Ann",
                }
            ),
        )
        rig.script.add(f"telegram:{ann.id}", dispatch(("user", "Hello Ann, from the team!")))
        await rig.gateway.cli.submit("greet ann on telegram")
        (greeting,) = await rig.fake.wait_for_sent(ann, 1)
        assert greeting.text == "Hello Ann, from the team!"
        assert await rig.gateway.manager.session_exists(f"telegram:{ann.id}")


async def test_a_send_to_telegram_when_it_is_not_running_says_so(tmp_path: Path) -> None:
    from gateway.app import Gateway
    from tests.gateway.conftest import make_config
    from tests.threads.agent.conftest import KeyedScript

    script = KeyedScript()
    script.add(
        "cli",
        dispatch(
            {"to": "session", "params": {"channel": "telegram", "user_id": "5"}, "body": "hi"}
        ),
        dispatch(),
    )
    config = make_config(
        tmp_path,
        models={"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        agents={"default": {"model": "scripted/test"}},
    )
    async with Gateway(config, model_clients={"scripted": ScriptedModel(default=script)}) as gw:
        assert gw.cli is not None
        await gw.cli.submit("greet")
        await gw.wait_idle()
    errors = [
        p.content
        for m in script.requests["cli"][1].messages
        for p in m.tool_results()
        if p.is_error
    ]
    assert any("the telegram channel is not running in this gateway" in e for e in errors)
    assert not any("user-facing" in e for e in errors)


async def test_webhook_mode_takes_updates_posted_with_the_secret_on_the_web_server(
    tmp_path: Path,
) -> None:
    port = free_port()
    webhook = f"http://127.0.0.1:{port}/telegram/default"
    async with telegram_gateway(
        tmp_path,
        telegram={"mode": "webhook", "webhook_url": webhook, "webhook_secret": "s3cret"},
        http_port=port,
    ) as rig:
        assert rig.fake.webhook is not None
        assert rig.fake.webhook.url == webhook
        assert not rig.fake.calls("getUpdates")  # nothing polls
        ann = rig.fake.user("Ann")
        rig.script.add(f"telegram:{ann.id}", dispatch(("caller:user", "via the webhook")))
        rig.fake.send_dm(ann, "hi")
        (reply,) = await rig.fake.wait_for_sent(ann, 1)
        assert reply.text == "via the webhook"
        async with aiohttp.ClientSession() as http:
            forged = {"update_id": 999, "message": {"message_id": 1, "date": 0, "text": "x",
                      "chat": {"id": 5, "type": "private"}}}  # fmt: skip
            for headers in ({}, {SECRET_HEADER: "wrong"}):
                async with http.post(webhook, json=forged, headers=headers) as response:
                    assert response.status == 401
        assert "telegram:5" not in rig.script.requests


async def test_an_edited_message_is_a_new_message_marked_edited(tmp_path: Path) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, dispatch(("caller:user", "first")), dispatch(("caller:user", "fixed")))
        sent = rig.fake.send_dm(ann, "helo")
        await rig.fake.wait_for_sent(ann, 1)
        await rig.gateway.wait_idle()
        rig.fake.edit_message(sent, "hello")
        await rig.fake.wait_for_sent(ann, 2)
        prompts = [r.messages[-1].text() for r in rig.script.requests[key]]
        assert prompts[1].endswith("[edited] hello")


async def test_documents_and_voice_notes_reach_the_model_as_file_references(
    tmp_path: Path,
) -> None:
    async with telegram_gateway(tmp_path) as rig:
        ann = rig.fake.user("Ann")
        key = f"telegram:{ann.id}"
        rig.script.add(key, dispatch(("caller:user", "got it")))
        rig.fake.send_document(
            ann, b"%PDF-1.7 tiny", file_name="report.pdf", mime_type="application/pdf",
            caption="please read",
        )  # fmt: skip
        await rig.fake.wait_for_sent(ann, 1)
        (request,) = rig.script.requests[key]
        prompt = request.messages[-1]
        (part,) = [p for p in prompt.content if isinstance(p, FilePart)]
        assert (part.name, part.media_type, part.size) == ("report.pdf", "application/pdf", 13)
        assert part.url.startswith("telegram://telegram/")  # a reference, not fetched
        assert prompt.text().endswith("please read")

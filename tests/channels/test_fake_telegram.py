"""The fake Telegram speaks the Bot API well enough that the real python-telegram-bot runs on it."""

from __future__ import annotations

import asyncio
import html
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from telegram import (
    Bot,
    BotCommandScopeAllChatAdministrators,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    Update,
)
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from channels.testing import FakeTelegram, FakeUsageError
from channels.testing.telegram_html import HtmlParseError, parse_html

BOT = "gw_test_bot"
# The first 24 bytes of a PNG are enough for its size: 40 × 30 pixels.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 40, 30) + b"\x08\x02rest"


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-telegram-bot warns on int durations unless opted in; warnings are errors here.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(bot_username=BOT) as server:
        yield server


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url) as b:
        yield b


def build(fake: FakeTelegram) -> Application[Any, Any, Any, Any, Any, Any]:
    return (
        Application.builder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )


@asynccontextmanager
async def polling(
    app: Application[Any, Any, Any, Any, Any, Any], **options: Any
) -> AsyncIterator[None]:
    """Run ``app`` as a bot runs it: initialize, start, poll; then stop it all."""
    await app.initialize()
    await app.start()
    await app.updater.start_polling(**options)  # type: ignore[union-attr]
    try:
        yield
    finally:
        await app.updater.stop()  # type: ignore[union-attr]
        await app.stop()
        await app.shutdown()


class Recorder:
    """A message handler that keeps every message and answers each one."""

    def __init__(self, answer: str = "got it") -> None:
        self.answer = answer
        self.messages: list[Message] = []

    async def __call__(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        assert message is not None
        self.messages.append(message)
        await message.reply_text(self.answer)


async def test_a_dm_reaches_the_bot_with_its_chat_and_user_and_the_reply_is_recorded(
    fake: FakeTelegram,
) -> None:
    recorder = Recorder("<b>hi</b> Ann")
    app = build(fake)
    app.add_handler(MessageHandler(filters.TEXT, recorder))
    ann = fake.user("Ann", username="ann")
    async with polling(app):
        sent = fake.send_dm(ann, "hello bot")
        [reply] = await fake.wait_for_sent(ann, 1)
    [message] = recorder.messages
    assert message.text == "hello bot"
    assert message.message_id == sent.message_id
    assert message.chat.id == ann.id
    assert message.chat.type == "private"
    assert message.from_user is not None
    assert message.from_user.username == "ann"
    assert reply.method == "sendMessage"
    assert reply.chat_id == ann.id
    assert reply.text == "<b>hi</b> Ann"
    assert reply.parse_mode is None
    assert reply.message_id == sent.message_id + 1
    assert [c.method for c in fake.calls()][:2] == ["getMe", "deleteWebhook"]


async def test_confirmed_updates_are_not_delivered_again_after_the_poller_restarts(
    fake: FakeTelegram,
) -> None:
    ann = fake.user("Ann")
    first, second = Recorder(), Recorder()
    app = build(fake)
    app.add_handler(MessageHandler(filters.TEXT, first))
    async with polling(app):
        fake.send_dm(ann, "one")
        await fake.wait_for_sent(ann, 1)
    assert fake.pending_updates() == []
    app = build(fake)
    app.add_handler(MessageHandler(filters.TEXT, second))
    async with polling(app):
        fake.send_dm(ann, "two")
        await fake.wait_for_sent(ann, 2)
    assert [m.text for m in first.messages] == ["one"]
    assert [m.text for m in second.messages] == ["two"]
    last = fake.calls("getUpdates")[-1]
    assert last.params["timeout"] == "0"
    assert last.status == 200


async def test_get_updates_honours_offset_limit_and_allowed_updates(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    one, two = fake.send_dm(ann, "one"), fake.send_dm(ann, "two")
    fake.press_button(one, ann, "ignored")
    [first] = await bot.get_updates(limit=1)
    assert first.update_id == one.update_id
    updates = await bot.get_updates(offset=first.update_id + 1, allowed_updates=["message"])
    assert [u.update_id for u in updates] == [two.update_id]
    # The button press was not allowed, so Telegram dropped it: nothing is left after "two".
    await bot.get_updates(offset=updates[-1].update_id + 1)
    assert fake.pending_updates() == []


async def test_a_long_poll_is_answered_as_soon_as_an_update_arrives(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for_poll()
    sent = fake.send_dm(ann, "wake up")
    async with asyncio.timeout(10):  # well before the poll's own 30 s
        [update] = await poll
    assert update.update_id == sent.update_id


async def test_retry_after_carries_the_servers_wait(fake: FakeTelegram, bot: Bot) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    fake.fail_next("sendMessage", 429, retry_after=7)
    with pytest.raises(RetryAfter) as caught:
        await bot.send_message(ann.id, "too fast")
    assert caught.value.retry_after == timedelta(seconds=7)
    assert fake.sent(ann) == []
    await bot.send_message(ann.id, "later")
    assert [s.text for s in fake.sent(ann)] == ["later"]


@pytest.mark.parametrize(
    ("status", "description", "error", "text"),
    [
        (403, None, Forbidden, "Forbidden: bot was blocked by the user"),
        (400, "chat not found", BadRequest, "Chat not found"),
        (500, None, NetworkError, "Internal Server Error"),
    ],
)
async def test_injected_failures_become_the_librarys_errors(
    fake: FakeTelegram,
    bot: Bot,
    status: int,
    description: str | None,
    error: type[TelegramError],
    text: str,
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    fake.fail_next("sendMessage", status, description=description)
    with pytest.raises(error) as caught:
        await bot.send_message(ann.id, "x")
    assert type(caught.value) is error
    assert caught.value.message == text


@pytest.mark.parametrize(
    ("markup", "why"),
    [
        ("a <br> b", 'unsupported start tag "br" at byte offset 2'),
        ("<b>bold</i>", 'unmatched end tag at byte offset 7, expected "</b>", found "</i>"'),
        ("<b>open", 'can\'t find end tag corresponding to start tag "b"'),
        ("x < y", 'unsupported start tag "" at byte offset 2'),
    ],
)
async def test_malformed_html_is_refused_as_telegram_refuses_it(
    fake: FakeTelegram, bot: Bot, markup: str, why: str
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    with pytest.raises(BadRequest) as caught:
        await bot.send_message(ann.id, markup, parse_mode="HTML")
    assert caught.value.message == f"Can't parse entities: {why}"
    assert fake.sent(ann) == []


@pytest.mark.parametrize(
    ("markup", "text", "entities"),
    [
        ("<b>a<i>b</i></b>", "ab", [("bold", 0, 2), ("italic", 1, 1)]),
        ("&lt;3 &amp; &#128512; &copy;", "<3 & 😀 &copy;", []),
        ("<b>🏟</b> ok", "🏟 ok", [("bold", 0, 2)]),
        ('<pre><code class="language-py">x = 1</code></pre>', "x = 1", [("pre", 0, 5)]),
        (
            '<span class="tg-spoiler">s</span> <a href="x.org">l</a>',
            "s l",
            [("spoiler", 0, 1), ("text_link", 2, 1)],
        ),
        ("<blockquote expandable>q</blockquote>", "q", [("expandable_blockquote", 0, 1)]),
    ],
)
def test_html_becomes_telegrams_text_and_utf16_entities(
    markup: str, text: str, entities: list[tuple[str, int, int]]
) -> None:
    parsed, found = parse_html(markup)
    assert parsed == text
    assert sorted((e["type"], e["offset"], e["length"]) for e in found) == sorted(entities)


@given(st.text())
def test_any_text_escaped_for_html_comes_back_unchanged(text: str) -> None:
    assert parse_html(html.escape(text)) == (text, [])


def test_html_errors_name_the_byte_offset_of_the_problem() -> None:
    with pytest.raises(HtmlParseError, match="Unclosed start tag at byte offset 5"):
        parse_html("🏟 <b")  # the emoji is four bytes
    with pytest.raises(HtmlParseError, match='Tag "span" must have class "tg-spoiler"'):
        parse_html("<span>x</span>")
    with pytest.raises(HtmlParseError, match="Unexpected end tag at byte offset 0"):
        parse_html("</b>")


async def test_text_longer_than_4096_utf16_units_is_too_long(fake: FakeTelegram, bot: Bot) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    await bot.send_message(ann.id, "😀" * 2048)  # two UTF-16 units each: exactly 4096
    with pytest.raises(BadRequest, match=r"^Message is too long$"):
        await bot.send_message(ann.id, "😀" * 2048 + "!")
    with pytest.raises(BadRequest, match=r"^Message text is empty$"):
        await bot.send_message(ann.id, "  \n ")


async def test_conflict_polling_reaches_the_poller_as_conflict(fake: FakeTelegram) -> None:
    errors: list[TelegramError] = []
    seen = asyncio.Event()

    def on_error(error: TelegramError) -> None:
        errors.append(error)
        seen.set()

    fake.conflict_polling = True
    app = build(fake)
    async with polling(app, error_callback=on_error):
        async with asyncio.timeout(10):
            await seen.wait()
    assert isinstance(errors[0], Conflict)
    assert "terminated by other getUpdates request" in errors[0].message


async def test_a_newer_poll_ends_the_older_one_with_conflict(fake: FakeTelegram, bot: Bot) -> None:
    ann = fake.user("Ann")
    older = asyncio.create_task(bot.get_updates(timeout=30))
    await fake.wait_for_poll()
    async with Bot(fake.token, base_url=fake.base_url) as other_process:
        newer = asyncio.create_task(other_process.get_updates(timeout=30))
        with pytest.raises(Conflict, match="terminated by other getUpdates request"):
            await older
        sent = fake.send_dm(ann, "who gets it")
        assert [u.update_id for u in await newer] == [sent.update_id]


async def test_a_photo_is_fetched_and_downloaded_with_the_registered_bytes(
    fake: FakeTelegram,
) -> None:
    downloaded: list[bytes] = []
    sizes: list[tuple[int, int]] = []

    async def fetch(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        photo = update.message.photo[-1]
        sizes.append((photo.width, photo.height))
        file = await photo.get_file()
        downloaded.append(bytes(await file.download_as_bytearray()))
        await update.message.reply_text(update.message.caption or "")

    app = build(fake)
    app.add_handler(MessageHandler(filters.PHOTO, fetch))
    ann = fake.user("Ann")
    async with polling(app):
        fake.send_photo(ann, PNG, caption="my cat")
        [reply] = await fake.wait_for_sent(ann, 1)
    assert downloaded == [PNG]
    assert sizes == [(40, 30)]
    assert reply.text == "my cat"


async def test_a_document_the_bot_uploads_is_recorded_and_can_be_fetched(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    message = await bot.send_document(
        ann.id, b"report body", filename="r.txt", caption="<i>done</i>", parse_mode="HTML"
    )
    [sent] = fake.sent(ann)
    assert (sent.method, sent.file, sent.file_name, sent.text) == (
        "sendDocument",
        b"report body",
        "r.txt",
        "done",
    )
    assert message.document is not None
    assert message.document.file_name == "r.txt"
    assert message.caption_entities[0].type == MessageEntity.ITALIC
    file = await bot.get_file(message.document.file_id)
    assert bytes(await file.download_as_bytearray()) == b"report body"


async def test_a_set_webhook_gets_the_updates_and_makes_get_updates_conflict(
    fake: FakeTelegram,
) -> None:
    app = build(fake)
    recorder = Recorder()
    app.add_handler(MessageHandler(filters.TEXT, recorder))
    secrets: list[str | None] = []

    async def receive(request: web.Request) -> web.Response:
        secrets.append(request.headers.get("X-Telegram-Bot-Api-Secret-Token"))
        await app.update_queue.put(Update.de_json(await request.json(), app.bot))
        return web.Response()

    receiver = web.Application()
    receiver.router.add_post("/hook", receive)
    runner = web.AppRunner(receiver)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    ann = fake.user("Ann")
    try:
        async with app:
            await app.start()
            await app.bot.set_webhook(f"http://127.0.0.1:{port}/hook", secret_token="s3cret")
            fake.send_dm(ann, "through the hook")
            await fake.wait_for_sent(ann, 1)
            with pytest.raises(Conflict, match="webhook is active"):
                await app.bot.get_updates()
            info = await app.bot.get_webhook_info()
            await app.stop()
    finally:
        await runner.cleanup()
    assert secrets == ["s3cret"]
    assert [m.text for m in recorder.messages] == ["through the hook"]
    assert info.url.endswith("/hook")
    assert info.pending_update_count == 0


async def test_a_failing_webhook_keeps_the_update_and_reports_the_error(
    fake: FakeTelegram, bot: Bot
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=500)

    receiver = web.Application()
    receiver.router.add_post("/hook", refuse)
    runner = web.AppRunner(receiver)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        await bot.set_webhook(f"http://127.0.0.1:{runner.addresses[0][1]}/hook")
        fake.send_dm(fake.user("Ann"), "lost?")
        await fake.wait_until(
            lambda: fake.webhook and fake.webhook.last_error_message, what="a webhook error"
        )
        info = await bot.get_webhook_info()
    finally:
        await runner.cleanup()
    assert info.pending_update_count == 1
    assert info.last_error_message == "Wrong response from the webhook: 500"


async def test_a_forum_topic_message_has_its_thread_and_the_reply_stays_in_it(
    fake: FakeTelegram, bot: Bot
) -> None:
    recorder = Recorder("noted")
    app = build(fake)
    app.add_handler(MessageHandler(filters.TEXT, recorder))
    forum = fake.group("Team", forum=True)
    ann = fake.user("Ann")
    topic = fake.open_topic(forum, "Releases", by=ann)
    async with polling(app):
        asked = fake.send_group(forum, ann, "status?", topic=topic)
        [reply] = await fake.wait_for_sent(forum, 1)
    [message] = recorder.messages
    assert message.chat.type == "supergroup"
    assert message.chat.is_forum
    assert message.is_topic_message
    assert message.message_thread_id == topic
    # As in Telegram, a topic message that replies to nothing replies to the topic's creation.
    assert message.reply_to_message is not None
    assert message.reply_to_message.forum_topic_created is not None
    assert reply.message_thread_id == topic
    assert reply.reply_to_message_id == asked.message_id
    # A reply sent without the thread id still lands in the replied-to message's topic.
    followup = await bot.send_message(forum.id, "and more", reply_to_message_id=asked.message_id)
    assert followup.message_thread_id == topic
    with pytest.raises(BadRequest, match="Message thread not found"):
        await bot.send_message(forum.id, "lost", message_thread_id=999)


async def test_a_group_mention_and_a_reply_arrive_with_entities_and_reply_to(
    fake: FakeTelegram, bot: Bot
) -> None:
    group = fake.group("Friends")
    ann = fake.user("Ann")
    ours = await bot.send_message(group.id, "hello group")
    fake.send_group(group, ann, "what do you think?", mention=True, reply_to=ours.message_id)
    [update] = await bot.get_updates()
    message = update.message
    assert message is not None
    assert message.chat.type == "group"
    assert list(message.parse_entities([MessageEntity.MENTION]).values()) == [f"@{BOT}"]
    assert message.text == f"@{BOT} what do you think?"
    assert message.reply_to_message is not None
    assert message.reply_to_message.text == "hello group"


async def test_a_bot_in_privacy_mode_sees_only_mentions_commands_and_replies() -> None:
    async with FakeTelegram(bot_username=BOT, privacy_mode=True) as fake:
        group, ann = fake.group("Friends"), fake.user("Ann")
        assert fake.send_group(group, ann, "just chatting").update_id is None
        assert fake.send_group(group, ann, "hey", mention=True).update_id is not None
        assert fake.send_group(group, ann, "/help").update_id is not None
        assert fake.send_group(group, ann, "/help@other_bot").update_id is None


async def test_edits_are_recorded_in_order_and_an_identical_edit_is_refused(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    message = await bot.send_message(ann.id, "draft")
    await bot.edit_message_text("draft 2", chat_id=ann.id, message_id=message.message_id)
    edited = await message.edit_text("<b>final</b>", parse_mode="HTML")
    with pytest.raises(BadRequest, match=r"^Message is not modified"):
        await message.edit_text("<b>final</b>", parse_mode="HTML")
    [sent] = fake.sent(ann)
    assert sent.versions == ("draft", "draft 2", "final")
    assert sent.markup == "<b>final</b>"
    assert sent.parse_mode == "HTML"
    assert isinstance(edited, Message)
    assert edited.edit_date is not None
    await bot.delete_message(ann.id, message.message_id)
    assert fake.sent(ann)[0].deleted
    with pytest.raises(BadRequest, match="Message to edit not found"):
        await message.edit_text("gone")


async def test_commands_chat_actions_and_reactions_are_recorded(
    fake: FakeTelegram, bot: Bot
) -> None:
    await bot.set_my_commands([("new", "Start over"), ("stop", "Stop the turn")])
    await bot.set_my_commands([("ban", "Ban")], scope=BotCommandScopeAllChatAdministrators())
    assert fake.commands() == [("new", "Start over"), ("stop", "Stop the turn")]
    assert fake.commands(scope={"type": "all_chat_administrators"}) == [("ban", "Ban")]
    assert [c.command for c in await bot.get_my_commands()] == ["new", "stop"]
    with pytest.raises(BadRequest, match="Bot_command_invalid"):
        await bot.set_my_commands([("Not Valid", "x")])
    ann = fake.user("Ann")
    said = fake.send_dm(ann, "/start")
    await bot.send_chat_action(ann.id, "typing")
    await bot.set_message_reaction(ann.id, said.message_id, "👀")
    assert [a.action for a in fake.chat_actions(ann)] == ["typing"]
    assert [r.emoji for r in fake.reactions(ann)] == [("👀",)]


async def test_user_media_edits_and_buttons_parse_as_the_librarys_objects(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    said = fake.send_dm(ann, "frist")
    fake.edit_message(said, "first")
    fake.send_voice(ann, b"OggS voice", duration=3)
    fake.send_sticker(ann, emoji="🎉")
    fake.send_document(ann, b"%PDF", file_name="cv.pdf", mime_type="application/pdf")
    menu = await bot.send_message(
        ann.id,
        "pick",
        reply_markup=InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="a")]]),
    )
    fake.press_button(fake.sent(ann)[0], ann, "a")
    updates = await bot.get_updates()
    assert updates[1].edited_message is not None
    assert updates[1].edited_message.text == "first"
    voice, sticker, document = (u.message for u in updates[2:5])
    assert voice is not None
    assert voice.voice is not None
    assert voice.voice.duration == timedelta(seconds=3)
    assert sticker is not None
    assert sticker.sticker is not None
    assert sticker.sticker.emoji == "🎉"
    assert document is not None
    assert document.document is not None
    assert document.document.mime_type == "application/pdf"
    query = updates[5].callback_query
    assert query is not None
    assert query.data == "a"
    assert query.message is not None
    assert query.message.message_id == menu.message_id
    await query.answer("chosen")
    assert fake.callback_answers[0]["text"] == "chosen"


async def test_a_button_press_reaches_a_callback_query_handler(fake: FakeTelegram) -> None:
    pressed: list[str | None] = []

    async def on_press(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.callback_query is not None
        pressed.append(update.callback_query.data)
        await update.callback_query.answer()

    app = build(fake)
    app.add_handler(CallbackQueryHandler(on_press))
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    async with polling(app):
        await app.bot.send_message(ann.id, "pick")
        fake.press_button(fake.sent(ann)[0], ann, "yes")
        await fake.wait_for_calls("answerCallbackQuery")
    assert pressed == ["yes"]


async def test_an_answer_held_after_the_send_leaves_the_outcome_unknown(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    hold = fake.hold_next("sendMessage", applied=True)
    with pytest.raises(TimedOut):
        await bot.send_message(ann.id, "did it go?", read_timeout=0.2)
    assert (await hold.arrived())["text"] == "did it go?"
    hold.release()
    assert [s.text for s in fake.sent(ann)] == ["did it go?"]


async def test_a_call_held_before_it_applies_leaves_nothing_when_the_client_gives_up(
    fake: FakeTelegram, bot: Bot
) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    hold = fake.hold_next("sendMessage")
    with pytest.raises(TimedOut):
        await bot.send_message(ann.id, "never", read_timeout=0.2)
    [call] = await fake.wait_for_calls("sendMessage")
    assert call.status == 0
    hold.release()
    assert fake.sent(ann) == []


async def test_a_wrong_token_is_unauthorized(fake: FakeTelegram) -> None:
    with pytest.raises(InvalidToken):
        async with Bot("42:wrong", base_url=fake.base_url):
            pass
    assert fake.calls("getMe")[0].status == 401


async def test_plain_http_clients_get_telegrams_envelopes(fake: FakeTelegram) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "/start")
    async with aiohttp.ClientSession() as http:
        url = f"{fake.base_url}{fake.token}"
        async with http.post(f"{url}/SENDMESSAGE", json={"chat_id": ann.id, "text": "hi"}) as r:
            body = await r.json()
        assert body["ok"] is True
        assert body["result"]["text"] == "hi"
        async with http.get(f"{url}/getChatMenuButtonX") as r:
            assert (r.status, await r.json()) == (
                404,
                {
                    "ok": False,
                    "error_code": 404,
                    "description": "Not Found: the fake Telegram does not answer getChatMenuButtonX",
                },
            )
    with pytest.raises(FakeUsageError, match="does not answer 'getChatMenuButtonX'"):
        fake.fail_next("getChatMenuButtonX")

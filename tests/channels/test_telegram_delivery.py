"""The Telegram adapter's delivery, against the fake Bot API: retries, and a send never doubled."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channels.errors import DeliveryError
from channels.telegram import TelegramChannel, TelegramOptions
from channels.testing import FakeTelegram
from threads.sinks import OutboundMessage


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(bot_username="gw_bot") as server:
        yield server


async def started(fake: FakeTelegram, **options: object) -> TelegramChannel:
    channel = TelegramChannel(
        TelegramOptions(
            token=fake.token,
            base_url=fake.base_url,
            base_file_url=fake.base_file_url,
            **options,  # type: ignore[arg-type]
        )
    )

    async def ignore(inbound: object) -> None:
        return None

    await channel.start(ignore)
    return channel


async def test_a_send_whose_outcome_is_unknown_is_not_sent_again(fake: FakeTelegram) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "hi")  # a bot writes only to people who wrote first
    channel = await started(fake, read_timeout=0.2)
    try:
        hold = fake.hold_next("sendMessage", applied=True)
        with pytest.raises(DeliveryError, match="may or may not have arrived"):
            await channel.deliver(str(ann.id), OutboundMessage(text="once"))
        hold.release()
        await fake.wait_for_calls("sendMessage", 1)
        assert [m.text for m in fake.sent(ann)] == ["once"]
        assert len(fake.calls("sendMessage")) == 1
    finally:
        await channel.stop()


async def test_a_server_error_is_retried_and_the_message_arrives_once(fake: FakeTelegram) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "hi")
    channel = await started(fake)
    try:
        fake.fail_next("sendMessage", status=502)
        delivery = await channel.deliver(str(ann.id), OutboundMessage(text="after a hiccup"))
        assert [m.text for m in fake.sent(ann)] == ["after a hiccup"]
        assert [c.status for c in fake.calls("sendMessage")] == [502, 200]
        assert delivery.message_ids == (str(fake.sent(ann)[0].message_id),)
    finally:
        await channel.stop()


async def test_a_user_who_blocked_the_bot_is_a_clear_delivery_error(fake: FakeTelegram) -> None:
    ann = fake.user("Ann")
    fake.send_dm(ann, "hi")
    channel = await started(fake)
    try:
        fake.fail_next(
            "sendMessage", status=403, description="Forbidden: bot was blocked by the user"
        )
        with pytest.raises(DeliveryError, match="blocked by the user"):
            await channel.deliver(str(ann.id), OutboundMessage(text="hello?"))
        assert len(fake.calls("sendMessage")) == 1
    finally:
        await channel.stop()

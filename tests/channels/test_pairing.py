"""Pairing: codes, their hour, the pending cap, approve / deny / revoke, telling the user."""

from __future__ import annotations

import pytest

from channels.errors import (
    DeliveryError,
    ExpiredCodeError,
    NotPairedError,
    UnknownChannelError,
    UnknownCodeError,
)
from channels.pairing import (
    ALPHABET,
    APPROVED_TEXT,
    DENIED_TEXT,
    NOTICES,
    PENDING,
    PairingService,
    new_code,
)
from tests.channels.clock import HandClock
from threads.state.memory import MemoryStateStore

CHANNELS = ("telegram", "discord")


class Told:
    """The notifier: records what users were told; can be made to fail."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, str]] = []
        self.failing = False

    async def __call__(self, channel: str, chat_id: str, text: str) -> None:
        if self.failing:
            raise DeliveryError(channel, chat_id, "the platform is down")
        self.messages.append((channel, chat_id, text))


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


@pytest.fixture
def store(clock: HandClock) -> MemoryStateStore:
    return MemoryStateStore(clock=clock)


@pytest.fixture
def told() -> Told:
    return Told()


@pytest.fixture
async def pairing(store: MemoryStateStore, clock: HandClock, told: Told) -> PairingService:
    service = PairingService(store, CHANNELS, clock=clock, notify=told)
    await service.load()
    return service


def test_codes_are_eight_characters_without_look_alikes() -> None:
    assert not set("0O1IL") & set(ALPHABET)
    codes = {new_code(set()) for _ in range(200)}
    assert all(len(code) == 8 and set(code) <= set(ALPHABET) for code in codes)
    assert len(codes) > 190  # random, not a counter


async def test_a_request_remembers_channel_user_name_chat_code_and_its_hour(
    pairing: PairingService, clock: HandClock
) -> None:
    ask = await pairing.ask("telegram", "11", user_name="Ada", chat_id="11")
    assert ask.outcome == "issued"
    request = ask.request
    assert request is not None
    assert (request.channel, request.user_id, request.user_name, request.chat_id) == (
        "telegram",
        "11",
        "Ada",
        "11",
    )
    assert request.created == clock.now
    assert (request.expires - request.created).total_seconds() == 3600


async def test_asking_again_within_the_hour_gives_the_same_code(
    pairing: PairingService, clock: HandClock
) -> None:
    first = await pairing.ask("telegram", "11")
    clock.advance(minutes=59)
    again = await pairing.ask("telegram", "11")
    assert again.outcome == "again"
    assert again.request == first.request
    assert len((await pairing.listing())["telegram"].pending) == 1


async def test_after_the_hour_the_same_sender_gets_a_new_code(
    pairing: PairingService, clock: HandClock
) -> None:
    first = await pairing.ask("telegram", "11")
    clock.advance(hours=1)
    later = await pairing.ask("telegram", "11")
    assert later.outcome == "issued"
    assert first.request is not None
    assert later.request is not None
    assert later.request.code != first.request.code


async def test_a_fourth_sender_is_told_to_try_later_while_three_wait(
    pairing: PairingService,
) -> None:
    for user in ("1", "2", "3"):
        assert (await pairing.ask("telegram", user)).outcome == "issued"
    assert (await pairing.ask("telegram", "4")).outcome == "full"
    assert (await pairing.ask("discord", "4")).outcome == "issued"  # per channel
    assert len((await pairing.listing())["telegram"].pending) == 3


async def test_an_expired_request_frees_its_place(
    pairing: PairingService, clock: HandClock
) -> None:
    for user in ("1", "2", "3"):
        await pairing.ask("telegram", user)
    clock.advance(minutes=61)
    assert (await pairing.ask("telegram", "4")).outcome == "issued"


async def test_approve_pairs_the_user_and_tells_them_through_their_chat(
    pairing: PairingService, told: Told
) -> None:
    ask = await pairing.ask("discord", "9", user_name="Bo", chat_id="dm-chan-77")
    assert ask.request is not None
    assert not pairing.is_paired("discord", "9")
    outcome = await pairing.approve("discord", ask.request.code)
    assert outcome.told
    assert pairing.is_paired("discord", "9")
    assert not pairing.is_paired("telegram", "9")
    assert told.messages == [("discord", "dm-chan-77", APPROVED_TEXT)]
    listing = (await pairing.listing())["discord"]
    assert listing.pending == ()
    assert [(u.user_id, u.user_name) for u in listing.paired] == [("9", "Bo")]


async def test_a_code_is_matched_ignoring_case_spaces_and_dashes(
    pairing: PairingService,
) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    code = ask.request.code
    typed = f" {code[:4].lower()}-{code[4:].lower()} "
    await pairing.approve("telegram", typed)
    assert pairing.is_paired("telegram", "11")


async def test_an_unknown_code_is_an_error_naming_it(pairing: PairingService) -> None:
    with pytest.raises(UnknownCodeError, match="unknown pairing code 'ABCD2345' on telegram"):
        await pairing.approve("telegram", "ABCD2345")
    with pytest.raises(UnknownCodeError, match="'nope'"):
        await pairing.deny("telegram", "nope")


async def test_a_code_from_one_channel_does_not_approve_on_another(
    pairing: PairingService,
) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    with pytest.raises(UnknownCodeError):
        await pairing.approve("discord", ask.request.code)
    assert not pairing.is_paired("discord", "11")


async def test_an_expired_code_says_it_expired_not_that_it_is_unknown(
    pairing: PairingService, clock: HandClock
) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    clock.advance(minutes=60)
    expected = f"expired pairing code {ask.request.code} on telegram: the user must write again"
    with pytest.raises(ExpiredCodeError, match=expected):
        await pairing.approve("telegram", ask.request.code)
    assert not pairing.is_paired("telegram", "11")


async def test_an_unknown_channel_names_the_channels_that_pair(pairing: PairingService) -> None:
    with pytest.raises(UnknownChannelError, match="'slack': pairing is for telegram, discord"):
        await pairing.approve("slack", "ABCD2345")
    with pytest.raises(UnknownChannelError):
        await pairing.ask("web", "1")


async def test_deny_drops_the_request_and_tells_the_user_once(
    pairing: PairingService, told: Told
) -> None:
    ask = await pairing.ask("telegram", "11", chat_id="11")
    assert ask.request is not None
    outcome = await pairing.deny("telegram", ask.request.code)
    assert outcome.told
    assert told.messages == [("telegram", "11", DENIED_TEXT)]
    with pytest.raises(UnknownCodeError):
        await pairing.deny("telegram", ask.request.code)
    assert told.messages == [("telegram", "11", DENIED_TEXT)]
    assert not pairing.is_paired("telegram", "11")
    assert (await pairing.ask("telegram", "11")).outcome == "issued"


async def test_revoke_unpairs_a_user_and_a_second_revoke_says_they_are_not_paired(
    pairing: PairingService, told: Told
) -> None:
    ask = await pairing.ask("telegram", "11", user_name="Ada")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    user = await pairing.revoke("telegram", "11")
    assert (user.user_id, user.user_name) == ("11", "Ada")
    assert not pairing.is_paired("telegram", "11")
    assert (await pairing.listing())["telegram"].paired == ()
    with pytest.raises(NotPairedError, match="telegram user 11 is not paired"):
        await pairing.revoke("telegram", "11")
    assert told.messages == [("telegram", "11", APPROVED_TEXT)]  # a revoke tells nobody


async def test_pairings_are_loaded_by_a_new_service_over_the_same_store(
    pairing: PairingService, store: MemoryStateStore, clock: HandClock
) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    again = PairingService(store, CHANNELS, clock=clock)
    assert not again.is_paired("telegram", "11")
    await again.load()
    assert again.is_paired("telegram", "11")


async def test_another_process_s_approval_reaches_memory_at_the_next_refresh(
    pairing: PairingService, store: MemoryStateStore, clock: HandClock
) -> None:
    other = PairingService(store, CHANNELS, clock=clock)
    await other.load()
    assert await other.refresh() is False
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    assert not other.is_paired("telegram", "11")
    assert await other.refresh() is True
    assert other.is_paired("telegram", "11")
    await pairing.revoke("telegram", "11")
    await other.refresh()
    assert not other.is_paired("telegram", "11")


async def test_a_user_who_cannot_be_told_now_is_told_at_the_next_start(
    store: MemoryStateStore, clock: HandClock, told: Told
) -> None:
    offline = PairingService(store, CHANNELS, clock=clock)  # the CLI with no gateway running
    ask = await offline.ask("telegram", "11", chat_id="11")
    assert ask.request is not None
    outcome = await offline.approve("telegram", ask.request.code)
    assert not outcome.told
    started = PairingService(store, CHANNELS, clock=clock, notify=told)
    await started.load()
    assert await started.deliver_notices() == 1
    assert told.messages == [("telegram", "11", APPROVED_TEXT)]
    assert await started.deliver_notices() == 0
    assert told.messages == [("telegram", "11", APPROVED_TEXT)]


async def test_a_notice_that_still_cannot_be_delivered_is_kept_for_later(
    pairing: PairingService, told: Told, store: MemoryStateStore
) -> None:
    told.failing = True
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    outcome = await pairing.deny("telegram", ask.request.code)
    assert not outcome.told
    assert await pairing.deliver_notices() == 0
    assert len(await store.scan(NOTICES)) == 1
    told.failing = False
    assert await pairing.deliver_notices() == 1
    assert told.messages == [("telegram", "11", DENIED_TEXT)]


async def test_expired_requests_are_swept_from_the_store(
    pairing: PairingService, store: MemoryStateStore, clock: HandClock
) -> None:
    await pairing.ask("telegram", "11")
    clock.advance(hours=2)
    assert len(await store.scan(PENDING)) == 1  # still says "expired" when approved
    assert (await pairing.listing())["telegram"].pending == ()
    clock.advance(days=1)
    assert await pairing.sweep() == 1
    assert await store.scan(PENDING) == []

"""Access decisions: direct-message policies, pairing, group allowlists, mentions, context, owners."""

from __future__ import annotations

from typing import Any

import pytest

from channels.access import CONTEXT_CLOSE, CONTEXT_OPEN, Access, with_context
from channels.base import Inbound
from channels.pairing import PairingService
from config.access import AccessConfig
from tests.channels.clock import HandClock
from threads.state import Json, StateStoreError
from threads.state.memory import MemoryStateStore


class CountingStore(MemoryStateStore):
    """The memory store, counting every read (the common path must make none),
    and failing them as an unreachable Redis would when told to."""

    def __init__(self, clock: HandClock) -> None:
        super().__init__(clock=clock)
        self.calls = 0
        self.failing = False

    def _read(self) -> None:
        self.calls += 1
        if self.failing:
            raise StateStoreError("redis://127.0.0.1:6379/0", "cannot reach Redis")

    async def get(self, namespace: str, key: str) -> Json:
        self._read()
        return await super().get(namespace, key)

    async def scan(self, namespace: str, prefix: str = "") -> list[tuple[str, Json]]:
        self._read()
        return await super().scan(namespace, prefix)


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


@pytest.fixture
def store(clock: HandClock) -> CountingStore:
    return CountingStore(clock)


@pytest.fixture
async def pairing(store: CountingStore, clock: HandClock) -> PairingService:
    service = PairingService(store, ("telegram", "discord"), clock=clock)
    await service.load()
    return service


def access(
    pairing: PairingService, *, session_owners: tuple[str, ...] = (), **options: Any
) -> Access:
    return Access(
        "telegram",
        AccessConfig.model_validate(options),
        pairing=pairing,
        session_owners=session_owners,
    )


def dm(user: str = "11", text: str = "hello", **fields: Any) -> Inbound:
    return Inbound(channel="telegram", chat_id=user, user_id=user, text=text, **fields)


def group(text: str, *, chat: str = "-100", user: str = "21", **fields: Any) -> Inbound:
    fields.setdefault("chat_type", "group")
    return Inbound(channel="telegram", chat_id=chat, user_id=user, text=text, **fields)


# -- direct messages


async def test_a_stranger_s_direct_message_gets_a_pairing_code_and_goes_no_further(
    pairing: PairingService,
) -> None:
    verdict = await access(pairing).admit(dm("11", user_name="Ada"))
    assert verdict.action == "pair"
    assert verdict.inbound is None
    [request] = (await pairing.listing())["telegram"].pending
    assert request.user_name == "Ada"
    assert f"Pairing code: {request.code} (valid for 60 more minutes)" in verdict.reply
    assert f"gateway pairing approve telegram {request.code}" in verdict.reply


async def test_the_same_stranger_writing_again_is_shown_the_same_code(
    pairing: PairingService, clock: HandClock
) -> None:
    gate = access(pairing)
    first = await gate.admit(dm("11"))
    clock.advance(minutes=20)
    second = await gate.admit(dm("11", text="hello??"))
    code = (await pairing.listing())["telegram"].pending[0].code
    assert code in first.reply
    assert code in second.reply
    assert "valid for 40 more minutes" in second.reply


async def test_a_fourth_stranger_is_told_to_try_later(pairing: PairingService) -> None:
    gate = access(pairing)
    for user in ("1", "2", "3"):
        await gate.admit(dm(user))
    verdict = await gate.admit(dm("4"))
    assert verdict.action == "pair"
    assert verdict.reply == (
        "This bot has too many pairing requests waiting right now; try again later."
    )


async def test_a_stranger_is_told_in_one_line_when_the_state_store_fails(
    pairing: PairingService, store: CountingStore
) -> None:
    store.failing = True
    verdict = await access(pairing).admit(dm("11"))
    assert (verdict.action, verdict.inbound) == ("pair", None)
    assert verdict.reply == "This bot cannot take new users right now; try again later."


async def test_a_paired_user_runs_and_the_check_touches_no_store(
    pairing: PairingService, store: CountingStore
) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    gate = access(pairing)
    before = store.calls
    message = dm("11")
    verdict = await gate.admit(message)
    assert verdict.action == "run"
    assert verdict.inbound == message
    assert store.calls == before


async def test_allow_from_and_owners_run_without_pairing(pairing: PairingService) -> None:
    gate = access(pairing, allow_from=[11], owners=["12"], session_owners=("telegram:13",))
    for user in ("11", "12", "13"):
        assert gate.check(dm(user)).action == "run"
    assert gate.check(dm("14")).action == "pair"


async def test_under_allowlist_a_stranger_gets_one_plain_line_with_their_id(
    pairing: PairingService,
) -> None:
    gate = access(pairing, dm_policy="allowlist", allow_from=["11"])
    assert gate.check(dm("11")).action == "run"
    verdict = await gate.admit(dm("12"))
    assert verdict.action == "refuse"
    assert verdict.reply == "This bot answers only allowlisted users; your telegram user id is 12."
    assert (await pairing.listing())["telegram"].pending == ()


async def test_under_allowlist_paired_users_are_not_let_in(pairing: PairingService) -> None:
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    assert access(pairing, dm_policy="allowlist").check(dm("11")).action == "refuse"


async def test_disabled_direct_messages_get_one_plain_line_even_from_the_allowlist(
    pairing: PairingService,
) -> None:
    gate = access(pairing, dm_policy="disabled", allow_from=["11"])
    verdict = gate.check(dm("11"))
    assert verdict.action == "refuse"
    assert verdict.reply == "This bot does not take direct messages."


async def test_open_direct_messages_run_for_anyone(pairing: PairingService) -> None:
    assert access(pairing, dm_policy="open").check(dm("999")).action == "run"


async def test_a_revoked_user_is_a_stranger_again(pairing: PairingService) -> None:
    gate = access(pairing)
    ask = await pairing.ask("telegram", "11")
    assert ask.request is not None
    await pairing.approve("telegram", ask.request.code)
    assert gate.check(dm("11")).action == "run"
    await pairing.revoke("telegram", "11")
    assert gate.check(dm("11")).action == "pair"


def test_pairing_without_a_pairing_service_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="needs a pairing service"):
        Access("telegram", AccessConfig())


# -- groups


async def test_a_group_that_is_not_allowlisted_is_ignored_without_a_reply(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"])
    verdict = await gate.admit(group("@bot hi", chat="-200", mentioned=True))
    assert (verdict.action, verdict.reply, verdict.inbound) == ("ignore", "", None)
    assert gate.check(group("@bot hi", chat="-100", mentioned=True)).action == "run"


async def test_a_disabled_group_policy_ignores_even_listed_groups(
    pairing: PairingService,
) -> None:
    gate = access(pairing, group_policy="disabled", groups=["-100"])
    assert gate.check(group("/status", mentioned=True), command=True).action == "ignore"


async def test_an_open_group_policy_serves_any_group(pairing: PairingService) -> None:
    gate = access(pairing, group_policy="open")
    assert gate.check(group("hi", chat="-999", mentioned=True)).action == "run"


async def test_a_discord_style_channel_chat_is_a_group(pairing: PairingService) -> None:
    gate = access(pairing, groups=["555"])
    assert gate.check(group("hi", chat="556", chat_type="channel")).action == "ignore"
    assert gate.check(group("hi", chat="555", chat_type="channel")).action == "context"


@pytest.mark.parametrize(
    "fields",
    [{"mentioned": True}, {"reply_to_bot": True}, {"text": "Hey BOT, what now?"}],
    ids=["mention", "reply-to-bot", "pattern"],
)
async def test_a_mention_a_reply_to_the_bot_or_a_pattern_addresses_it(
    pairing: PairingService, fields: dict[str, Any]
) -> None:
    gate = access(pairing, groups=["-100"], mention_patterns=[r"\bhey bot\b"])
    text = fields.pop("text", "what now?")
    assert gate.check(group(text, **fields)).action == "run"
    assert gate.check(group("what now?")).action == "context"


async def test_without_require_mention_every_group_message_runs(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"], require_mention=False)
    assert gate.check(group("anyone?")).action == "run"


async def test_unaddressed_messages_are_prepended_to_the_next_addressed_one_with_senders(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"])
    assert gate.check(group("the build is red", user_name="Ada")).action == "context"
    assert gate.check(group("since noon\nafter the merge", user="22")).action == "context"
    verdict = gate.check(group("@bot why?", user_name="Cy", mentioned=True))
    assert verdict.action == "run"
    assert with_context(verdict.context, "@bot why?") == "\n".join(
        [
            CONTEXT_OPEN,
            "Ada: the build is red",
            "user 22: since noon",
            "  after the merge",
            CONTEXT_CLOSE,
            "@bot why?",
        ]
    )
    again = gate.check(group("@bot and now?", mentioned=True))
    assert again.context == ()  # the context went with the first turn
    assert with_context(again.context, "@bot and now?") == "@bot and now?"


async def test_a_forum_topic_belongs_to_its_group_and_keeps_its_own_context(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"])
    assert gate.check(group("chatter", chat="group:-100:topic:7")).action == "context"
    assert gate.check(group("chatter", chat="group:-200:topic:7")).action == "ignore"
    mentioned = gate.check(group("@bot hi", chat="group:-100", mentioned=True))
    assert (mentioned.action, mentioned.context) == ("run", ())
    assert [line.text for line in gate.context("group:-100:topic:7")] == ["chatter"]


async def test_context_is_bounded_per_chat_and_drops_the_oldest(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100", "-200"], group_context_messages=2)
    for n in range(1, 5):
        gate.check(group(f"m{n}", user_name="Ada"))
    gate.check(group("other chat", chat="-200", user_name="Bo"))
    assert [line.text for line in gate.context("-100")] == ["m3", "m4"]
    assert [line.text for line in gate.context("-200")] == ["other chat"]


async def test_no_context_is_kept_when_group_context_messages_is_zero(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"], group_context_messages=0)
    gate.check(group("chatter"))
    verdict = gate.check(group("@bot hi", mentioned=True))
    assert verdict.action == "run"
    assert verdict.context == ()


async def test_a_command_in_a_group_needs_no_mention_and_leaves_the_context(
    pairing: PairingService,
) -> None:
    gate = access(pairing, groups=["-100"])
    gate.check(group("chatter", user_name="Ada"))
    verdict = gate.check(group("/status"), command=True)
    assert (verdict.action, verdict.context) == ("run", ())
    assert [line.text for line in gate.context("-100")] == ["chatter"]


# -- owners


async def test_owners_are_the_channel_s_and_session_owners_for_this_channel(
    pairing: PairingService,
) -> None:
    gate = access(pairing, owners=["1"], session_owners=("telegram:2", "discord:3", "4"))
    assert [gate.is_owner(user) for user in ("1", "2", "3", "4", "5")] == [
        True,
        True,
        False,
        True,
        False,
    ]


async def test_a_telegram_account_s_owners_include_the_platform_s(
    pairing: PairingService,
) -> None:
    owners = ("telegram:2", "telegram.support:3", "telegram.other:4")
    gate = Access("telegram.support", AccessConfig(), pairing=pairing, session_owners=owners)
    assert [gate.is_owner(user) for user in ("2", "3", "4")] == [True, True, False]

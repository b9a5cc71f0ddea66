"""Key shapes: main, OpenClaw keys, session ids, reserved words, and the derived kind."""

from __future__ import annotations

import pytest

from tests.threads.sessions.conftest import USER, Rig, SessionScript, session_config
from threads.errors import InvalidKeyError
from threads.sessions.errors import ReservedSessionKeyError, UnknownSessionError
from threads.sessions.keys import channel_of, chat_type_of, kind_of, resolve, translate
from threads.testing.scripted import dispatch

CONFIG = session_config(session={"main_key": "telegram:42"})


@pytest.mark.parametrize(
    ("given", "ours"),
    [
        ("main", "telegram:42"),
        ("agent:default:main", "telegram:42"),
        ("agent:default:telegram:group:-1001", "telegram:group:-1001"),
        ("agent:default:discord:channel:555", "discord:channel:555"),
        ("agent:default:discord:group:555", "discord:channel:555"),
        ("agent:ops:webchat:group:room1", "web:group:room1"),
        ("agent:default:discord:dm:77", "discord:77"),
        ("agent:default:telegram:direct:77", "telegram:77"),
        ("agent:default:cron:nightly", "cron:nightly"),
        ("cron:nightly", "cron:nightly"),
        ("hook:3f2a", "hook:3f2a"),
        ("node-kitchen", "node-kitchen"),
        ("agent:default:subagent:0b6f", "agent:default:subagent:0b6f"),
        ("cli", "cli"),
        ("telegram:1:threads:find-news", "telegram:1:threads:find-news"),
    ],
)
def test_every_accepted_shape_translates_to_our_key(given: str, ours: str) -> None:
    assert translate(given, CONFIG) == ours


def test_global_is_main_only_when_the_scope_is_global() -> None:
    with pytest.raises(ReservedSessionKeyError, match="'global' is a reserved session key"):
        translate("global", CONFIG)
    scoped = session_config(session={"main_key": "cli", "scope": "global"})
    assert translate("global", scoped) == "cli"


def test_unknown_is_reserved() -> None:
    with pytest.raises(ReservedSessionKeyError, match="'unknown' is a reserved session key"):
        translate("unknown", CONFIG)


def test_an_agent_key_of_no_known_shape_is_an_error_listing_the_shapes() -> None:
    with pytest.raises(InvalidKeyError, match=r"agent:<agentId>:<channel>:group:<id>"):
        translate("agent:default:mystery:1", CONFIG)


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("telegram:42", "main"),
        ("telegram:group:-1001", "group"),
        ("discord:channel:555", "group"),
        ("web:group:room1", "group"),
        ("cron:nightly", "cron"),
        ("hook:3f2a", "hook"),
        ("node-kitchen", "node"),
        ("telegram:7", "other"),
        ("discord:77", "other"),
        ("agent:default:subagent:0b6f", "other"),
    ],
)
def test_kind_is_derived_from_the_key(key: str, kind: str) -> None:
    assert kind_of(key, CONFIG) == kind


def test_chat_types_of_our_keys() -> None:
    assert chat_type_of("telegram:group:-1001") == "group"
    assert chat_type_of("telegram:group:-1001:topic:7") == "group"
    assert chat_type_of("discord:channel:5") == "channel"
    assert chat_type_of("telegram:5") == "direct"
    assert chat_type_of("cron:x") == ""


def test_the_row_channel_is_internal_for_system_keys_and_the_chat_channel_otherwise() -> None:
    assert channel_of("cron:nightly", "cron") == "internal"
    assert channel_of("hook:1", "hook") == "internal"
    assert channel_of("agent:default:subagent:0b6f", "other") == "internal"
    assert channel_of("telegram:group:-1001", "group") == "telegram"
    assert channel_of("web:abc", "other") == "webchat"
    assert channel_of("telegram:42", "main", "telegram") == "telegram"
    assert channel_of("custom-thing", "other") == "unknown"


async def test_a_session_id_resolves_to_its_key(rig: Rig, script: SessionScript) -> None:
    script.add(USER, dispatch())
    await rig.result(await rig.say(USER, "hi"))
    session_id = str(await rig.store.resolve(USER))
    resolved = await resolve(session_id, rig.store, rig.manager.config)
    assert (resolved.key, resolved.session_id, resolved.current) == (USER, session_id, True)


async def test_the_id_of_a_replaced_session_names_that_session(
    rig: Rig, script: SessionScript
) -> None:
    script.add(USER, dispatch())
    await rig.result(await rig.say(USER, "hi"))
    old = str(await rig.store.resolve(USER))
    await rig.manager.new_session(USER)
    resolved = await resolve(old, rig.store, rig.manager.config)
    assert (resolved.key, resolved.session_id, resolved.current) == (USER, old, False)


async def test_a_missing_session_id_or_key_is_an_error(rig: Rig) -> None:
    with pytest.raises(UnknownSessionError, match="session id 's_01J000000000000000000000AA'"):
        await resolve("s_01J000000000000000000000AA", rig.store, rig.manager.config)
    with pytest.raises(UnknownSessionError, match="session key 'telegram:404' names no session"):
        await resolve("telegram:404", rig.store, rig.manager.config)

"""Session keys: the shapes, the parent of child keys, and each refusal rule."""

from __future__ import annotations

import pytest

from threads.errors import InvalidKeyError
from threads.keys import SessionKey, endpoint_key


@pytest.mark.parametrize(
    "key",
    [
        "telegram:123",
        "telegram:-100123",
        "discord:channel:456",
        "cli",
        "web:abc",
        "cron:daily-report",
        "telegram:123:threads:find-news",
        "telegram:123:fork:hypo-a",
        "agent:main:subagent:0b6f3a2e-8a1d-4c55-9c1e-2f7d8f0a1b2c",
    ],
)
def test_every_documented_shape_is_a_valid_key(key: str) -> None:
    assert SessionKey(key) == key


def test_a_subagent_key_names_its_parent_and_task() -> None:
    key = SessionKey("telegram:123:threads:find-news")
    assert key.parent == "telegram:123"
    assert key.task_id == "find-news"
    assert key.child_kind == "subagent"


def test_a_fork_of_a_subagent_names_the_subagent_as_parent() -> None:
    key = SessionKey("cli:threads:a:fork:b")
    assert key.parent == "cli:threads:a"
    assert key.root == "cli"
    assert key.child_kind == "fork"


def test_top_level_keys_have_no_parent() -> None:
    assert SessionKey("telegram:123").parent is None
    assert SessionKey("cli").parent is None


def test_child_builds_the_subagent_and_fork_keys() -> None:
    key = SessionKey("cli")
    assert key.child("subagent", "x1") == "cli:threads:x1"
    assert key.child("fork", "x1") == "cli:fork:x1"


def test_child_refuses_a_task_id_outside_the_alphabet() -> None:
    with pytest.raises(InvalidKeyError, match=r"\[a-z0-9_-\]"):
        SessionKey("cli").child("subagent", "Find News")


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "cannot be empty"),
        ("telegram::1", "part 2 is empty"),
        (":telegram", "part 1 is empty"),
        ("telegram:", "part 2 is empty"),
        ("telegram:1 2", "whitespace"),
        ("telegram:\t1", "whitespace"),
        ("web:a/b", "path separators"),
        ("web:a\\b", "path separators"),
        ("web:..", "'..'"),
        ("x" * 513, "longer than 512"),
        ("web:\x00", "control characters"),
    ],
)
def test_a_bad_key_is_refused_naming_the_rule(value: str, rule: str) -> None:
    with pytest.raises(InvalidKeyError) as caught:
        SessionKey(value)
    assert rule in str(caught.value)


def test_a_512_character_key_is_accepted() -> None:
    assert len(SessionKey("w:" + "x" * 510)) == 512


def test_user_facing_keys_are_the_channel_chats() -> None:
    assert SessionKey("telegram:1").is_user_facing
    assert SessionKey("cli").is_user_facing
    assert not SessionKey("cron:job").is_user_facing
    assert not SessionKey("cli:threads:t").is_user_facing


@pytest.mark.parametrize(
    ("channel", "user_id", "key"),
    [
        ("telegram", "12345", "telegram:12345"),
        ("telegram", "group:-100777", "telegram:group:-100777"),
        ("discord", "42", "discord:42"),
        ("discord", "group:99", "discord:channel:99"),
        ("wecom", "ZhaoJing", "wecom:ZhaoJing"),
        ("wecom", "group:g1", "wecom:group:g1"),
        ("cli", "anyone", "cli"),
    ],
)
def test_channel_endpoints_map_to_session_keys(channel: str, user_id: str, key: str) -> None:
    assert endpoint_key(channel, user_id) == key

"""The access section of a chat channel: defaults, ids, patterns, bounds, errors by path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from config import ConfigError, load_config, validate
from threads.sessions.policy import is_owner

GATEWAY = [sys.executable, "-m", "gateway"]


def test_by_default_strangers_pair_and_only_allowlisted_groups_are_served() -> None:
    access = validate({}, "test").channels.telegram.access
    assert (access.dm_policy, access.group_policy) == ("pairing", "allowlist")
    assert access.require_mention
    assert access.group_context_messages == 20


def test_the_chat_channels_with_access_sections_are_telegram_and_discord() -> None:
    assert sorted(validate({}, "test").channels.access_sections()) == ["discord", "telegram"]


def test_each_telegram_account_has_an_access_section_of_its_own() -> None:
    config = validate(
        {
            "channels": {
                "telegram": {
                    "accounts": {"support": {"access": {"dm_policy": "open"}}},
                    "access": {"dm_policy": "disabled"},
                }
            }
        },
        "test",
    )
    sections = config.channels.access_sections()
    assert sorted(sections) == ["discord", "telegram", "telegram.support"]
    assert sections["telegram.support"].dm_policy == "open"
    assert sections["telegram"].dm_policy == "disabled"


def test_a_bad_account_access_option_is_named_by_its_account_path() -> None:
    with pytest.raises(ConfigError) as caught:
        validate(
            {"channels": {"telegram": {"accounts": {"support": {"access": {"groups": [""]}}}}}},
            "test",
        )
    [problem] = caught.value.problems
    assert problem.path == "channels.telegram.accounts.support.access.groups.0"


def test_ids_written_as_numbers_are_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[channels.telegram.access]\nallow_from = [12345]\ngroups = [-1001234567890]\n"
        'owners = [7, "8"]\n'
    )
    access = load_config(path, env={}).channels.telegram.access
    assert access.allow_from == ["12345"]
    assert access.groups == ["-1001234567890"]
    assert access.owners == ["7", "8"]


@pytest.mark.parametrize(
    ("options", "path", "words"),
    [
        ({"mention_patterns": ["ok", "(bot"]}, "mention_patterns.1", "not a regular expression"),
        ({"dm_policy": "friends"}, "dm_policy", "pairing"),
        ({"group_policy": "pairing"}, "group_policy", "allowlist"),
        ({"group_context_messages": 201}, "group_context_messages", "200"),
        ({"allow_from": [""]}, "allow_from.0", "at least 1"),
        ({"allowed_users": ["1"]}, "allowed_users", "Extra inputs"),
    ],
)
def test_a_bad_access_option_is_an_error_naming_its_dotted_path(
    options: dict[str, object], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"channels": {"discord": {"access": options}}}, "test")
    [problem] = caught.value.problems
    assert problem.path == f"channels.discord.access.{path}"
    assert words in problem.message


def test_config_check_reports_a_bad_mention_pattern_by_its_path(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[channels.telegram.access]\nmention_patterns = ["[unclosed"]\n')
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "channels.telegram.access.mention_patterns.0: '[unclosed' is not a regular" in (
        result.stderr
    )


class Sender:
    def __init__(self, channel: str, user_id: str) -> None:
        self.channel = channel
        self.user_id = user_id


def test_a_channel_s_access_owners_are_owners_for_the_send_policy() -> None:
    config = validate({"channels": {"telegram": {"access": {"owners": ["42"]}}}}, "test")
    assert is_owner(Sender("telegram", "42"), config)
    assert not is_owner(Sender("discord", "42"), config)
    assert not is_owner(Sender("telegram", "43"), config)


def test_a_platform_owner_owns_every_account_of_that_platform() -> None:
    config = validate({"session": {"owners": ["telegram:7"]}}, "test")
    assert is_owner(Sender("telegram.support", "7"), config)
    assert not is_owner(Sender("discord", "7"), config)

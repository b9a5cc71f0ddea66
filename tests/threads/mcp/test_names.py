"""MCP tool names on the wire: what every model API accepts, unique, and the same each listing."""

from __future__ import annotations

import re

from threads.mcp.names import label, wire_names

ACCEPTED = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_a_plain_tool_name_is_the_server_two_underscores_and_the_tool() -> None:
    assert wire_names("github", ["create_issue"]) == {"create_issue": "github__create_issue"}
    assert label("github", "create_issue") == "github.create_issue"


def test_names_with_other_characters_too_long_or_colliding_stay_valid_and_distinct() -> None:
    tools = ["repo.list", "repo/list", "repo list", "x" * 100, "y" * 100]
    names = wire_names("gh", tools)
    assert all(ACCEPTED.match(n) for n in names.values())
    assert len(set(names.values())) == len(tools)
    assert names["repo.list"] == "gh__repo_list"
    assert wire_names("gh", tools) == names

"""Which calls ask: rules with equals / prefix / glob predicates, per agent and for all."""

from __future__ import annotations

from typing import Any

import pytest

from config import validate
from config.errors import ConfigError
from tests.threads.approvals.conftest import DeployArgs
from threads.agent.tools import Tool, ToolContext
from threads.approvals.predicates import ArgTest, args_sha256, json_equal, resolve
from threads.approvals.rules import ApprovalRules


async def _noop(args: DeployArgs, ctx: ToolContext) -> str:
    return ""


def tool(name: str, *, requires_approval: bool = False, label: str = "") -> Tool[DeployArgs]:
    return Tool(
        name=name,
        description="",
        args=DeployArgs,
        handler=_noop,
        label=label,
        requires_approval=requires_approval,
    )


def rules(agents: dict[str, Any] | None = None, **approvals: Any) -> ApprovalRules:
    return ApprovalRules(
        validate({"agents": agents or {"default": {}}, "approvals": approvals}, "t")
    )


@pytest.mark.parametrize(
    ("test", "args", "matches"),
    [
        ({"pointer": "/env", "equals": "prod"}, {"env": "prod"}, True),
        ({"pointer": "/env", "equals": "prod"}, {"env": "production"}, False),
        ({"pointer": "/n", "equals": 1}, {"n": 1.0}, True),
        ({"pointer": "/n", "equals": True}, {"n": 1}, False),
        ({"pointer": "", "equals": {"a": [1, {"b": 2}]}}, {"a": [1, {"b": 2}]}, True),
        ({"pointer": "/path", "prefix": "/ws/"}, {"path": "/ws/a.txt"}, True),
        ({"pointer": "/path", "prefix": "/ws/"}, {"path": "/ws-evil/a"}, False),
        ({"pointer": "/path", "prefix": "/ws/"}, {"path": 3}, False),
        ({"pointer": "/command", "glob": "git status*"}, {"command": "git status -s"}, True),
        (
            {"pointer": "/command", "glob": "git status*"},
            {"command": "rm -rf /; git status"},
            False,
        ),
        ({"pointer": "/command", "glob": "ls ?"}, {"command": "ls é"}, True),
        ({"pointer": "/command", "glob": "a.c"}, {"command": "abc"}, False),
        ({"pointer": "/argv/0", "equals": "git"}, {"argv": ["git", "log"]}, True),
        ({"pointer": "/a~1b", "equals": 1}, {"a/b": 1}, True),
        ({"pointer": "/missing", "equals": None}, {}, False),
    ],
)
def test_an_argument_predicate_holds_only_for_what_it_names(
    test: dict[str, Any], args: dict[str, Any], matches: bool
) -> None:
    assert ArgTest.from_wire(test).matches(args) is matches


def test_json_equality_ignores_key_order_and_pointers_resolve_into_lists() -> None:
    assert json_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not json_equal([1, 2], [2, 1])
    assert resolve({"a": [{"b": 5}]}, "/a/0/b") == 5
    assert args_sha256({"b": 1, "a": 2}) == args_sha256({"a": 2, "b": 1})


def test_the_first_matching_rule_decides_the_agents_own_before_the_global_ones() -> None:
    judge = rules(
        agents={"default": {}, "ops": {"approval_rules": [{"tool": "deploy", "action": "allow"}]}},
        rules=[
            {"tool": "deploy", "args": [{"pointer": "/env", "glob": "prod*"}], "action": "ask"},
            {"tool": "deploy", "action": "deny", "reason": "staging is frozen"},
        ],
    )
    deploy = tool("deploy")
    assert judge.verdict(deploy, "default", {"env": "production"}).action == "ask"
    denied = judge.verdict(deploy, "default", {"env": "staging"})
    assert (denied.action, denied.reason) == ("deny", "staging is frozen")
    assert judge.verdict(deploy, "ops", {"env": "production"}).action == "allow"


def test_without_a_rule_the_tools_own_setting_and_auto_approve_decide() -> None:
    judge = rules(agents={"default": {}, "trusted": {"auto_approve": ["run_*"]}})
    risky = tool("run_command", requires_approval=True)
    assert judge.verdict(risky, "default", {}).action == "ask"
    assert judge.verdict(risky, "trusted", {}).action == "allow"
    assert judge.verdict(tool("read_file"), "default", {}).action == "allow"


def test_a_rule_may_name_an_mcp_tool_by_its_label_or_a_glob() -> None:
    judge = rules(rules=[{"tool": "github.*"}])
    assert judge.verdict(tool("github__merge", label="github.merge"), "default", {}).action == "ask"


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        ({"pointer": "/a"}, "give exactly one of equals, prefix or glob"),
        ({"pointer": "/a", "prefix": "x", "glob": "y"}, "this one has prefix, glob"),
        ({"pointer": "a", "equals": 1}, "is not a JSON pointer"),
        ({"pointer": "/a", "prefix": ""}, "an empty prefix matches nothing"),
    ],
)
def test_a_bad_predicate_is_one_error_naming_its_place(
    predicate: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"approvals": {"rules": [{"tool": "x", "args": [predicate]}]}}, "t")
    assert "approvals.rules.0.args.0" in str(caught.value)
    assert message in str(caught.value)

"""Which calls wait for a person: the configured rules, then the tool's own setting.

The first rule that matches decides — the calling agent's ``approval_rules``
first, then ``[approvals] rules`` — whether the call is asked about, allowed
or denied. With no rule matching, a tool marked ``requires_approval``
(``run_command`` by default, an MCP server's tools when its section says so)
is asked about unless the agent lists it in ``auto_approve``; every other
call runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from config.approvals import ApprovalRule
from config.models import GatewayConfig
from threads.agent.tools import Tool
from threads.approvals.predicates import ArgTest, all_match

Action = Literal["ask", "allow", "deny"]

REQUIRES_APPROVAL = "tool requires approval"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What the rules say of one call, and why (the words a person or the model sees)."""

    action: Action
    reason: str = ""


RUN = Verdict(action="allow")


class ApprovalRules:
    """The rules of one configuration, ready to judge calls."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self._global = [_Rule.of(r) for r in config.approvals.rules]
        self._agents = {
            name: [_Rule.of(r) for r in agent.approval_rules]
            for name, agent in config.agents.items()
        }
        self._any = bool(self._global) or any(self._agents.values())

    def verdict(self, tool: Tool[Any], agent: str, args: Mapping[str, Any]) -> Verdict:
        """Ask, allow or deny one call of ``tool`` by ``agent`` with ``args``."""
        if self._any:
            for rule in [*self._agents.get(agent, []), *self._global]:
                if rule.matches(tool, args):
                    return rule.verdict()
        if not tool.requires_approval:
            return RUN
        settings = self.config.agents.get(agent)
        patterns = settings.auto_approve if settings is not None else []
        if any(tool.matches(p) for p in patterns):
            return RUN
        return Verdict(action="ask", reason=REQUIRES_APPROVAL)


@dataclass(frozen=True, slots=True)
class _Rule:
    rule: ApprovalRule
    tests: tuple[ArgTest, ...]

    @classmethod
    def of(cls, rule: ApprovalRule) -> _Rule:
        return cls(rule, tuple(ArgTest.from_wire(p.wire()) for p in rule.args))

    def matches(self, tool: Tool[Any], args: Mapping[str, Any]) -> bool:
        return tool.matches(self.rule.tool) and all_match(self.tests, args)

    def verdict(self) -> Verdict:
        reason = self.rule.reason
        if self.rule.action == "deny":
            reason = reason or "denied by the gateway's approval rules"
        elif self.rule.action == "ask":
            reason = reason or "an approval rule asks for a person's approval"
        return Verdict(action=self.rule.action, reason=reason)

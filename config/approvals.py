"""Configuration of approvals: which tool calls wait for a person, who decides, how long.

    [approvals]
    expiry_seconds = 86400                # a request not decided by then is denied
    approvers = ["telegram:42"]           # may decide any session's requests

    [[approvals.rules]]                   # for every agent
    tool = "write_file"
    args = [{ pointer = "/path", prefix = "config/" }]
    action = "ask"

    [[agents.ops.approval_rules]]         # for one agent, tried before the global rules
    tool = "run_command"
    args = [{ pointer = "/command", glob = "git status*" }]
    action = "allow"

A rule names a tool (its name, its label such as ``github.create_issue``, or
a glob of either) and, optionally, argument predicates every one of which the
call's arguments must satisfy: ``equals`` (any JSON value), ``prefix`` or
``glob`` (strings; ``*`` is any run of characters, ``?`` one), at a JSON
pointer (``/command``, ``/file/path``; ``""`` is the whole arguments object).
The first matching rule decides: ``ask`` a person, ``allow`` without asking,
``deny`` at once with ``reason``. With no rule matching, the tool's own
``requires_approval`` setting decides (``run_command``'s and an MCP server's)
and the agent's ``auto_approve`` patterns still skip the asking.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from config.section import Section

ApprovalAction = Literal["ask", "allow", "deny"]


class ArgPredicate(Section):
    """One test of one argument: exactly one of ``equals``, ``prefix``, ``glob``."""

    pointer: str = ""
    equals: JsonValue = None
    prefix: str | None = None
    glob: str | None = None

    @field_validator("pointer")
    @classmethod
    def _pointer(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(
                f"{value!r} is not a JSON pointer: start it with '/' (e.g. '/command'), "
                "or leave it empty for the whole arguments object"
            )
        return value

    @model_validator(mode="after")
    def _one_test(self) -> ArgPredicate:
        tests = [name for name in ("equals", "prefix", "glob") if name in self.model_fields_set]
        if len(tests) != 1:
            raise ValueError(
                "give exactly one of equals, prefix or glob"
                + (f" (this one has {', '.join(tests)})" if tests else "")
            )
        if self.prefix == "":
            raise ValueError("an empty prefix matches nothing; leave args out to match any call")
        if self.glob == "":
            raise ValueError('an empty glob matches only an empty string; use equals = ""')
        return self

    def wire(self) -> dict[str, Any]:
        """The predicate as stored in grants and requests: pointer and its one test."""
        out: dict[str, Any] = {"pointer": self.pointer}
        if "equals" in self.model_fields_set:
            out["equals"] = self.equals
        if self.prefix is not None:
            out["prefix"] = self.prefix
        if self.glob is not None:
            out["glob"] = self.glob
        return out


class ApprovalRule(Section):
    """A tool (and argument predicates) and what its calls do: ask, allow or deny."""

    tool: str = Field(min_length=1)
    args: list[ArgPredicate] = Field(default_factory=list)
    action: ApprovalAction = "ask"
    # deny: the words the model gets after "DENIED: "; ask: shown to the person asked.
    reason: str = ""


class ApprovalsConfig(Section):
    """How approvals run: rules for every agent, who may decide, when requests lapse."""

    # A request still undecided this long after it was made is denied (0: never).
    expiry_seconds: float = Field(default=86_400.0, ge=0, le=31_536_000)
    # Who may decide any session's requests, besides the person whose message
    # started the turn and the owners: "<channel>:<user id>" or "<platform>:<user id>".
    approvers: list[str] = Field(default_factory=list)
    rules: list[ApprovalRule] = Field(default_factory=list)

    @field_validator("approvers")
    @classmethod
    def _approvers(cls, value: list[str]) -> list[str]:
        for who in value:
            channel, sep, user = who.partition(":")
            if not sep or not channel or not user:
                raise ValueError(
                    f"{who!r} is not '<channel>:<user id>' (e.g. 'telegram:123456789')"
                )
        return value

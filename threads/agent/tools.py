"""Typed tools: pydantic argument models, the JSON schema the model sees, safe calls.

A tool's schema is generated once, when it is registered (or given as is, for
a tool whose schema comes from elsewhere: an MCP server's). Calling a tool
never raises into the runner: invalid arguments come back to the model as an
error naming the field, an exception as an error with its message, and a
call past its timeout as a timeout error — and the turn goes on.

Agents choose tools with patterns (``*``, a name, ``-name``, shell-style
globs such as ``github.*`` matched against a tool's name and its label).
``*`` covers the standard tools only: an *opt-in* tool (the files, web and
command built-ins, every MCP server's tools) is offered to an agent whose
patterns name it. A tool marked ``requires_approval`` passes the registry's
:class:`ApprovalGate` before it runs; with no gate it is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from threads.llm.base import UNPARSED_ARGS_KEY, ToolSpec
from threads.messages import FilePart, ToolCallPart, ToolResultPart
from threads.turns import Parked

if TYPE_CHECKING:
    from threads.turns import Run

log = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """What a tool returns: content for the model, and whether the turn ends here.

    ``files`` (images a tool produced, by reference) travel with the tool
    results, so a model that accepts images sees them. ``parked`` is the
    approval gate's answer for a call that waits for a person: the call has
    no result yet, and the turn ends pending on it.
    """

    content: str
    is_error: bool = False
    ends_turn: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[FilePart, ...] = ()
    parked: Parked | None = None


@dataclass(slots=True, kw_only=True)
class ToolContext:
    """What a tool may reach: the run it serves and the services the gateway provides.

    ``call_id`` is the id of the call being run (set per call by the registry).
    """

    run: Run
    key: str
    agent: str
    services: Any = None
    call_id: str = ""

    def for_call(self, call_id: str) -> ToolContext:
        """This context for one call (``dataclasses.replace`` costs 10× as much, per call)."""
        if type(self) is not ToolContext:
            return dataclasses.replace(self, call_id=call_id)  # a subclass keeps its fields
        return ToolContext(
            run=self.run, key=self.key, agent=self.agent, services=self.services, call_id=call_id
        )


Handler = Callable[[A, ToolContext], Awaitable[ToolOutput | str]]


class AnyArgs(BaseModel):
    """The argument model of a tool whose schema is given as is: any object, checked by the tool."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool(Generic[A]):
    """One tool: name, description, argument model, handler and timeout.

    ``name`` is what the model calls (``[a-zA-Z0-9_-]``, at most 64
    characters, as every provider accepts); ``label`` is the name people and
    configuration use when it differs (an MCP tool's ``server.tool``).
    ``schema`` replaces the one generated from ``args`` (then ``args`` is
    usually :class:`AnyArgs`). ``opt_in`` tools are left out of ``*``;
    ``requires_approval`` tools pass the registry's approval gate first.
    """

    name: str
    description: str
    args: type[A]
    handler: Handler[A]
    timeout: float | None = None
    terminates: bool = False
    group: str = ""
    label: str = ""
    schema: Mapping[str, Any] | None = None
    opt_in: bool = False
    requires_approval: bool = False
    spec: ToolSpec = field(init=False)

    def __post_init__(self) -> None:
        schema = dict(self.schema) if self.schema is not None else self.args.model_json_schema()
        schema.pop("title", None)
        object.__setattr__(
            self, "spec", ToolSpec(name=self.name, description=self.description, parameters=schema)
        )

    @property
    def shown(self) -> str:
        """The name to show people: the label when there is one."""
        return self.label or self.name

    def matches(self, pattern: str) -> bool:
        """Whether a selection pattern (a name, a label or a glob of either) names this tool."""
        if pattern in (self.name, self.label):
            return True
        if not any(c in pattern for c in "*?["):
            return False
        return fnmatch.fnmatchcase(self.name, pattern) or (
            bool(self.label) and fnmatch.fnmatchcase(self.label, pattern)
        )

    def in_group(self, group: str) -> Tool[A]:
        """This tool, in a named group (agents can be denied a whole group, e.g. ``cron``)."""
        return dataclasses.replace(self, group=group)


def tool(
    name: str,
    description: str,
    args: type[A],
    *,
    timeout: float | None = None,
    terminates: bool = False,
    opt_in: bool = False,
    requires_approval: bool = False,
) -> Callable[[Handler[A]], Tool[A]]:
    """Decorate an async handler ``(args, ctx) -> ToolOutput | str`` into a :class:`Tool`."""

    def wrap(handler: Handler[A]) -> Tool[A]:
        return Tool(
            name=name,
            description=description,
            args=args,
            handler=handler,
            timeout=timeout,
            terminates=terminates,
            opt_in=opt_in,
            requires_approval=requires_approval,
        )

    return wrap


class ApprovalGate(Protocol):
    """Decides whether a call may run, must wait for a person, or is refused.

    ``review`` sees every call once its arguments are valid: ``None`` lets it
    run; a :class:`ToolOutput` is what the model gets instead — a refusal, or
    one whose ``parked`` says the call waits for a decision (the turn ends
    pending; the decision's resume runs the call, approved).
    """

    async def review(
        self, tool: Tool[Any], call: ToolCallPart, ctx: ToolContext
    ) -> ToolOutput | None:
        """``None`` to run the call; otherwise what the model is told, or the park."""
        ...


class ToolRegistry:
    """The tools the gateway offers, and per-agent selections of them (cached).

    Tools may come and go while the gateway runs (an MCP server's, as it
    connects and drops): :meth:`replace_group` swaps a group's tools and
    forgets the cached selections.
    """

    def __init__(
        self,
        tools: Iterable[Tool[Any]] = (),
        *,
        default_timeout: float = 120.0,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._selections: dict[tuple[str, ...], tuple[dict[str, Tool[Any]], list[ToolSpec]]] = {}
        self.default_timeout = default_timeout
        self.approvals = approvals
        for t in tools:
            self.register(t)

    def register(self, t: Tool[Any]) -> None:
        if t.name in self._tools:
            raise ValueError(f"tool {t.name!r} is registered twice")
        self._tools[t.name] = t
        self._selections.clear()

    def replace_group(self, group: str, tools: Iterable[Tool[Any]]) -> list[str]:
        """Withdraw every tool of ``group`` and register ``tools`` in it instead.

        Returns the names refused because another group's tool has them.
        """
        if not group:
            raise ValueError("replace_group needs a group name")
        for name in [n for n, t in self._tools.items() if t.group == group]:
            del self._tools[name]
        refused = []
        for t in tools:
            if t.name in self._tools:
                refused.append(t.name)
                continue
            self._tools[t.name] = t if t.group == group else t.in_group(group)
        self._selections.clear()
        return refused

    def group(self, group: str) -> list[Tool[Any]]:
        """The tools registered in ``group`` now."""
        return [t for t in self._tools.values() if t.group == group]

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def select(
        self, allowed: Sequence[str], *, without_groups: Sequence[str] = ()
    ) -> tuple[dict[str, Tool[Any]], list[ToolSpec]]:
        """The tools an agent may use, and their specs.

        Patterns apply in order: ``*`` adds every tool but the opt-in ones; a
        name, a label or a glob (``github.*``) adds what it matches, opt-in
        tools included; ``-pattern`` removes what it matches. Tools in
        ``without_groups`` are left out whatever ``allowed`` says.
        """
        cache_key = (*allowed, "\0", *without_groups)
        cached = self._selections.get(cache_key)
        if cached is not None:
            return cached
        chosen: dict[str, Tool[Any]] = {}
        for pattern in allowed:
            if pattern == "*":
                chosen.update((n, t) for n, t in self._tools.items() if not t.opt_in)
            elif pattern.startswith("-"):
                for name in [n for n, t in chosen.items() if t.matches(pattern[1:])]:
                    del chosen[name]
            elif pattern in self._tools:
                chosen[pattern] = self._tools[pattern]
            else:
                chosen.update((n, t) for n, t in self._tools.items() if t.matches(pattern))
        for name in [n for n, t in chosen.items() if t.group and t.group in without_groups]:
            del chosen[name]
        # dispatch is how a turn ends; every agent has it.
        if "dispatch" in self._tools:
            chosen.setdefault("dispatch", self._tools["dispatch"])
        selection = (chosen, [t.spec for t in chosen.values()])
        self._selections[cache_key] = selection
        return selection

    async def call(
        self,
        tools: Mapping[str, Tool[Any]],
        call: ToolCallPart,
        ctx: ToolContext,
        *,
        approved: bool = False,
    ) -> tuple[ToolResultPart, ToolOutput]:
        """Run one call; every failure becomes an error result the model can read.

        ``approved`` is a person's decision for this very call: the approval
        gate is not asked again.
        """
        t = tools.get(call.name)
        if t is None:
            known = ", ".join(sorted(tools)) or "none"
            output = ToolOutput(
                content=f"unknown tool {call.name!r}; the tools you have are: {known}",
                is_error=True,
            )
        else:
            if isinstance(ctx, ToolContext):
                ctx = ctx.for_call(call.id)
            output = await self._run(t, call, ctx, approved=approved)
        result = ToolResultPart(
            call_id=call.id, name=call.name, content=output.content, is_error=output.is_error
        )
        return result, output

    async def _run(
        self, t: Tool[Any], call: ToolCallPart, ctx: ToolContext, *, approved: bool
    ) -> ToolOutput:
        raw = call.args.get(UNPARSED_ARGS_KEY)
        if isinstance(raw, str) and len(call.args) == 1:
            shown = raw if len(raw) <= 200 else raw[:197] + "..."
            return ToolOutput(
                content=f"the arguments of {t.name} are not a JSON object: {shown!r}; "
                "call it again with an object matching its schema",
                is_error=True,
            )
        try:
            args = t.args.model_validate(call.args)
        except ValidationError as exc:
            return ToolOutput(content=describe_validation(t.name, exc), is_error=True)
        if not approved:
            instead = await self._review(t, call, ctx)
            if instead is not None:
                return instead
        timeout = t.timeout or self.default_timeout
        try:
            async with asyncio.timeout(timeout):
                out = await t.handler(args, ctx)
        except TimeoutError:
            return ToolOutput(content=f"{t.shown} timed out after {timeout:g} s", is_error=True)
        except Exception as exc:
            log.warning("tool %s failed: %s", t.shown, exc, exc_info=True)
            return ToolOutput(content=f"{t.shown} failed: {exc}", is_error=True)
        return out if isinstance(out, ToolOutput) else ToolOutput(content=str(out))

    async def _review(
        self, t: Tool[Any], call: ToolCallPart, ctx: ToolContext
    ) -> ToolOutput | None:
        if self.approvals is not None:
            return await self.approvals.review(t, call, ctx)
        if t.requires_approval:
            return ToolOutput(
                content=f"{t.shown} requires a person's approval, and no one can approve "
                "calls here; do without it",
                is_error=True,
            )
        return None


def describe_validation(tool_name: str, exc: ValidationError) -> str:
    """A tool error naming each invalid field, for the model to fix and call again."""
    lines = [f"invalid arguments for {tool_name}:"]
    for error in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in error.get("loc", ())) or "(arguments)"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"- {loc}: {message}")
    return "\n".join(lines)


def json_text(value: Any) -> str:
    """Compact JSON text for tool results."""
    return orjson.dumps(value, default=str).decode()

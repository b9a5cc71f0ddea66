"""Typed tools: pydantic argument models, the JSON schema the model sees, safe calls.

A tool's schema is generated once, when it is registered. Calling a tool
never raises into the runner: invalid arguments come back to the model as an
error naming the field, an exception as an error with its message, and a
call past its timeout as a timeout error — and the turn goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from threads.llm.base import UNPARSED_ARGS_KEY, ToolSpec
from threads.messages import ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from threads.turns import Run

log = logging.getLogger(__name__)

A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """What a tool returns: content for the model, and whether the turn ends here."""

    content: str
    is_error: bool = False
    ends_turn: bool = False
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class ToolContext:
    """What a tool may reach: the run it serves and the services the gateway provides."""

    run: Run
    key: str
    agent: str
    services: Any = None


Handler = Callable[[A, ToolContext], Awaitable[ToolOutput | str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool(Generic[A]):
    """One tool: name, description, argument model, handler and timeout."""

    name: str
    description: str
    args: type[A]
    handler: Handler[A]
    timeout: float | None = None
    terminates: bool = False
    group: str = ""
    spec: ToolSpec = field(init=False)

    def __post_init__(self) -> None:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        object.__setattr__(
            self, "spec", ToolSpec(name=self.name, description=self.description, parameters=schema)
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
        )

    return wrap


class ToolRegistry:
    """The tools the gateway offers, and per-agent selections of them (cached)."""

    def __init__(self, tools: Iterable[Tool[Any]] = (), *, default_timeout: float = 120.0) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        self._selections: dict[tuple[str, ...], tuple[dict[str, Tool[Any]], list[ToolSpec]]] = {}
        self.default_timeout = default_timeout
        for t in tools:
            self.register(t)

    def register(self, t: Tool[Any]) -> None:
        if t.name in self._tools:
            raise ValueError(f"tool {t.name!r} is registered twice")
        self._tools[t.name] = t
        self._selections.clear()

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def select(
        self, allowed: Sequence[str], *, without_groups: Sequence[str] = ()
    ) -> tuple[dict[str, Tool[Any]], list[ToolSpec]]:
        """The tools an agent may use (``*`` means all; ``-name`` removes one) and their specs.

        Tools in ``without_groups`` are left out whatever ``allowed`` says.
        """
        cache_key = (*allowed, "\0", *without_groups)
        cached = self._selections.get(cache_key)
        if cached is not None:
            return cached
        chosen: dict[str, Tool[Any]] = {}
        for pattern in allowed:
            if pattern == "*":
                chosen.update(self._tools)
            elif pattern.startswith("-"):
                chosen.pop(pattern[1:], None)
            elif pattern in self._tools:
                chosen[pattern] = self._tools[pattern]
        for name in [n for n, t in chosen.items() if t.group and t.group in without_groups]:
            del chosen[name]
        # dispatch is how a turn ends; every agent has it.
        if "dispatch" in self._tools:
            chosen.setdefault("dispatch", self._tools["dispatch"])
        selection = (chosen, [t.spec for t in chosen.values()])
        self._selections[cache_key] = selection
        return selection

    async def call(
        self, tools: Mapping[str, Tool[Any]], call: ToolCallPart, ctx: ToolContext
    ) -> tuple[ToolResultPart, ToolOutput]:
        """Run one call; every failure becomes an error result the model can read."""
        t = tools.get(call.name)
        if t is None:
            known = ", ".join(sorted(tools)) or "none"
            output = ToolOutput(
                content=f"unknown tool {call.name!r}; the tools you have are: {known}",
                is_error=True,
            )
        else:
            output = await self._run(t, call, ctx)
        result = ToolResultPart(
            call_id=call.id, name=call.name, content=output.content, is_error=output.is_error
        )
        return result, output

    async def _run(self, t: Tool[Any], call: ToolCallPart, ctx: ToolContext) -> ToolOutput:
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
        timeout = t.timeout or self.default_timeout
        try:
            async with asyncio.timeout(timeout):
                out = await t.handler(args, ctx)
        except TimeoutError:
            return ToolOutput(content=f"{t.name} timed out after {timeout:g} s", is_error=True)
        except Exception as exc:
            log.warning("tool %s failed: %s", t.name, exc, exc_info=True)
            return ToolOutput(content=f"{t.name} failed: {exc}", is_error=True)
        return out if isinstance(out, ToolOutput) else ToolOutput(content=str(out))


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

"""Typed tools: schemas from pydantic models, and every failure as a result the model reads."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from tests.threads.agent.conftest import Runtime
from threads.agent.tools import ToolContext, ToolOutput, ToolRegistry, tool
from threads.llm.base import UNPARSED_ARGS_KEY
from threads.messages import ToolCallPart
from threads.testing.scripted import call, dispatch, say


class Lookup(BaseModel):
    order: int = Field(description="the order number")
    verbose: bool = False


@tool("lookup", "Look up an order.", Lookup)
async def lookup(args: Lookup, ctx: ToolContext) -> str:
    return f"order {args.order} shipped"


class Nothing(BaseModel):
    pass


@tool("explode", "Always fails.", Nothing)
async def explode(args: Nothing, ctx: ToolContext) -> str:
    raise RuntimeError("the warehouse is on fire")


never = asyncio.Event()


@tool("slow", "Never finishes.", Nothing, timeout=0.05)
async def slow(args: Nothing, ctx: ToolContext) -> str:
    await never.wait()
    return "unreachable"


def test_the_schema_the_model_sees_is_generated_from_the_argument_model() -> None:
    params = lookup.spec.parameters
    assert params["type"] == "object"
    assert params["properties"]["order"]["type"] == "integer"
    assert params["properties"]["order"]["description"] == "the order number"
    assert params["required"] == ["order"]


def test_a_selection_reuses_the_schemas_generated_at_registration() -> None:
    registry = ToolRegistry([lookup, explode])
    _, first = registry.select(["*"])
    _, second = registry.select(["*"])
    assert first is second
    assert first[0] is lookup.spec


def test_a_selection_takes_all_removes_by_name_and_always_has_dispatch() -> None:
    from threads.dispatch import dispatch_tool

    registry = ToolRegistry([lookup, explode, dispatch_tool])
    chosen, _ = registry.select(["*", "-explode"])
    assert set(chosen) == {"lookup", "dispatch"}
    chosen, _ = registry.select(["lookup"])
    assert set(chosen) == {"lookup", "dispatch"}


async def _call(registry: ToolRegistry, name: str, args: dict[str, Any]) -> ToolOutput:
    tools, _ = registry.select(["*"])
    _, output = await registry.call(tools, ToolCallPart(id="c1", name=name, args=args), None)  # type: ignore[arg-type]
    return output


async def test_invalid_arguments_come_back_as_an_error_naming_the_field() -> None:
    output = await _call(ToolRegistry([lookup]), "lookup", {"order": "not a number"})
    assert output.is_error
    assert "order" in output.content
    assert "invalid arguments for lookup" in output.content


async def test_a_tool_that_raises_becomes_an_error_result_with_its_message() -> None:
    output = await _call(ToolRegistry([explode]), "explode", {})
    assert output.is_error
    assert "the warehouse is on fire" in output.content


async def test_a_tool_past_its_timeout_becomes_a_timeout_error() -> None:
    output = await _call(ToolRegistry([slow]), "slow", {})
    assert output.is_error
    assert "timed out" in output.content


async def test_an_unknown_tool_is_an_error_listing_the_known_ones() -> None:
    output = await _call(ToolRegistry([lookup]), "lokup", {})
    assert output.is_error
    assert "lookup" in output.content


async def test_arguments_that_were_not_json_are_refused() -> None:
    output = await _call(ToolRegistry([lookup]), "lookup", {UNPARSED_ARGS_KEY: "{order: 1"})
    assert output.is_error
    assert "not a JSON object" in output.content


async def test_a_validation_error_does_not_end_the_turn(runtime: Runtime) -> None:
    runtime.loop.tools.register(lookup)
    runtime.model.add(
        call("lookup", order="twelve"),
        call("lookup", order=12),
        dispatch(("caller:user", "It shipped.")),
    )
    result = await runtime.result(await runtime.say("telegram:1", "where is 12?"))
    assert result.stop_reason == "dispatch"
    assert runtime.inbox("telegram:1").messages == ["It shipped."]
    second_request = runtime.model.requests[1]
    errors = [p for m in second_request.messages for p in m.tool_results() if p.is_error]
    assert errors
    assert "order" in errors[0].content


async def test_tool_results_reach_the_model(runtime: Runtime) -> None:
    runtime.loop.tools.register(lookup)
    runtime.model.add(call("lookup", order=7), say("done"))
    await runtime.result(await runtime.say("telegram:1", "where is 7?"))
    results = [p for m in runtime.model.requests[1].messages for p in m.tool_results()]
    assert results[-1].content == "order 7 shipped"


def _opt_in(name: str, label: str = "", *, group: str = "") -> Any:
    from threads.agent.tools import AnyArgs, Tool

    async def handler(args: AnyArgs, ctx: ToolContext) -> str:
        return f"{name} ran with {args.model_dump()}"

    return Tool(
        name=name,
        label=label,
        description="an opt-in tool",
        args=AnyArgs,
        schema={"type": "object", "properties": {"q": {"type": "string"}}, "title": "x"},
        handler=handler,
        opt_in=True,
        group=group,
    )


def test_star_leaves_opt_in_tools_out_and_names_or_globs_bring_them_in() -> None:
    registry = ToolRegistry(
        [lookup, _opt_in("read_file"), _opt_in("gh__issue", "gh.issue"), _opt_in("gh__pr", "gh.pr")]
    )
    assert set(registry.select(["*"])[0]) == {"lookup"}
    assert set(registry.select(["*", "read_file"])[0]) == {"lookup", "read_file"}
    assert set(registry.select(["gh.*"])[0]) == {"gh__issue", "gh__pr"}
    assert set(registry.select(["gh.*", "-gh.pr"])[0]) == {"gh__issue"}
    assert set(registry.select(["gh.issue", "gh__pr"])[0]) == {"gh__issue", "gh__pr"}


def test_a_given_schema_is_what_the_model_sees() -> None:
    spec = _opt_in("gh__issue", "gh.issue").spec
    assert spec.name == "gh__issue"
    assert spec.parameters == {"type": "object", "properties": {"q": {"type": "string"}}}


def test_replacing_a_group_withdraws_its_old_tools_and_forgets_cached_selections() -> None:
    registry = ToolRegistry([lookup])
    registry.replace_group("mcp:gh", [_opt_in("gh__issue", "gh.issue")])
    assert set(registry.select(["*", "gh.*"])[0]) == {"lookup", "gh__issue"}
    registry.replace_group("mcp:gh", [])
    assert set(registry.select(["*", "gh.*"])[0]) == {"lookup"}
    assert registry.replace_group("mcp:other", [_opt_in("lookup")]) == ["lookup"]
    assert registry.get("lookup") is lookup


async def test_a_tool_requiring_approval_is_refused_when_no_one_can_approve() -> None:
    import dataclasses

    risky = dataclasses.replace(_opt_in("risky"), requires_approval=True)
    registry = ToolRegistry([risky])
    tools, _ = registry.select(["risky"])
    _, output = await registry.call(tools, ToolCallPart(id="c1", name="risky", args={}), None)  # type: ignore[arg-type]
    assert output.is_error
    assert "risky requires a person's approval" in output.content


async def test_a_tool_sees_its_own_call_id_in_a_context_of_the_callers_type() -> None:
    class GatewayContext(ToolContext):
        __slots__ = ("extra",)

    seen: list[tuple[str, str]] = []

    @tool("whoami", "Says which call it is.", Nothing)
    async def whoami(args: Nothing, ctx: ToolContext) -> str:
        seen.append((type(ctx).__name__, ctx.call_id))
        return "ok"

    registry = ToolRegistry([whoami])
    plain = ToolContext(run=None, key="k", agent="a")  # type: ignore[arg-type]
    special = GatewayContext(run=None, key="k", agent="a")  # type: ignore[arg-type]
    for ctx, call_id in ((plain, "c1"), (special, "c2")):
        await registry.call(
            registry.select(["*"])[0], ToolCallPart(id=call_id, name="whoami", args={}), ctx
        )
    assert seen == [("ToolContext", "c1"), ("GatewayContext", "c2")]
    assert plain.call_id == special.call_id == ""  # the caller's context is left as it was

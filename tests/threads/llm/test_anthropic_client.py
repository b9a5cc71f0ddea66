"""The Anthropic messages client against the fake server, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import orjson
import pytest

from tests.threads.llm.conftest import ANTHROPIC_KEY, FakeTime
from threads.llm import (
    AnthropicClient,
    ContextOverflowError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequest,
    RateLimitError,
    RetryPolicy,
    ToolSpec,
)
from threads.llm.anthropic import AnthropicStream, blocks_of
from threads.llm.sse import SSEEvent
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
    tool_result_message,
)
from threads.testing.fake_anthropic import Failure, FakeAnthropicServer, Reply, ToolCall

CALC = ToolSpec(
    name="add",
    description="Add two numbers.",
    parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
)


@pytest.fixture
async def client(
    anthropic_server: FakeAnthropicServer, fake_time: FakeTime
) -> AsyncIterator[AnthropicClient]:
    async with AnthropicClient(
        base_url=anthropic_server.base_url,
        api_key=ANTHROPIC_KEY,
        retry=RetryPolicy(max_retries=3, budget_seconds=30.0),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    ) as client:
        yield client


def ask(text: str = "hello", *, stream: bool = False, **kwargs: object) -> ModelRequest:
    return ModelRequest(model="claude-fake", messages=[Message.user(text)], stream=stream, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
async def test_text_answer_comes_back_as_an_assistant_message(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, stream: bool
) -> None:
    anthropic_server.script(Reply(text="Hello, human."))
    response = await client.complete(ask(stream=stream))
    assert response.message == Message.assistant("Hello, human.")
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-fake"


async def test_request_has_top_level_system_version_header_and_key_header(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer
) -> None:
    await client.complete(
        ModelRequest(
            model="claude-fake",
            system="Be brief.",
            messages=[Message.user("hi")],
            tools=[CALC],
            max_output_tokens=321,
        )
    )
    sent = anthropic_server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers
    assert sent.body["system"] == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    assert sent.body["max_tokens"] == 321
    assert sent.body["tools"] == [
        {"name": "add", "description": "Add two numbers.", "input_schema": dict(CALC.parameters)}
    ]
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_round_trips_as_tool_use_and_tool_result_blocks(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, stream: bool
) -> None:
    anthropic_server.script(
        Reply(text="Adding.", tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]),
        Reply(text="5"),
    )
    first = await client.complete(ask("2+3?", stream=stream, tools=[CALC]))
    assert first.stop_reason == "tool_use"
    (call,) = first.message.tool_calls()
    assert (call.name, dict(call.args)) == ("add", {"a": 2, "b": 3})
    assert call.id.startswith("toolu_")

    results = tool_result_message([ToolResultPart(call_id=call.id, name="add", content="5")])
    second = await client.complete(
        ModelRequest(
            model="claude-fake",
            messages=[Message.user("2+3?"), first.message, results, Message.user("thanks")],
            tools=[CALC],
            stream=stream,
        )
    )
    assert second.message.text() == "5"
    sent = anthropic_server.requests[1].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Adding."},
            {"type": "tool_use", "id": call.id, "name": "add", "input": {"a": 2, "b": 3}},
        ],
    }
    # The tool turn and the next user turn merge into one user message, results first.
    assert sent[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "5"},
            {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}},
        ],
    }
    assert len(sent) == 3


@pytest.mark.parametrize("stream", [False, True])
async def test_signed_thinking_becomes_reasoning_and_goes_back_with_its_signature(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, stream: bool
) -> None:
    anthropic_server.script(
        Reply(reasoning="Think it over.", reasoning_signature="sig-123", text="Done.")
    )
    response = await client.complete(ask(stream=stream))
    assert response.message.content == (
        ReasoningPart(text="Think it over.", signature="sig-123"),
        TextPart(text="Done."),
    )
    unsigned = Message(
        role="assistant", content=(ReasoningPart(text="not ours"), TextPart(text="Old."))
    )
    await client.complete(
        ModelRequest(
            model="claude-fake",
            messages=[
                Message.user("a"),
                unsigned,
                Message.user("b"),
                response.message,
                Message.user("c"),
            ],
        )
    )
    sent = anthropic_server.requests[1].body["messages"]
    assert sent[1]["content"] == [{"type": "text", "text": "Old."}]
    assert sent[3]["content"] == [
        {"type": "thinking", "thinking": "Think it over.", "signature": "sig-123"},
        {"type": "text", "text": "Done."},
    ]


async def test_streamed_text_deltas_reach_the_callback_in_order_before_the_answer_ends(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer
) -> None:
    gate = asyncio.Event()
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        gate.set()

    anthropic_server.script(Reply(text="a b c", chunks=["a", " b", " c"], gate=gate))
    response = await client.complete(ask(stream=True), on_delta)
    assert deltas == ["a", " b", " c"]
    assert response.message.text() == "a b c"


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_counts_the_whole_prompt_with_cache_reads_as_cached(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, stream: bool
) -> None:
    anthropic_server.script(Reply(text="ok", input_tokens=1000, output_tokens=9, cached_tokens=800))
    response = await client.complete(ask(stream=stream))
    assert response.usage == Usage(input_tokens=1000, output_tokens=9, cached_tokens=800)


async def test_images_and_pdfs_become_blocks_and_other_files_a_line_of_text(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer
) -> None:
    message = Message(
        role="user",
        content=(
            FilePart(url="data:image/png;base64,iVBORw0K", media_type="image/png"),
            FilePart(url="https://example.org/a.pdf", media_type="application/pdf"),
            FilePart(url="file:///x.csv", media_type="text/csv", name="x.csv"),
        ),
    )
    await client.complete(ModelRequest(model="claude-fake", messages=[message]))
    content = anthropic_server.requests[0].body["messages"][0]["content"]
    assert content[0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
    }
    assert content[1] == {
        "type": "document",
        "source": {"type": "url", "url": "https://example.org/a.pdf"},
    }
    assert content[2]["text"] == "[attached file x.csv (text/csv): file:///x.csv]"


async def test_429_is_retried_after_the_wait_the_server_asked_for(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, fake_time: FakeTime
) -> None:
    anthropic_server.script(Failure.rate_limited(retry_after=3), Reply(text="ok"))
    assert (await client.complete(ask(stream=True))).message.text() == "ok"
    assert fake_time.sleeps == [3.0]


async def test_overloaded_529_then_success_is_retried(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer, fake_time: FakeTime
) -> None:
    anthropic_server.script(Failure.server_error(529), Reply(text="ok"))
    assert (await client.complete(ask())).message.text() == "ok"
    assert len(fake_time.sleeps) == 1


async def test_429_after_every_retry_raises_rate_limit_error(
    client: AnthropicClient, anthropic_server: FakeAnthropicServer
) -> None:
    anthropic_server.script(*(Failure.rate_limited(retry_after=1) for _ in range(4)))
    with pytest.raises(RateLimitError, match="HTTP 429 for model claude-fake: Rate limit reached"):
        await client.complete(ask())


@pytest.mark.parametrize("stream", [False, True])
async def test_prompt_is_too_long_raises_context_overflow_without_retrying(
    client: AnthropicClient,
    anthropic_server: FakeAnthropicServer,
    fake_time: FakeTime,
    stream: bool,
) -> None:
    anthropic_server.script(Failure.context_overflow(window=200_000))
    with pytest.raises(ContextOverflowError, match="prompt is too long"):
        await client.complete(ask(stream=stream))
    assert anthropic_server.request_count == 1
    assert fake_time.sleeps == []


async def test_a_wrong_api_key_is_never_in_the_error_text(
    anthropic_server: FakeAnthropicServer,
) -> None:
    secret = "sk-ant-wrong-555555"
    async with AnthropicClient(base_url=anthropic_server.base_url, api_key=secret) as client:
        with pytest.raises(ModelHTTPError) as info:
            await client.complete(ask())
        assert secret not in repr(client)
    assert info.value.status == 401
    assert "[redacted]" in str(info.value)
    assert secret not in str(info.value)


def events(*items: Mapping[str, object]) -> list[SSEEvent]:
    return [SSEEvent(str(i["type"]), orjson.dumps(i)) for i in items]


def test_an_overloaded_error_event_before_any_text_is_a_retryable_529() -> None:
    stream = AnthropicStream("anthropic", "claude-fake", None)
    start = {"type": "message_start", "message": {"model": "claude-fake", "usage": {}}}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    first, failing = events(start, error)
    stream.feed(first)
    with pytest.raises(ModelHTTPError) as info:
        stream.feed(failing)
    assert info.value.status == 529


def test_a_stream_without_message_stop_is_incomplete() -> None:
    stream = AnthropicStream("anthropic", "claude-fake", None)
    start = {"type": "message_start", "message": {"model": "claude-fake", "usage": {}}}
    for event in events(start):
        stream.feed(event)
    with pytest.raises(ModelConnectionError, match="ended before message_stop"):
        stream.finish()


def test_redacted_thinking_is_kept_and_sent_back_as_it_came() -> None:
    stream = AnthropicStream("anthropic", "claude-fake", None)
    for event in events(
        {"type": "message_start", "message": {"model": "claude-fake", "usage": {}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": "opaque"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ):
        stream.feed(event)
    message = stream.finish().message
    assert message.content == (ReasoningPart(text="", signature="opaque"),)
    assert blocks_of(message) == [{"type": "redacted_thinking", "data": "opaque"}]


def test_tool_use_input_is_assembled_from_json_fragments() -> None:
    stream = AnthropicStream("anthropic", "claude-fake", None)
    for event in events(
        {"type": "message_start", "message": {"model": "claude-fake", "usage": {}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": 1,'},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ' "b": 2}'},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ):
        stream.feed(event)
    response = stream.finish()
    assert response.message.content == (
        ToolCallPart(id="toolu_1", name="add", args={"a": 1, "b": 2}),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage.output_tokens == 5

"""The OpenAI chat-completions client against the fake server, over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator

import pytest

from tests.threads.llm.conftest import OPENAI_KEY, FakeTime
from threads.llm import (
    UNPARSED_ARGS_KEY,
    ContextOverflowError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRequest,
    ModelTimeoutError,
    OpenAIClient,
    RateLimitError,
    RetryPolicy,
    ToolSpec,
)
from threads.messages import (
    FilePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolResultPart,
    Usage,
    tool_result_message,
)
from threads.testing.fake_openai import Failure, FakeOpenAIServer, Reply, ToolCall

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
async def client(
    openai_server: FakeOpenAIServer, fake_time: FakeTime
) -> AsyncIterator[OpenAIClient]:
    async with OpenAIClient(
        base_url=openai_server.base_url,
        api_key=OPENAI_KEY,
        retry=RetryPolicy(max_retries=3, budget_seconds=30.0),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    ) as client:
        yield client


def ask(text: str = "hello", *, stream: bool = False, **kwargs: object) -> ModelRequest:
    return ModelRequest(model="fake-model", messages=[Message.user(text)], stream=stream, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [False, True])
async def test_text_answer_comes_back_as_an_assistant_message(
    client: OpenAIClient, openai_server: FakeOpenAIServer, stream: bool
) -> None:
    openai_server.script(Reply(text="Hello, human."))
    response = await client.complete(ask(stream=stream))
    assert response.message == Message.assistant("Hello, human.")
    assert response.stop_reason == "end_turn"
    assert response.model == "fake-model"


async def test_request_carries_system_messages_tools_and_output_cap(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    await client.complete(
        ModelRequest(
            model="fake-model",
            system="Be brief.",
            messages=[Message.user("hi")],
            tools=[WEATHER],
            max_output_tokens=99,
            temperature=0.2,
        )
    )
    body = openai_server.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": dict(WEATHER.parameters),
            },
        }
    ]
    assert body["max_tokens"] == 99
    assert body["temperature"] == 0.2
    assert "stream" not in body


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_calls_round_trip_through_the_chat_format(
    client: OpenAIClient, openai_server: FakeOpenAIServer, stream: bool
) -> None:
    openai_server.script(
        Reply(
            tool_calls=[
                ToolCall(name="get_weather", arguments={"city": "Paris"}),
                ToolCall(name="get_weather", arguments={"city": "Oslo"}),
            ]
        ),
        Reply(text="Sunny in Paris, snow in Oslo."),
    )
    first = await client.complete(ask("weather?", stream=stream, tools=[WEATHER]))
    assert first.stop_reason == "tool_use"
    calls = first.message.tool_calls()
    assert [(c.name, dict(c.args)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert calls[0].id != calls[1].id

    results = tool_result_message(
        ToolResultPart(call_id=c.id, name=c.name, content=f"{c.args['city']}: ok") for c in calls
    )
    second = await client.complete(
        ModelRequest(
            model="fake-model",
            messages=[Message.user("weather?"), first.message, results],
            tools=[WEATHER],
            stream=stream,
        )
    )
    assert second.message.text() == "Sunny in Paris, snow in Oslo."
    sent = openai_server.requests[1].messages
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": calls[0].id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            },
            {
                "id": calls[1].id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            },
        ],
    }
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": calls[0].id, "content": "Paris: ok"},
        {"role": "tool", "tool_call_id": calls[1].id, "content": "Oslo: ok"},
    ]


async def test_a_later_request_of_a_conversation_says_what_a_fresh_encoding_says(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(Reply(text="one"), Reply(text="two"), Reply(text="three"))
    history = [Message.user("first"), Message.assistant("an answer"), Message.user("second")]
    first = await client.complete(
        ModelRequest(model="fake-model", system="Be brief.", messages=history, tools=[WEATHER])
    )
    grown = [*history, first.message, Message.user("third")]
    await client.complete(
        ModelRequest(model="fake-model", system="Be brief.", messages=grown, tools=[WEATHER])
    )
    # A compaction: the same tail behind a new first message is encoded whole again.
    summary = Message.user("<summary>earlier</summary>")
    await client.complete(ModelRequest(model="fake-model", messages=[summary, *grown[3:]]))
    earlier, later, compacted = openai_server.requests
    assert later.messages[: len(earlier.messages)] == earlier.messages
    assert later.messages[-2:] == [
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "third"},
    ]
    assert compacted.messages == [
        {"role": "user", "content": "<summary>earlier</summary>"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "third"},
    ]
    assert (
        later.tools
        == earlier.tools
        == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ]
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_long_conversation_goes_out_whole_and_again_on_a_retry(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime, stream: bool
) -> None:
    # Past SPLICE_AT its kept bytes go to the socket as a view, not copied into one body.
    history = [Message.user(f"{n} " + "words " * 100) for n in range(200)]
    openai_server.script(Failure.rate_limited(retry_after=1), Reply(text="one"), Reply(text="two"))
    first = await client.complete(ModelRequest(model="fake-model", messages=history, stream=stream))
    grown = [*history, first.message, Message.user("and?")]
    await client.complete(ModelRequest(model="fake-model", messages=grown, stream=stream))
    refused, retried, later = openai_server.requests
    assert refused.messages == retried.messages
    assert [m["content"] for m in retried.messages] == [m.text() for m in history]
    assert later.messages == [
        *retried.messages,
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "and?"},
    ]


async def test_arguments_that_are_not_json_are_kept_raw_and_sent_back_as_they_came(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(Reply(tool_calls=[ToolCall(name="get_weather", arguments="{city: Paris")]))
    response = await client.complete(ask(tools=[WEATHER]))
    call = response.message.tool_calls()[0]
    assert dict(call.args) == {UNPARSED_ARGS_KEY: "{city: Paris"}
    result = tool_result_message(
        [ToolResultPart(call_id=call.id, name=call.name, content="bad JSON", is_error=True)]
    )
    await client.complete(
        ModelRequest(model="fake-model", messages=[Message.user("w"), response.message, result])
    )
    sent = openai_server.requests[1].messages
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == "{city: Paris"
    assert sent[2]["content"] == "Error: bad JSON"


async def test_streamed_text_deltas_reach_the_callback_in_order_before_the_answer_ends(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    gate = asyncio.Event()
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        gate.set()  # the last event is held until a delta has arrived

    openai_server.script(Reply(text="one two three", chunks=["one", " two", " three"], gate=gate))
    response = await client.complete(ask(stream=True), on_delta)
    assert deltas == ["one", " two", " three"]
    assert response.message.text() == "one two three"
    assert openai_server.requests[0].body["stream_options"] == {"include_usage": True}


async def test_without_streaming_the_callback_gets_the_whole_text_once(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(Reply(text="all at once"))
    deltas: list[str] = []
    await client.complete(ask(), deltas.append)
    assert deltas == ["all at once"]


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_is_read_with_the_cached_part_of_the_prompt(
    client: OpenAIClient, openai_server: FakeOpenAIServer, stream: bool
) -> None:
    openai_server.script(Reply(text="ok", input_tokens=1200, output_tokens=7, cached_tokens=1024))
    response = await client.complete(ask(stream=stream))
    assert response.usage == Usage(input_tokens=1200, output_tokens=7, cached_tokens=1024)


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_content_becomes_a_reasoning_part_and_is_not_sent_back(
    client: OpenAIClient, openai_server: FakeOpenAIServer, stream: bool
) -> None:
    openai_server.script(Reply(reasoning="think first", text="answer"))
    response = await client.complete(ask(stream=stream))
    assert response.message.content == (
        ReasoningPart(text="think first"),
        TextPart(text="answer"),
    )
    await client.complete(
        ModelRequest(
            model="fake-model",
            messages=[Message.user("q"), response.message, Message.user("more")],
        )
    )
    assert openai_server.requests[1].messages[1] == {"role": "assistant", "content": "answer"}


async def test_images_go_as_image_url_parts_and_other_files_as_a_line_of_text(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    message = Message(
        role="user",
        content=(
            TextPart(text="look"),
            FilePart(url="https://example.org/cat.png", media_type="image/png"),
            FilePart(url="file:///tmp/notes.txt", media_type="text/plain", name="notes.txt"),
        ),
    )
    await client.complete(ModelRequest(model="fake-model", messages=[message]))
    assert openai_server.requests[0].messages[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
        {"type": "text", "text": "[attached file notes.txt (text/plain): file:///tmp/notes.txt]"},
    ]


async def test_max_tokens_finish_is_reported_as_max_tokens(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(Reply(text="cut o", finish_reason="length"))
    assert (await client.complete(ask())).stop_reason == "max_tokens"


async def test_api_key_goes_in_the_bearer_header(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    await client.complete(ask())
    assert openai_server.requests[0].headers["Authorization"] == f"Bearer {OPENAI_KEY}"


async def test_a_wrong_api_key_is_never_in_the_error_text_or_the_repr(
    openai_server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-wrong-secret-987654321"
    async with OpenAIClient(base_url=openai_server.base_url, api_key=secret) as client:
        with pytest.raises(ModelHTTPError) as info:
            await client.complete(ask())
        assert secret not in repr(client)
    assert info.value.status == 401
    assert "[redacted]" in str(info.value)  # the fake echoed the key; the client blanked it
    assert secret not in str(info.value)
    assert secret not in info.value.body
    assert secret not in caplog.text


@pytest.mark.parametrize("stream", [False, True])
async def test_429_is_retried_after_the_wait_the_server_asked_for(
    client: OpenAIClient,
    openai_server: FakeOpenAIServer,
    fake_time: FakeTime,
    stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    openai_server.script(Failure.rate_limited(retry_after=2), Reply(text="finally"))
    with caplog.at_level(logging.WARNING, logger="threads.llm"):
        response = await client.complete(ask(stream=stream))
    assert response.message.text() == "finally"
    assert fake_time.sleeps == [2.0]
    assert openai_server.request_count == 2
    assert "HTTP 429" in caplog.text
    assert "as the provider asked" in caplog.text


async def test_retry_after_ms_is_preferred_to_retry_after(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime
) -> None:
    openai_server.script(Failure.rate_limited(retry_after=5, retry_after_ms=250), Reply(text="ok"))
    await client.complete(ask())
    assert fake_time.sleeps == [0.25]


async def test_429_after_every_retry_raises_rate_limit_error(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime
) -> None:
    openai_server.script(*(Failure.rate_limited(retry_after=1) for _ in range(4)))
    with pytest.raises(RateLimitError):
        await client.complete(ask())
    assert openai_server.request_count == 4
    assert fake_time.sleeps == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
async def test_a_server_error_then_success_is_retried_with_backoff(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime, status: int
) -> None:
    openai_server.script(Failure.server_error(status), Reply(text="recovered"))
    response = await client.complete(ask())
    assert response.message.text() == "recovered"
    assert len(fake_time.sleeps) == 1
    assert 0.25 <= fake_time.sleeps[0] <= 0.5


async def test_the_retry_budget_bounds_the_total_wait(
    openai_server: FakeOpenAIServer, fake_time: FakeTime
) -> None:
    openai_server.script(*(Failure.rate_limited(retry_after=4) for _ in range(10)))
    async with OpenAIClient(
        base_url=openai_server.base_url,
        api_key=OPENAI_KEY,
        retry=RetryPolicy(max_retries=10, budget_seconds=10.0),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    ) as client:
        with pytest.raises(RateLimitError):
            await client.complete(ask())
    assert fake_time.sleeps == [4.0, 4.0]
    assert openai_server.request_count == 3


@pytest.mark.parametrize("stream", [False, True])
async def test_context_overflow_raises_its_own_error_without_retrying(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime, stream: bool
) -> None:
    openai_server.script(Failure.context_overflow(window=8192))
    with pytest.raises(ContextOverflowError, match="maximum context length is 8192"):
        await client.complete(ask(stream=stream))
    assert openai_server.request_count == 1
    assert fake_time.sleeps == []


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_refused_raises_model_connection_error_after_the_retries(
    fake_time: FakeTime,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with OpenAIClient(
        base_url=url,
        api_key=OPENAI_KEY,
        name="local",
        retry=RetryPolicy(max_retries=2),
        sleep=fake_time.sleep,
        clock=fake_time.clock,
    ) as client:
        with pytest.raises(ModelConnectionError, match=r"^local: cannot reach http://127\.0\.0\.1"):
            await client.complete(ask())
    assert len(fake_time.sleeps) == 2


async def test_a_slow_answer_times_out_with_model_timeout_error(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.script(Reply(text="late", delay=30.0))
    async with OpenAIClient(
        base_url=openai_server.base_url,
        api_key=OPENAI_KEY,
        timeout_seconds=0.05,
        retry=RetryPolicy(max_retries=0),
    ) as client:
        with pytest.raises(ModelTimeoutError, match=r"did not answer within 0\.05s"):
            await client.complete(ask())


async def test_a_stream_that_breaks_after_text_was_streamed_is_not_retried(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    openai_server.script(Reply(text="one two three", disconnect_after=3), Reply(text="again"))
    deltas: list[str] = []
    with pytest.raises(ModelConnectionError) as info:
        await client.complete(ask(stream=True), deltas.append)
    assert info.value.partial
    assert deltas == ["one ", "two "]
    assert openai_server.request_count == 1


async def test_a_stream_that_breaks_before_any_text_is_retried(
    client: OpenAIClient, openai_server: FakeOpenAIServer, fake_time: FakeTime
) -> None:
    openai_server.script(Reply(text="lost", disconnect_after=1), Reply(text="again"))
    deltas: list[str] = []
    response = await client.complete(ask(stream=True), deltas.append)
    assert response.message.text() == "again"
    assert deltas == ["again"]
    assert len(fake_time.sleeps) == 1


async def test_sequential_requests_reuse_one_connection(
    client: OpenAIClient, openai_server: FakeOpenAIServer
) -> None:
    for i in range(5):
        await client.complete(ask(str(i)), None)
    await client.complete(ask("streamed", stream=True))
    assert len({r.peer for r in openai_server.requests}) == 1


async def test_the_messages_go_into_the_body_beside_its_metadata_and_extra_fields(
    openai_server: FakeOpenAIServer,
) -> None:
    openai_server.script(Reply(text="one"), Reply(text="two"))
    history = [Message.user("first")]
    async with OpenAIClient(
        base_url=openai_server.base_url, api_key=OPENAI_KEY, run_metadata="body"
    ) as client:
        await client.complete(
            ModelRequest(
                model="fake-model",
                system="Be brief.",
                messages=history,
                metadata={"weft.turn": "t1"},
                extra={"reasoning_effort": "low"},
            )
        )
        # Fields given as extra win, the messages too.
        replaced = [{"role": "user", "content": "instead"}]
        await client.complete(
            ModelRequest(model="fake-model", messages=history, extra={"messages": replaced})
        )
    spliced, overridden = openai_server.requests
    assert spliced.body["metadata"] == {"weft.turn": "t1"}
    assert spliced.body["reasoning_effort"] == "low"
    assert spliced.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
    ]
    assert overridden.messages == replaced

"""The fake model servers themselves, spoken to with plain aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from threads.testing.fake_anthropic import FakeAnthropicServer
from threads.testing.fake_openai import (
    Answer,
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    ToolCall,
    tool_then,
)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_models_are_listed(http: aiohttp.ClientSession) -> None:
    async with (
        FakeOpenAIServer(models=["a", "b"]) as server,
        http.get(f"{server.base_url}/models") as resp,
    ):
        data = await resp.json()
    assert [m["id"] for m in data["data"]] == ["a", "b"]


async def test_a_request_without_the_key_is_refused_with_401(http: aiohttp.ClientSession) -> None:
    async with (
        FakeOpenAIServer(api_key="sk-right") as server,
        http.get(f"{server.base_url}/models") as resp,
    ):
        assert resp.status == 401
        assert (await resp.json())["error"]["code"] == "invalid_api_key"


async def test_the_default_responder_echoes_and_can_be_replaced(
    http: aiohttp.ClientSession,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
    async with (
        FakeOpenAIServer() as server,
        http.post(f"{server.base_url}/chat/completions", json=body) as resp,
    ):
        echoed = await resp.json()

        def shout(request: RecordedRequest) -> Answer:
            return Reply(text=request.last_user_text().upper())

        server.default = shout
        async with http.post(f"{server.base_url}/chat/completions", json=body) as resp:
            shouted = await resp.json()
    assert echoed["choices"][0]["message"]["content"] == "ping"
    assert shouted["choices"][0]["message"]["content"] == "PING"


async def test_scripted_answers_are_used_in_order_then_the_default(
    http: aiohttp.ClientSession,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    async with FakeOpenAIServer() as server:
        server.script(Reply(text="one"), Reply(tool_calls=[ToolCall(name="t", id="call_9")]))
        texts = []
        for _ in range(3):
            async with http.post(f"{server.base_url}/chat/completions", json=body) as resp:
                texts.append((await resp.json())["choices"][0]["message"])
        assert server.pending == 0
    assert texts[0]["content"] == "one"
    assert texts[1]["tool_calls"][0]["id"] == "call_9"
    assert texts[2]["content"] == "x"


async def test_a_tool_message_answering_no_call_is_refused_like_the_real_api(
    http: aiohttp.ClientSession,
) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "tool", "tool_call_id": "call_404", "content": "r"},
        ],
    }
    async with (
        FakeOpenAIServer() as server,
        http.post(f"{server.base_url}/chat/completions", json=body) as resp,
    ):
        assert resp.status == 400
        assert "role 'tool' must be a response" in (await resp.json())["error"]["message"]


async def test_without_recording_only_the_count_is_kept(http: aiohttp.ClientSession) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    async with FakeOpenAIServer(record=False) as server:
        for _ in range(3):
            async with http.post(f"{server.base_url}/chat/completions", json=body) as resp:
                assert resp.status == 200
        assert server.requests == []
        assert server.request_count == 3


async def test_wait_for_requests_returns_once_they_arrived_and_names_the_shortfall(
    http: aiohttp.ClientSession,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    async with FakeOpenAIServer() as server:
        url = f"{server.base_url}/chat/completions"

        async def post() -> None:
            async with http.post(url, json=body) as resp:
                await resp.read()

        async with asyncio.TaskGroup() as group:
            group.create_task(post())
            group.create_task(post())
            await server.wait_for_requests(2)
        with pytest.raises(TimeoutError, match="got 2 requests, not 3"):
            await server.wait_for_requests(3, timeout=0.01)


async def test_closing_the_server_ends_a_slow_answer_at_once(
    http: aiohttp.ClientSession,
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    server = FakeOpenAIServer()
    await server.start()
    server.script(Reply(text="late", delay=3600))

    async def post() -> int:
        async with http.post(f"{server.base_url}/chat/completions", json=body) as resp:
            return resp.status

    task = asyncio.create_task(post())
    await server.wait_for_requests(1)
    await server.close()
    assert await task == 503


async def test_anthropic_fake_requires_the_version_header(http: aiohttp.ClientSession) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    async with (
        FakeAnthropicServer() as server,
        http.post(f"{server.base_url}/v1/messages", json=body) as resp,
    ):
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


async def test_anthropic_fake_refuses_a_tool_result_without_its_tool_use(
    http: aiohttp.ClientSession,
) -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}],
            }
        ],
    }
    async with FakeAnthropicServer() as server:
        headers = {"anthropic-version": "2023-06-01"}
        async with http.post(f"{server.base_url}/v1/messages", json=body, headers=headers) as resp:
            assert resp.status == 400
            assert "tool_use_id" in (await resp.json())["error"]["message"]


async def test_tool_then_calls_the_tool_first_and_answers_after_its_result(
    http: aiohttp.ClientSession,
) -> None:
    final = Reply(text="done")
    server = FakeOpenAIServer(record=False, default=tool_then(ToolCall(name="t"), final))
    user = {"role": "user", "content": "x"}
    async with server:
        url = f"{server.base_url}/chat/completions"
        async with http.post(url, json={"model": "m", "messages": [user]}) as resp:
            call = (await resp.json())["choices"][0]["message"]["tool_calls"][0]
        assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
        result = {"role": "tool", "tool_call_id": call["id"], "content": "r"}
        body = {"model": "m", "messages": [user, assistant, result]}
        async with http.post(url, json=body) as resp:
            answer = (await resp.json())["choices"][0]["message"]
    assert call["function"]["name"] == "t"
    assert answer["content"] == "done"

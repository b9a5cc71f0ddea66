"""The OpenAI-compatible API through the whole gateway: completions, streams, sessions, the SDK."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import orjson
import pytest

from tests.channels.api_rig import (
    API_KEY,
    Api,
    api_config,
    ask,
    files_of,
    running,
    user_texts,
)
from threads.llm.base import ModelResponse
from threads.messages import Message, TextPart, Usage
from threads.sinks import OutboundMessage
from threads.testing.scripted import call, dispatch, say

ALICE = "api:alice"


def default_session(key: str) -> str:
    return f"api:key-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running(api_config(tmp_path)) as rig:
        yield rig


def text_then_dispatch(text: str, body: str) -> ModelResponse:
    """A step that writes ``text`` and ends the turn with ``body`` to the caller."""
    call = dispatch(("caller:user", body)).message.content
    return ModelResponse(
        message=Message(role="assistant", content=(TextPart(text=text), *call)),
        stop_reason="tool_use",
    )


# -- whole completions


async def test_a_completion_is_what_the_turn_dispatched_to_the_caller(api: Api) -> None:
    usage = Usage(input_tokens=40, output_tokens=7, cached_tokens=8)
    api.script.add(ALICE, _with_usage(dispatch(("caller:user", "Paris.")), usage))

    status, body, headers = await api.post(
        ask("Capital of France?"), headers={"X-Session-Key": ALICE}
    )

    assert status == 200
    assert headers["X-Session-Key"] == ALICE
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert body["model"] == "default"
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Paris.", "refusal": None}
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 40
    assert body["usage"]["completion_tokens"] == 7
    assert body["usage"]["total_tokens"] == 47
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}


def _with_usage(response: ModelResponse, usage: Usage) -> ModelResponse:
    return ModelResponse(message=response.message, stop_reason=response.stop_reason, usage=usage)


async def test_a_final_text_answer_is_the_content(api: Api) -> None:
    api.script.add(ALICE, say("Just text."))
    status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "Just text."


async def test_a_turn_that_ends_silently_answers_empty_content_with_stop(api: Api) -> None:
    api.script.add(ALICE, dispatch())
    status, body, _ = await api.post(ask("say nothing"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == ""
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_the_model_field_names_the_agent_that_runs(api: Api) -> None:
    api.script.add(ALICE, say("def f(): ..."))
    status, body, _ = await api.post(ask("code!", model="coder"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert body["model"] == "coder"
    (request,) = api.script.requests[ALICE]
    assert "You write code." in request.system


async def test_the_models_are_the_configured_agents(api: Api) -> None:
    async with api.sdk() as client:
        listed = await client.models.list()
        coder = await client.models.retrieve("coder")
    assert sorted(m.id for m in listed.data) == ["coder", "default"]
    assert coder.id == "coder"
    assert coder.owned_by == "gateway"


async def test_a_slash_command_is_answered_without_a_turn(api: Api) -> None:
    status, body, _ = await api.post(ask("/help"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert "/new" in body["choices"][0]["message"]["content"]
    assert not api.script.requests[ALICE]


# -- streams


async def test_a_stream_is_openai_chunks_ending_with_done(api: Api) -> None:
    api.script.add(
        ALICE, _with_usage(say("Streamed answer."), Usage(input_tokens=9, output_tokens=2))
    )
    status, events, headers = await api.stream(
        ask("hi", stream_options={"include_usage": True}), headers={"X-Session-Key": ALICE}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    with_choices = [c for c in chunks if c["choices"]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in with_choices)
    assert content == "Streamed answer."  # shown once: the delivered answer is not repeated
    assert with_choices[-1]["choices"][0]["finish_reason"] == "stop"
    assert [c["choices"][0]["finish_reason"] for c in with_choices[:-1]] == [None] * (
        len(with_choices) - 1
    )
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 11


async def test_a_stream_sends_no_usage_chunk_unless_asked(api: Api) -> None:
    api.script.add(ALICE, say("ok"))
    _, events, _ = await api.stream(ask("hi"), headers={"X-Session-Key": ALICE})
    assert all(b'"usage"' not in e for e in events)


async def test_a_dispatched_answer_is_streamed_after_the_text_the_model_wrote(api: Api) -> None:
    api.script.add(ALICE, text_then_dispatch("Let me think.", "The answer is 4."))
    _, events, _ = await api.stream(ask("2+2?"), headers={"X-Session-Key": ALICE})
    chunks = [orjson.loads(e) for e in events[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p or "" for p in pieces) == "Let me think.\n\nThe answer is 4."
    assert "Let me think." in pieces  # streamed as the model wrote it, before the answer


# -- the official SDK, unmodified


async def test_the_official_openai_sdk_works_unmodified(api: Api) -> None:
    api.script.add(ALICE, dispatch(("caller:user", "Hello from the gateway.")))
    api.script.add(ALICE, say("Streamed via the SDK."))
    async with api.sdk() as client:
        whole = await client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], user="alice"
        )
        stream = await client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "again"}],
            user="alice",
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(
                model="gpt-nope", messages=[{"role": "user", "content": "hi"}]
            )
    assert whole.choices[0].message.content == "Hello from the gateway."
    assert whole.choices[0].finish_reason == "stop"
    assert "".join(pieces) == "Streamed via the SDK."
    assert finish == "stop"
    assert usage is not None
    assert missing.value.code == "model_not_found"
    async with api.sdk(key="sk-wrong") as stranger:
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "hi"}]
            )


async def test_a_failed_turn_in_a_stream_raises_in_the_sdk(api: Api) -> None:
    api.script.add(ALICE, _failing)
    async with api.sdk() as client:
        stream = await client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], user="alice", stream=True
        )
        with pytest.raises(openai.APIError, match="model is unavailable"):
            async for _ in stream:
                pass


def _failing(request: object) -> ModelResponse:
    from threads.llm.errors import ModelHTTPError

    raise ModelHTTPError("scripted", 500, "upstream broke")


# -- sessions: the server keeps the history


async def test_the_server_keeps_the_history_between_requests(api: Api) -> None:
    api.script.add(ALICE, say("Nice to meet you, Ann."), say("You are Ann."))
    await api.post(ask("I am Ann."), headers={"X-Session-Key": ALICE})
    status, body, _ = await api.post(ask("Who am I?"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "You are Ann."
    second = api.script.requests[ALICE][1]
    assert user_texts(second) == ["I am Ann.", "Who am I?"]
    answers = [m.text() for m in second.messages if m.role == "assistant"]
    assert "Nice to meet you, Ann." in answers


async def test_a_whole_history_sent_again_adds_only_the_new_message(api: Api) -> None:
    api.script.add(ALICE, say("A1"), say("A2"))
    await api.post(ask("first"), headers={"X-Session-Key": ALICE})
    history = {
        "model": "default",
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "second"},
        ],
    }
    await api.post(history, headers={"X-Session-Key": ALICE})
    assert user_texts(api.script.requests[ALICE][1]) == ["first", "second"]


async def test_the_session_key_header_chooses_the_thread(api: Api) -> None:
    api.script.add("api:bob", say("for bob"))
    status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": "api:bob"})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "for bob"
    assert await api.gateway.manager.session_exists("api:bob")
    assert not await api.gateway.manager.session_exists(default_session(API_KEY))


async def test_the_user_field_chooses_the_thread(api: Api) -> None:
    api.script.add("api:carol", say("for carol"))
    _, body, headers = await api.post(ask("hi", user="carol"))
    assert body["choices"][0]["message"]["content"] == "for carol"
    assert headers["X-Session-Key"] == "api:carol"


async def test_sessions_do_not_see_each_others_history(api: Api) -> None:
    await api.post(ask("secret of alice"), headers={"X-Session-Key": ALICE})
    await api.post(ask("hello"), headers={"X-Session-Key": "api:bob"})
    (bobs,) = api.script.requests["api:bob"]
    assert user_texts(bobs) == ["hello"]


async def test_without_a_session_each_api_key_has_its_own(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# the team's keys\nsk-one\n\nsk-two\n")
    async with running(api_config(tmp_path, api={"api_key_file": str(keys)})) as api:
        for key in ("sk-one", "sk-two", API_KEY):
            status, _, headers = await api.post(ask("hi"), key=key)
            assert status == 200
            assert headers["X-Session-Key"] == default_session(key)
        sessions = {default_session(k) for k in ("sk-one", "sk-two", API_KEY)}
        for session in sessions:
            assert await api.gateway.manager.session_exists(session)
        assert all("sk-" not in s for s in sessions)


async def test_a_session_reset_starts_over(api: Api) -> None:
    api.script.add(ALICE, say("one"), say("two"))
    await api.post(ask("before"), headers={"X-Session-Key": ALICE})
    before = await api.gateway.manager.store.resolve(ALICE)
    await api.post(ask("after"), headers={"X-Session-Key": ALICE, "X-Session-Reset": "1"})
    assert await api.gateway.manager.store.resolve(ALICE) != before
    assert user_texts(api.script.requests[ALICE][1]) == ["after"]


async def test_requests_on_one_session_queue_and_each_gets_its_own_answer(api: Api) -> None:
    api.model.gate = asyncio.Event()
    api.script.add(ALICE, dispatch(("caller:user", "first answer")))
    api.script.add(ALICE, dispatch(("caller:user", "second answer")))
    first = asyncio.create_task(api.post(ask("one"), headers={"X-Session-Key": ALICE}))
    await api.model.called.wait()
    second = asyncio.create_task(api.post(ask("two"), headers={"X-Session-Key": ALICE}))
    thread = api.gateway.manager.thread(ALICE)
    assert thread is not None
    async with asyncio.timeout(10):
        while thread.session.pending_count() < 1:
            await asyncio.sleep(0)
    api.model.gate.set()
    one, two = await first, await second
    assert one[1]["choices"][0]["message"]["content"] == "first answer"
    assert two[1]["choices"][0]["message"]["content"] == "second answer"


# -- images


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


async def test_an_image_in_the_message_reaches_the_model_as_a_file_part(api: Api) -> None:
    api.script.add(ALICE, say("a cat"))
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ],
    }
    status, _, _ = await api.post(
        {"model": "default", "messages": [message]}, headers={"X-Session-Key": ALICE}
    )
    assert status == 200
    (request,) = api.script.requests[ALICE]
    assert user_texts(request) == ["What is this?"]
    data, link = files_of(request)
    assert data.url == f"data:image/png;base64,{PNG}"
    assert data.media_type == "image/png"
    assert link.url == "https://example.com/cat.jpg"
    assert link.media_type == "image/jpeg"


# -- where deliveries go


async def test_the_stored_wake_answers_its_own_request(api: Api) -> None:
    api.script.add(ALICE, say("ok"))
    _, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    session_id = await api.gateway.manager.store.resolve(ALICE)
    assert session_id is not None
    loaded = await api.gateway.manager.store.load(session_id)
    (wake,) = [e.wake for e in loaded.entries if getattr(e, "wake", None)]
    assert wake["meta"] == {"message_id": body["id"]}
    # After a restart the turn's answer goes to this request (gone by then), never
    # to another request waiting on the same session.
    assert wake["sink"]["channel"] == "api"
    assert wake["sink"]["chat"] == "alice"
    assert wake["sink"]["reply_to"] == body["id"]


async def test_a_delivery_for_another_request_never_joins_this_one(api: Api) -> None:
    channel = api.gateway.api
    assert channel is not None
    api.model.gate = asyncio.Event()
    api.script.add(ALICE, say("mine"))
    asked = asyncio.create_task(api.post(ask("hi"), headers={"X-Session-Key": ALICE}))
    await api.model.called.wait()
    stale = OutboundMessage(text="an answer from before a restart", reply_to="chatcmpl-gone")
    assert (await channel.deliver("alice", stale)).dropped
    api.model.gate.set()
    _, body, _ = await asked
    assert body["choices"][0]["message"]["content"] == "mine"


async def test_a_message_to_the_user_joins_the_running_requests_answer(api: Api) -> None:
    api.script.add(ALICE, dispatch(("user", "via the user target")))
    status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 200
    assert body["choices"][0]["message"]["content"] == "via the user target"


async def test_a_delivery_no_request_waits_for_is_reported_dropped(api: Api) -> None:
    channel = api.gateway.api
    assert channel is not None
    delivery = await channel.deliver("nobody", OutboundMessage(text="late", reply_to="chatcmpl-x"))
    assert delivery.dropped
    assert "session only" in delivery.delivered_to


async def test_a_turn_at_its_step_cap_finishes_with_length(tmp_path: Path) -> None:
    agents = {"default": {"model": "scripted/test", "max_steps": 1}}
    async with running(api_config(tmp_path, agents=agents)) as api:
        api.script.add(ALICE, call("check_session", session_key=ALICE))
        status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 200
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length"
    assert "stopped after 1 steps" in choice["message"]["content"]

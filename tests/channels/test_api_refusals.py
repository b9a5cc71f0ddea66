"""Every refusal of the OpenAI-compatible API is an error in OpenAI's shape with its status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import openai
import pytest

from config import ConfigError, load_config
from gateway.app import Gateway
from gateway.errors import StartupError
from tests.channels.api_rig import API_KEY, Api, api_config, ask, running
from threads.errors import StoreError
from threads.llm.base import ModelResponse
from threads.llm.errors import ModelHTTPError
from threads.store.base import Header
from threads.store.memory import MemoryStore
from threads.testing.scripted import ScriptedModel, dispatch

ALICE = "api:alice"


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running(api_config(tmp_path)) as rig:
        yield rig


def error_of(body: Any) -> Mapping[str, Any]:
    """The error object, after checking the body is OpenAI's shape and nothing else."""
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return dict(error)


# -- keys


async def test_a_request_without_a_key_is_refused_401(api: Api) -> None:
    status, body, headers = await api.post(ask("hi"), key=None)
    assert status == 401
    error = error_of(body)
    assert error["type"] == "invalid_request_error"
    assert "Authorization: Bearer" in error["message"]
    assert headers["x-should-retry"] == "false"


async def test_a_wrong_key_is_refused_401_without_repeating_it(api: Api) -> None:
    status, body, _ = await api.post(ask("hi"), key="sk-guessed-123")
    assert status == 401
    error = error_of(body)
    assert error["code"] == "invalid_api_key"
    assert "sk-guessed-123" not in error["message"]


async def test_the_model_list_needs_the_key_too(api: Api) -> None:
    async with api.sdk(key="sk-wrong") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()


async def test_on_loopback_without_keys_no_key_is_asked(tmp_path: Path) -> None:
    async with running(api_config(tmp_path, api={"api_key": None})) as api:
        status, body, headers = await api.post(ask("hi"), key=None)
    assert status == 200
    assert body["object"] == "chat.completion"
    assert headers["X-Session-Key"] == "api:default"


def test_off_loopback_the_api_needs_a_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[http]\nhost = "0.0.0.0"\n[channels.web]\nenabled = false\n'
        "[channels.api]\nenabled = true\n"
    )
    with pytest.raises(ConfigError, match=r"channels\.api\.api_key \(or api_key_file\)"):
        load_config(path, env={})


def test_the_api_needs_the_http_server(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        "[http]\nenabled = false\n[channels.web]\nenabled = false\n[channels.api]\nenabled = true\n"
    )
    with pytest.raises(ConfigError, match="served by the HTTP server"):
        load_config(path, env={})


async def test_a_key_file_with_no_key_stops_the_start(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# nothing yet\n\n")
    config = api_config(tmp_path, api={"api_key": None, "api_key_file": str(keys)})
    with pytest.raises(StartupError, match=r"channels\.api\.api_key_file .* holds no key"):
        async with Gateway(config, model_clients={"scripted": ScriptedModel()}, control=False):
            pass


# -- the request


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        (b"{not json", None, "not JSON"),
        ([1, 2], None, "JSON object"),
        ({"model": "default"}, "messages", "non-empty array"),
        ({"model": "default", "messages": []}, "messages", "non-empty array"),
        ({"model": "default", "messages": ["hi"]}, "messages[0]", "must be an object"),
        (
            {"model": "default", "messages": [{"role": "robot", "content": "hi"}]},
            "messages[0].role",
            "not one of",
        ),
        (
            {
                "model": "default",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ],
            },
            "messages[1].role",
            "must be the user's",
        ),
        (
            {"model": "default", "messages": [{"role": "user", "content": "  "}]},
            "messages[0].content",
            "empty",
        ),
        (
            {
                "model": "default",
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
                ],
            },
            "messages[0].content[0].type",
            "'text' and 'image_url'",
        ),
        (
            {
                "model": "default",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "file:///etc"}}],
                    }
                ],
            },
            "messages[0].content[0].image_url.url",
            "https://",
        ),
        ({**ask("hi"), "stream": "yes"}, "stream", "true or false"),
        ({**ask("hi"), "model": 4}, "model", "string"),
    ],
)
async def test_a_malformed_request_is_refused_400_naming_the_field(
    api: Api, body: Any, param: str | None, says: str
) -> None:
    status, answer, _ = await api.post(body)
    assert status == 400
    error = error_of(answer)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert says in error["message"]


async def test_an_unknown_model_is_refused_404(api: Api) -> None:
    status, body, _ = await api.post(ask("hi", model="gpt-4o"))
    assert status == 404
    error = error_of(body)
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert "GET /v1/models" in error["message"]


@pytest.mark.parametrize(
    "key", ["telegram:123", "api:", "api:a:threads:x", "api:../etc", "alice", "api:a b"]
)
async def test_a_session_key_that_is_not_an_api_key_is_refused(api: Api, key: str) -> None:
    status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": key})
    assert status == 400
    assert error_of(body)["code"] == "invalid_session_key"
    assert not await api.gateway.manager.session_exists("telegram:123")


async def test_a_user_that_cannot_name_a_session_is_refused(api: Api) -> None:
    status, body, _ = await api.post(ask("hi", user="a:threads:b"))
    assert status == 400
    assert error_of(body)["param"] == "user"


async def test_a_request_over_the_size_limit_is_refused_413(tmp_path: Path) -> None:
    config = api_config(tmp_path, http={"port": 0, "max_request_bytes": 4096})
    async with running(config) as api:
        status, body, _ = await api.post(ask("x" * 5000))
        small, _, _ = await api.post(ask("small"))
    assert status == 413
    error = error_of(body)
    assert error["code"] == "request_too_large"
    assert "http.max_request_bytes" in error["message"]
    assert small == 200


async def test_an_unknown_path_and_a_wrong_method_are_shaped_errors(api: Api) -> None:
    status, body, _ = await api.post(ask("hi"), path="/completions")
    assert status == 404
    assert "POST /v1/chat/completions" in error_of(body)["message"]
    status, body, _ = await api.post(ask("hi"), path="/models")
    assert status == 405
    error_of(body)


# -- the session and the store


async def test_a_full_session_queue_is_refused_429(tmp_path: Path) -> None:
    config = api_config(tmp_path, threads={"inbox_size": 1})
    async with running(config) as api:
        api.model.gate = asyncio.Event()
        head = {"X-Session-Key": ALICE}
        running_one = asyncio.create_task(api.post(ask("one"), headers=head))
        await api.model.called.wait()
        queued = asyncio.create_task(api.post(ask("two"), headers=head))
        thread = api.gateway.manager.thread(ALICE)
        assert thread is not None
        async with asyncio.timeout(10):
            while thread.session.pending_count() < 1:
                await asyncio.sleep(0)
        status, body, _ = await api.post(ask("three"), headers=head)
        api.model.gate.set()
        assert (await running_one)[0] == 200
        assert (await queued)[0] == 200
    assert status == 429
    error = error_of(body)
    assert error["code"] == "session_busy"
    assert ALICE in error["message"]


class FullDisk(MemoryStore):
    async def create(self, header: Header, *, durable: bool = True) -> None:
        raise StoreError("no space left on device")


async def test_a_store_that_cannot_save_the_message_is_refused_503(tmp_path: Path) -> None:
    model = ScriptedModel()
    config = api_config(tmp_path)
    async with Gateway(
        config, model_clients={"scripted": model}, store=FullDisk(), control=False
    ) as gw:
        api = Api(gateway=gw, script=None, model=model)  # type: ignore[arg-type]
        status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 503
    error = error_of(body)
    assert error["code"] == "store_unavailable"
    assert "no space" not in error["message"]  # the cause is logged, not shown


# -- turns that fail


def _model_down(request: object) -> ModelResponse:
    raise ModelHTTPError("scripted", 500, "upstream broke at http://10.0.0.7/internal")


async def test_a_turn_whose_model_fails_is_a_502_in_plain_words(api: Api) -> None:
    api.script.add(ALICE, _model_down)
    status, body, _ = await api.post(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 502
    error = error_of(body)
    assert error["type"] == "server_error"
    assert error["code"] == "model_error"
    assert "model is unavailable" in error["message"]
    assert "10.0.0.7" not in error["message"]


async def test_a_turn_whose_model_fails_mid_stream_ends_with_an_error_event(api: Api) -> None:
    api.script.add(ALICE, _model_down)
    status, events, _ = await api.stream(ask("hi"), headers={"X-Session-Key": ALICE})
    assert status == 200  # the stream had begun
    assert events[-1] == b"[DONE]"
    assert b'"code":"model_error"' in events[-2]


async def test_a_session_past_its_budget_is_refused_429_without_retry(tmp_path: Path) -> None:
    config = api_config(tmp_path, threads={"budget": {"session_model_calls_per_hour": 1}})
    async with running(config) as api:
        api.script.add(ALICE, dispatch(("caller:user", "one")))
        first, _, _ = await api.post(ask("one"), headers={"X-Session-Key": ALICE})
        status, body, headers = await api.post(ask("two"), headers={"X-Session-Key": ALICE})
    assert first == 200
    assert status == 429
    assert error_of(body)["code"] == "budget_exceeded"
    assert headers["x-should-retry"] == "false"


async def test_a_key_is_never_a_session_name(api: Api) -> None:
    await api.post(ask("hi"))
    keys = await api.gateway.manager.store.keys()
    assert keys
    assert all(API_KEY not in key for key in keys)


async def test_a_turn_stopped_before_it_answered_is_a_409_without_retry(api: Api) -> None:
    api.model.gate = asyncio.Event()
    asked = asyncio.create_task(api.post(ask("hi"), headers={"X-Session-Key": ALICE}))
    await api.model.called.wait()
    await api.gateway.manager.stop(ALICE, by_user=True)
    api.model.gate.set()
    status, body, headers = await asked
    assert status == 409
    assert error_of(body)["code"] == "turn_canceled"
    assert headers["x-should-retry"] == "false"


async def test_requests_waiting_at_shutdown_are_told_their_message_is_kept(
    tmp_path: Path,
) -> None:
    config = api_config(tmp_path, threads={"close_deadline_seconds": 0})
    async with running(config) as api:
        api.model.gate = asyncio.Event()
        head = {"X-Session-Key": ALICE}
        first = asyncio.create_task(api.post(ask("one"), headers=head))
        await api.model.called.wait()
        second = asyncio.create_task(api.post(ask("two"), headers=head))
        thread = api.gateway.manager.thread(ALICE)
        assert thread is not None
        async with asyncio.timeout(10):
            while thread.session.pending_count() < 1:
                await asyncio.sleep(0)
        await api.gateway.close()
        (status_1, body_1, retry_1), (status_2, body_2, retry_2) = [
            (status, body, headers["x-should-retry"])
            for status, body, headers in (await first, await second)
        ]
    assert (status_1, error_of(body_1)["code"], retry_1) == (409, "turn_canceled", "false")
    assert (status_2, error_of(body_2)["code"], retry_2) == (503, "shutting_down", "false")
    assert "Do not send it again" in body_2["error"]["message"]

"""make_client: the client a provider section describes, and where its API key comes from."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from config.models import ProviderConfig
from tests.threads.llm.conftest import FakeTime
from threads.llm import (
    AnthropicClient,
    ModelClient,
    ModelConfigError,
    ModelError,
    ModelRequest,
    OpenAIClient,
    make_client,
    resolve_api_key,
)
from threads.messages import Message
from threads.testing.fake_anthropic import FakeAnthropicServer
from threads.testing.fake_openai import Failure, FakeOpenAIServer, Reply


def test_inline_key_wins_over_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    monkeypatch.setenv("MY_KEY", "from-env")
    config = ProviderConfig(
        api_key=SecretStr("inline"), api_key_file=key_file, api_key_env="MY_KEY"
    )
    assert resolve_api_key("p", config) == "inline"


def test_key_file_is_read_and_stripped(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("  from-file\n")
    assert resolve_api_key("p", ProviderConfig(api_key_file=key_file)) == "from-file"


def test_key_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTER_KEY", "from-env")
    assert resolve_api_key("p", ProviderConfig(api_key_env="ROUTER_KEY")) == "from-env"


def test_a_named_variable_that_is_unset_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ROUTER_KEY", raising=False)
    with pytest.raises(
        ModelConfigError, match=r"models\.providers\.router\.api_key_env names ROUTER_KEY"
    ):
        resolve_api_key("router", ProviderConfig(api_key_env="ROUTER_KEY"))


def test_an_unreadable_key_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelConfigError, match="cannot read secret file"):
        resolve_api_key("p", ProviderConfig(api_key_file=missing))


def test_the_vendor_variable_is_read_only_for_the_vendors_own_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vendor")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-vendor")
    assert resolve_api_key("openai", ProviderConfig()) == "sk-vendor"
    assert resolve_api_key("claude", ProviderConfig(kind="anthropic")) == "sk-ant-vendor"
    local = ProviderConfig(base_url="http://localhost:11434/v1")
    assert resolve_api_key("ollama", local) == ""


def test_kind_picks_the_client_and_anthropic_gets_its_own_default_url() -> None:
    openai = make_client("openai", ProviderConfig(api_key=SecretStr("k")))
    anthropic = make_client("claude", ProviderConfig(kind="anthropic", api_key=SecretStr("k")))
    assert isinstance(openai, OpenAIClient)
    assert openai.url == "https://api.openai.com/v1/chat/completions"
    assert isinstance(anthropic, AnthropicClient)
    assert anthropic.url == "https://api.anthropic.com/v1/messages"
    assert isinstance(openai, ModelClient)


def test_repr_of_a_client_holds_no_key() -> None:
    client = make_client("openai", ProviderConfig(api_key=SecretStr("sk-very-secret")))
    assert "sk-very-secret" not in repr(client)
    assert repr(client) == (
        "OpenAIClient(name='openai', url='https://api.openai.com/v1/chat/completions')"
    )


async def test_a_configured_openai_provider_talks_to_its_server(fake_time: FakeTime) -> None:
    async with FakeOpenAIServer(api_key="sk-cfg") as server:
        server.script(Failure.server_error(503), Reply(text="hi"))
        config = ProviderConfig(
            base_url=server.base_url,
            api_key=SecretStr("sk-cfg"),
            max_retries=1,
            headers={"HTTP-Referer": "https://example.org"},
        )
        client = make_client("router", config, sleep=fake_time.sleep, clock=fake_time.clock)
        try:
            response = await client.complete(ModelRequest(model="m", messages=[Message.user("x")]))
        finally:
            await client.close()
    assert response.message.text() == "hi"
    assert len(fake_time.sleeps) == 1
    assert server.requests[0].headers["HTTP-Referer"] == "https://example.org"
    assert server.requests[0].body["max_tokens"] == 4096


async def test_a_configured_anthropic_provider_talks_to_its_server() -> None:
    async with FakeAnthropicServer(api_key="sk-ant-cfg") as server:
        config = ProviderConfig(
            kind="anthropic", base_url=server.base_url, api_key=SecretStr("sk-ant-cfg")
        )
        client = make_client("claude", config)
        try:
            response = await client.complete(
                ModelRequest(model="claude-x", messages=[Message.user("echo me")])
            )
        finally:
            await client.close()
    assert response.message.text() == "echo me"


async def test_a_closed_client_refuses_further_calls() -> None:
    async with FakeOpenAIServer() as server:
        client = OpenAIClient(base_url=server.base_url)
        await client.close()
        with pytest.raises(ModelError, match="the model client is closed"):
            await client.complete(ModelRequest(model="m", messages=[Message.user("x")]))

"""An HTTP listener off loopback needs a token: refused at load, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config import ConfigError, GatewayConfig, load_config
from config.section import is_loopback, normal_origin


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.168.1.20", "example.com", ""])
def test_the_http_server_off_loopback_without_the_chats_token_is_a_config_error(
    tmp_path: Path, address: str
) -> None:
    path = write(tmp_path, f'[http]\nhost = "{address}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    (problem,) = caught.value.problems
    assert problem.path == "http"
    assert problem.message == (
        f"host {address!r} is not a loopback address: set channels.web.token (or token_file) "
        "for the web chat — or bind 127.0.0.1"
    )


@pytest.mark.parametrize("token", ['token = "t"', 'token_file = "/run/t"'])
def test_off_loopback_the_chats_token_is_enough(tmp_path: Path, token: str) -> None:
    path = write(tmp_path, f'[http]\nhost = "0.0.0.0"\n[channels.web]\n{token}\n')
    assert isinstance(load_config(path, env={}), GatewayConfig)


def test_off_loopback_with_the_web_chat_off_no_token_is_needed(tmp_path: Path) -> None:
    path = write(tmp_path, '[http]\nhost = "0.0.0.0"\n[channels.web]\nenabled = false\n')
    assert load_config(path, env={}).http.host == "0.0.0.0"


def test_a_token_from_the_environment_counts(tmp_path: Path) -> None:
    path = write(tmp_path, '[http]\nhost = "0.0.0.0"\n')
    config = load_config(path, env={"GATEWAY_CHANNELS__WEB__TOKEN": "from-env"})
    assert config.http.host == "0.0.0.0"


def test_an_empty_token_does_not_count() -> None:
    with pytest.raises(ValidationError, match=r"'0\.0\.0\.0' is not a loopback address"):
        GatewayConfig.model_validate(
            {"http": {"host": "0.0.0.0"}, "channels": {"web": {"token": ""}}}
        )


def test_the_web_chat_needs_the_http_server(tmp_path: Path) -> None:
    path = write(tmp_path, "[http]\nenabled = false\n")
    with pytest.raises(ConfigError, match="served by the HTTP server"):
        load_config(path, env={})


def test_the_message_is_one_line_and_never_shows_a_secret(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[channels.telegram]\ntoken = "123:BOT-SECRET"\n[http]\nhost = "0.0.0.0"\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "BOT-SECRET" not in str(caught.value)
    (problem,) = caught.value.problems
    assert "\n" not in str(problem)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST", "localhost."]
)
def test_loopback_addresses_need_no_token(host: str) -> None:
    assert is_loopback(host)
    assert GatewayConfig.model_validate({"http": {"host": host}})


@pytest.mark.parametrize(
    ("given", "origin"),
    [
        ("https://Chat.Example.com", "https://chat.example.com"),
        ("https://chat.example.com:443/", "https://chat.example.com"),
        ("http://chat.example.com:8080", "http://chat.example.com:8080"),
        ("http://[::1]:8765", "http://[::1]:8765"),
    ],
)
def test_allowed_origins_are_kept_as_browsers_send_them(given: str, origin: str) -> None:
    assert normal_origin(given) == origin
    config = GatewayConfig.model_validate({"channels": {"web": {"allowed_origins": [given]}}})
    assert config.channels.web.allowed_origins == [origin]


@pytest.mark.parametrize(
    "given", ["chat.example.com", "https://chat.example.com/chat", "ftp://x", "https://", "*"]
)
def test_an_allowed_origin_that_is_not_an_origin_is_a_config_error(
    tmp_path: Path, given: str
) -> None:
    path = write(tmp_path, f'[channels.web]\nallowed_origins = ["{given}"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    (problem,) = caught.value.problems
    assert problem.path == "channels.web.allowed_origins"
    assert "is not an origin like" in problem.message

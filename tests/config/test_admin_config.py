"""``[admin]``: off by default; on, it needs a token of some length, and the HTTP server."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import ConfigError, load_config

LONG = "a-long-enough-admin-token"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_the_admin_part_is_off_by_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={})
    assert not config.admin.enabled


def test_enabled_without_a_token_is_refused_even_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "[admin]\nenabled = true\n"), env={})
    (problem,) = caught.value.problems
    assert problem.path == "admin"
    assert "admin.enabled needs admin.token (or token_file)" in problem.message


@pytest.mark.parametrize("token", [f'token = "{LONG}"', 'token_file = "/run/secrets/admin"'])
def test_a_token_or_a_token_file_is_enough(tmp_path: Path, token: str) -> None:
    config = load_config(write(tmp_path, f"[admin]\nenabled = true\n{token}\n"), env={})
    assert config.admin.enabled


def test_a_token_from_the_environment_counts(tmp_path: Path) -> None:
    path = write(tmp_path, "[admin]\nenabled = true\n")
    config = load_config(path, env={"GATEWAY_ADMIN__TOKEN": LONG})
    assert config.admin.token is not None


def test_a_short_token_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, '[admin]\nenabled = true\ntoken = "hunter2"\n'), env={})
    (problem,) = caught.value.problems
    assert problem.path == "admin.token"
    assert "7 characters; use at least 16" in problem.message
    assert "hunter2" not in str(caught.value)


def test_the_admin_part_needs_the_http_server(tmp_path: Path) -> None:
    text = f'[admin]\nenabled = true\ntoken = "{LONG}"\n[http]\nenabled = false\n'
    text += "[channels.web]\nenabled = false\n"
    with pytest.raises(ConfigError, match="served by the HTTP server"):
        load_config(write(tmp_path, text), env={})

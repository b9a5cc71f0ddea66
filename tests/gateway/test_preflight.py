"""``gateway config check`` refuses what start-up would refuse on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gateway.cli import app

UNSET = "WEFT_TEST_KEY_THAT_IS_NOT_SET"


def check(path: Path) -> Result:
    return CliRunner().invoke(app, ["config", "check", str(path)])


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    # A free port: the check also asks whether the web port can be bound.
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[http]\nport = 0\n' + text)
    return path


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSET, raising=False)


def test_an_unset_key_variable_of_the_default_models_provider_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        f'[models]\ndefault = "openai/gpt-x"\n[models.providers.openai]\napi_key_env = "{UNSET}"\n'
        # A provider no model uses is not started, so its key is not looked for.
        f'[models.providers.spare]\napi_key_env = "{UNSET}"\n',
    )
    result = check(path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {path}: 1 problem",
        f"  models.providers.openai.api_key_env: names {UNSET}, which is not set in the "
        "environment; export it or set api_key_file (for models.default 'openai/gpt-x')",
    ]
    monkeypatch.setenv(UNSET, "sk-present")
    result = check(path)
    assert result.output == f"{path}: ok\n"
    assert result.exit_code == 0


def test_an_unset_key_variable_of_an_agents_provider_is_named(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[models.providers.router]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "{UNSET}"\n'
        '[agents.default]\nmodel = "router/small"\n',
    )
    result = check(path)
    assert result.exit_code == 1
    assert "models.providers.router.api_key_env" in result.output
    assert "agents.default.model 'router/small'" in result.output


def test_a_data_dir_open_to_others_is_named_with_its_fix(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    result = check(path)
    assert result.exit_code == 1
    assert f"  data_dir: {data} is open to other users (mode 0755): chmod 700 {data}" in (
        result.output.splitlines()
    )


def test_an_enabled_telegram_bot_whose_token_variable_is_unset_is_named(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[channels.telegram]\nenabled = true\ntoken_env = "{UNSET}"\n'
        '[channels.telegram.accounts.support]\ntoken_file = "/nonexistent/token"\n',
    )
    result = check(path)
    assert result.exit_code == 1
    assert f"channels.telegram.token_env: names {UNSET}, which is not set" in result.output
    assert "channels.telegram.accounts.support.token_file" in result.output


def test_an_enabled_discord_bot_without_a_token_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, f'[channels.discord]\nenabled = true\ntoken_env = "{UNSET}"\n')
    result = check(path)
    assert result.exit_code == 1
    assert f"channels.discord.token_env: names {UNSET}, which is not set" in result.output
    path = write(tmp_path, '[channels.discord]\nenabled = true\ntoken_file = "/nonexistent/t"\n')
    result = check(path)
    assert result.exit_code == 1
    assert "channels.discord.token_file" in result.output


def test_an_unknown_access_policy_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[channels.telegram.access]\ndm_policy = "everyone"\n')
    result = check(path)
    assert result.exit_code == 1
    assert "channels.telegram.access.dm_policy" in result.output


def test_an_mcp_server_with_neither_command_nor_url_is_named_with_its_dotted_path(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "[mcp.servers.github]\ntimeout_seconds = 10\n"
        '[mcp.servers.both]\ncommand = "x"\nurl = "https://example.com/mcp"\n'
        '[agents.default]\ntools = ["*", "gitlab.*"]\n',
    )
    result = check(path)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert (
        "  mcp.servers.github: give command (a server run over stdio) or url (a streamable HTTP "
        "server), neither is set"
    ) in lines
    assert (
        "  mcp.servers.both: give command (a server run over stdio) or url (a streamable HTTP server), not both"
        in lines
    )
    assert any(
        line.startswith("  agents.default.tools: names MCP server 'gitlab'") for line in lines
    )


def test_an_mcp_header_naming_an_unset_variable_is_named(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f'[mcp.servers.github]\nurl = "https://example.com/mcp"\n'
        f'headers = {{ Authorization = "Bearer ${{{UNSET}}}" }}\n',
    )
    result = check(path)
    assert result.exit_code == 1
    assert result.output.splitlines()[1] == (
        f"  mcp.servers.github.headers.Authorization: names ${{{UNSET}}}, which is not set in the "
        "environment"
    )


def test_bad_tool_limits_are_named_with_their_dotted_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[tools.web_fetch]\nallow_networks = ["not-a-net"]\nmax_bytes = 0\n'
        "[tools.run_command]\ntimeout_seconds = -1\n",
    )
    result = check(path)
    assert result.exit_code == 1
    assert "tools.web_fetch.allow_networks" in result.output
    assert "tools.web_fetch.max_bytes" in result.output
    assert "tools.run_command.timeout_seconds" in result.output

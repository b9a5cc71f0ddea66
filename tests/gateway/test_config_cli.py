"""``gateway config check`` finds what ``gateway run`` would refuse, with the same exit code.

And ``gateway init`` writes a starter file that checks clean; store paths sit
under ``data_dir``; the command itself reads well (help, version, metavars).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from config import load_config
from gateway.app import Gateway
from gateway.cli import app
from tests.gateway.conftest import make_config

GATEWAY = [sys.executable, "-m", "gateway"]
UNSET = "WEFT_TEST_INIT_KEY_NOT_SET"


def gateway(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [*GATEWAY, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**clean, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_taken_http_port_is_named_by_config_check_and_refused_by_run_with_the_same_code(
    tmp_path: Path, taken_port: int
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[http]\nport = {taken_port}\n')
    check = gateway("config", "check", str(path), cwd=tmp_path)
    run = gateway("run", "--config", str(path), cwd=tmp_path)
    assert check.returncode == run.returncode == 1
    words = f"127.0.0.1:{taken_port} cannot be used"
    assert words in check.stderr
    assert words in run.stderr
    assert run.stderr.startswith("error: http.port: ")


def test_a_bad_file_exits_1_from_config_check_and_from_run_with_the_same_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[threads]\ninbox_size = 0\n')
    check = gateway("config", "check", str(path), cwd=tmp_path)
    run = gateway("run", "--config", str(path), cwd=tmp_path)
    assert check.returncode == run.returncode == 1
    assert check.stderr == run.stderr
    assert check.stderr.startswith(f"error: {path}: 1 problem\n  threads.inbox_size: ")


def test_an_unset_api_key_variable_exits_1_from_both(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[models]\ndefault = "openai/gpt-x"\n'
        f'[models.providers.openai]\napi_key_env = "{UNSET}"\n'
    )
    check = gateway("config", "check", str(path), cwd=tmp_path)
    run = gateway("run", "--config", str(path), cwd=tmp_path)
    assert check.returncode == run.returncode == 1
    assert f"names {UNSET}, which is not set" in check.stderr
    assert f"names {UNSET}, which is not set" in run.stderr


async def test_config_check_says_a_gateway_already_runs_on_this_data_dir(tmp_path: Path) -> None:
    config = make_config(tmp_path, channels={"web": {"enabled": False}})
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{config.data_dir}"\n[channels.web]\nenabled = false\n[http]\nport = 0\n'
    )
    async with Gateway(config):
        result = await asyncio.to_thread(CliRunner().invoke, app, ["config", "check", str(path)])
    assert result.exit_code == 1
    assert "data_dir: another gateway is running here" in result.stderr


async def test_setting_only_data_dir_keeps_the_sessions_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "state"}"\n[channels.web]\nenabled = false\n[http]\nport = 0\n'
    )
    config = load_config(path, env={})
    async with Gateway(config, control=False) as gw:
        assert gw.cli is not None
        await gw.cli.submit("hello")
        await gw.wait_idle()
    assert list((tmp_path / "state" / "sessions").glob("s_*.jsonl"))
    assert not (elsewhere / "data").exists()


@pytest.mark.parametrize(
    ("store", "url"),
    [
        ({"url": "jsonl://sessions"}, "jsonl:///srv/gw/sessions"),
        ({"url": "sqlite:///sessions.db"}, "sqlite:////srv/gw/sessions.db"),
        ({"url": "jsonl:///abs/sessions"}, "jsonl:///abs/sessions"),
        ({"url": "sqlite:////abs/s.db"}, "sqlite:////abs/s.db"),
        ({"url": "redis://127.0.0.1:6379/0"}, "redis://127.0.0.1:6379/0"),
    ],
)
def test_store_paths_are_relative_to_data_dir_unless_absolute(
    store: dict[str, str], url: str
) -> None:
    from config import validate

    assert validate({"data_dir": "/srv/gw", "store": store}, "test").store.url == url


def test_the_state_url_sqlite_file_is_under_data_dir_too() -> None:
    from config import validate

    config = validate({"data_dir": "/srv/gw", "store": {"state_url": "sqlite:///state.db"}}, "t")
    assert config.state_store_url() == "sqlite:////srv/gw/state.db"


def test_the_old_example_spelling_keeps_its_meaning() -> None:
    from config import validate

    config = validate({"data_dir": "./data", "store": {"url": "jsonl://./data/sessions"}}, "t")
    assert config.store.url == "jsonl://./data/sessions"


# --- gateway init ------------------------------------------------------------------------


def test_init_from_flags_writes_a_commented_file_that_checks_clean(tmp_path: Path) -> None:
    result = gateway(
        "init", "--provider", "openai", "--telegram-token-env", "MY_TG_TOKEN",
        "--discord-token-env", "MY_DC_TOKEN", "--timezone", "Europe/Berlin",
        "--data-dir", str(tmp_path / "data"),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "gateway.toml").read_text()
    assert written.startswith("# gateway.toml — written by `gateway init`")
    assert 'default = "openai/gpt-4o-mini"' in written
    assert 'api_key_env = "OPENAI_API_KEY"' in written
    assert 'token_env = "MY_TG_TOKEN"' in written
    assert 'token_env = "MY_DC_TOKEN"' in written
    assert "export OPENAI_API_KEY" in result.stdout
    env = {
        "OPENAI_API_KEY": "sk-x",
        "MY_TG_TOKEN": "1:x",
        "MY_DC_TOKEN": "x",
        "GATEWAY_HTTP__PORT": "0",
    }
    check = gateway("config", "check", cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stderr
    missing = gateway("config", "check", cwd=tmp_path, env={"GATEWAY_HTTP__PORT": "0"})
    assert missing.returncode == 1
    assert "channels.telegram.token_env: names MY_TG_TOKEN" in missing.stderr


def test_init_asks_when_interactive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    answers = "anthropic\n\nMY_CLAUDE_KEY\ny\n\nn\nUTC\n"
    result = CliRunner().invoke(app, ["init", "--interactive"], input=answers)
    assert result.exit_code == 0, result.output
    written = (tmp_path / "gateway.toml").read_text()
    assert 'default = "anthropic/claude-3-5-haiku-latest"' in written
    assert 'api_key_env = "MY_CLAUDE_KEY"' in written
    assert 'token_env = "TELEGRAM_BOT_TOKEN"' in written
    assert "[channels.discord]" not in written


def test_init_never_replaces_a_file_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "gateway.toml").write_text("# mine\n")
    refused = gateway("init", "--provider", "echo", cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: gateway.toml exists; pass --force")
    assert (tmp_path / "gateway.toml").read_text() == "# mine\n"
    forced = gateway("init", "--provider", "ollama", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert 'base_url = "http://127.0.0.1:11434/v1"' in (tmp_path / "gateway.toml").read_text()


def test_init_refuses_a_secret_where_a_variable_name_belongs(tmp_path: Path) -> None:
    result = gateway("init", "--provider", "openai", "--api-key-env", "sk-abc:123", cwd=tmp_path)
    assert result.returncode == 2
    assert "the name of an environment variable" in result.stderr
    assert not (tmp_path / "gateway.toml").exists()


# --- the command itself ---------------------------------------------------------------------


def test_bare_gateway_prints_help_and_exits_0(tmp_path: Path) -> None:
    result = gateway(cwd=tmp_path)
    assert result.returncode == 0
    assert "Usage: gateway" in result.stdout
    for group in ("cron", "sessions", "pairing", "config"):
        sub = gateway(group, cwd=tmp_path)
        assert sub.returncode == 0, group
        assert f"Usage: gateway {group}" in sub.stdout


def test_gateway_version_prints_the_version(tmp_path: Path) -> None:
    result = gateway("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("gateway 0.")


@pytest.mark.parametrize(
    "command",
    [[], ["cron", "set-cron"], ["stop-session"], ["sessions", "list"], ["init"], ["run"]],
)
def test_no_option_shows_a_bool_metavar(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output


def test_a_usage_error_exits_2(tmp_path: Path) -> None:
    assert gateway("cron", "list", "--no-such-option", cwd=tmp_path).returncode == 2
    assert gateway("stop-session", cwd=tmp_path).returncode == 2


def test_an_empty_web_token_file_is_named_by_config_check_and_refused_by_run(
    tmp_path: Path,
) -> None:
    token = tmp_path / "web-token"
    token.write_text("\n")
    path = tmp_path / "gateway.toml"
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[http]\nport = 0\n'
        f'[channels.web]\ntoken_file = "{token}"\n'
    )
    check = gateway("config", "check", str(path), cwd=tmp_path)
    run = gateway("run", "--config", str(path), cwd=tmp_path)
    assert check.returncode == run.returncode == 1
    assert f"channels.web.token_file: {token} is empty" in check.stderr
    assert f"channels.web.token_file {token} is empty" in run.stderr

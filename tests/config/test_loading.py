"""Loading the configuration: files, environment, errors that name the path."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from config import ConfigError, ConfigFileError, GatewayConfig, load_config
from config.loading import env_overrides

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = [sys.executable, "-m", "gateway"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_defaults_need_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(env={})
    assert config.store.url == "jsonl://data/sessions"
    assert config.state_store_url() == "sqlite:///data/gateway.db"
    assert config.models.default == "echo"
    assert config.channels.cli.enabled
    assert config.channels.web.enabled


def test_the_example_file_documents_a_valid_configuration() -> None:
    config = load_config(ROOT / "gateway.example.toml", env={})
    assert isinstance(config, GatewayConfig)


def test_the_example_file_mentions_every_option() -> None:
    text = (ROOT / "gateway.example.toml").read_text()

    def models_in(annotation: object) -> list[type]:
        """The config models an annotation holds: directly, or in a list, dict or union."""
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]

    def names(model: type) -> set[str]:
        out = set()
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            out.add(name)
            for inner in models_in(field.annotation):
                out |= names(inner)
        return out

    missing = sorted(n for n in names(GatewayConfig) if n not in text)
    assert not missing, f"gateway.example.toml does not mention {missing}"


def test_stream_turns_the_streamed_answer_on_and_off_under_its_former_name_too(
    tmp_path: Path,
) -> None:
    text = "[channels.telegram]\nstream = false\n[channels.discord]\nstream_edits = false\n"
    config = load_config(write(tmp_path, text), env={})
    assert not config.channels.telegram.stream
    assert not config.channels.discord.stream
    assert load_config(write(tmp_path, ""), env={}).channels.telegram.stream


def test_an_unknown_key_is_an_error_naming_its_dotted_path(tmp_path: Path) -> None:
    path = write(tmp_path, "[threads]\nmax_concurent_turns = 4\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    problem = caught.value.problems[0]
    assert problem.path == "threads.max_concurent_turns"
    assert "4" in problem.value


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'timezone = "Mars/Olympus"\n[threads]\nmax_concurrent_turns = 0\n[store]\nurl = "ftp://x"\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    paths = {p.path for p in caught.value.problems}
    assert {"timezone", "threads.max_concurrent_turns", "store.url"} <= paths


def test_environment_overrides_the_file_with_double_underscore_nesting(tmp_path: Path) -> None:
    path = write(tmp_path, "[threads]\nmax_concurrent_turns = 4\n")
    env = {"GATEWAY_THREADS__MAX_CONCURRENT_TURNS": "9", "GATEWAY_TIMEZONE": "Europe/Berlin"}
    config = load_config(path, env=env)
    assert config.threads.max_concurrent_turns == 9
    assert config.timezone == "Europe/Berlin"


def test_gateway_config_names_the_file_to_load(tmp_path: Path) -> None:
    path = write(tmp_path, "[threads]\ninbox_size = 7\n")
    config = load_config(env={"GATEWAY_CONFIG": str(path)})
    assert config.threads.inbox_size == 7


def test_a_secret_is_never_shown_in_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[channels.telegram]\ntoken = 12345\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "12345" not in str(caught.value)


def test_an_api_key_file_must_exist_and_its_contents_are_never_held(tmp_path: Path) -> None:
    from threads.llm import resolve_api_key

    secret = tmp_path / "openai-key"
    secret.write_text("sk-very-secret\n")
    body = '[models.providers.openai]\napi_key_file = "{}"\n'
    config = load_config(write(tmp_path, body.format(secret)), env={})
    assert "very-secret" not in repr(config)
    assert "very-secret" not in config.model_dump_json()
    assert resolve_api_key("openai", config.models.providers["openai"]) == "sk-very-secret"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, body.format(tmp_path / "missing")), env={})
    (problem,) = caught.value.problems
    assert problem.path == "models.providers.openai.api_key_file"
    assert problem.message == "no such file"


def test_env_values_are_text_unless_they_are_json_lists_or_objects() -> None:
    parsed = env_overrides(
        {
            "GATEWAY_A__B": "3",
            "GATEWAY_A__C": "true",
            "GATEWAY_D": "plain",
            "GATEWAY_E": '["x", "y"]',
            "GATEWAY_F": '{"k": "v"}',
            "OTHER": "x",
        }
    )
    assert parsed == {"a": {"b": "3", "c": "true"}, "d": "plain", "e": ["x", "y"], "f": {"k": "v"}}


def test_a_numeric_env_value_for_a_text_option_stays_text() -> None:
    config = load_config(
        env={"GATEWAY_CHANNELS__CLI__USER_ID": "42", "GATEWAY_THREADS__INBOX_SIZE": "9"}
    )
    assert config.channels.cli.user_id == "42"
    assert config.threads.inbox_size == 9


def test_an_unknown_environment_key_is_an_error_naming_its_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(env={"GATEWAY_THREADS__MAX_TRUNS": "4"})
    assert [p.path for p in caught.value.problems] == ["threads.max_truns"]


def test_cross_references_are_reported_with_their_own_path_alongside_field_errors(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        'default_agent = "nope"\n[threads]\ninbox_size = 0\n[agents.default]\nmodel = "ghost/m"\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    paths = {p.path for p in caught.value.problems}
    assert paths == {"threads.inbox_size", "default_agent", "agents.default.model"}


def test_a_model_naming_an_unconfigured_provider_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[models]\ndefault = "openai/gpt-4o"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "openai" in str(caught.value)


def test_config_check_exits_zero_on_a_valid_file(tmp_path: Path) -> None:
    # In an empty directory: the check also looks at the (relative) data_dir. Port 0:
    # whether 8765 is free on this machine is not what this test is about.
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(ROOT / "gateway.example.toml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={**os.environ, "GATEWAY_HTTP__PORT": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_config_check_prints_each_problem_and_exits_non_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "[threads]\ninbox_size = -1\nbogus = true\n")
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: 2 problems\n")
    assert "threads.inbox_size" in result.stderr
    assert "threads.bogus" in result.stderr
    assert "-1" in result.stderr


def test_chat_users_steer_and_the_api_and_system_sources_queue_by_default() -> None:
    policies = GatewayConfig().threads.busy_policy
    assert {s: policies[s] for s in ("telegram", "discord", "web", "cli")} == dict.fromkeys(
        ("telegram", "discord", "web", "cli"), "steer"
    )
    queued = ("api", "session", "child_completed", "cron", "heartbeat", "progress", "compression")
    assert {s: policies[s] for s in queued} == dict.fromkeys(queued, "queue")


def test_a_busy_policy_for_an_unknown_source_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[threads.busy_policy]\nfax = "queue"\n')
    with pytest.raises(ConfigError, match="unknown wake sources"):
        load_config(path, env={})


def test_a_store_url_password_is_never_shown() -> None:
    from config.models import StoreConfig, redact_url

    assert redact_url("redis://:hunter2@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redact_url("redis://app:hunter2@db/1") == "redis://app:***@db/1"
    assert redact_url("jsonl://./data/sessions") == "jsonl://./data/sessions"
    assert "hunter2" not in StoreConfig(url="rediss://:hunter2@h:6380/2").safe_url


def test_a_config_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_bytes(b'timezone = "UTC"\n# caf\xe9\n')
    with pytest.raises(ConfigFileError) as caught:
        load_config(path, env={})
    assert str(caught.value) == f"{path}: not UTF-8 text (byte 0xe9 at offset 22)"
    for command in (["config", "check", str(path)], ["run", "--config", str(path)]):
        result = subprocess.run(
            [*GATEWAY, *command], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 1, command
        assert result.stdout == "", command
        assert result.stderr.splitlines() == [
            f"error: {path}: not UTF-8 text (byte 0xe9 at offset 22)"
        ], command


def test_a_provider_base_url_with_credentials_is_refused_and_shown_redacted(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path, '[models.providers.local]\nbase_url = "https://bob:hunter2@llm.internal/v1"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    (problem,) = caught.value.problems
    assert problem.path == "models.providers.local.base_url"
    assert "api_key" in problem.message
    assert "hunter2" not in str(caught.value)
    assert "https://bob:***@llm.internal/v1" in str(caught.value)
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "models.providers.local.base_url" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr


def test_a_store_url_refused_for_its_scheme_is_shown_redacted(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "postgres://app:hunter2@db/gw"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert [p.path for p in caught.value.problems] == ["store.url"]
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("cron.poll_seconds", "1e-300"),
        ("cron.poll_seconds", "61"),
        ("cron.poll_seconds", "inf"),
        ("cron.misfire_grace_seconds", "1e300"),
        ("threads.collect_window_seconds", "1e-300"),
        ("threads.idle_evict_seconds", "inf"),
        ("threads.tool_timeout_seconds", "1e-300"),
        ("threads.close_deadline_seconds", "1e300"),
        ("models.providers.p.timeout_seconds", "1e-300"),
        ("models.providers.p.retry_budget_seconds", "inf"),
        ("agent_defaults.subagents.archive_after_minutes", "10000000000000"),
        ('models.settings."p/m".context_window', "100000000000"),
    ],
)
def test_an_absurd_number_is_refused_naming_its_setting(
    tmp_path: Path, setting: str, value: str
) -> None:
    table, _, name = setting.rpartition(".")
    path = write(tmp_path, f"[{table}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert [p.path for p in caught.value.problems] == [setting.replace('"', "")]

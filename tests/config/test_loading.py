"""Loading the configuration: files, environment, errors that name the path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from config import ConfigError, GatewayConfig, load_config
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
    assert config.store.url == "jsonl://./data/sessions"
    assert config.models.default == "echo"
    assert config.channels.cli.enabled
    assert config.channels.web.enabled


def test_the_example_file_documents_a_valid_configuration() -> None:
    config = load_config(ROOT / "gateway.example.toml", env={})
    assert isinstance(config, GatewayConfig)


def test_the_example_file_mentions_every_option() -> None:
    text = (ROOT / "gateway.example.toml").read_text()

    def names(model: type) -> set[str]:
        out = set()
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            out.add(name)
            annotation = field.annotation
            if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
                out |= names(annotation)
        return out

    missing = sorted(n for n in names(GatewayConfig) if n not in text)
    assert not missing, f"gateway.example.toml does not mention {missing}"


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
    path = write(tmp_path, "[channels.telegram]\nenabled = true\ntoken = 12345\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "12345" not in str(caught.value)


def test_a_secret_is_read_from_its_file_and_not_printed(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("123:very-secret\n")
    path = write(tmp_path, f'[channels.telegram]\nenabled = true\ntoken_file = "{secret}"\n')
    config = load_config(path, env={})
    assert "very-secret" not in repr(config)
    assert "very-secret" not in config.model_dump_json()


def test_env_values_parse_as_json_when_they_can() -> None:
    parsed = env_overrides(
        {"GATEWAY_A__B": "3", "GATEWAY_A__C": "true", "GATEWAY_D": "plain", "OTHER": "x"}
    )
    assert parsed == {"a": {"b": 3, "c": True}, "d": "plain"}


def test_a_model_naming_an_unconfigured_provider_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[models]\ndefault = "openai/gpt-4o"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "openai" in str(caught.value)


def test_config_check_exits_zero_on_a_valid_file() -> None:
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(ROOT / "gateway.example.toml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_config_check_prints_each_problem_and_exits_non_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "[threads]\ninbox_size = -1\nbogus = true\n")
    result = subprocess.run(
        [*GATEWAY, "config", "check", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert "threads.inbox_size" in result.stdout
    assert "threads.bogus" in result.stdout
    assert "-1" in result.stdout


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

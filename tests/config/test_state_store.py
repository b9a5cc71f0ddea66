"""Where gateway state (cron jobs, the run ledger) lives: ``GatewayConfig.state_store_url``."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import validate


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/3", "rediss://:secret@cache.example:6380/0"]
)
def test_the_state_store_is_the_session_redis_when_sessions_are_in_redis(
    tmp_path: Path, url: str
) -> None:
    config = validate({"data_dir": str(tmp_path / "data"), "store": {"url": url}}, "test")
    assert config.state_store_url() == url


@pytest.mark.parametrize(
    "url", ["jsonl://./data/sessions", "sqlite:///data/sessions.db", "memory://"]
)
def test_without_redis_sessions_state_is_one_sqlite_file_in_the_data_directory(
    tmp_path: Path, url: str
) -> None:
    config = validate({"data_dir": str(tmp_path / "data"), "store": {"url": url}}, "test")
    assert config.state_store_url() == f"sqlite:///{tmp_path / 'data' / 'gateway.db'}"


def test_an_explicit_state_url_wins_over_the_session_store(tmp_path: Path) -> None:
    config = validate(
        {
            "data_dir": str(tmp_path / "data"),
            "store": {"url": "redis://127.0.0.1:6379/3", "state_url": "sqlite:////srv/state.db"},
        },
        "test",
    )
    assert config.state_store_url() == "sqlite:////srv/state.db"

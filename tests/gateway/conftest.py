"""Gateway test helpers: a configuration under a temporary data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import GatewayConfig, validate


def make_config(tmp_path: Path, **overrides: object) -> GatewayConfig:
    data = {
        "data_dir": str(tmp_path / "data"),
        "store": {"url": f"jsonl://{tmp_path / 'data' / 'sessions'}"},
        "channels": {"web": {"port": 0}},
    }
    data.update(overrides)
    return validate(data, "test")


@pytest.fixture
def config(tmp_path: Path) -> GatewayConfig:
    return make_config(tmp_path)

"""Gateway test helpers: a configuration under a temporary data directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from config import GatewayConfig, validate


class Replies:
    """What the terminal channel prints; ``wait(n)`` returns once ``n`` replies arrived."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._arrived = asyncio.Event()

    def __call__(self, text: str) -> None:
        self.items.append(text)
        self._arrived.set()

    async def wait(self, count: int = 1) -> list[str]:
        async with asyncio.timeout(10):
            while len(self.items) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.items


def make_config(tmp_path: Path, **overrides: object) -> GatewayConfig:
    data = {
        "data_dir": str(tmp_path / "data"),
        "store": {"url": f"jsonl://{tmp_path / 'data' / 'sessions'}"},
        "http": {"port": 0},
    }
    data.update(overrides)
    return validate(data, "test")


@pytest.fixture
def config(tmp_path: Path) -> GatewayConfig:
    return make_config(tmp_path)

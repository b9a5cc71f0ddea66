"""Fixtures of the model-client tests: the fake servers and a fake clock for retries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from threads.testing.fake_anthropic import FakeAnthropicServer
from threads.testing.fake_openai import FakeOpenAIServer

OPENAI_KEY = "sk-test-openai-0123456789"
ANTHROPIC_KEY = "sk-ant-test-0123456789"


class FakeTime:
    """A clock that moves only when the retry loop sleeps; the sleeps are kept."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def openai_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(api_key=OPENAI_KEY) as server:
        yield server


@pytest.fixture
async def anthropic_server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(api_key=ANTHROPIC_KEY) as server:
        yield server

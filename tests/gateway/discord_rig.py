"""The whole gateway with its real Discord adapter, against the fake Discord."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.discord import DiscordChannel
from channels.testing import FakeDiscord
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.gateway.telegram_rig import OPEN_ACCESS
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import Tool
from threads.llm.base import ModelClient
from threads.testing.scripted import ScriptedModel


@dataclass
class DiscordRig:
    gateway: Gateway
    fake: FakeDiscord
    script: KeyedScript
    model: ModelClient

    @property
    def channel(self) -> DiscordChannel:
        channel = self.gateway.channels["discord"]
        assert isinstance(channel, DiscordChannel)
        return channel


@asynccontextmanager
async def discord_gateway(
    tmp_path: Path,
    *,
    model: ModelClient | None = None,
    script: KeyedScript | None = None,
    discord: Mapping[str, Any] | None = None,
    control: bool = False,
    tools: Sequence[Tool[Any]] = (),
) -> AsyncIterator[DiscordRig]:
    """A started, ready gateway on the scripted model whose Discord bot talks to a fake."""
    script = script if script is not None else KeyedScript()
    async with FakeDiscord(bot_name="gw-bot") as fake:
        config = make_config(
            tmp_path,
            models={
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            agents={"default": {"model": "scripted/test"}},
            http={"port": 0},
            channels={
                "discord": {
                    "enabled": True,
                    "token": fake.token,
                    "api_base": fake.api_url,
                    "gateway_url": fake.ws_url,
                    "ready_timeout_seconds": 0.05,
                    "access": OPEN_ACCESS,
                    **(discord or {}),
                },
            },
        )
        client = model if model is not None else ScriptedModel(default=script)
        async with Gateway(
            config, model_clients={"scripted": client}, control=control, tools=tools
        ) as gw:
            await fake.wait_for_ready()
            yield DiscordRig(gateway=gw, fake=fake, script=script, model=client)

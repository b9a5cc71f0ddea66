"""The whole gateway with its real Telegram adapter, against the fake Bot API server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.telegram import TelegramChannel
from channels.testing import FakeTelegram
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import Tool
from threads.clock import WallClock
from threads.llm.base import ModelClient
from threads.testing.scripted import ScriptedModel

BOT = "gw_bot"


@dataclass
class TelegramRig:
    gateway: Gateway
    fake: FakeTelegram
    script: KeyedScript
    model: ModelClient

    @property
    def channel(self) -> TelegramChannel:
        channel = self.gateway.channels["telegram"]
        assert isinstance(channel, TelegramChannel)
        return channel


# Everyone may talk to the bot in these tests (they are about the adapter, not
# access control: see tests/gateway/test_access_telegram.py).
OPEN_ACCESS = {"dm_policy": "open", "group_policy": "open", "require_mention": False}


def telegram_config(tmp_path: Path, fake: FakeTelegram, **telegram: Any) -> dict[str, Any]:
    """The ``[channels.telegram]`` table pointing the default account at ``fake``."""
    return {
        "enabled": True,
        "token": fake.token,
        "base_url": fake.base_url,
        "base_file_url": fake.base_file_url,
        "access": OPEN_ACCESS,
        **telegram,
    }


@asynccontextmanager
async def telegram_gateway(
    tmp_path: Path,
    *,
    model: ModelClient | None = None,
    script: KeyedScript | None = None,
    telegram: Mapping[str, Any] | None = None,
    http_port: int = 0,
    control: bool = False,
    tools: Sequence[Tool[Any]] = (),
    approval_clock: WallClock | None = None,
    **overrides: Any,
) -> AsyncIterator[TelegramRig]:
    """A started gateway on the scripted model whose Telegram bot talks to a fake server."""
    script = script if script is not None else KeyedScript()
    async with FakeTelegram(bot_username=BOT) as fake:
        config = make_config(
            tmp_path,
            models={
                "providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}
            },
            agents={"default": {"model": "scripted/test"}},
            http={"port": http_port},
            channels={
                "telegram": telegram_config(tmp_path, fake, **(telegram or {})),
            },
            **overrides,
        )
        client = model if model is not None else ScriptedModel(default=script)
        async with Gateway(
            config,
            model_clients={"scripted": client},
            control=control,
            tools=tools,
            approval_clock=approval_clock,
        ) as gw:
            yield TelegramRig(gateway=gw, fake=fake, script=script, model=client)

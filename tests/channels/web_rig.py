"""A whole gateway with the web chat on a model the test controls, and the page's frames."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from channels.web import WebChannel
from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from threads.agent.tools import Tool
from threads.llm.base import ModelClient
from threads.store.base import SessionStore
from threads.testing.scripted import ScriptedModel

Frame = dict[str, Any]


def chat_config(
    tmp_path: Path, *, base_url: str = "http://127.0.0.1:9", **more: Any
) -> GatewayConfig:
    """The web chat on a model named ``scripted`` (given to the gateway, or served at ``base_url``)."""
    data: dict[str, Any] = {
        "models": {"providers": {"scripted": {"kind": "openai", "base_url": base_url}}},
        "agents": {"default": {"model": "scripted/test"}},
        "channels": {"cli": {"enabled": False}},
        "cron": {"enabled": False},
    }
    data.update(more)
    return make_config(tmp_path, **data)


@dataclass
class ChatRig:
    gateway: Gateway
    model: ScriptedModel | None

    @property
    def web(self) -> WebChannel:
        assert self.gateway.web is not None
        return self.gateway.web

    async def session_entries(self, chat: str) -> Sequence[Any]:
        """What the store holds of the chat's current session (read back, not the live copy)."""
        session = await self.gateway.store.resolve(f"web:{chat}")
        assert session is not None
        return (await self.gateway.store.load(session)).entries


@asynccontextmanager
async def chat_gateway(
    config: GatewayConfig,
    *,
    model: ModelClient | None = None,
    store: SessionStore | None = None,
    tools: Sequence[Tool[Any]] = (),
) -> AsyncIterator[ChatRig]:
    """The gateway of ``config``; ``model`` answers as ``scripted`` when given."""
    clients = {"scripted": model} if model is not None else None
    async with Gateway(
        config, model_clients=clients, store=store, tools=tools, control=False
    ) as gateway:
        yield ChatRig(gateway, model if isinstance(model, ScriptedModel) else None)


async def say(
    ws: aiohttp.ClientWebSocketResponse,
    text: str,
    *,
    id: str,
    files: Sequence[tuple[str, str, bytes]] = (),
    resend: bool = False,
) -> None:
    """Send a message as the page does; ``files`` are (name, type, bytes)."""
    await ws.send_json(
        {
            "type": "message",
            "id": id,
            "text": text,
            "files": [
                {"name": n, "type": t, "data": base64.b64encode(d).decode()} for n, t, d in files
            ],
            "resend": resend,
        }
    )


async def frames_until(
    ws: aiohttp.ClientWebSocketResponse, done: Callable[[Frame], bool]
) -> list[Frame]:
    """Every frame up to and including the first for which ``done`` holds."""
    frames: list[Frame] = []
    while not frames or not done(frames[-1]):
        frames.append(dict(await ws.receive_json(timeout=10)))
    return frames


def kind(name: str, **fields: Any) -> Callable[[Frame], bool]:
    """A frame of type ``name`` whose fields have the values given."""
    return lambda f: f["type"] == name and all(f.get(k) == v for k, v in fields.items())

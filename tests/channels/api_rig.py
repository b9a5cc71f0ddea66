"""A whole gateway with the OpenAI-compatible API on, its model scripted per session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from openai import AsyncOpenAI

from config import GatewayConfig
from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.threads.agent.conftest import KeyedScript
from threads.agent.tools import Tool
from threads.llm.base import ModelRequest
from threads.llm.echo import split_wake
from threads.messages import FilePart, Message
from threads.testing.scripted import ScriptedModel

API_KEY = "sk-gateway-test-key"


def api_config(tmp_path: Path, api: Mapping[str, Any] | None = None, **more: Any) -> GatewayConfig:
    """A gateway on the scripted model with the API on (key ``API_KEY``) and two agents."""
    data: dict[str, Any] = {
        "models": {"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}},
        "agents": {
            "default": {"model": "scripted/test"},
            "coder": {"model": "scripted/test", "instructions": "You write code."},
        },
        "channels": {
            "api": {"enabled": True, "api_key": API_KEY, **(api or {})},
            "web": {"enabled": False},
            "cli": {"enabled": False},
        },
        "cron": {"enabled": False},
    }
    data.update(more)
    return make_config(tmp_path, **data)


@dataclass
class Api:
    """The running gateway, its per-session script, and ways to call its API."""

    gateway: Gateway
    script: KeyedScript
    model: ScriptedModel

    @property
    def base_url(self) -> str:
        assert self.gateway.http is not None
        return f"{self.gateway.http.url}v1"

    def sdk(self, key: str = API_KEY) -> AsyncOpenAI:
        """The official client, as a user would make it (no retries: a test sees the first answer)."""
        return AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0)

    async def post(
        self,
        body: Any,
        *,
        key: str | None = API_KEY,
        headers: Mapping[str, str] | None = None,
        path: str = "/chat/completions",
    ) -> tuple[int, Any, Mapping[str, str]]:
        """POST ``body`` (JSON, or bytes as they are): status, decoded JSON, headers."""
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self.base_url}{path}", data=data, headers=sent) as response,
        ):
            raw = await response.read()
            return response.status, orjson.loads(raw), response.headers

    async def stream(
        self, body: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> tuple[int, list[bytes], Mapping[str, str]]:
        """POST a streamed request: status, each SSE ``data:`` payload, headers."""
        sent = {"Authorization": f"Bearer {API_KEY}", **(headers or {})}
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{self.base_url}/chat/completions",
                data=orjson.dumps({**body, "stream": True}),
                headers=sent,
            ) as response,
        ):
            raw = await response.read()
        events = [block for block in raw.split(b"\n\n") if block]
        assert all(block.startswith(b"data: ") for block in events), raw
        return response.status, [block[6:] for block in events], response.headers


@asynccontextmanager
async def running(config: GatewayConfig, tools: Sequence[Tool[Any]] = ()) -> AsyncIterator[Api]:
    script = KeyedScript()
    model = ScriptedModel(default=script)
    async with Gateway(config, model_clients={"scripted": model}, control=False, tools=tools) as gw:
        yield Api(gateway=gw, script=script, model=model)


def ask(text: str, model: str = "default", **more: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **more}


def user_texts(request: ModelRequest) -> list[str]:
    """The bodies of the user messages the model was shown (wake headers cut off)."""
    return [body_of(m) for m in request.messages if m.role == "user"]


def body_of(message: Message) -> str:
    return split_wake(message.text())[1]


def files_of(request: ModelRequest) -> list[FilePart]:
    last = [m for m in request.messages if m.role == "user"][-1]
    return [p for p in last.content if isinstance(p, FilePart)]

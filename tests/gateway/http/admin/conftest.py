"""The whole gateway with its admin part on, the scripted model, and a client of the admin API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import Gateway
from tests.gateway.conftest import make_config
from tests.gateway.test_thread_ops_cli import Digging, dig
from tests.threads.agent.conftest import KeyedScript
from threads.sinks import DropSink
from threads.testing.scripted import ScriptedModel
from threads.turns import RunResult
from threads.wake import UserCaller, Wake, WakeSource

TOKEN = "admin-token-for-the-tests-0123"
SCRIPTED = {"providers": {"scripted": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}}


def admin_config(tmp_path: Path, **overrides: Any) -> Any:
    data: dict[str, Any] = {
        "models": SCRIPTED,
        "agents": {"default": {"model": "scripted/test"}},
        "admin": {"enabled": True, "token": TOKEN},
    }
    data.update(overrides)
    return make_config(tmp_path, **data)


class ApiClient:
    """Calls the admin API of a running gateway; every answer is (status, JSON body)."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: bytes | None = None,
        token: str | None = TOKEN,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        body = orjson.dumps(json) if json is not None else data
        if json is not None:
            sent["Content-Type"] = "application/json"
        async with self.http.request(method, self.base + path, data=body, headers=sent) as answer:
            raw = await answer.read()
            return answer.status, orjson.loads(raw) if raw else None

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, json: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, json=json, **kw)

    async def put(self, path: str, json: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, json=json, **kw)

    async def delete(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, **kw)

    async def ok(self, method: str, path: str, json: Any = None, status: int = 200) -> Any:
        got, body = await self.call(method, path, json=json)
        assert got == status, body
        return body


@dataclass
class AdminRig:
    gateway: Gateway
    script: KeyedScript
    api: ApiClient

    @property
    def base(self) -> str:
        return self.api.base

    async def talk(self, key: str, text: str) -> RunResult:
        """A user's message to ``key`` (replies dropped); its turn's result."""
        wake = Wake(
            source=WakeSource.TELEGRAM,
            body=text,
            caller=UserCaller(channel="telegram", user_id="7"),
            sink=DropSink(reason="test"),
        )
        _accepted, turn = await self.gateway.manager.wake_turn(key, wake)
        result = await turn.wait(10)
        assert result is not None
        return result


@asynccontextmanager
async def admin_gateway(
    tmp_path: Path, *, script: KeyedScript | None = None, **overrides: Any
) -> AsyncIterator[AdminRig]:
    Digging.started = asyncio.Event()
    Digging.release = asyncio.Event()
    script = script if script is not None else KeyedScript()
    config = admin_config(tmp_path, **overrides)
    model = ScriptedModel(default=script)
    async with Gateway(config, model_clients={"scripted": model}, tools=[dig], control=False) as gw:
        assert gw.http is not None
        async with aiohttp.ClientSession() as http:
            try:
                yield AdminRig(gateway=gw, script=script, api=ApiClient(http, gw.http.url + "api"))
            finally:
                Digging.release.set()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[AdminRig]:
    async with admin_gateway(tmp_path) as found:
        yield found


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """The server-sent events of a response, as (name, data)."""
    name, data = "message", b""
    async for line in response.content:
        line = line.rstrip(b"\r\n")
        if not line:
            if data:
                yield name, orjson.loads(data)
            name, data = "message", b""
        elif line.startswith(b"event: "):
            name = line[7:].decode()
        elif line.startswith(b"data: "):
            data += line[6:]

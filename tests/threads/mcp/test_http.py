"""An MCP server over streamable HTTP on loopback: called with headers, killed, and back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.threads.mcp.conftest import FAST, HttpServer, running, until


async def test_a_url_servers_tools_are_listed_and_called(
    tmp_path: Path, http_server: HttpServer
) -> None:
    settings = {"url": http_server.url, "headers": {"X-Token": "${EXP_TOKEN}"}, **FAST}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXP_TOKEN", "t0ken")
        async with running(tmp_path, settings) as rig:
            assert rig.server.state == "up", rig.server.error
            assert "exp.echo" in rig.offered()
            assert (await rig.call("echo", text="over http")).content == "echo: over http"
            assert (await rig.call("header", name="X-Token")).content == "t0ken"
            picture = await rig.call("picture")
            assert [f.media_type for f in picture.files] == ["image/png"]
            health = rig.hub.health()["exp"]
            assert (health["transport"], health["target"], health["state"]) == (
                "http",
                http_server.url,
                "up",
            )


async def test_a_header_naming_an_unset_variable_keeps_the_server_down_and_says_which(
    tmp_path: Path, http_server: HttpServer
) -> None:
    settings = {"url": http_server.url, "headers": {"Authorization": "Bearer ${NOT_SET_X}"}}
    async with running(tmp_path, {**settings, "reconnect_min_seconds": 60}) as rig:
        assert rig.server.state == "down"
        assert rig.hub.health()["exp"]["error"] == (
            "mcp.servers.exp.headers.Authorization names ${NOT_SET_X}, which is not set"
        )


async def test_a_killed_url_server_is_withdrawn_and_restored_when_it_is_back(
    tmp_path: Path, http_server: HttpServer
) -> None:
    async with running(tmp_path, {"url": http_server.url, **FAST}) as rig:
        rig.remember()
        marker = tmp_path / "in-flight"
        call = asyncio.ensure_future(rig.call("slow", seconds=60, marker=str(marker)))
        await until(marker.exists)
        http_server.kill()

        output = await call
        assert output.is_error
        assert "MCP server exp went away during the call" in output.content
        await until(lambda: rig.server.state == "down" and rig.server.failures >= 2)
        assert rig.offered() == {}
        assert rig.hub.health()["exp"]["state"] == "down"
        assert (await rig.call("echo", text="x")).content.startswith("exp.echo is not available")

        http_server.start()
        await rig.server.wait_for("up")
        assert (await rig.call("echo", text="back")).content == "echo: back"


async def test_a_probe_finds_a_url_server_gone_without_a_call(
    tmp_path: Path, http_server: HttpServer
) -> None:
    settings = {"url": http_server.url, **FAST, "probe_seconds": 0.05}
    async with running(tmp_path, settings) as rig:
        assert rig.server.state == "up"
        http_server.kill()
        await rig.server.wait_for("down")
        assert rig.offered() == {}

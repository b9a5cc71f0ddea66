"""An MCP server run over stdio: its tools offered and called, its death reported, its return."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from tests.threads.mcp.conftest import alive, running, stdio_settings, until
from tests.threads.mcp.server_script import PNG


async def test_a_servers_tools_are_offered_under_its_name_with_their_schemas(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, stdio_settings()) as rig:
        assert rig.server.state == "up"
        assert rig.offered() == {
            f"exp.{n}": f"exp__{n}"
            for n in ("echo", "picture", "document", "slow", "fail", "header", "pid")
        }
        tool = rig.registry.get("exp__echo")
        assert tool is not None
        assert tool.spec.parameters["properties"]["text"]["type"] == "string"
        assert tool.spec.parameters["required"] == ["text"]
        assert "(tool echo of MCP server exp)" in tool.spec.description
        assert rig.registry.select(["*"])[0] == {}


async def test_calls_return_text_images_as_files_and_resources_as_text(tmp_path: Path) -> None:
    async with running(tmp_path, stdio_settings()) as rig:
        echoed = await rig.call("echo", text="hi")
        assert (echoed.content, echoed.is_error) == ("echo: hi", False)

        picture = await rig.call("picture")
        assert picture.content == (
            "a red dot\n[image: exp.picture image 1 (image/png, 69 bytes), attached]"
        )
        (image,) = picture.files
        assert image.url.startswith("tool-media://local/")
        assert image.media_type == "image/png"
        assert await rig.images.fetch(image.url) == PNG
        stored = tmp_path / "media" / image.url.rsplit("/", 1)[1]
        assert stored.read_bytes() == PNG
        assert oct(stored.stat().st_mode & 0o777) == "0o600"

        document = await rig.call("document")
        assert document.content == "[resource file:///notes.txt]\nthe notes"

        failed = await rig.call("fail")
        assert failed.is_error
        assert "fail" in failed.content

        invalid = await rig.call("echo", nope=1)
        assert invalid.is_error


async def test_a_call_past_its_timeout_is_a_tool_error_and_the_server_stays_up(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, stdio_settings(timeout_seconds=0.3)) as rig:
        output = await rig.call("slow", seconds=30)
        assert output.is_error
        assert output.content == "exp.slow timed out after 0.3 s (mcp.servers.exp.timeout_seconds)"
        assert rig.server.state == "up"
        assert (await rig.call("echo", text="still here")).content == "echo: still here"


async def test_a_server_killed_mid_call_is_withdrawn_reported_and_restored(
    tmp_path: Path,
) -> None:
    hold = tmp_path / "hold-down"
    async with running(tmp_path, stdio_settings("--refuse-if", str(hold))) as rig:
        pid = int((await rig.call("pid")).content)
        rig.remember()
        marker = tmp_path / "in-flight"
        hold.touch()
        call = asyncio.ensure_future(rig.call("slow", seconds=60, marker=str(marker)))
        await until(marker.exists)
        os.kill(pid, signal.SIGKILL)

        output = await call
        assert output.is_error
        assert "exp.slow failed: MCP server exp went away during the call" in output.content

        await until(lambda: rig.server.state == "down" and rig.server.failures >= 2)
        assert rig.offered() == {}
        health = rig.hub.health()["exp"]
        assert health["state"] == "down"
        assert health["tools"] == []
        assert "refusing to start: the test holds me down" in health["error"]
        refused = await rig.call("echo", text="anyone?")
        assert refused.is_error
        assert refused.content.startswith("exp.echo is not available: MCP server exp is ")

        hold.unlink()
        await rig.server.wait_for("up")
        assert "exp.echo" in rig.offered()
        assert (await rig.call("echo", text="back")).content == "echo: back"
        assert int((await rig.call("pid")).content) != pid


async def test_a_server_that_cannot_start_is_reported_and_the_hub_starts_anyway(
    tmp_path: Path,
) -> None:
    settings = {"command": str(tmp_path / "no-such-server"), "reconnect_min_seconds": 60}
    async with running(tmp_path, settings) as rig:
        assert rig.server.state == "down"
        health = rig.hub.health()["exp"]
        assert "no such program" in health["error"]
        assert health["failures"] == 1
        assert "next_attempt" in health


async def test_closing_the_hub_stops_the_server_process(tmp_path: Path) -> None:
    async with running(tmp_path, stdio_settings()) as rig:
        pid = int((await rig.call("pid")).content)
    assert rig.server.state == "stopped"
    assert rig.offered() == {}
    assert not alive(pid)


async def test_closing_does_not_wait_for_a_server_still_starting(tmp_path: Path) -> None:
    hang = "import time; time.sleep(60)"
    settings = {"command": sys.executable, "args": ["-c", hang], "connect_timeout_seconds": 600}
    async with asyncio.timeout(30):
        async with running(tmp_path, settings, start_wait=0.1) as rig:
            assert rig.server.state == "starting"
    assert rig.server.state == "stopped"

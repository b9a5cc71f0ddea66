"""The control socket's client: a gateway that goes away mid-call leaves nothing behind."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from gateway.control import ControlClient
from gateway.errors import GatewayGoneError


async def test_a_call_cut_off_as_the_gateway_goes_away_leaves_no_unread_error(
    tmp_path: Path,
) -> None:
    stop = asyncio.Event()

    async def gateway(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stop.wait()  # reads nothing: the client's request is still being written
        writer.transport.abort()

    path = tmp_path / "gateway.sock"
    server = await asyncio.start_unix_server(gateway, str(path))
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    try:
        client = await ControlClient.connect(path)
        assert client is not None
        call = asyncio.create_task(client.call("chat", text="x" * (1 << 20)))
        async with asyncio.timeout(30):
            while not client._writer.transport.get_write_buffer_size():  # blocked writing
                await asyncio.sleep(0)
        stop.set()
        await client.wait_disconnected()
        with pytest.raises(GatewayGoneError):
            await call
        await client.close()
        del call
        gc.collect()
        assert not unhandled, unhandled
    finally:
        loop.set_exception_handler(None)
        server.close()
        await server.wait_closed()

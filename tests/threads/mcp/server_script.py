"""A small MCP server for the tests, written with the SDK's own server API.

    python server_script.py stdio [--refuse-if FILE]
    python server_script.py http PORT [--refuse-if FILE]   (PORT 0: any; the port is printed)

With ``--refuse-if FILE``, it exits at start while FILE exists (a server that
will not come back until the test lets it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import EmbeddedResource, TextResourceContents

# A 1x1 red PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415478da63f8cfc000000301010018dd8db00000000049454e44ae426082"
)

server = MCPServer("exp")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def picture() -> list[str | Image]:
    """A caption and an image."""
    return ["a red dot", Image(data=PNG, format="png")]


@server.tool()
def document() -> EmbeddedResource:
    """An embedded text resource."""
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri="file:///notes.txt", text="the notes", mime_type="text/plain"
        ),
    )


@server.tool()
async def slow(seconds: float, marker: str = "") -> str:
    """Sleep for a while (writing ``marker`` first, when given)."""
    if marker:
        await anyio.Path(marker).write_text(str(os.getpid()))
    await anyio.sleep(seconds)
    return "done"


@server.tool(name="fail")
def fail() -> str:
    """Always raises."""
    raise ValueError("boom")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of a header of this request (over HTTP), or '(none)'."""
    return (ctx.headers or {}).get(name.lower(), "(none)")


@server.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("port", nargs="?", type=int, default=0)
    parser.add_argument("--refuse-if", default="")
    args = parser.parse_args()
    if args.refuse_if and os.path.exists(args.refuse_if):
        print("refusing to start: the test holds me down", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.transport == "stdio":
        server.run()
        return
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(64)  # before the port is told, so a client that connects at once is queued
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()

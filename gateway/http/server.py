"""The gateway's one aiohttp server.

Every HTTP part of the gateway is served here, on ``[http] host:port``: the
web chat at the root, the OpenAI-compatible API, the admin API and dashboard,
and platform webhooks, each under its own prefix with its own rules (a part
mounts a sub-application; the web chat installs its few paths at the root).
Parts are put in place before :meth:`HttpServer.start`; the application is
frozen once it serves.
"""

from __future__ import annotations

import logging

from aiohttp import web

from config.channels import HttpConfig

log = logging.getLogger(__name__)


class HttpServer:
    """One aiohttp application and the site that serves it."""

    def __init__(self, config: HttpConfig) -> None:
        self.host = config.host
        self.port = config.port
        self.app = web.Application(client_max_size=config.max_request_bytes)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def mount(self, prefix: str, part: web.Application) -> None:
        """Serve ``part`` under ``prefix`` (``/v1``, ``/api``, ``/telegram``…), before start."""
        self.app.add_subapp(prefix, part)

    async def start(self) -> None:
        """Listen; raises ``OSError`` when the port cannot be bound."""
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        if self.port == 0:
            self.port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

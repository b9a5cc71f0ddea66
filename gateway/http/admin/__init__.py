"""The admin part of the gateway's HTTP server: the API at ``/api`` and the dashboard at ``/admin``.

:class:`AdminPart` is built by the gateway when ``[admin] enabled`` (it needs
a token), installed on the one HTTP server before it starts, and closed
before it stops (its event streams end first). The API's routes are listed
once (:mod:`.routes`) and served and documented from that list
(``/api/openapi.json``).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata

from aiohttp import web

from config.channels import AdminConfig
from gateway.http.admin.api import api_application
from gateway.http.admin.approvals import ApprovalsApi
from gateway.http.admin.auth import AdminAuth, read_token
from gateway.http.admin.dashboard import dashboard_application
from gateway.http.admin.errors import AdminTokenError
from gateway.http.admin.jobs import JobsApi
from gateway.http.admin.live import EventStreams, LiveThreads
from gateway.http.admin.nodes import NodesApi
from gateway.http.admin.openapi import document
from gateway.http.admin.pairing import PairingApi
from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.sessions import SessionsApi
from gateway.http.server import HttpServer
from gateway.metrics import Metrics

__all__ = ["AdminPart", "AdminTokenError"]

API_PREFIX = "/api"
DASHBOARD_PREFIX = "/admin"
TITLE = "Chat gateway admin API"


def _version() -> str:
    try:
        return metadata.version("chat-gateway")
    except metadata.PackageNotFoundError:
        return "0"


class AdminPart:
    """The admin API and dashboard of one gateway."""

    def __init__(
        self,
        parts: Parts,
        *,
        token: str,
        metrics: Metrics | None = None,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.parts = parts
        self.metrics = metrics or Metrics()
        self.auth = AdminAuth(token, allowed_origins)
        self.streams = EventStreams()
        self.live = LiveThreads(parts.manager, self.metrics)
        self.routes: list[Route] = [
            *SessionsApi(parts, self.live, self.streams, self.metrics).routes(),
            *JobsApi(parts).routes(),
            *PairingApi(parts).routes(),
            *NodesApi(parts).routes(),
            *ApprovalsApi(parts).routes(),
            Route(method="GET", path="/openapi.json", name="openapi", tag="meta",
                  summary="This document", handler=self._openapi),
        ]  # fmt: skip
        self.openapi = document(
            self.routes,
            prefix=API_PREFIX,
            title=TITLE,
            version=_version(),
            description="Every call needs Authorization: Bearer <admin token>. "
            "Errors answer {error: {status, message, field, problems}}.",
        )
        self.url = ""

    @classmethod
    def from_config(
        cls, parts: Parts, config: AdminConfig, metrics: Metrics | None = None
    ) -> AdminPart:
        """The part ``[admin]`` describes; :class:`AdminTokenError` when its token cannot be read."""
        return cls(
            parts,
            token=read_token(config),
            metrics=metrics,
            allowed_origins=config.allowed_origins,
        )

    def install(self, http: HttpServer) -> None:
        """Mount the API and the dashboard, and watch the threads (before anything runs)."""
        http.mount(API_PREFIX, api_application(self.auth, self.routes))
        http.mount(DASHBOARD_PREFIX, dashboard_application(DASHBOARD_PREFIX))
        self.parts.manager.observe(self.live.observe)

    def started(self, http: HttpServer) -> None:
        """Note where the server listens (its port is known once it started)."""
        self.url = f"{http.url}{DASHBOARD_PREFIX.lstrip('/')}/"

    async def close(self) -> None:
        """End every event stream, then the live view's tasks."""
        await self.streams.close()
        await self.live.close()

    async def _openapi(self, request: web.Request, inputs: Inputs) -> web.Response:
        return web.json_response(self.openapi, headers={"Cache-Control": "no-store"})

"""The fake Discord's REST plumbing: routes, authorization, answers, failures and holds.

Routes are named as Discord's documentation and discord.py's ``Route`` name
them, method and path template: ``"POST /channels/{channel_id}/messages"``.
Every answer with a body is JSON with ``Content-Type`` exactly
``application/json`` (discord.py reads a body as JSON only then) and carries
``X-RateLimit-*`` headers of a generous bucket, so discord.py's bucket code
runs without ever making it wait; the fake limits only when a test says so.
Errors are Discord's: ``{"message", "code"[, "errors"]}``. A 429 carries
``Retry-After``, ``X-RateLimit-*`` and ``Via: 1.1 google`` (a 429 without
``Via`` is, to discord.py, a Cloudflare ban; ``banned=True`` sends that).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from channels.testing.discord_world import DcCall, DcFile, World
from channels.testing.errors import DiscordApiError, FakeUsageError, invalid_form_body
from channels.testing.telegram import Hold

log = logging.getLogger(__name__)
T = TypeVar("T")

API_PREFIX = "/api/v10"
Answer = Any  # a JSON value, or None for 204 No Content
JSON_TYPE = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One request to a route: path parameters, query, JSON body and uploaded files.

    ``files`` are the multipart parts ``files[n]`` by ``n``, as discord.py
    uploads them beside ``payload_json`` (which becomes ``body``).
    """

    route: str
    match: dict[str, str]
    query: dict[str, str]
    body: Any
    files: dict[int, DcFile] = field(default_factory=dict)

    def snowflake(self, name: str) -> int:
        """A path parameter that must be an id; Discord's 400 when it is not."""
        value = self.match[name]
        if not value.isdigit():
            raise invalid_form_body(
                name, "NUMBER_TYPE_COERCE", f'Value "{value}" is not snowflake.'
            )
        return int(value)

    def json(self) -> dict[str, Any]:
        """The body as an object (an empty one when there is none)."""
        if self.body is None:
            return {}
        if not isinstance(self.body, dict):
            raise DiscordApiError(400, 50109, "The request body contains invalid JSON.")
        return self.body


Handler = Callable[[Call], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """A route the fake answers; ``auth=False`` for the interaction-token and CDN routes."""

    method: str
    path: str
    handler: Handler
    auth: bool = True

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """An error a test asked for instead of the next call of a route."""

    status: int
    code: int
    message: str
    retry_after: float
    is_global: bool
    banned: bool

    def response(self, bucket: str) -> web.Response:
        if self.status != 429:
            body = {"message": self.message, "code": self.code}
            return web.Response(
                body=json.dumps(body).encode(), status=self.status, headers=JSON_TYPE
            )
        if self.banned:
            page = "<html><body>You are being rate limited.</body></html>"
            return web.Response(text=page, status=429, content_type="text/html")
        body = {"message": self.message, "retry_after": self.retry_after, "global": self.is_global}
        if self.code:
            body["code"] = self.code
        headers = {
            **JSON_TYPE,
            "Retry-After": str(math.ceil(self.retry_after)),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset-After": f"{self.retry_after:.3f}",
            "X-RateLimit-Bucket": bucket,
            "X-RateLimit-Scope": "global" if self.is_global else "user",
            "Via": "1.1 google",
        }
        if self.is_global:
            headers["X-RateLimit-Global"] = "true"
        return web.Response(body=json.dumps(body).encode(), status=429, headers=headers)


class Rest:
    """The REST side of the fake: serves ``RouteSpec``s under ``/api/v10`` and records calls."""

    def __init__(self, world: World, routes: list[RouteSpec]) -> None:
        self.world = world
        self.routes = {spec.name: spec for spec in routes}
        self.failures: dict[str, deque[Failure]] = {}
        self.holds: dict[str, deque[Hold]] = {}
        self.every_hold: list[Hold] = []

    def install(self, app: web.Application) -> None:
        for spec in self.routes.values():
            app.router.add_route(spec.method, API_PREFIX + spec.path, self._serving(spec))
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._unknown)

    def route(self, name: str) -> RouteSpec:
        """The route a test names; a route the fake does not answer is a usage error."""
        spec = self.routes.get(" ".join(name.split()))
        if spec is None:
            known = "\n  ".join(sorted(self.routes))
            raise FakeUsageError(
                f"the fake Discord does not answer {name!r}; it answers:\n  {known}"
            )
        return spec

    def _serving(self, spec: RouteSpec) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            return await self._serve(spec, request)

        return serve

    async def _serve(self, spec: RouteSpec, request: web.Request) -> web.Response:
        query = dict(request.query)
        body: Any = None
        bucket = hashlib.sha1(spec.name.encode()).hexdigest()[:32]
        try:
            call = await _read(spec, request, query)
            body = call.body
            if spec.auth and request.headers.get("Authorization") != f"Bot {self.world.token}":
                raise DiscordApiError(401, 0, "401: Unauthorized")
            hold = _take(self.holds, spec.name)
            failure = _take(self.failures, spec.name)
            if hold is not None and not hold.applied:
                await hold.keep({"path": request.path, "query": query, "body": body})
            if failure is not None:
                self._record(
                    spec, request, query, body, failure.status, failure.code, failure.message
                )
                return failure.response(bucket)
            answer = await spec.handler(call)
            if hold is not None and hold.applied:
                await hold.keep({"path": request.path, "query": query, "body": body})
        except DiscordApiError as error:
            self._record(spec, request, query, body, error.status, error.code, error.message)
            return web.Response(
                body=json.dumps(error.body()).encode(), status=error.status, headers=JSON_TYPE
            )
        except asyncio.CancelledError:
            self._record(
                spec, request, query, body, 0, None, "the client went away before the answer"
            )
            raise
        self._record(spec, request, query, body, 200 if answer is not None else 204, None, None)
        headers = {
            "X-RateLimit-Limit": "50",
            "X-RateLimit-Remaining": "49",
            "X-RateLimit-Reset-After": "1.000",
            "X-RateLimit-Bucket": bucket,
        }
        if answer is None:
            return web.Response(status=204, headers=headers)
        return web.Response(
            body=json.dumps(answer).encode(), status=200, headers={**JSON_TYPE, **headers}
        )

    async def _unknown(self, request: web.Request) -> web.Response:
        log.warning(
            "the fake Discord got %s %s, which it does not answer", request.method, request.path
        )
        route = f"{request.method} {request.path.removeprefix(API_PREFIX)}"
        self.world.calls.append(
            DcCall(
                method=request.method,
                route=route,
                path=request.path,
                query=dict(request.query),
                body=None,
                status=404,
                code=0,
                message="404: Not Found",
            )
        )
        self.world.notify()
        body = {"message": "404: Not Found", "code": 0}
        return web.Response(body=json.dumps(body).encode(), status=404, headers=JSON_TYPE)

    def _record(
        self,
        spec: RouteSpec,
        request: web.Request,
        query: dict[str, str],
        body: Any,
        status: int,
        code: int | None,
        message: str | None,
    ) -> None:
        self.world.calls.append(
            DcCall(
                method=spec.method,
                route=spec.name,
                path=request.path.removeprefix(API_PREFIX),
                query=query,
                body=body,
                status=status,
                code=code,
                message=message,
            )
        )
        self.world.notify()


async def _read(spec: RouteSpec, request: web.Request, query: dict[str, str]) -> Call:
    """The call's body: JSON, or multipart with ``payload_json`` and ``files[n]`` parts."""
    body: Any = None
    files: dict[int, DcFile] = {}
    if request.content_type == "application/json":
        try:
            body = json.loads(await request.text())
        except ValueError:
            raise DiscordApiError(400, 50109, "The request body contains invalid JSON.") from None
    elif request.content_type == "multipart/form-data":
        form = await request.post()
        for name, value in form.items():
            if isinstance(value, web.FileField):
                if name.startswith("files[") and name.endswith("]") and name[6:-1].isdigit():
                    files[int(name[6:-1])] = DcFile(
                        filename=value.filename,
                        data=value.file.read(),
                        content_type=value.content_type,
                    )
            elif name == "payload_json":
                try:
                    body = json.loads(str(value))
                except ValueError:
                    raise DiscordApiError(
                        400, 50109, "The request body contains invalid JSON."
                    ) from None
    return Call(
        route=spec.name, match=dict(request.match_info), query=query, body=body, files=files
    )


def _take(queues: dict[str, deque[T]], name: str) -> T | None:
    queue = queues.get(name)
    return queue.popleft() if queue else None

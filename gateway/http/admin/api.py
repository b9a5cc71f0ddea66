"""The admin API as an aiohttp application: the guard, input validation and JSON answers.

:func:`api_application` turns the route table into the application mounted
at ``/api``. Its one middleware checks every request first
(:class:`~gateway.http.admin.auth.AdminAuth`: origin, then token — an unknown
path without the token is 401, not 404), and answers every error as JSON:
``{"error": {"status", "message", "field", "problems"}}``. Each route's
wrapper reads the query string and the body (at most :data:`MAX_BODY_BYTES`,
else 413) into the route's models, so a refused input is a 400 naming its
field, calls the handler, and maps what it raises (:func:`api_error_of`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from aiohttp import hdrs, web
from pydantic import BaseModel, ValidationError

from gateway.http.admin.auth import REALM, AdminAuth
from gateway.http.admin.errors import ApiError, FieldProblem, api_error_of
from gateway.http.admin.routes import Inputs, Route
from gateway.http.admin.schemas import Body, ErrorBody, ErrorResponse, ProblemOut, Query

MAX_BODY_BYTES = 64 * 1024
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
_FIELD_FIRST = re.compile(r"^(\w+): (.*)$", re.DOTALL)


def api_application(auth: AdminAuth, routes: Sequence[Route]) -> web.Application:
    """The application serving ``routes``, every request guarded by ``auth``."""

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            auth.check(request)
            response: web.StreamResponse = await handler(request)
            return response
        except ApiError as exc:
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            headers = {"Allow": exc.headers[hdrs.ALLOW]} if hdrs.ALLOW in exc.headers else {}
            return error_response(ApiError(exc.status, _routing_message(exc)), headers)

    app = web.Application(middlewares=[guard])
    for route in routes:
        app.router.add_route(route.method, route.path, _endpoint(route), name=route.name)
    return app


def _routing_message(exc: web.HTTPException) -> str:
    if exc.status == 404:
        return "no such admin API path: /api/openapi.json lists them"
    if exc.status == 405:
        return f"method not allowed here; allowed: {exc.headers.get(hdrs.ALLOW, '')}"
    return exc.reason


def error_response(exc: ApiError, headers: dict[str, str] | None = None) -> web.Response:
    body = ErrorResponse(
        error=ErrorBody(
            status=exc.status,
            message=exc.message,
            field=exc.field,
            problems=[ProblemOut(field=p.field, message=p.message) for p in exc.problems],
        )
    )
    all_headers = {**HEADERS, **(headers or {})}
    if exc.status == 401:
        all_headers[hdrs.WWW_AUTHENTICATE] = REALM
    return web.Response(
        body=body.model_dump_json().encode(),
        status=exc.status,
        content_type="application/json",
        headers=all_headers,
    )


def json_response(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(
        body=model.model_dump_json().encode(),
        status=status,
        content_type="application/json",
        headers=HEADERS,
    )


def _endpoint(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def endpoint(request: web.Request) -> web.StreamResponse:
        try:
            inputs = Inputs(
                path=dict(request.match_info),
                query=_query(request, route.query),
                body=await _body(request, route.body) if route.body is not None else None,
            )
            answer = await route.handler(request, inputs)
        except Exception as exc:
            return error_response(api_error_of(exc))
        if isinstance(answer, web.StreamResponse):
            return answer
        return json_response(answer, route.status)

    return endpoint


def _query(request: web.Request, model: type[Query] | None) -> Query | None:
    given = request.query
    if model is None:
        if given:
            name = next(iter(given))
            raise ApiError.bad_field(name, "this path takes no query parameters")
        return None
    values: dict[str, str] = {}
    for name in given:
        if len(given.getall(name)) > 1:
            raise ApiError.bad_field(name, "given more than once")
        values[name] = given[name]
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise invalid(exc, "query") from None


async def _body(request: web.Request, model: type[Body]) -> Body:
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        raise _too_large(length)
    data = bytearray()
    while chunk := await request.content.read(MAX_BODY_BYTES + 1):
        data += chunk
        if len(data) > MAX_BODY_BYTES:
            raise _too_large(len(data))
    try:
        obj = orjson.loads(data) if data.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise invalid(exc, "body") from None


def _too_large(size: int) -> ApiError:
    return ApiError(
        413, f"the body is {size} bytes; the admin API takes at most {MAX_BODY_BYTES} per request"
    )


def invalid(exc: ValidationError, where: str) -> ApiError:
    """A 400 naming every refused field of a pydantic validation error."""
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if not field and (split := _FIELD_FIRST.match(message)):
            field, message = split.group(1), split.group(2)
        if error.get("type") == "missing":
            message = "required"
        elif error.get("type") == "extra_forbidden":
            message = "unknown field" if where == "body" else "unknown query parameter"
        problems.append(FieldProblem(field or where, message))
    lines = "; ".join(f"{p.field}: {p.message}" for p in problems)
    return ApiError(400, f"refused {where}: {lines}", problems=problems)

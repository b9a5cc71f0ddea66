"""The OpenAPI 3.1 document of the admin API, made from the route table and the models' schemas.

Request bodies and answers are the ``model_json_schema`` of their pydantic
models (JSON Schema 2020-12, which OpenAPI 3.1 uses as is), gathered under
``components/schemas`` by :func:`pydantic.json_schema.models_json_schema`, so
a model used in several places is described once. Query models become query
parameters, one per field; ``{name}`` segments of a path become path
parameters. Event streams are ``text/event-stream`` answers whose events are
listed, each with the schema of its data, under ``x-events``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from gateway.http.admin.routes import Route
from gateway.http.admin.schemas import ErrorResponse

REF = "#/components/schemas/{model}"
_PARAM = re.compile(r"\{([^}/]+)\}")


def document(
    routes: Sequence[Route], *, prefix: str, title: str, version: str, description: str = ""
) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` served under ``prefix``."""
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorResponse, "serialization")]
    for route in routes:
        if route.body is not None:
            wanted.append((route.body, "validation"))
        if route.response is not None:
            wanted.append((route.response, "serialization"))
        for model in (route.events or {}).values():
            wanted.append((model, "serialization"))
    refs, top = models_json_schema(_unique(wanted), ref_template=REF)
    components: dict[str, Any] = dict(top.get("$defs", {}))

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(prefix + route.path, {})[route.method.lower()] = _operation(route, ref)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "tags": [{"name": tag} for tag in dict.fromkeys(r.tag for r in routes)],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the admin token ([admin] token or token_file)",
                }
            },
        },
    }


def _unique(
    items: Iterable[tuple[type[BaseModel], JsonSchemaMode]],
) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    return list(dict.fromkeys(items))


def _operation(route: Route, ref: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": route.name,
        "summary": route.summary,
        "tags": [route.tag],
    }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(route.path)
    ]
    if route.query is not None:
        parameters += _query_parameters(route.query)
    if parameters:
        operation["parameters"] = parameters
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": ref(route.body, "validation")}},
        }
    responses: dict[str, Any] = {str(route.status): _success(route, ref)}
    for status in route.statuses:
        responses[str(status)] = {
            "description": HTTPStatus(status).phrase,
            "content": {"application/json": {"schema": ref(ErrorResponse, "serialization")}},
        }
    operation["responses"] = responses
    return operation


def _success(route: Route, ref: Any) -> dict[str, Any]:
    if route.events is not None:
        return {
            "description": "server-sent events: "
            + ", ".join(route.events)
            + "; a comment line every few seconds keeps the stream alive",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "x-events": {name: ref(model, "serialization") for name, model in route.events.items()},
        }
    schema = ref(route.response, "serialization") if route.response else {"type": "object"}
    return {
        "description": HTTPStatus(route.status).phrase,
        "content": {"application/json": {"schema": schema}},
    }


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(mode="validation")
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema.get("properties", {}).items():
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": {k: v for k, v in prop.items() if k not in ("title", "description")},
        }
        if "description" in prop:
            parameter["description"] = prop["description"]
        out.append(parameter)
    return out

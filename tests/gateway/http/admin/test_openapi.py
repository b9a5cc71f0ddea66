"""The OpenAPI document: a valid OpenAPI 3.1 structure, made from the models, listing every route."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from tests.gateway.http.admin.conftest import AdminRig

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def api_routes(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route of the application mounted at /api."""
    for resource in app.router.resources():
        info = resource.get_info()
        if info.get("prefix") == "/api":
            sub: web.Application = info["app"]
            return {
                (route.method.lower(), route.resource.canonical)
                for route in sub.router.routes()
                if route.resource is not None and route.method != "HEAD"
            }
    raise AssertionError("no application is mounted at /api")


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


async def test_the_document_lists_every_route_and_nothing_else(rig: AdminRig) -> None:
    doc = await rig.api.ok("GET", "/openapi.json")
    listed = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert rig.gateway.http is not None
    served = api_routes(rig.gateway.http.app)
    assert listed == served
    assert ("get", "/api/openapi.json") in listed
    assert ("get", "/api/sessions/{key}/tail") in listed
    assert len(listed) >= 26


async def test_the_document_has_the_structure_of_openapi_3_1(rig: AdminRig) -> None:
    doc = await rig.api.ok("GET", "/openapi.json")
    assert re.fullmatch(r"3\.1\.\d+", doc["openapi"])
    assert doc["info"]["title"]
    assert doc["info"]["version"]
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "the admin token ([admin] token or token_file)",
    }
    assert doc["security"] == [{"bearer": []}]
    schemas = doc["components"]["schemas"]
    operation_ids = []
    for path, item in doc["paths"].items():
        assert path.startswith("/api/")
        assert set(item) <= METHODS
        templated = set(re.findall(r"\{([^}]+)\}", path))
        for operation in item.values():
            operation_ids.append(operation["operationId"])
            assert operation["summary"]
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == templated, path
            for parameter in operation.get("parameters", []):
                assert parameter["in"] in ("path", "query")
                assert isinstance(parameter["schema"], dict)
                assert parameter["required"] is True or parameter["in"] == "query"
            responses = operation["responses"]
            assert any(code.startswith("2") for code in responses), path
            for code, response in responses.items():
                assert re.fullmatch(r"[1-5]\d\d", code)
                assert response["description"]
                for media in response["content"].values():
                    assert "schema" in media
            assert "401" in responses
            assert "403" in responses
            if "requestBody" in operation:
                assert "413" in responses
                assert "400" in responses
    assert len(operation_ids) == len(set(operation_ids))
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


async def test_the_schemas_come_from_the_models(rig: AdminRig) -> None:
    doc = await rig.api.ok("GET", "/openapi.json")
    schemas = doc["components"]["schemas"]
    job = schemas["JobRequest"]
    assert job["required"] == ["kind", "task"]
    assert job["properties"]["kind"]["enum"] == ["cron", "at", "every"]
    assert job["additionalProperties"] is False
    create = doc["paths"]["/api/cron/jobs"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobRequest"
    }
    assert "201" in create["responses"]
    sessions = doc["paths"]["/api/sessions"]["get"]
    names = {p["name"] for p in sessions["parameters"]}
    assert names == {"kind", "active_minutes", "include_archived", "limit", "offset"}
    tail = doc["paths"]["/api/sessions/{key}/tail"]["get"]["responses"]["200"]
    assert "text/event-stream" in tail["content"]
    assert tail["x-events"] == {"entry": {"$ref": "#/components/schemas/TailEntry"}}
    error = schemas["ErrorResponse"]
    assert error["properties"]["error"] == {"$ref": "#/components/schemas/ErrorBody"}

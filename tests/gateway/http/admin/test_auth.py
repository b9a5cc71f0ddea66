"""Who may call the admin API: the bearer token always, and no other site's pages."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.errors import StartupError
from tests.gateway.http.admin.conftest import TOKEN, AdminRig, admin_config, admin_gateway


async def test_a_call_without_the_token_is_401_with_a_json_error(rig: AdminRig) -> None:
    status, body = await rig.api.get("/health", token=None)
    assert status == 401
    assert body["error"]["status"] == 401
    assert "Authorization: Bearer" in body["error"]["message"]


async def test_a_wrong_token_is_401(rig: AdminRig) -> None:
    status, body = await rig.api.get("/health", token=TOKEN + "x")
    assert status == 401
    assert body["error"]["message"] == "the admin token is wrong"


async def test_another_scheme_than_bearer_is_401(rig: AdminRig) -> None:
    status, _ = await rig.api.get(
        "/health", token=None, headers={"Authorization": f"Basic {TOKEN}"}
    )
    assert status == 401


async def test_the_right_token_is_let_in_on_loopback(rig: AdminRig) -> None:
    status, body = await rig.api.get("/health")
    assert status == 200
    assert body["threads"]["active"] == 0


async def test_a_401_says_how_to_authenticate(rig: AdminRig) -> None:
    async with rig.api.http.get(rig.base + "/threads") as answer:
        assert answer.status == 401
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        assert answer.headers["Cache-Control"] == "no-store"


async def test_an_unknown_path_is_401_without_the_token_and_404_with_it(rig: AdminRig) -> None:
    assert (await rig.api.get("/no/such/thing", token=None))[0] == 401
    status, body = await rig.api.get("/no/such/thing")
    assert status == 404
    assert "openapi.json" in body["error"]["message"]


async def test_a_wrong_method_is_a_json_405(rig: AdminRig) -> None:
    status, body = await rig.api.call("DELETE", "/health")
    assert status == 405
    assert "allowed: GET" in body["error"]["message"]


async def test_a_page_of_another_origin_is_403_even_with_the_token(rig: AdminRig) -> None:
    status, body = await rig.api.get("/health", headers={"Origin": "http://evil.example"})
    assert status == 403
    assert "may not call the admin API" in body["error"]["message"]


async def test_the_dashboards_own_origin_is_let_in(rig: AdminRig) -> None:
    origin = rig.base.removesuffix("/api")
    status, _ = await rig.api.get("/health", headers={"Origin": origin})
    assert status == 200


async def test_the_token_may_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "admin-token"
    secret.write_text(TOKEN + "\n")
    config = admin_config(tmp_path, admin={"enabled": True, "token_file": str(secret)})
    async with Gateway(config, control=False) as gw:
        assert gw.admin is not None
        assert gw.admin.url.endswith("/admin/")


async def test_an_empty_token_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    secret = tmp_path / "admin-token"
    secret.write_text("\n")
    config = admin_config(tmp_path, admin={"enabled": True, "token_file": str(secret)})
    with pytest.raises(StartupError, match=r"admin.token_file .*admin-token is empty"):
        async with Gateway(config, control=False):
            pass


async def test_a_short_token_in_a_file_stops_the_start(tmp_path: Path) -> None:
    secret = tmp_path / "admin-token"
    secret.write_text("short")
    config = admin_config(tmp_path, admin={"enabled": True, "token_file": str(secret)})
    with pytest.raises(StartupError, match="5 characters; use at least 16"):
        async with Gateway(config, control=False):
            pass


async def test_off_by_default_nothing_answers_under_api_or_admin(tmp_path: Path) -> None:
    config = admin_config(tmp_path, admin={"enabled": False})
    async with Gateway(config, control=False) as gw:
        assert gw.admin is None
        assert gw.http is not None
        async with aiohttp.ClientSession() as http:
            for path in ("api/health", "admin/"):
                async with http.get(gw.http.url + path) as answer:
                    assert answer.status == 404


async def test_an_origin_listed_in_allowed_origins_is_let_in(tmp_path: Path) -> None:
    admin = {"enabled": True, "token": TOKEN, "allowed_origins": ["https://Admin.Example.com"]}
    async with admin_gateway(tmp_path, admin=admin) as rig:
        status, _ = await rig.api.get("/health", headers={"Origin": "https://admin.example.com"})
        assert status == 200
        status, _ = await rig.api.get("/health", headers={"Origin": "null"})
        assert status == 403

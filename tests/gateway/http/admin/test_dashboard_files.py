"""The dashboard's files: served from the package without a token, under a strict policy."""

from __future__ import annotations

import re
from importlib import resources

from tests.gateway.http.admin.conftest import AdminRig

STATIC = resources.files("gateway.http.admin").joinpath("static")


def origin(rig: AdminRig) -> str:
    return rig.base.removesuffix("api")


async def test_admin_redirects_to_the_dashboard_page(rig: AdminRig) -> None:
    async with rig.api.http.get(origin(rig) + "admin", allow_redirects=False) as answer:
        assert answer.status == 302
        assert answer.headers["Location"] == "/admin/"


async def test_the_page_and_its_files_are_served_with_a_strict_policy(rig: AdminRig) -> None:
    for name, kind in [
        ("", "text/html"),
        ("main.js", "text/javascript"),
        ("admin.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ]:
        async with rig.api.http.get(origin(rig) + "admin/" + name) as answer:
            assert answer.status == 200, name
            assert answer.content_type == kind
            policy = answer.headers["Content-Security-Policy"]
            assert "script-src 'self'" in policy
            assert "default-src 'none'" in policy
            assert "unsafe-inline" not in policy
            assert answer.headers["X-Frame-Options"] == "DENY"


async def test_an_unknown_file_is_404_with_the_same_policy(rig: AdminRig) -> None:
    async with rig.api.http.get(origin(rig) + "admin/secrets.txt") as answer:
        assert answer.status == 404
        assert "default-src 'none'" in answer.headers["Content-Security-Policy"]


def test_the_page_has_no_inline_script_style_or_handler_and_loads_nothing_from_elsewhere() -> None:
    page = STATIC.joinpath("index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="main.js">']
    assert "<style" not in page
    assert not re.search(r"\son[a-z]+=", page)
    assert not re.search(r"\bstyle=", page)
    for name in ("index.html", "main.js", "api.js", "admin.css", "charts.js"):
        text = STATIC.joinpath(name).read_text(encoding="utf-8")
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text


def test_the_scripts_never_parse_data_as_html() -> None:
    for item in STATIC.iterdir():
        if item.name.endswith(".js"):
            text = item.read_text(encoding="utf-8")
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
                assert sink not in text, f"{item.name} uses {sink}"

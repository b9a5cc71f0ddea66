"""The dashboard at ``/admin``: static files shipped in the package, under a strict policy.

The page, its stylesheet and its scripts (ES modules) live in
``gateway/http/admin/static`` and are read once at start; nothing is fetched
from elsewhere, so the dashboard works offline. The files hold no data and
need no token: everything the page shows it asks of ``/api`` with the token
the operator typed (kept in the tab's ``sessionStorage``, docs/decisions/admin-02).

Every answer carries a Content-Security-Policy allowing only this origin's
scripts, styles and connections — no inline script or style, no framing —
and what the page renders from data is set as text, never parsed as HTML.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from aiohttp import hdrs, web

STATIC_PACKAGE = "gateway.http.admin"
STATIC_DIR = "static"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Every packaged file of the dashboard: name → (bytes, content type)."""
    folder = resources.files(STATIC_PACKAGE).joinpath(STATIC_DIR)
    out: dict[str, tuple[bytes, str]] = {}
    for item in folder.iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in CONTENT_TYPES:
            out[item.name] = (item.read_bytes(), CONTENT_TYPES[suffix])
    if "index.html" not in out:
        raise FileNotFoundError(f"the dashboard's index.html is missing from {folder}")
    return out


def dashboard_application(prefix: str = "/admin") -> web.Application:
    """The application serving the dashboard's files, to be mounted at ``prefix``."""
    assets = load_assets()

    @web.middleware
    async def headers(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == prefix:
            raise web.HTTPFound(prefix + "/", headers=HEADERS)
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(HEADERS)
            raise
        response.headers.update(HEADERS)
        return response

    async def serve(request: web.Request) -> web.Response:
        name = request.match_info.get("name") or "index.html"
        found = assets.get(name)
        if found is None:
            raise web.HTTPNotFound(text=f"no file {name[:100]!r} in the dashboard")
        body, content_type = found
        return web.Response(body=body, headers={hdrs.CONTENT_TYPE: content_type})

    app = web.Application(middlewares=[headers])
    app.router.add_get("/", serve)
    app.router.add_get("/{name}", serve)
    return app

"""Who may call the admin API: the bearer token, always, and no other site's pages.

Every request under ``/api`` carries ``Authorization: Bearer <admin token>``,
on loopback too (a local process or a page on another port is not the
operator). The token is compared in constant time. A browser request whose
``Origin`` is neither the gateway's own page nor in ``admin.allowed_origins``
gets 403 whatever it carries: the API answers its dashboard and programs,
not other sites (docs/decisions/admin-01).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from aiohttp import hdrs, web

from config.channels import AdminConfig, check_admin_token
from config.section import normal_origin, read_secret, same_origin
from gateway.http.admin.errors import AdminTokenError, ApiError

REALM = 'Bearer realm="gateway-admin"'


def read_token(config: AdminConfig) -> str:
    """The admin token, from ``token`` or ``token_file``; :class:`AdminTokenError` if none fits."""
    try:
        secret = read_secret(config.token, config.token_file, "admin.token_file")
    except ValueError as exc:
        raise AdminTokenError(str(exc)) from None
    if secret is None or not secret.get_secret_value():
        where = f"admin.token_file {config.token_file}" if config.token_file else "admin.token"
        raise AdminTokenError(f"{where} is empty: the admin API needs a token")
    try:
        return check_admin_token(secret.get_secret_value(), "the admin token")
    except ValueError as exc:
        raise AdminTokenError(f"admin.token_file {config.token_file}: {exc}") from None


class AdminAuth:
    """Checks each request's token and origin (its own, or one of ``allowed_origins``)."""

    def __init__(self, token: str, allowed_origins: Iterable[str] = ()) -> None:
        if not token:
            raise AdminTokenError("the admin API needs a token")
        self._token = token.encode()
        self._origins = frozenset(normal_origin(origin) for origin in allowed_origins)

    def check(self, request: web.Request) -> None:
        """Return when the request may go on; raise :class:`ApiError` 403 or 401 otherwise."""
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not self._origin_allowed(origin, request.host):
            raise ApiError(
                403,
                f"origin {origin[:100]!r} may not call the admin API: only the gateway's own "
                "dashboard (and admin.allowed_origins) may",
            )
        scheme, _, given = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if not given or scheme.lower() != "bearer":
            raise ApiError(
                401, "the admin API needs its token: send Authorization: Bearer <admin token>"
            )
        if not hmac.compare_digest(given.strip().encode(), self._token):
            raise ApiError(401, "the admin token is wrong")

    def _origin_allowed(self, origin: str, host: str) -> bool:
        if same_origin(origin, host):
            return True
        try:
            return normal_origin(origin) in self._origins
        except ValueError:  # "null", from a sandboxed frame or a file
            return False

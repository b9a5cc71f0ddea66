"""Query parameters the gateway reads out of a store URL before a client library sees it.

A Redis URL may carry the gateway's own parameters (``prefix`` for the
session store, ``cron_prefix`` for the state store) beside redis-py's; redis-py
refuses a parameter it does not know, so each is taken out first.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def pop_query(url: str, name: str) -> tuple[str, str | None]:
    """``url`` without its ``name`` query parameter, and that parameter's last value (None: absent)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == name]
    if not named:
        return url, None
    rest = urlencode([(key, value) for key, value in query if key != name])
    return urlunsplit(parts._replace(query=rest)), named[-1]

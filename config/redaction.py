"""Redaction: credentials never leave in a printed or logged line.

Every URL the gateway prints (store URLs, a provider's ``base_url``) and every
exception text that may carry one (redis-py and aiohttp echo addresses, a
config error echoes the value it refused) passes through :func:`redact_text`
first. It blanks

- the password of a URL's user info (``redis://app:hunter2@db`` becomes
  ``redis://app:***@db``), and a lone user name too, since that is where
  ``https://<token>@host`` puts a token (``https://***@host``);
- the value of a query parameter that names a secret (``?password=…``,
  ``&token=…``, ``api_key``, ``access_token``, ``secret``, ``auth``).

Everything else is left as it was, so an operator still sees which host,
port and database a message is about.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://userinfo@ — userinfo ends at the last "@" before the host part ends.
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@]*(?:@[^\s/?#@]*)*)@"
)
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&](?:password|passwd|pass|pwd|token|access_token|api_key|apikey|"
    r"secret|client_secret|auth)=)(?P<value>[^&#\s'\"]*)",
    re.IGNORECASE,
)


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(_mask_userinfo, text)
    return _SECRET_PARAM.sub(lambda m: m["name"] + (MASK if m["value"] else ""), text)


def redact_url(url: str) -> str:
    """``url`` with its password (and any secret query parameter) replaced by ``***``."""
    return redact_text(url)


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, password = match["userinfo"].partition(":")
    if colon:
        return f"{match['scheme']}{user}:{MASK if password else ''}@"
    return f"{match['scheme']}{MASK if user else ''}@"

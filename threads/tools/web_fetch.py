"""``web_fetch``: one HTTP GET for an agent, bounded in time and size, public addresses only.

What it refuses, each with a message the model can act on: a scheme other
than http and https; an address that is not public — loopback, private,
link-local, shared, multicast, reserved — unless ``[tools.web_fetch]
allow_private`` is on (every address a name resolves to is checked, the
connection goes only to checked addresses, and each redirect is checked
again); a body over ``max_bytes`` (declared or counted as it arrives,
decompressed); a content type that is not text; more than ``max_redirects``
redirects; and anything past ``timeout_seconds`` in all. HTML is turned into
its readable text (:mod:`threads.tools.html_text`); the text the model gets
is cut at ``max_chars``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import BaseModel, ConfigDict, Field

from config.tools import WebFetchConfig
from threads.agent.tools import Tool, ToolContext, ToolOutput, tool
from threads.tools.html_text import html_to_text

GROUP = "web"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-javascript"}
)


class FetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="the http:// or https:// address to GET")


class FetchRefused(Exception):
    """A fetch that is not made, or not finished; the message says why, for the model."""


def refusal(address: str, settings: WebFetchConfig) -> str | None:
    """Why ``address`` (an IP address) may not be fetched, or None when it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if settings.allow_private or ip.is_global:
        return None
    if any(ip in ipaddress.ip_network(n, strict=False) for n in settings.allow_networks):
        return None
    kind = (
        "loopback"
        if ip.is_loopback
        else "link-local"
        if ip.is_link_local
        else "private"
        if ip.is_private
        else "not public"
    )
    return (
        f"{address} is a {kind} address; web_fetch reaches public addresses only "
        "(an operator can allow others with [tools.web_fetch] allow_private or allow_networks)"
    )


class GuardedResolver(AbstractResolver):
    """Resolves names as aiohttp does, refusing a name when any of its addresses is not allowed."""

    def __init__(self, settings: WebFetchConfig) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self._settings = settings
        self.refused = ""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            why = refusal(result["host"], self._settings)
            if why is not None:
                self.refused = f"{host} resolves to {why}"
                raise OSError(self.refused)
        return results

    async def close(self) -> None:
        await self._inner.close()


def check_url(url: str, settings: WebFetchConfig) -> None:
    """Refuse a URL that is not http(s), has no host, or names a refused address outright."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchRefused(f"{url!r} is not an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise FetchRefused(f"{url!r} has no host")
    try:
        why = refusal(host, settings)
    except ValueError:
        return  # a name: the resolver checks its addresses
    if why is not None:
        raise FetchRefused(why)


def is_text(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return (
        kind.startswith("text/")
        or kind in _TEXT_TYPES
        or kind.endswith(("+json", "+xml"))
        or kind == ""
    )


async def fetch(url: str, settings: WebFetchConfig) -> str:
    """The text at ``url`` as the model gets it; :class:`FetchRefused` says why not."""
    resolver = GuardedResolver(settings)
    connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, limit=2)
    headers = {
        "User-Agent": settings.user_agent,
        "Accept": "text/html, text/plain, application/json, text/*;q=0.9, */*;q=0.1",
    }
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        current = url
        for _ in range(settings.max_redirects + 1):
            check_url(current, settings)
            try:
                async with session.get(current, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in _REDIRECTS and location:
                        current = urljoin(current, location)
                        continue
                    return await _read(current, response, settings)
            except aiohttp.ClientError as exc:
                if resolver.refused:
                    raise FetchRefused(resolver.refused) from None
                raise FetchRefused(f"could not fetch {current}: {exc}") from None
        raise FetchRefused(
            f"{url} redirects more than {settings.max_redirects} times "
            "([tools.web_fetch] max_redirects)"
        )


async def _read(url: str, response: aiohttp.ClientResponse, settings: WebFetchConfig) -> str:
    if response.status >= 400:
        raise FetchRefused(f"{url} answered HTTP {response.status} {response.reason or ''}".strip())
    content_type = response.headers.get("Content-Type", "")
    if not is_text(content_type):
        raise FetchRefused(
            f"{url} is {content_type.split(';', 1)[0]}, not text; web_fetch returns text only"
        )
    cap = settings.max_bytes
    too_big = (
        f"{url} is larger than {cap} bytes, the cap ([tools.web_fetch] max_bytes); not fetched"
    )
    if response.content_length is not None and response.content_length > cap:
        raise FetchRefused(too_big)
    body = bytearray()
    async for chunk in response.content.iter_chunked(65_536):
        body += chunk
        if len(body) > cap:
            raise FetchRefused(too_big)
    charset = response.charset or "utf-8"
    try:
        decoded = bytes(body).decode(charset, errors="replace")
    except LookupError:
        decoded = bytes(body).decode("utf-8", errors="replace")
    if not content_type and "\0" in decoded[:1024]:
        raise FetchRefused(f"{url} is binary, not text; web_fetch returns text only")
    head = [f"URL: {response.url}"]
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in ("text/html", "application/xhtml+xml") or (not kind and "<html" in decoded[:512]):
        title, decoded = html_to_text(decoded)
        if title:
            head.append(f"Title: {title}")
    if len(decoded) > settings.max_chars:
        decoded = decoded[: settings.max_chars] + (
            f"\n[cut: the text is {len(decoded)} characters; showing the first {settings.max_chars}]"
        )
    return "\n".join(head) + "\n\n" + decoded


def web_fetch_tool(settings: WebFetchConfig) -> Tool[Any]:
    """The ``web_fetch`` tool with the operator's limits."""

    @tool(
        "web_fetch",
        "Fetch a web page or text document by URL (HTTP GET) and get its readable text "
        f"(HTML turned to text; at most {settings.max_chars} characters).",
        FetchArgs,
        timeout=settings.timeout_seconds + 5,
        opt_in=True,
    )
    async def web_fetch(args: FetchArgs, ctx: ToolContext) -> ToolOutput:
        try:
            async with asyncio.timeout(settings.timeout_seconds):
                text = await fetch(args.url, settings)
        except FetchRefused as exc:
            return ToolOutput(content=str(exc), is_error=True)
        except TimeoutError:
            return ToolOutput(
                content=f"{args.url} did not answer within {settings.timeout_seconds:g} s "
                "([tools.web_fetch] timeout_seconds)",
                is_error=True,
            )
        return ToolOutput(content=text)

    return web_fetch.in_group(GROUP)

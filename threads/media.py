"""Files users sent, fetched from their platform only when a model is to see them.

A channel records a file as a :class:`~threads.messages.FilePart` whose URL
names it on the platform (``telegram://<account>/<file id>``): the transcript
keeps the reference, never the bytes nor a URL with the bot's token. Before a
model call the agent loop asks :meth:`Media.prepare` for the messages it is
about to send: every image part of a registered scheme within the size cap is
fetched (through the fetcher its channel registered) and passed as a
``data:`` URL, so models that accept images see it (images tools returned,
which ride in tool messages, too); other files stay references the model is
told about in a line. Fetched images are kept in a
small LRU cache, so a conversation's images are fetched once, not every turn.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import overload

from threads.context import RunContext
from threads.messages import FilePart, Message

log = logging.getLogger(__name__)

Fetch = Callable[[str], Awaitable[bytes]]
"""Fetch the bytes a URL of the scheme names (raise on failure)."""

DEFAULT_MAX_BYTES = 5_000_000
DEFAULT_CACHE_ITEMS = 64


class Media:
    """The fetchers channels registered, and the images fetched lately."""

    def __init__(
        self, *, max_bytes: int = DEFAULT_MAX_BYTES, cache_items: int = DEFAULT_CACHE_ITEMS
    ) -> None:
        self.max_bytes = max_bytes
        self._fetchers: dict[str, Fetch] = {}
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_items = cache_items

    def register(self, origin: str, fetch: Fetch) -> None:
        """Fetch the files of URLs ``<origin>/…`` (``telegram://telegram.support``) with ``fetch``."""
        self._fetchers[origin.rstrip("/")] = fetch

    def register_channel(self, channel: str, fetch: Fetch) -> None:
        """Fetch the files a channel recorded (``<platform>://<channel>/<file id>``)."""
        self.register(f"{channel.partition('.')[0]}://{channel}", fetch)

    def _fetcher(self, url: str) -> Fetch | None:
        start = url.find("://")
        end = url.find("/", start + 3) if start >= 0 else -1
        return self._fetchers.get(url[:end]) if end > 0 else None

    def fetchable(self, part: FilePart) -> bool:
        """An image of a registered origin, within the size cap."""
        return (
            part.media_type.startswith("image/")
            and part.size <= self.max_bytes
            and self._fetcher(part.url) is not None
        )

    async def prepare(self, messages: Sequence[Message]) -> Sequence[Message]:
        """``messages`` with every fetchable image as a ``data:`` URL (``messages`` if none)."""
        if not self._fetchers:
            return messages
        shown: dict[int, Message] = {}
        # A run's context gives only its messages of several parts: a long one's
        # older texts stay packed (decision perf-43).
        found = messages.parted() if isinstance(messages, RunContext) else enumerate(messages)
        for index, message in found:
            if message.role == "assistant" or len(message.content) < 2:
                continue
            parts = list(message.content)
            changed = False
            for at, part in enumerate(parts):
                if isinstance(part, FilePart) and self.fetchable(part):
                    data = await self._data_url(part)
                    if data is not None:
                        parts[at] = dataclasses.replace(part, url=data)
                        changed = True
            if changed:
                shown[index] = Message(role=message.role, content=tuple(parts))
        return _Shown(messages, shown) if shown else messages

    async def _data_url(self, part: FilePart) -> str | None:
        cached = self._cache.get(part.url)
        if cached is not None:
            self._cache.move_to_end(part.url)
            return cached
        fetch = self._fetcher(part.url)
        assert fetch is not None
        try:
            data = await fetch(part.url)
        except Exception as exc:
            log.warning("the file %s could not be fetched for the model: %s", part.url, exc)
            return None
        if len(data) > self.max_bytes:
            log.info("the file %s is %d bytes, over the cap; not shown", part.url, len(data))
            return None
        url = f"data:{part.media_type};base64,{base64.b64encode(data).decode()}"
        self._cache[part.url] = url
        if len(self._cache) > self._cache_items:
            self._cache.popitem(last=False)
        return url


class _Shown(Sequence[Message]):
    """``messages`` with some shown otherwise (their images as ``data:`` URLs), not copied:
    a long context's packed messages stay packed until the client reads them."""

    __slots__ = ("_messages", "_shown")

    def __init__(self, messages: Sequence[Message], shown: dict[int, Message]) -> None:
        self._messages = messages
        self._shown = shown

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._messages)))]
        if index < 0:
            index += len(self._messages)
        shown = self._shown.get(index)
        return shown if shown is not None else self._messages[index]

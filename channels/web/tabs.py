"""The open tabs of each web chat, and the replies that wait for a chat with none."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from channels.web.frames import send_frame

Frame = dict[str, Any]

BACKLOG = 100
"""Frames kept for a chat with no open tab."""
BACKLOG_CHATS = 1000
"""Chats whose frames are kept; past it, the chat whose last frame is oldest loses its own.

What is lost is only what the conversation's history does not already show a
returning tab (web-06): replies are in the session, and a tab gets them back
from there.
"""


class Tabs:
    """Each chat's open sockets; a frame sent to a chat goes to every one of them."""

    def __init__(self, *, backlog_chats: int = BACKLOG_CHATS) -> None:
        self._sockets: dict[str, set[web.WebSocketResponse]] = defaultdict(set)
        # In the order their last frame was kept: the first is the one to let go.
        self._backlog: dict[str, deque[Frame]] = {}
        self._backlog_chats = backlog_chats

    def __contains__(self, chat: str) -> bool:
        """Whether ``chat`` has an open tab."""
        return chat in self._sockets

    def add(self, chat: str, ws: web.WebSocketResponse) -> None:
        self._sockets[chat].add(ws)

    def remove(self, chat: str, ws: web.WebSocketResponse) -> None:
        self._sockets[chat].discard(ws)
        if not self._sockets[chat]:
            del self._sockets[chat]

    def every(self) -> Iterator[web.WebSocketResponse]:
        """Every open socket of every chat."""
        for sockets in list(self._sockets.values()):
            yield from list(sockets)

    async def send(
        self, chat: str, frame: Frame, *, besides: web.WebSocketResponse | None = None
    ) -> int:
        """Send ``frame`` to every open tab of ``chat`` (but ``besides``); how many took it."""
        sent = 0
        for ws in list(self._sockets.get(chat, ())):
            if ws is besides or ws.closed:
                continue
            try:
                await send_frame(ws, frame)
            except ConnectionResetError:
                continue  # the tab is going away; its socket's loop forgets it
            sent += 1
        return sent

    def keep(self, chat: str, frame: Frame) -> None:
        """Keep ``frame`` for the chat's next tab (the last :data:`BACKLOG` are kept).

        At most ``backlog_chats`` chats keep frames (see :data:`BACKLOG_CHATS`).

        A frame with the ``id`` of one already kept (a send repeated after a
        restart) is kept once.
        """
        backlog = self._backlog.pop(chat, None)
        if backlog is None:
            backlog = deque(maxlen=BACKLOG)
            while len(self._backlog) >= self._backlog_chats:
                del self._backlog[next(iter(self._backlog))]
        self._backlog[chat] = backlog
        ident = frame.get("id")
        if not ident or all(kept.get("id") != ident for kept in backlog):
            backlog.append(frame)

    def waiting(self, chat: str) -> list[Frame]:
        """The frames kept for ``chat``, now taken."""
        return list(self._backlog.pop(chat, None) or ())

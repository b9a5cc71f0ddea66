"""What every open tab of a chat sees of a running turn (through :mod:`channels.feedback`).

A turn still running after :data:`QUIET` shows ``typing``, each tool as it
starts and ends (``tool``; a ``dispatch`` is the answer itself, not a tool to
show), the answer as it is written (``draft``, rendered HTML, redrawn at most
every :data:`DRAFT_EVERY`), then ``end``. A quicker turn shows nothing but its
answer: it needs no indicator, and following it would cost every turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from channels.feedback import Feedback
from channels.web.tabs import Tabs
from threads.history import one_line
from threads.turns import ToolFinish, ToolStart, Turn

#: How long a turn runs before its tabs are shown it, in seconds.
QUIET = 0.15
#: How often a streamed answer is redrawn, in seconds.
DRAFT_EVERY = 0.1


class LiveTurns:
    """The presence of the web chat: typing, tools and drafts, sent to every tab."""

    def __init__(self, tabs: Tabs, render: Callable[[str], str]) -> None:
        self._tabs = tabs
        self._render = render
        self.feedback = Feedback(self, typing_after=0.0, edit_every=DRAFT_EVERY)
        self._soon: set[asyncio.TimerHandle] = set()
        self._answered: set[str] = set()
        self._showing: set[str] = set()

    def follow(self, chat: str, turn: Turn) -> None:
        """Show ``turn`` in the chat's open tabs if it is still running after :data:`QUIET`."""
        handle: asyncio.TimerHandle

        def show() -> None:
            self._soon.discard(handle)
            if chat in self._tabs:
                self.feedback.follow(chat, turn)

        handle = asyncio.get_running_loop().call_later(QUIET, show)
        self._soon.add(handle)

    def answered(self, chat: str) -> None:
        """The running turn's answer went out: it takes the draft's place, no draft follows."""
        if self.feedback.following(chat):
            self._answered.add(chat)

    async def close(self) -> None:
        for handle in self._soon:
            handle.cancel()
        self._soon.clear()
        await self.feedback.close()

    # -- channels.feedback's presence

    async def typing(self, chat_id: str) -> None:
        if chat_id not in self._answered:
            await self._show(chat_id, {"type": "typing"})

    async def draft(self, chat_id: str, text: str) -> None:
        if chat_id not in self._answered:
            await self._show(chat_id, {"type": "draft", "html": self._render(text)})

    async def tool(self, chat_id: str, event: ToolStart | ToolFinish) -> None:
        if event.name == "dispatch":
            return
        frame: dict[str, Any] = {"type": "tool", "id": event.call_id, "name": event.name}
        if isinstance(event, ToolFinish):
            frame["summary"] = f"{event.name} → {one_line(event.content, 80)}"
            frame["error"] = event.is_error
        await self._show(chat_id, frame)

    async def end_draft(self, chat_id: str) -> None:
        self._answered.discard(chat_id)
        if chat_id in self._showing:
            self._showing.discard(chat_id)
            await self._tabs.send(chat_id, {"type": "end"})

    async def _show(self, chat: str, frame: dict[str, Any]) -> None:
        self._showing.add(chat)
        await self._tabs.send(chat, frame)

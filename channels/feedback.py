"""Feedback while a turn runs: the typing indicator, and the answer streamed into one draft.

A person should never stare at a silent chat for twenty seconds. Once a turn
answering them has run for ``typing_after`` seconds (a quick answer needs no
indicator: it is the answer), a channel that can show it refreshes its typing
indicator every few seconds and — when the model streams — shows the answer
so far in one draft message edited in place, at most once per ``edit_every``
seconds; one that can (:class:`ShowsTools`) shows each tool as it runs. A turn
still waiting for its slot or its place in the queue shows nothing yet. The
final answer replaces the draft: the channel's ``deliver`` takes the draft
over. A draft no delivery took over (the turn ended silently, or failed) is
removed when the turn ends.

One follower per chat: a message steered into the running turn is followed by
the follower already there, and a turn the chat's messages wait for (a steer
deferred to a turn of its own, a queued message) is followed after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from threads.turns import Event, RunStart, TextDelta, ToolFinish, ToolStart, Turn

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0
TYPING_AFTER = 0.5
EDIT_EVERY = 1.0


@runtime_checkable
class Presence(Protocol):
    """What a channel shows of a running turn."""

    async def typing(self, chat_id: str) -> None:
        """Show (or refresh) the typing indicator in the chat."""
        ...

    async def draft(self, chat_id: str, text: str) -> None:
        """Show the answer so far: post the draft message, or edit it in place."""
        ...

    async def end_draft(self, chat_id: str) -> None:
        """The turn ended: remove a draft no delivery took over, forget the one that was."""
        ...


@runtime_checkable
class ShowsTools(Protocol):
    """A presence that also shows the tools a turn runs (the web chat)."""

    async def tool(self, chat_id: str, event: ToolStart | ToolFinish) -> None:
        """A tool started or finished in the turn shown in the chat."""
        ...


@dataclass(slots=True)
class _Follower:
    turns: deque[Turn] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Feedback:
    """Follows the turns of chats on one channel and shows them through its presence.

    ``clock`` is monotonic seconds; ``drafts`` turns the streamed draft off
    (typing only).
    """

    def __init__(
        self,
        presence: Presence,
        *,
        typing_every: float = TYPING_EVERY,
        typing_after: float = TYPING_AFTER,
        edit_every: float = EDIT_EVERY,
        drafts: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.presence = presence
        self.typing_every = typing_every
        self.typing_after = typing_after
        self.edit_every = edit_every
        self._tools = presence if isinstance(presence, ShowsTools) else None
        self.drafts = drafts
        self.clock = clock
        self._followers: dict[str, _Follower] = {}

    def follow(self, chat_id: str, turn: Turn) -> None:
        """Show ``turn`` in ``chat_id`` while it runs (after the turns already followed there)."""
        if turn.done() and turn.next is None:
            return
        follower = self._followers.get(chat_id)
        if follower is None:
            follower = self._followers[chat_id] = _Follower()
        follower.turns.append(turn)
        if follower.task is None:
            follower.task = asyncio.create_task(
                self._run(chat_id, follower), name=f"feedback {chat_id}"
            )

    def following(self, chat_id: str) -> bool:
        """Whether a turn of ``chat_id`` is being shown now."""
        follower = self._followers.get(chat_id)
        return follower is not None and follower.task is not None

    async def close(self) -> None:
        """Stop following every chat."""
        tasks = [f.task for f in self._followers.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._followers.clear()

    async def _run(self, chat_id: str, follower: _Follower) -> None:
        try:
            while follower.turns:
                turn: Turn | None = follower.turns.popleft()
                while turn is not None:
                    if not turn.done():
                        await self._watch(chat_id, turn)
                    turn = turn.next
        finally:
            if self._followers.get(chat_id) is follower:
                del self._followers[chat_id]

    async def _watch(self, chat_id: str, turn: Turn) -> None:
        events = turn.events()
        pending: asyncio.Future[Event] = asyncio.ensure_future(anext(events))
        text = shown = ""
        began: float | None = None
        typed_at = last_edit = float("-inf")
        try:
            while True:
                now = self.clock()
                waits: list[float] = []
                if began is not None:
                    due = max(began + self.typing_after, typed_at + self.typing_every)
                    if now >= due:
                        await self._quietly(self.presence.typing(chat_id), "typing", chat_id)
                        typed_at = now
                        due = now + self.typing_every
                    waits.append(due - now)
                if self.drafts and began is not None and text != shown:
                    waits.append(self._draft_due(began, last_edit) - now)
                timeout = max(min(waits), 0.0) if waits else None
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if pending in done:
                    try:
                        event = pending.result()
                    except StopAsyncIteration:
                        break
                    if isinstance(event, RunStart):
                        began = self.clock()
                    elif isinstance(event, TextDelta):
                        text += event.text
                    elif self._tools is not None and isinstance(event, ToolStart | ToolFinish):
                        await self._quietly(self._tools.tool(chat_id, event), "tool", chat_id)
                    pending = asyncio.ensure_future(anext(events))
                now = self.clock()
                if (
                    self.drafts
                    and began is not None
                    and text != shown
                    and now >= self._draft_due(began, last_edit)
                ):
                    await self._quietly(self.presence.draft(chat_id, text), "draft", chat_id)
                    shown, last_edit = text, now
        finally:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
            await events.aclose()
        await self._quietly(self.presence.end_draft(chat_id), "end of the draft", chat_id)

    def _draft_due(self, began: float, last_edit: float) -> float:
        """When the draft may next change: once the turn has run ``typing_after``, then once
        per ``edit_every`` (a quick answer is shown as the answer alone, with no draft before it)."""
        return max(began + self.typing_after, last_edit + self.edit_every)

    async def _quietly(self, call: Awaitable[None], what: str, chat_id: str) -> None:
        """Feedback is a courtesy: a failure is logged, never fails the turn or the follower."""
        try:
            await call
        except Exception as exc:
            log.warning("feedback (%s) in chat %s failed: %s", what, chat_id, exc)

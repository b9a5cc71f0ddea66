"""Approval questions in the web chat: shown with their buttons in every tab until decided.

A question is ``{"type": "approval", "id", "text", "buttons"}`` (each button
``[data, label]``; a press comes back as ``{"press": data}``, see
:mod:`channels.web.frames`). Once decided, ``{"type": "approval_settled",
"id", "text"}`` replaces its buttons. A question still open is sent again to
a tab that connects (a reload, a second tab, a chat whose page was closed
when it was asked), after the conversation so far.
"""

from __future__ import annotations

from collections import defaultdict

from channels.approvals import BUTTONS, button_data
from channels.base import ApprovalAsk
from channels.web.tabs import Frame, Tabs


class Questions:
    """The open approval questions of each chat."""

    def __init__(self, tabs: Tabs) -> None:
        self._tabs = tabs
        self._open: dict[str, dict[str, Frame]] = defaultdict(dict)

    async def ask(self, chat: str, ask: ApprovalAsk) -> str:
        """Show the question in every tab (and to every tab that opens before it is decided)."""
        buttons = [[button_data(choice, ask.request_id), label] for choice, label in BUTTONS]
        frame: Frame = {
            "type": "approval",
            "id": ask.request_id,
            "text": ask.text,
            "buttons": buttons,
        }
        self._open[chat][ask.request_id] = frame
        await self._tabs.send(chat, frame)
        return ask.request_id

    async def settle(self, chat: str, message_id: str, text: str) -> None:
        """The question's buttons give way to how it was decided."""
        asked = self._open.get(chat)
        if asked is not None:
            asked.pop(message_id, None)
            if not asked:
                del self._open[chat]
        await self._tabs.send(chat, {"type": "approval_settled", "id": message_id, "text": text})

    def open(self, chat: str) -> list[Frame]:
        """The chat's questions not yet decided, oldest first."""
        return list(self._open.get(chat, {}).values())

"""Approval buttons on Discord: three buttons under a question, pressed as commands.

Each button is a :class:`ApprovalButton`, discord.py's ``DynamicItem``: its
``custom_id`` carries the choice and the request (:mod:`channels.approvals`),
and the class is registered with the client at start, so a button posted
before a restart still works after it. A press is handed to the channel as
the ``approval_press`` event (``Client.dispatch``), which turns it into the
chat command it stands for.
"""

from __future__ import annotations

import re
from typing import Any

import discord

from channels.approvals import APPROVE, BUTTONS, DENY, button_data

STYLES = {APPROVE: discord.ButtonStyle.success, DENY: discord.ButtonStyle.danger}


class ApprovalButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=re.compile(r"apr:(?P<choice>approve|always|deny):(?P<request>[A-Za-z0-9_-]{1,56})"),
):
    """Approve, Always or Deny, for one request."""

    def __init__(self, choice: str, request_id: str, label: str = "") -> None:
        super().__init__(
            discord.ui.Button(
                label=label or choice.title(),
                style=STYLES.get(choice, discord.ButtonStyle.secondary),
                custom_id=button_data(choice, request_id),
            )
        )
        self.choice = choice
        self.request_id = request_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str]
    ) -> ApprovalButton:
        return cls(match["choice"], match["request"])

    async def callback(self, interaction: discord.Interaction) -> None:
        interaction.client.dispatch("approval_press", interaction, self.choice, self.request_id)


def buttons(request_id: str) -> discord.ui.View:
    """The three buttons of one question, in one row."""
    view = discord.ui.View(timeout=None)
    for choice, label in BUTTONS:
        view.add_item(ApprovalButton(choice, request_id, label))
    return view

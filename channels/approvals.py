"""Approval questions in chats: what a button carries, and the command a press becomes.

A question about a parked call shows three buttons. Each carries
``apr:<choice>:<request id>`` (64 bytes at most, as Telegram's callback data
and Discord's custom ids allow), and a press arrives at the router as the
chat command it stands for — ``/approve <id>``, ``/always <id>`` or
``/deny <id>`` — with :attr:`~channels.base.Inbound.press` set, so buttons,
typed commands and every channel share one path (access, who may decide,
what a stale button says).
"""

from __future__ import annotations

APPROVE = "approve"
ALWAYS = "always"
DENY = "deny"
BUTTONS: tuple[tuple[str, str], ...] = ((APPROVE, "Approve"), (ALWAYS, "Always"), (DENY, "Deny"))
"""Each button's choice and label, in the order they are shown."""

_PREFIX = "apr"


def button_data(choice: str, request_id: str) -> str:
    """What the ``choice`` button of a question carries."""
    return f"{_PREFIX}:{choice}:{request_id}"


def commands_hint(request_id: str) -> str:
    """The line that says how to decide by typing, where no button can be shown."""
    return f"Reply /approve {request_id}, /always {request_id} or /deny {request_id} [reason]."


def press_command(data: str) -> str | None:
    """The chat command a pressed button stands for; None for data that is not ours."""
    prefix, _, rest = data.partition(":")
    choice, _, request_id = rest.partition(":")
    if prefix != _PREFIX or choice not in (APPROVE, ALWAYS, DENY) or not request_id:
        return None
    return f"/{choice} {request_id}"

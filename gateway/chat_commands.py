"""What the chat commands say: ``/help``, ``/status``, ``/compact``, and an unknown ``/word``.

The router answers these at once, without a turn, on every channel. Their
words are for the person in the chat: what happened, how many messages, what
is running and for how long — no store, wake or cut in sight. ``/help``
lists only the commands the asker may use (``/send`` is for owners).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from channels.base import Inbound
from gateway.cli_kit import duration_text
from threads.agent.compaction import NothingToCompactError
from threads.agent.summaries import CompactionError
from threads.errors import ThreadsError
from threads.keys import SessionKey
from threads.llm.errors import ModelError
from threads.manager import ThreadManager
from threads.session import Session
from threads.store.entries import CompactionEntry

COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "start a fresh conversation (the old one is kept)"),
    ("reset", "the same as /new"),
    ("stop", "stop the running answer and the work it started (/stop drain: your queue too)"),
    ("status", "what this conversation is doing right now"),
    ("compact", "summarize the older part of this conversation to make room (/compact <focus>)"),
    ("send", "owners: on|off|inherit — allow, block or inherit replies to this chat"),
    ("help", "the commands you can use"),
)
COMMAND_WORD = re.compile(r"/[A-Za-z][A-Za-z0-9_]{0,31}(?:@\w+)?")
"""A command as chat platforms write one (``/status``, ``/status@my_bot``); ``/usr/bin`` is not."""

Command = Callable[[Inbound, SessionKey, str], Awaitable[str]]


def help_text(*, owner: bool, owner_only: Collection[str]) -> str:
    """The commands this person may use, one a line."""
    lines = [
        f"/{name} — {about}" for name, about in COMMANDS if owner or f"/{name}" not in owner_only
    ]
    return "Commands:\n" + "\n".join(lines)


def unknown_text(word: str, help_lines: str) -> str:
    return f"There is no {word} command. {help_lines}"


def status_text(key: SessionKey, info: dict[str, Any], model: str) -> str:
    """``/status``: the conversation, and what its thread is doing right now."""
    if not info.get("exists"):
        return "No conversation yet: send a message to start one."
    messages = int(info.get("message_count", 0))
    turns = int(info.get("turn_count", 0))
    lines = [
        f"This conversation: {_count(messages, 'message')}, {_count(turns, 'answer')} so far "
        f"(agent {info.get('agent', '?')}, model {model}).",
    ]
    if not info.get("thread_active"):
        lines.append("Right now: nothing is running.")
        return "\n".join(lines)
    state = info.get("thread_state")
    waiting = int(info.get("thread_pending", 0))
    if state == "running":
        now = f"Right now: answering, for {duration_text(float(info.get('thread_elapsed_sec', 0)))}"
        calls = int(info.get("thread_iterations", 0))
        if calls:
            now += f", {_count(calls, 'model call')} so far"
        if info.get("thread_current_tool"):
            now += f", using the tool {info['thread_current_tool']}"
        lines.append(now + ".")
    elif info.get("thread_awaiting_approval"):
        for request in info["thread_awaiting_approval"]:
            lines.append(
                f"Right now: waiting for approval to run {request['tool']} "
                f"(/approve {request['id']} or /deny {request['id']})."
            )
    else:
        lines.append("Right now: nothing is running.")
    if waiting:
        lines.append(f"Waiting after it: {_count(waiting, 'message')}.")
    return "\n".join(lines)


Compact = Callable[[Session, str], Awaitable[CompactionEntry]]
"""Compacts a session now, with instructions for its summary ("" for none)."""


def compact_command(manager: ThreadManager, compact: Compact) -> Command:
    """``/compact [focus]``: summarize the chat's older messages now (between answers).

    Words after the command guide the summary: ``/compact focus on the API design``.
    """

    async def compact_now(inbound: Inbound, key: SessionKey, rest: str) -> str:
        thread = await manager.open_thread(key)
        if thread is None:
            return "Nothing to compact yet: this conversation has not started."
        session = thread.session
        if session.busy:
            return "An answer is being written; send /compact again once it has arrived."
        before = len(session.context())
        try:
            entry = await compact(session, rest.strip())
        except NothingToCompactError:
            return (
                f"Nothing to compact yet: this conversation is short ({_count(before, 'message')}), "
                "and its recent part is always kept word for word."
            )
        except (CompactionError, ModelError, ThreadsError) as exc:
            return f"Could not compact this conversation: {exc}"
        kept = max(len(session.context()) - 1, 0)
        summarized = max(before - kept, 0)
        return (
            f"Compacted: {_count(summarized, 'older message')} (about "
            f"{entry.tokens_before:,} tokens of context) are now one summary; the latest "
            f"{_count(kept, 'message')} stay word for word. Nothing was deleted."
        )

    return compact_now


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"

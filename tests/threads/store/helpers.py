"""Small builders the store tests share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from threads.ids import new_entry_id, new_session_id
from threads.messages import Message
from threads.store.entries import Entry, Header, InfoEntry, MessageEntry

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def header(session: str | None = None, *, created: datetime | None = None, **meta: str) -> Header:
    return Header(
        id=new_session_id() if session is None else session,
        created=created or datetime.now(UTC),
        meta=dict(meta),
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def msg(text: str, parent: str = "", **extra: Any) -> MessageEntry:
    return MessageEntry(id=new_entry_id(), parent=parent, message=Message.user(text), **extra)


def info(title: str) -> InfoEntry:
    return InfoEntry(id=new_entry_id(), title=title)


def texts(entries: list[Entry]) -> list[str]:
    return [e.message.text() for e in entries if isinstance(e, MessageEntry)]

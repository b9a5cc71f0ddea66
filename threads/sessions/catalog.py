"""The read side of the session tools: sessions as rows, transcripts as messages.

A :class:`Catalog` reads the store (and, when it runs inside a gateway, the
live sessions of loaded threads, which are never behind the store). It serves
``sessions_list``, ``sessions_history`` and the ``gateway sessions`` CLI alike;
readers never lock, so the CLI can read while a gateway writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from config.models import GatewayConfig
from threads.errors import NotFoundError
from threads.identity import PUBLIC_ID
from threads.keys import SessionKey
from threads.messages import JSON, Message, message_to_wire
from threads.session import Session
from threads.sessions import meta as m
from threads.sessions.errors import UnknownSessionError
from threads.sessions.keys import RESERVED, Kind, Resolved, channel_of, kind_of, resolve
from threads.store.base import SessionStore
from threads.store.entries import (
    CustomMessageEntry,
    Entry,
    Header,
    InfoEntry,
    MessageEntry,
    TurnEntry,
)
from threads.store.jsonl import JsonlStore
from threads.tree import EntryTree
from threads.wake import WakeSource

if TYPE_CHECKING:
    from threads.manager import ThreadManager

LIST_DEFAULT = 200
LIST_MAX = 500
HISTORY_DEFAULT = 50
HISTORY_MAX = 500
MESSAGES_MAX = 50

LiveSessions = Callable[[str], Session | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """One session as read now: its header, entries, the leaf's path and merged metadata."""

    key: SessionKey
    header: Header
    entries: Sequence[Entry]
    path: Sequence[Entry]
    meta: Mapping[str, str]

    @property
    def id(self) -> str:
        return self.header.id

    @property
    def updated(self) -> datetime:
        """When the session last did something: a heartbeat's run and what it wrote do not count."""
        group: list[Entry] = []
        for entry in reversed(self.entries):
            group.append(entry)
            if isinstance(entry, MessageEntry) and entry.run_id:
                if entry.wake.get("source") != WakeSource.HEARTBEAT.value:
                    return group[0].created
                group = []
        return group[0].created if group else self.header.created


def _no_live(key: str) -> Session | None:
    return None


class Catalog:
    """Sessions for the session tools and the CLI."""

    def __init__(
        self,
        store: SessionStore,
        config: GatewayConfig,
        *,
        live: LiveSessions = _no_live,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self._live = live
        self._clock = clock or (lambda: datetime.now(UTC))

    @classmethod
    def of(cls, manager: ThreadManager) -> Catalog:
        """A catalog over a manager's store and its loaded threads."""

        def live(key: str) -> Session | None:
            thread = manager.thread(key)
            return thread.session if thread is not None else None

        return cls(manager.store, manager.config, live=live)

    def now(self) -> datetime:
        return self._clock()

    # -- reading sessions

    async def resolve(self, ref: str) -> Resolved:
        """The session ``ref`` names (key in any shape, or session id); see :mod:`.keys`."""
        return await resolve(ref, self.store, self.config)

    async def view(self, key: str, session_id: str) -> SessionView:
        """One session, live when its thread holds it; :class:`UnknownSessionError` if gone."""
        session = self._live(key)
        if session is not None and session.id == session_id and not session.closed:
            return SessionView(
                key=SessionKey(key),
                header=session.header,
                entries=session.entries(),
                path=session.path(),
                meta=session.meta(),
            )
        try:
            loaded = await self.store.load(session_id)
        except NotFoundError:
            raise UnknownSessionError(key, "its session was deleted") from None
        tree = EntryTree(session_id)
        skipped = loaded.report.skipped if loaded.report else ()
        tree.load(loaded.entries, salvaged=bool(skipped))
        return SessionView(
            key=SessionKey(key),
            header=loaded.header,
            entries=loaded.entries,
            path=tree.path(),
            meta=tree.meta(dict(loaded.header.meta)),
        )

    async def views(self) -> list[SessionView]:
        """Every current session of every key, newest first; reserved and deleted ones left out."""
        out: list[SessionView] = []
        for key, session_id in (await self.store.keys()).items():
            if key in RESERVED:
                continue
            try:
                out.append(await self.view(key, session_id))
            except UnknownSessionError:
                continue  # the key points at a deleted session (a sub-agent cleaned up)
        out.sort(key=lambda v: v.updated, reverse=True)
        return out

    # -- rows

    def kind(self, view: SessionView) -> Kind:
        return kind_of(view.key, self.config)

    def archived(self, view: SessionView) -> bool:
        return m.is_archived(view.meta, self.config, self.now())

    async def rows(
        self,
        *,
        kinds: Iterable[str] | None = None,
        limit: int = LIST_DEFAULT,
        active_minutes: int | None = None,
        message_limit: int = 0,
        visible: Callable[[SessionView], bool] | None = None,
        include_archived: bool = False,
    ) -> list[dict[str, Any]]:
        """``sessions_list``: rows newest first, filtered, at most ``limit`` (capped)."""
        wanted = set(kinds) if kinds else None
        since = self.now() - timedelta(minutes=active_minutes) if active_minutes else None
        limit = min(max(limit, 1), LIST_MAX)
        out: list[dict[str, Any]] = []
        for view in await self.views():
            if since is not None and view.updated < since:
                break  # newest first: every later one is older
            if wanted is not None and self.kind(view) not in wanted:
                continue
            if not include_archived and self.archived(view):
                continue
            if visible is not None and not visible(view):
                continue
            out.append(self.row(view, message_limit=message_limit))
            if len(out) >= limit:
                break
        return out

    def row(self, view: SessionView, *, message_limit: int = 0) -> dict[str, Any]:
        """The seed's row shape; a field with no value here is null, never made up."""
        kind = self.kind(view)
        last_channel, last_to = _last_delivery(view.path)
        turns = [e for e in view.entries if isinstance(e, TurnEntry)]
        agent = view.meta.get("agent", self.config.default_agent)
        row: dict[str, Any] = {
            "key": str(view.key),
            "kind": kind,
            "channel": channel_of(view.key, kind, last_channel),
            "displayName": view.meta.get(m.LABEL) or _title(view) or None,
            "updatedAt": _ms(view.updated),
            "sessionId": view.id,
            "model": view.meta.get(m.MODEL) or self.config.model_for(_known(agent, self.config)),
            "contextTokens": (turns[-1].last_input or None) if turns else None,
            "totalTokens": sum(t.usage.total_tokens for t in turns) if turns else None,
            "thinkingLevel": None,
            "verboseLevel": None,
            "systemSent": None,
            "abortedLastRun": _aborted(turns[-1]) if turns else None,
            "sendPolicy": m.send_override(view.meta),
            "lastChannel": last_channel or None,
            "lastTo": last_to or None,
            "deliveryContext": {"channel": last_channel, "to": last_to} if last_channel else None,
            "transcriptPath": self.transcript_path(view.id),
            "agent": agent,
            "publicId": view.meta.get(PUBLIC_ID),
        }
        if m.SPAWNED_BY in view.meta:
            row["spawnedBy"] = view.meta[m.SPAWNED_BY]
            row["delegation"] = view.meta.get(m.DELEGATION, "running")
            row["archived"] = self.archived(view)
        if message_limit > 0:
            row["messages"] = transcript(
                view.path, limit=min(message_limit, MESSAGES_MAX), include_tools=False
            )
        return row

    def transcript_path(self, session_id: str) -> str | None:
        """The session's file when the store is a JSON-lines directory and the file exists."""
        url = self.config.store.url
        if not url.startswith("jsonl://") or not isinstance(self.store, JsonlStore):
            return None
        path = Path(url.removeprefix("jsonl://")) / f"{session_id}.jsonl"
        return str(path.resolve()) if os.path.exists(path) else None

    # -- history

    async def history(
        self, ref: str, *, limit: int = HISTORY_DEFAULT, include_tools: bool = False
    ) -> dict[str, Any]:
        """``sessions_history``: the raw messages of one session (key or id), newest last."""
        resolved = await self.resolve(ref)
        view = await self.view(resolved.key, resolved.session_id)
        return {
            "sessionKey": str(resolved.key),
            "sessionId": view.id,
            "current": resolved.current,
            "messages": transcript(
                view.path, limit=min(max(limit, 1), HISTORY_MAX), include_tools=include_tools
            ),
        }


def transcript(path: Sequence[Entry], *, limit: int, include_tools: bool) -> list[dict[str, JSON]]:
    """The last ``limit`` messages of a path in their stored form; tool results only if asked."""
    out: list[dict[str, JSON]] = []
    for entry in reversed(path):
        message: Message | None = None
        if isinstance(entry, MessageEntry | CustomMessageEntry):
            message = entry.message
        if message is None or (message.role == "tool" and not include_tools):
            continue
        wire: dict[str, JSON] = {"id": entry.id, "created": entry.created.isoformat()}
        wire.update(message_to_wire(message))
        if isinstance(entry, MessageEntry) and entry.run_id:
            wire["run_id"] = entry.run_id
        if isinstance(entry, CustomMessageEntry):
            wire["custom"] = entry.kind
        out.append(wire)
        if len(out) >= limit:
            break
    out.reverse()
    return out


def _last_delivery(path: Sequence[Entry]) -> tuple[str, str]:
    """The channel and chat a user last reached this session from (from stored wakes)."""
    for entry in reversed(path):
        if not isinstance(entry, MessageEntry) or not entry.wake:
            continue
        caller = entry.wake.get("caller")
        if not isinstance(caller, dict) or caller.get("kind") != "user":
            continue
        sink = entry.wake.get("sink")
        chat = sink.get("chat", "") if isinstance(sink, dict) else ""
        return str(caller.get("channel", "")), str(chat or caller.get("user_id", ""))
    return "", ""


def _title(view: SessionView) -> str:
    for entry in reversed(view.entries):
        if isinstance(entry, InfoEntry) and entry.title:
            return entry.title
    return ""


def _aborted(turn: TurnEntry) -> bool:
    return turn.canceled or turn.stop_reason in ("canceled", "error")


def _known(agent: str, config: GatewayConfig) -> str | None:
    return agent if agent in config.agents else None


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)

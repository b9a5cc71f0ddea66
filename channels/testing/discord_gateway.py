"""The fake Discord's gateway: the WebSocket discord.py keeps open for events.

One ``Connection`` per WebSocket, one ``Session`` per IDENTIFY. The fake
speaks gateway v10 with JSON encoding: HELLO with the heartbeat interval,
IDENTIFY → READY (guilds unavailable, ``resume_gateway_url`` pointing back at
the fake) then one GUILD_CREATE per guild, HEARTBEAT → HEARTBEAT_ACK,
REQUEST_GUILD_MEMBERS → GUILD_MEMBERS_CHUNK, and dispatches numbered by ``s``
per session. A session outlives its connection: events that happen while
the bot is away are kept, and a RESUME with the last ``s`` the bot saw
replays what came after it, then RESUMED. A RESUME of an unknown session is
answered with INVALID_SESSION (``d: false``), as Discord answers it.

Transport compression: discord.py asks for ``compress=zlib-stream`` (or
``zstd-stream`` when a zstd module is installed). It decompresses binary
frames only and reads text frames as they are, so the fake compresses with
one zlib stream per connection when asked for ``zlib-stream`` and answers
in text frames otherwise.

Close codes follow Discord's: 4004 for a wrong token, 4014 for a privileged
intent the application has not enabled, 4003 for a payload before IDENTIFY,
4005 for a second IDENTIFY, 4001 for an unknown opcode, 4002 for a payload
that is not JSON. ``drop()`` closes with 4000 by default, which discord.py
answers by resuming.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from channels.testing.discord_payloads import guild_object, member_object, without_content
from channels.testing.discord_world import (
    GUILDS,
    JSON,
    MESSAGE_CONTENT,
    PRIVILEGED_INTENTS,
    DcHandshake,
    Dispatch,
    World,
)
from channels.testing.telegram import Hold

log = logging.getLogger(__name__)

DISPATCH, HEARTBEAT, IDENTIFY, PRESENCE, VOICE_STATE = 0, 1, 2, 3, 4
RESUME, RECONNECT, REQUEST_MEMBERS, INVALID_SESSION, HELLO, HEARTBEAT_ACK = 6, 7, 8, 9, 10, 11
_TRACE = ["fake-discord"]
_PRIVILEGED = sum(PRIVILEGED_INTENTS.values())


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str


@dataclass(slots=True)
class Session:
    """A gateway session: its intents, its shard, and every dispatch it was sent, by ``s``."""

    id: str
    intents: int
    shard: tuple[int, int] | None
    seq: int = 0
    log: list[tuple[int, str]] = field(default_factory=list)
    connection: Connection | None = None

    def owns(self, guild_id: int | None) -> bool:
        """Whether this session's shard gets the guild's events (DMs go to shard 0)."""
        if self.shard is None:
            return True
        shard_id, count = self.shard
        return (0 if guild_id is None else (guild_id >> 22) % count) == shard_id

    def push(self, name: str, data: JSON) -> None:
        self.seq += 1
        text = json.dumps({"op": DISPATCH, "t": name, "s": self.seq, "d": data})
        self.log.append((self.seq, text))
        if self.connection is not None:
            self.connection.send_text(text)


class Connection:
    """One WebSocket; everything it sends goes through one writer, in order."""

    def __init__(self, ws: web.WebSocketResponse, path: str, compress: str | None) -> None:
        self.ws = ws
        self.path = path
        self.compress = compress
        self.session: Session | None = None
        self.closed = asyncio.Event()
        self._queue: asyncio.Queue[str | _Close] = asyncio.Queue()
        self._zlib = zlib.compressobj() if compress == "zlib-stream" else None

    def send(self, payload: JSON) -> None:
        self.send_text(json.dumps(payload))

    def send_text(self, text: str) -> None:
        self._queue.put_nowait(text)

    def close(self, code: int, reason: str = "") -> None:
        """Close after what is queued has gone out."""
        self._queue.put_nowait(_Close(code, reason))

    async def write(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, _Close):
                    await self.ws.close(code=item.code, message=item.reason.encode())
                    return
                if self._zlib is not None:
                    data = self._zlib.compress(item.encode()) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_str(item)
        except ConnectionError:
            return


class Gateway:
    """The gateway of one bot over one ``World``."""

    def __init__(
        self,
        world: World,
        *,
        heartbeat_interval: float,
        privileged_intents: int,
        resume_url: Callable[[], str],
    ) -> None:
        self.world = world
        self.heartbeat_interval = heartbeat_interval
        self.privileged_intents = privileged_intents
        self.resume_url = resume_url
        self.sessions: dict[str, Session] = {}
        self.connections: set[Connection] = set()
        self.heartbeats = 0
        self.holds: deque[Hold] = deque()
        world.listeners.append(self._on_dispatch)

    # -- what tests do to the connection

    def live(self) -> list[Connection]:
        """Connections with a session (identified or resumed) that are still open."""
        return [c for c in self.connections if c.session is not None and not c.closed.is_set()]

    async def drop(self, code: int, *, timeout: float) -> None:
        """Close every live connection with ``code``; sessions stay, so the bot can resume."""
        dropped = self.live()
        for connection in dropped:
            self._detach(connection)
            connection.close(code, "dropped by the fake")
        await self._wait_closed(dropped, timeout)

    def reconnect(self) -> None:
        """Send RECONNECT (op 7): discord.py closes and resumes."""
        for connection in self.live():
            connection.send({"op": RECONNECT, "d": None, "s": None, "t": None})

    def invalidate(self, *, resumable: bool) -> None:
        """Send INVALID_SESSION; unless ``resumable`` the sessions end and the bot identifies anew."""
        for connection in self.live():
            connection.send({"op": INVALID_SESSION, "d": resumable, "s": None, "t": None})
            if not resumable and connection.session is not None:
                self.sessions.pop(connection.session.id, None)

    async def close(self) -> None:
        for connection in list(self.connections):
            connection.close(1001, "the fake is closing")
        await self._wait_closed(list(self.connections), 5.0)

    async def _wait_closed(self, connections: list[Connection], timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                for connection in connections:
                    await connection.closed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"the gateway connections did not close within {timeout} s"
            ) from None

    # -- the WebSocket

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.holds:
            await self.holds.popleft().keep({"path": request.path, "query": dict(request.query)})
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        compress = request.query.get("compress")
        connection = Connection(ws, request.path, compress)
        self.connections.add(connection)
        writer = asyncio.create_task(connection.write(), name="FakeDiscord gateway writer")
        try:
            if request.query.get("encoding", "json") != "json":
                connection.close(4002, "the fake gateway speaks encoding=json only")
            elif request.query.get("v", "10") not in ("9", "10"):
                connection.close(4012, "Invalid API version")
            else:
                connection.send(
                    {
                        "op": HELLO,
                        "d": {
                            "heartbeat_interval": int(self.heartbeat_interval * 1000),
                            "_trace": _TRACE,
                        },
                        "s": None,
                        "t": None,
                    }
                )
            await self._read(connection)
            connection.close(1000)
            await writer
        finally:
            writer.cancel()
            self._detach(connection)
            self.connections.discard(connection)
            connection.closed.set()
            self.world.notify()
        return ws

    async def _read(self, connection: Connection) -> None:
        async for message in connection.ws:
            if message.type is not WSMsgType.TEXT:
                continue
            try:
                payload = json.loads(message.data)
                op, data = payload["op"], payload.get("d")
            except (ValueError, KeyError, TypeError):
                connection.close(4002, "Error while decoding payload.")
                continue
            self._receive(connection, op, data)

    def _receive(self, connection: Connection, op: int, data: Any) -> None:
        if op == HEARTBEAT:
            self.heartbeats += 1
            connection.send({"op": HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op in (IDENTIFY, RESUME, REQUEST_MEMBERS) and not isinstance(data, dict):
            connection.close(4002, "Error while decoding payload.")
        elif op == IDENTIFY:
            self._identify(connection, data)
        elif op == RESUME:
            self._resume(connection, data)
        elif connection.session is None:
            connection.close(4003, "Not authenticated.")
        elif op == REQUEST_MEMBERS:
            self._members(connection.session, data)
        elif op not in (PRESENCE, VOICE_STATE):
            connection.close(4001, "Unknown opcode.")
        self.world.notify()

    def _identify(self, connection: Connection, data: JSON) -> None:
        if connection.session is not None:
            connection.close(4005, "Already authenticated.")
            return
        if data.get("token") != self.world.token:
            connection.close(4004, "Authentication failed.")
            return
        intents = data.get("intents")
        if not isinstance(intents, int):
            connection.close(4013, "Invalid intent(s).")
            return
        if intents & ~self.privileged_intents & _PRIVILEGED:
            connection.close(4014, "Disallowed intent(s).")
            return
        shard = data.get("shard")
        session = Session(
            id=uuid.uuid4().hex,
            intents=intents,
            shard=(int(shard[0]), int(shard[1])) if shard else None,
        )
        self.sessions[session.id] = session
        self._attach(session, connection)
        world = self.world
        guilds = [g for g in world.guilds.values() if session.owns(g.id)]
        ready: JSON = {
            "v": 10,
            "user": world.bot.api() | {"verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_url(),
            "application": {"id": str(world.bot.id), "flags": 0},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
            "auth": {},
            "_trace": _TRACE,
        }
        if session.shard is not None:
            ready["shard"] = list(session.shard)
        session.push("READY", ready)
        if intents & GUILDS:
            for guild in guilds:
                session.push("GUILD_CREATE", guild_object(world, guild))
        self._record(
            DcHandshake(
                kind="identify",
                session_id=session.id,
                seq=None,
                path=connection.path,
                compress=connection.compress,
                intents=intents,
            )
        )

    def _resume(self, connection: Connection, data: JSON) -> None:
        session = self.sessions.get(str(data.get("session_id")))
        if session is None or data.get("token") != self.world.token:
            connection.send({"op": INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        seq = data.get("seq")
        previous = session.connection
        if previous is not None:
            self._detach(previous)
            previous.close(4000, "resumed elsewhere")
        after = seq if isinstance(seq, int) else 0
        for number, text in session.log:
            if number > after:
                connection.send_text(text)
        self._attach(session, connection)
        session.push("RESUMED", {"_trace": _TRACE})
        self._record(
            DcHandshake(
                kind="resume",
                session_id=session.id,
                seq=seq if isinstance(seq, int) else None,
                path=connection.path,
                compress=connection.compress,
                intents=session.intents,
            )
        )

    def _members(self, session: Session, data: JSON) -> None:
        guild_id = int(data["guild_id"])
        if guild_id not in self.world.guilds:
            return
        wanted = {int(u) for u in data.get("user_ids") or ()}
        query = str(data.get("query") or "").lower()
        members = [
            member_object(self.world, guild_id, self.world.users[user_id])
            for user_id in self.world.members[guild_id]
            if (not wanted or user_id in wanted)
            and self.world.users[user_id].username.lower().startswith(query)
        ]
        chunk: JSON = {
            "guild_id": str(guild_id),
            "members": members,
            "chunk_index": 0,
            "chunk_count": 1,
            "not_found": [],
        }
        if data.get("nonce") is not None:
            chunk["nonce"] = data["nonce"]
        session.push("GUILD_MEMBERS_CHUNK", chunk)

    # -- sessions

    def _attach(self, session: Session, connection: Connection) -> None:
        session.connection = connection
        connection.session = session

    def _detach(self, connection: Connection) -> None:
        session = connection.session
        if session is not None and session.connection is connection:
            session.connection = None

    def _record(self, handshake: DcHandshake) -> None:
        self.world.handshakes.append(handshake)

    def _on_dispatch(self, event: Dispatch) -> None:
        data = event.data
        guild_id = data.get("guild_id") or (
            data.get("id") if event.name.startswith("GUILD_") else None
        )
        for session in self.sessions.values():
            if event.intent and not session.intents & event.intent:
                continue
            if not session.owns(None if guild_id is None else int(guild_id)):
                continue
            if event.private and not session.intents & MESSAGE_CONTENT:
                session.push(event.name, without_content(data))
            else:
                session.push(event.name, data)

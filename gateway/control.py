"""The control socket: how the CLI reaches a running gateway on the same machine.

A Unix socket at ``<data_dir>/gateway.sock`` (mode 0600, so only its owner
connects) speaking JSON lines. Each request is one object with an ``op`` and
an optional ``id`` echoed in the answer:

* ``ping`` — ``{"ok": true, "pid": …}``
* ``chat`` ``{"text"}`` — a line from the attached terminal user; replies to
  the terminal chat come back on the same connection as ``{"event": "reply"}``
* ``idle`` — answers once no turn is running or queued
* ``health``, ``check_session`` ``{"key"}``
* ``stop_session`` ``{"key"}`` or ``{"all": true}``, optional ``"drain": true`` —
  answers what the stop did (``ended``, ``winding_down``, ``dropped``, ``text``)
* ``send_policy`` ``{"key", "setting"}`` — a session's send policy override
  (allow | deny | inherit); answers the policy now in force
* ``cancel_delegation`` ``{"key"}`` — cancel the delegation running (or waiting
  for a slot) in child session ``key``; answers its parent and state
* ``session_edit`` ``{"key", "action", "args"}`` — pin, compact (or preview),
  uncompact or branch a session between its turns; answers what was done
  (:mod:`gateway.session_edits`)
* ``pairing_list`` — every access-controlled channel's pending requests and
  paired users (``{"channels": {name: {"pending": […], "paired": […]}}}``)
* ``pairing_approve`` / ``pairing_deny`` ``{"channel", "code"}`` — answers the
  request and whether its user was told now (``told``)
* ``pairing_revoke`` ``{"channel", "user"}`` — answers the unpaired user
* ``nodes`` — this node (``{"node": {"id", "boot", …}}``) and, scaled out, every
  node with its leases and keys (``"cluster"``, null for a gateway on its own)
* ``drain`` — this node leads nothing from now on and stops, handing its keys
  over; answers what it held (``node``, ``keys``, ``leads``) before it stops
* ``approvals_list`` — the tool calls waiting for a decision (``{"requests": […]}``)
* ``approvals_decide`` ``{"request", "approve", "always", "reason", "who"}`` — decides
  one as the operator ``who`` (through the ``cli`` door); answers how it was decided
* ``approvals_grants`` ``{"key"?}`` — the standing approvals ``/always`` minted
* ``approvals_revoke`` ``{"grant"}`` — ends one; answers it

Errors come back as ``{"ok": false, "error": "…"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from channels.errors import ChannelError
from channels.pairing import PairingService, listing_json, outcome_json
from gateway.errors import ControlError, GatewayGoneError
from gateway.preflight import another_gateway
from gateway.scaleout import node_health
from gateway.session_edits import Editor
from threads.agent.loop import AgentLoop
from threads.approvals.service import ApprovalService, Decider
from threads.errors import ThreadsError

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

Op = Callable[[dict[str, Any], "_Connection"], Awaitable[dict[str, Any]]]


class _Connection:
    """One client: everything sent to it goes through one ordered outbox."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()

    def send(self, obj: dict[str, Any]) -> None:
        self.outbox.put_nowait(orjson.dumps(obj) + b"\n")

    async def pump(self) -> None:
        while True:
            self.writer.write(await self.outbox.get())
            await self.writer.drain()


class ControlServer:
    """Serves the control protocol for one gateway."""

    def __init__(self, gateway: Gateway, path: Path) -> None:
        self.gateway = gateway
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ops: dict[str, Op] = {
            "ping": self._ping,
            "chat": self._chat,
            "idle": self._idle,
            "health": self._health,
            "check_session": self._check_session,
            "stop_session": self._stop_session,
            "send_policy": self._send_policy,
            "cancel_delegation": self._cancel_delegation,
            "session_edit": self._session_edit,
            "pairing_list": self._pairing_list,
            "pairing_approve": self._pairing_approve,
            "pairing_deny": self._pairing_deny,
            "pairing_revoke": self._pairing_revoke,
            "nodes": self._nodes,
            "drain": self._drain,
            "approvals_list": self._approvals_list,
            "approvals_decide": self._approvals_decide,
            "approvals_grants": self._approvals_grants,
            "approvals_revoke": self._approvals_revoke,
        }

    async def start(self) -> None:
        if await _alive(self.path):
            raise ControlError(another_gateway(self.path))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a stale socket left by a gateway that died
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection = _Connection(writer)
        pump = asyncio.create_task(connection.pump(), name="control outbox")

        def listener(text: str) -> None:
            connection.send({"event": "reply", "text": text})

        cli = self.gateway.cli
        if cli is not None:
            cli.listeners.append(listener)
        try:
            while line := await reader.readline():
                await self._answer(line, connection)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # stop() ends connections by cancelling them. The handler ends normally:
            # Python 3.11's start_unix_server logs a cancelled one as an error.
            pass
        finally:
            if cli is not None:
                cli.listeners.remove(listener)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await pump
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, line: bytes, connection: _Connection) -> None:
        try:
            request = orjson.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
        except (orjson.JSONDecodeError, ValueError) as exc:
            connection.send({"ok": False, "error": f"bad request: {exc}"})
            return
        op = self._ops.get(str(request.get("op")))
        if op is None:
            answer = {
                "ok": False,
                "error": f"unknown op {request.get('op')!r}; ops: {sorted(self._ops)}",
            }
        else:
            try:
                answer = await op(request, connection)
            except (ThreadsError, ChannelError, ValueError, LookupError) as exc:
                answer = {"ok": False, "error": str(exc)}
            except ConnectionError:
                raise  # the op closes this connection (the gateway is stopping)
            except Exception as exc:
                log.exception("control op %s failed", request.get("op"))
                answer = {"ok": False, "error": f"the gateway could not do that: {exc}"}
        if "id" in request:
            answer["id"] = request["id"]
        connection.send(answer)

    async def _ping(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid()}

    async def _chat(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        cli = self.gateway.cli
        if cli is None:
            return {"ok": False, "error": "the terminal channel is disabled in this gateway"}
        try:
            await cli.submit(str(request.get("text", "")))
        except Exception:
            if not self.gateway.stopping:
                raise
            # A line that arrives while the gateway stops is not taken (the channel, the
            # manager or the session has closed): end this connection unanswered, so the
            # client says, in its one line, that the gateway went away.
            raise ConnectionResetError("the gateway is stopping") from None
        return {"ok": True}

    async def _idle(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        await self.gateway.wait_idle()
        return {"ok": True}

    async def _health(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        return {"ok": True, "health": await self.gateway.manager.health()}

    async def _check_session(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        return {
            "ok": True,
            "session": await self.gateway.manager.check_session(str(request["key"])),
        }

    async def _stop_session(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        manager = self.gateway.manager
        drain = bool(request.get("drain"))
        if request.get("all"):
            report = await manager.stop_all(drain=drain)
        else:
            report = await manager.stop(str(request["key"]), drain=drain)
        return {"ok": True, **report.to_json(), "text": report.describe()}

    async def _send_policy(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        policy = self.gateway.send_policy
        if policy is None:
            return {"ok": False, "error": "the gateway has not started its send policy"}
        key, setting = str(request["key"]), str(request["setting"])
        decision = await policy.set(key, setting)
        return {"ok": True, "key": key, "policy": decision.action, "reason": decision.reason}

    async def _cancel_delegation(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        key = str(request["key"])
        delegation = await self.gateway.manager.pool.cancel(key, "canceled by an operator")
        return {
            "ok": True,
            "key": key,
            "parent": str(delegation.parent_key),
            "receipt": delegation.receipt,
            "state": delegation.state,
        }

    async def _session_edit(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        key = str(request["key"])
        manager = self.gateway.manager
        thread = await manager.open_thread(key)
        if thread is None:
            raise LookupError(f"session key {key!r} names no session")
        loop = manager.agent
        if not isinstance(loop, AgentLoop):
            raise LookupError("this gateway runs no agent loop to summarize with")
        editor = Editor(config=self.gateway.config, models=loop.models)
        args = request.get("args")
        done = await editor.edit(
            thread.session, str(request["action"]), dict(args) if isinstance(args, dict) else {}
        )
        return {"ok": True, "key": key, **done}

    def _pairing(self) -> PairingService:
        pairing = self.gateway.pairing
        if pairing is None:
            raise LookupError("this gateway has no channel with access control to pair on")
        return pairing

    async def _pairing_list(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        return {"ok": True, **listing_json(await self._pairing().listing())}

    async def _pairing_approve(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        outcome = await self._pairing().approve(str(request["channel"]), str(request["code"]))
        return {"ok": True, **outcome_json(outcome)}

    async def _pairing_deny(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        outcome = await self._pairing().deny(str(request["channel"]), str(request["code"]))
        return {"ok": True, **outcome_json(outcome)}

    async def _pairing_revoke(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        user = await self._pairing().revoke(str(request["channel"]), str(request["user"]))
        return {"ok": True, "user": user.model_dump(mode="json")}

    async def _nodes(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        gateway = self.gateway
        member = gateway.member
        return {
            "ok": True,
            "node": node_health(gateway.node, member),
            "cluster": await member.view() if member is not None else None,
        }

    async def _drain(self, request: dict[str, Any], connection: _Connection) -> dict[str, Any]:
        gateway = self.gateway
        member = gateway.member
        if member is None:
            return {
                "ok": False,
                "error": "this gateway is not scaled out (store.url is not redis://): there is "
                "no other node to hand its keys to; stop it with Ctrl-C or SIGTERM",
            }
        held = member.local_view()
        # Answered first: the stop that follows closes this socket.
        asyncio.get_running_loop().call_soon(gateway.spawn_drain)
        return {"ok": True, "node": member.node, "keys": held["keys_owned"], "leads": held["leads"]}

    def _approvals(self) -> ApprovalService:
        service = self.gateway.approvals
        if service is None:
            raise LookupError("the gateway has not started its approvals")
        return service

    async def _approvals_list(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        return {"ok": True, "requests": [w.wire() for w in await self._approvals().waiting()]}

    async def _approvals_decide(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        settled = await self._approvals().decide(
            str(request["request"]),
            approve=bool(request.get("approve")),
            always=bool(request.get("always")),
            reason=str(request.get("reason") or ""),
            decider=Decider(channel="cli", name=str(request.get("who") or "")),
        )
        return {"ok": True, "decision": settled.wire()}

    async def _approvals_grants(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        key = request.get("key")
        grants = await self._approvals().grants_of(str(key) if key else None)
        return {"ok": True, "grants": [g.wire() for g in grants]}

    async def _approvals_revoke(
        self, request: dict[str, Any], connection: _Connection
    ) -> dict[str, Any]:
        grant = await self._approvals().revoke(str(request["grant"]))
        return {"ok": True, "grant": grant.wire()}


async def _alive(path: Path) -> bool:
    try:
        _reader, writer = await asyncio.open_unix_connection(str(path))
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    return True


class ControlClient:
    """A connection to a running gateway's control socket.

    When the gateway ends the connection (it stopped, or died), every call
    waiting for an answer and every later call raises
    :class:`~gateway.errors.GatewayGoneError`, and :meth:`wait_disconnected`
    returns: an attached terminal says so instead of hanging or crashing.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._next_id = 0
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._disconnected = asyncio.Event()
        self.replies: asyncio.Queue[str] = asyncio.Queue()
        self._pump = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, path: Path) -> ControlClient | None:
        """A client, or None when no gateway listens at ``path``."""
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
        except OSError:
            return None
        return cls(reader, writer)

    @property
    def connected(self) -> bool:
        return not self._disconnected.is_set()

    async def wait_disconnected(self) -> None:
        """Return once the gateway has ended the connection."""
        await self._disconnected.wait()

    async def _read(self) -> None:
        try:
            while line := await self._reader.readline():
                self._take(line)
        except (ConnectionError, ValueError) as exc:
            # A reset connection, or a line the gateway never sent whole: the same end.
            log.debug("the control connection broke: %s", exc)
        finally:
            self._disconnected.set()
            for future in self._answers.values():
                if not future.done():
                    future.set_exception(GatewayGoneError())
                    # Marked read: its caller may be gone (cancelled, or failed on the write
                    # first), and asyncio would log the unread error. An awaiting caller still
                    # gets it raised.
                    future.exception()
            self._answers.clear()

    def _take(self, line: bytes) -> None:
        message = orjson.loads(line)
        if message.get("event") == "reply":
            self.replies.put_nowait(str(message.get("text", "")))
            return
        future = self._answers.pop(message.get("id", -1), None)
        if future is not None and not future.done():
            future.set_result(message)

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its answer; raise :class:`ControlError` on failure."""
        if not self.connected:
            raise GatewayGoneError()
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = future
        try:
            self._writer.write(orjson.dumps({"op": op, "id": request_id, **fields}) + b"\n")
            await self._writer.drain()
        except ConnectionError:
            self._answers.pop(request_id, None)
            raise GatewayGoneError() from None
        answer = await future
        if not answer.get("ok"):
            raise ControlError(str(answer.get("error", "the gateway refused the request")))
        return answer

    async def close(self) -> None:
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


async def ask_at(path: Path, op: str, **fields: Any) -> dict[str, Any] | None:
    """The answer of the gateway listening at ``path`` to ``op``; None when none listens."""
    client = await ControlClient.connect(path)
    if client is None:
        return None
    try:
        return await client.call(op, **fields)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def connected(path: Path) -> AsyncIterator[ControlClient | None]:
    client = await ControlClient.connect(path)
    try:
        yield client
    finally:
        if client is not None:
            await client.close()

"""Answers on their way back to the node a wake came in on: one Redis Stream per node.

A wake forwarded to its key's owner may come from a chat that lives on the
sending node: a browser's socket (web chat), a waiting HTTP request (the
API), a terminal. Only that node can deliver there, and only it holds the
turn handle its channel waits on. So the forwarded wake's sink names its
origin node, and the owner sends back, on ``<prefix>relay:<origin>``:

* ``deliver`` — each message for such a chat (the origin's channel delivers it);
* ``turn`` — how the forwarded wake's turn ended, which finishes the turn
  handle the origin gave its channel (an API request gets its answer then);
* ``answer`` — the owner's answer to an op the origin asked of a key's
  thread (``/stop``, ``/new``: :meth:`Relay.call`).

The origin reads its relay stream as entries come (``XREAD``) and deletes
what it handled. A relay entry is only useful while the origin's
connections live, so a starting node drops what a previous life left there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from threads.errors import ClosedError, DroppedError, NotRunError, ThreadsError, TurnError
from threads.messages import usage_from_wire, usage_to_wire
from threads.sinks import Delivery, OutboundMessage
from threads.turns import Outcome, RunResult, Turn

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger(__name__)

Deliver = Callable[[str, str, OutboundMessage], Awaitable[Delivery]]
"""Delivers a message to a chat of a channel on this node: (channel, chat, message)."""

_ERRORS: dict[str, type[ThreadsError]] = {
    "DroppedError": DroppedError,
    "ClosedError": ClosedError,
    "NotRunError": NotRunError,
}
MAX_RELAY_ENTRIES = 10_000


def outcome_wire(turn: Turn) -> dict[str, Any]:
    """How a decided turn ended, as the origin rebuilds it."""
    out: dict[str, Any] = {"outcome": turn.outcome.value}
    result = turn.result
    if result is not None:
        out["result"] = {
            "stop_reason": result.stop_reason,
            "text": result.text,
            "usage": usage_to_wire(result.usage),
            "steps": result.steps,
            "error": result.error,
        }
    if turn.error is not None:
        out["error"] = {"kind": type(turn.error).__name__, "message": str(turn.error)}
    return out


def finish_from_wire(turn: Turn, wire: Mapping[str, Any]) -> None:
    """Finish ``turn`` as the owner's turn ended."""
    result = None
    if isinstance(found := wire.get("result"), Mapping):
        result = RunResult(
            stop_reason=str(found.get("stop_reason", "")),
            text=str(found.get("text", "")),
            usage=usage_from_wire(found.get("usage", {})),
            steps=int(found.get("steps", 0)),
            error=str(found.get("error", "")),
        )
    error: BaseException | None = None
    if isinstance(failed := wire.get("error"), Mapping):
        kind = _ERRORS.get(str(failed.get("kind")), TurnError)
        error = kind(str(failed.get("message", "")))
    turn.finish(Outcome(str(wire.get("outcome", Outcome.FAILED.value))), result, error)


class Relay:
    """This node's relay stream, and the turn handles waiting for an owner's answer."""

    def __init__(self, redis: aioredis.Redis, prefix: str, node: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self.node = node
        self._waiting: dict[str, Turn] = {}
        self._calls: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._last = "0-0"

    def stream(self, node: str) -> str:
        return f"{self.prefix}relay:{node}"

    async def start(self) -> None:
        """Drop what a previous life of this node left on its relay stream (its chats are gone)."""
        await self.redis.delete(self.stream(self.node))

    def expect(self, marker: str, turn: Turn) -> None:
        """``turn`` is finished when the owner relays how the wake ``marker`` names ended."""
        self._waiting[marker] = turn
        turn.add_done_callback(partial(self._settled, marker))

    def _settled(self, marker: str, turn: Turn) -> None:
        self._waiting.pop(marker, None)

    def settle(self, marker: str, turn: Turn) -> None:
        """The wake ``marker`` names is taken here after all (this node took its key over):
        the handle waiting for it ends as ``turn`` ends."""
        waiting = self._waiting.pop(marker, None)
        if waiting is not None:
            turn.add_done_callback(lambda done: finish_from_wire(waiting, outcome_wire(done)))

    def gone_from(self, stream: str, still_there: set[str]) -> list[str]:
        """The waiting markers of wakes a dead node's inbox (``stream``) no longer holds."""
        return [
            m
            for m in self._waiting
            if m.startswith(f"{stream}/") and m.removeprefix(f"{stream}/") not in still_there
        ]

    def abandon(self, markers: list[str], dead: str) -> None:
        """End the handles still waiting for wakes a dead node had taken into its sessions:
        no one will say how their turns end (another node continues them, answering in
        the conversation)."""
        for marker in markers:
            turn = self._waiting.pop(marker, None)
            if turn is not None:
                turn.finish(
                    Outcome.FAILED,
                    error=TurnError(
                        f"the gateway node {dead} running this turn stopped; the message is "
                        "kept and another node continues it, answering in the conversation"
                    ),
                )

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def handles(self) -> list[Turn]:
        """The turn handles still waiting for another node to say how their turns ended."""
        return list(self._waiting.values())

    async def send_delivery(
        self, node: str, wire: Mapping[str, str], message: OutboundMessage
    ) -> None:
        fields: dict[Any, Any] = {
            "kind": "deliver",
            "channel": wire.get("channel", ""),
            "chat": wire.get("chat", ""),
            "message": orjson.dumps(
                {
                    "text": message.text,
                    "reply_to": message.reply_to or wire.get("reply_to", ""),
                    "meta": dict(message.meta),
                    "expects_reply": message.expects_reply,
                }
            ),
        }
        await self._send(node, fields)

    def call(self, call_id: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the answer to the op ``call_id`` names (see :meth:`send_answer`)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        future.add_done_callback(lambda _done: self._calls.pop(call_id, None))
        return future

    async def send_answer(self, node: str, call_id: str, answer: Mapping[str, Any]) -> None:
        await self._send(
            node, {"kind": "answer", "call": call_id, "answer": orjson.dumps(dict(answer))}
        )

    async def send_outcome(self, node: str, marker: str, turn: Turn) -> None:
        await self._send(
            node, {"kind": "turn", "marker": marker, "outcome": orjson.dumps(outcome_wire(turn))}
        )

    async def read(self, deliver: Deliver, *, block_ms: int | None) -> int:
        """Handle what arrived on this node's relay stream; how many entries."""
        stream = self.stream(self.node)
        found: Any = await self.redis.xread({stream: self._last}, count=64, block=block_ms)
        handled = 0
        for _name, entries in found or []:
            for eid, fields in entries:
                self._last = eid.decode() if isinstance(eid, bytes) else str(eid)
                try:
                    await self._handle({_text(k): v for k, v in fields.items()}, deliver)
                except Exception:
                    log.exception("a relayed %s could not be handled", fields.get(b"kind"))
                await self.redis.xdel(stream, eid)
                handled += 1
        return handled

    async def _handle(self, fields: Mapping[str, Any], deliver: Deliver) -> None:
        kind = _text(fields.get("kind", b""))
        if kind == "deliver":
            data = orjson.loads(fields["message"])
            message = OutboundMessage(
                text=str(data.get("text", "")),
                reply_to=str(data.get("reply_to", "")),
                meta={str(k): str(v) for k, v in dict(data.get("meta", {})).items()},
                expects_reply=bool(data.get("expects_reply", True)),
            )
            await deliver(_text(fields["channel"]), _text(fields["chat"]), message)
        elif kind == "turn":
            turn = self._waiting.pop(_text(fields["marker"]), None)
            if turn is not None:
                finish_from_wire(turn, orjson.loads(fields["outcome"]))
        elif kind == "answer":
            future = self._calls.pop(_text(fields["call"]), None)
            if future is not None and not future.done():
                future.set_result(orjson.loads(fields["answer"]))

    async def _send(self, node: str, fields: dict[Any, Any]) -> None:
        await self.redis.xadd(self.stream(node), fields, maxlen=MAX_RELAY_ENTRIES, approximate=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelaySink:
    """A chat that lives on another node: its messages go there on the relay stream."""

    relay: Relay
    node: str
    wire: Mapping[str, str]

    @property
    def drops(self) -> bool:
        return False

    def describe(self) -> str:
        channel = self.wire.get("channel", "?")
        return f"Caller is the {channel} user - reply with dispatch(to=caller:user)"

    def to_wire(self) -> dict[str, str]:
        return dict(self.wire)

    async def deliver(self, message: OutboundMessage) -> Delivery:
        await self.relay.send_delivery(self.node, self.wire, message)
        where = f"{self.wire.get('channel', '?')}:{self.wire.get('chat', '?')}"
        return Delivery(delivered_to=f"{where} (through node {self.node})")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

"""The thread manager's side of scale-out: which keys are this node's, and their fences.

:class:`Ownership` is what the manager asks before it starts a thread (take
the key's lease or name the node that has it), what fences a session's
writes with that lease, and what lets the key go when the thread closes.
Without a cluster (one process, any store) it owns every key and fences
nothing. :class:`ManagerOwner` is the manager as the cluster member's
:class:`~threads.cluster.inbox.Owner`: it takes forwarded wakes and keys
handed over, and drops a key whose lease was lost.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from threads.cluster.wakes import MARKER, Forward, wake_of
from threads.errors import (
    ExchangeRefusedError,
    NoTurnRunningError,
    OwnedElsewhereError,
    ThreadNotLoadedError,
    ThreadsError,
)
from threads.keys import SessionKey
from threads.store.base import Fence, Fencer, SessionStore
from threads.tree import holds_wake
from threads.turns import Outcome, Policy, Turn
from threads.wake import Accepted, Wake

if TYPE_CHECKING:
    from threads.cluster.member import Member
    from threads.manager import ThreadManager

log = logging.getLogger(__name__)


class Ownership:
    """Key leases and session fences for one manager; see the module docstring."""

    def __init__(self, store: SessionStore, member: Member | None) -> None:
        self.store = store
        self.member = member

    async def own(self, key: SessionKey) -> Fence | None:
        """The key's fence once its lease is this node's; :class:`OwnedElsewhereError` if not."""
        if self.member is None:
            return None
        route = await self.member.route(key)
        if route.fence is None:
            raise OwnedElsewhereError(str(key), route.node)
        return route.fence

    def held(self, key: SessionKey) -> Fence | None:
        """The fence of a key already this node's, without asking Redis."""
        return self.member.fence(key) if self.member is not None else None

    def fence(self, session_id: str, fence: Fence | None) -> None:
        """Every write to the session checks the key's lease from now on."""
        if fence is not None and isinstance(self.store, Fencer):
            self.store.fence(session_id, fence)

    def unfence(self, session_id: str) -> None:
        if isinstance(self.store, Fencer):
            self.store.fence(session_id, None)

    async def release(self, key: SessionKey, *, hand_over: bool = False) -> None:
        """Let the key go (its thread closed); with ``hand_over`` another node continues it."""
        if self.member is None:
            return
        if hand_over:
            await self.member.hand_over(key)
        else:
            await self.member.let_go(key)

    async def ask_owner(
        self, key: SessionKey, op: str, args: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Have the node that owns ``key`` run ``op`` on its thread; None when no other node does.

        An answer that is a refusal is raised here as the owner raised it.
        """
        if self.member is None:
            return None
        node = await self.member.owner_of(key)
        if node is None:
            return None
        answer = await self.member.call(node, key, op, args)
        if not answer.get("ok"):
            raise _refusal(key, answer)
        return answer

    async def forward(self, node: str, key: SessionKey, wake: Wake) -> tuple[Accepted, Turn]:
        """Send the wake to the node that owns its key; accepted once it is in that node's inbox.

        The owner runs the turn and delivers its replies; the turn handle is
        decided at once (``forwarded``), unless the chat is tied to this
        process: then its answers come back here and the handle ends as the
        owner's turn ends.
        """
        member = self.member
        assert member is not None
        # A chat tied to this process (a socket, a waiting request) gets its answers
        # through here, and its channel waits on the turn: the owner says how it ended.
        attached = bool(getattr(wake.sink, "attached", False))
        entry = await member.forward(node, key, wake, answer_here=attached)
        turn = Turn(entry, "", Policy.QUEUE)
        if attached:
            member.relay.expect(f"{member.streams.stream(node)}/{entry}", turn)
        else:
            turn.finish(Outcome.FORWARDED)
        return Accepted(key=key, session_id="", run_id="", node=node), turn


OwnerOp = Callable[[SessionKey, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""An op another node asks of a key's thread here: its answer, ``{"ok": True, …}``."""


class ManagerOwner:
    """The thread manager as a cluster member's owner: forwarded wakes in, lost keys out.

    ``ops`` adds ops to the manager's own (``stop``, ``new``): the gateway's
    ``send_policy``.
    """

    def __init__(self, manager: ThreadManager, ops: Mapping[str, OwnerOp] | None = None) -> None:
        self.manager = manager
        self.ops: dict[str, OwnerOp] = {"stop": self._stop, "new": self._new, **(ops or {})}

    async def receive(self, forward: Forward, marker: str) -> None:
        manager = self.manager
        key = SessionKey(forward.key)
        if forward.kind == "continue":
            await manager.continue_key(key)
            return
        if forward.kind == "op":
            assert forward.op is not None
            answer = await self._run_op(key, str(forward.op.get("op")), forward.op.get("args", {}))
            member = manager.ownership.member
            assert member is not None
            await member.relay.send_answer(forward.origin, str(forward.op.get("call")), answer)
            return
        assert forward.wake is not None
        wake = wake_of(forward.wake, manager.resolve_sink, marker)
        try:
            thread = await manager.open_thread(key, create=True, agent=wake.agent)
        except OwnedElsewhereError as elsewhere:
            # The key moved on while the wake travelled: send it after the key, named as it
            # was first read so the session can tell it again.
            member = manager.ownership.member
            assert member is not None
            wire = {**forward.wake, "meta": dict(wake.meta)}
            again = dataclasses.replace(forward, wake=wire, origin=member.node)
            await member.streams.send(elsewhere.node, again)
            return
        assert thread is not None
        first = str(wake.meta.get(MARKER, marker))
        if forward.redelivered and holds_wake(thread.session.entries(), MARKER, first):
            log.info("a wake for %s read again (%s) was accepted before; not again", key, first)
            return
        try:
            wake = manager.chains.admit(key, wake)
        except ExchangeRefusedError as exc:
            log.warning("a wake forwarded to %s is refused: %s", key, exc)
            return
        _accepted, turn = await thread.wake(wake)
        origin = wake.sink.to_wire().get("node", "")
        member = manager.ownership.member
        if origin and member is not None:
            if origin != member.node:
                turn.add_done_callback(partial(self._report, member, origin, first))
            else:  # it came back to the node it came in on (a takeover)
                member.relay.settle(first, turn)

    def _report(self, member: Member, origin: str, marker: str, turn: Turn) -> None:
        """Tell the origin how the turn of the wake ``marker`` names ended."""
        report = member.relay.send_outcome(origin, marker, turn)
        self.manager.spawn(report, name=f"relay the end of {marker}")

    async def _run_op(self, key: SessionKey, op: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Another node's op on a key this node owns (or that moved on: asked on from here)."""
        run = self.ops.get(op)
        if run is None:
            return {"ok": False, "error": "ValueError", "message": f"no op {op!r} on a thread"}
        try:
            return await run(key, args)
        except Exception as exc:  # answered: the asking node raises it for its caller
            if not isinstance(exc, ThreadsError | ValueError):
                log.exception("the %s op asked of %s failed", op, key)
            state = exc.state if isinstance(exc, NoTurnRunningError) else ""
            return {"ok": False, "error": type(exc).__name__, "message": str(exc), "state": state}

    async def _stop(self, key: SessionKey, args: Mapping[str, Any]) -> dict[str, Any]:
        drain, by_user = bool(args.get("drain")), bool(args.get("by_user"))
        report = await self.manager.stop(key, drain=drain, by_user=by_user)
        return {"ok": True, "report": report.to_json()}

    async def _new(self, key: SessionKey, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"ok": True, "session_id": await self.manager.new_session(key)}

    async def take_over(self, key: str) -> bool:
        session_key = SessionKey(key)
        await self.manager.continue_key(session_key)
        return self.manager.thread(session_key) is not None

    async def lost(self, key: str) -> None:
        await self.manager.drop(SessionKey(key))

    def thread_rows(self) -> list[dict[str, Any]]:
        return [t.snapshot() for t in self.manager.threads()]


def _refusal(key: SessionKey, answer: Mapping[str, Any]) -> Exception:
    """The error the owner's answer names, raised on the asking node."""
    kind, message = str(answer.get("error")), str(answer.get("message", ""))
    if kind == "ThreadNotLoadedError":
        return ThreadNotLoadedError(str(key))
    if kind == "NoTurnRunningError":
        return NoTurnRunningError(str(key), str(answer.get("state", "idle")))
    if kind == "ValueError":
        return ValueError(message)
    return ThreadsError(message)

"""This node as a member of the cluster: its leases, its inbox, and taking over from the dead.

A :class:`Member` holds this node's leases — ``node:<id>`` (it is alive),
``key:<session key>`` for each key it owns, ``leader:…`` for each singleton
it leads — and renews them all at every *tick* (a third of the lease time),
when it also stands for the singletons it does not lead and publishes its
record (:mod:`threads.cluster.nodes`). It *sweeps* as soon as another
node's lease can lapse: a lapsed ``node:`` lease is a dead node, whose inbox
it takes over (``XAUTOCLAIM``, then its unread entries); a lapsed ``key:``
lease is a key whose owner died, which it claims and continues (the
interrupted turn is recorded as canceled, accepted input runs once), letting
the lease go again when the key holds nothing to run. Meanwhile a reader
task takes entries from this node's inbox and hands them to the owner (the
thread manager, :mod:`threads.cluster.inbox`), one key's entries in order,
acknowledging each once it is durable.

The owner asks :meth:`Member.route` before it starts a key's thread: the key
is this node's (its lease taken, with the fence its writes carry), or it
names the node to forward the wake to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from threads.cluster.clock import LeaseClock, server_time
from threads.cluster.inbox import Inbox, Owner
from threads.cluster.leaders import Action, Leadership
from threads.cluster.leases import LeaseTable
from threads.cluster.nodes import KEY, LEADER, NODE, NodeBook, cluster_view, thread_rows
from threads.cluster.relay import Deliver, Relay
from threads.cluster.wakes import Forward, WakeStreams, wake_wire
from threads.node import NodeIdentity
from threads.store.base import Fence
from threads.wake import Wake

log = logging.getLogger(__name__)

READ_BLOCK_MS = 1000
LAPSE_MARGIN = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """Where a key's wakes run: here (``fence`` set, the lease is ours) or at ``node``."""

    node: str
    fence: Fence | None = None

    @property
    def here(self) -> bool:
        return self.fence is not None


class Member:
    """One node's part in the cluster; see the module docstring."""

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        identity: NodeIdentity,
        *,
        ttl: float,
        clock: LeaseClock = server_time,
        info: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        """A member under ``prefix``; ``info`` adds to the node's record (its HTTP address).

        On the server's clock the member ticks by itself, every third of the
        lease; a test that brings a lease clock of its own drives the ticks
        (:meth:`tick`) as it moves the clock. The inbox is read as entries come.
        """
        self.identity = identity
        self.node = identity.node_id
        self.ttl = ttl
        self.leases = LeaseTable(redis, prefix, node=self.node, ttl=ttl, clock=clock)
        self.streams = WakeStreams(redis, prefix, self.node)
        self.book = NodeBook(redis, prefix)
        self.relay = Relay(redis, prefix, self.node)
        self.owner: Owner | None = None
        self.inbox = Inbox(self.streams)
        self.draining = False
        self._auto_tick = clock is server_time
        self._info = info
        self._keys: dict[str, int] = {}
        self._node_fence = 0
        self._leaders: dict[str, Leadership] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._relayer: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._reader: asyncio.Task[None] | None = None
        self._started = time.time()
        self._stopped = False

    # -- lifetime

    async def start(self, owner: Owner, deliver: Deliver | None = None) -> None:
        """Join: take this node's lease, then read what its inbox kept from a previous life.

        ``deliver`` delivers what other nodes relay to this node's chats (see
        :mod:`threads.cluster.relay`); without it nothing is relayed here.
        """
        self.owner = owner
        self.inbox.owner = owner
        claim = await self.leases.claim(NODE + self.node)
        self._node_fence = claim.lease.fence
        await self.streams.join(self.node)
        await self.relay.start()
        await self.publish()
        await self.inbox.handle(await self.streams.pending())
        loop = asyncio.get_running_loop()
        if self._auto_tick:
            self._ticker = loop.create_task(self._ticking(), name="cluster lease tick")
            self._sweeper = loop.create_task(self._sweeping(), name="cluster takeover")
        self._reader = loop.create_task(self._reading(), name="cluster inbox")
        if deliver is not None:
            self._relayer = loop.create_task(self._relaying(deliver), name="cluster relay")

    async def stop_reading(self) -> None:
        """Take no more entries from this node's inbox (what is left waits for the next reader)."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None

    async def stop(self) -> None:
        """Stop ticking and reading; lead nothing; let the node lease go (keys are the owner's)."""
        if self._stopped:
            return
        self._stopped = True
        await self.stop_reading()
        for timer in self._timers:
            timer.cancel()
        for task in (self._relayer, self._sweeper, self._ticker):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for leadership in self._leaders.values():
            await self._resign(leadership, "this node is stopping")
        with contextlib.suppress(RedisError, OSError):
            if not await self.inbox.hand_over(self.pick_node):
                return  # kept for this node's next start: its lease lapses, its record stays
            # A node that stopped cleanly leaves no trace; a dead one shows as gone.
            await self.leases.release(NODE + self.node, self._node_fence)
            await self.book.forget(self.node)

    # -- keys

    async def route(self, key: str) -> Route:
        """Where ``key``'s wakes run: here when its lease is (or now becomes) this node's.

        A draining node takes no key it does not hold: a free key goes to
        another live node (here when there is none).
        """
        if key in self._keys and not self.draining:
            return Route(node=self.node, fence=self._fence(key))
        if self.draining and key not in self._keys:
            current = await self.leases.get(KEY + key)
            if current is None or current.lapsed(await self.leases.now_ms()):
                other = await self.pick_node()
                if other is not None:
                    return Route(node=other)
            elif current.node != self.node:
                return Route(node=current.node)
        claim = await self.leases.claim(KEY + key)
        if not claim.won:
            return Route(node=claim.lease.node)
        self._keys[key] = claim.lease.fence
        return Route(node=self.node, fence=self._fence(key))

    def holds(self, key: str) -> bool:
        return key in self._keys

    def fence(self, key: str) -> Fence | None:
        """The fence of a key this node holds (None when it holds none)."""
        return self._fence(key) if key in self._keys else None

    async def let_go(self, key: str) -> None:
        """Release the key's lease (its thread is closed); the next wake anywhere may take it."""
        fence = self._keys.pop(key, None)
        if fence is not None:
            try:
                await self.leases.release(KEY + key, fence)
            except (RedisError, OSError) as exc:
                log.warning("releasing the lease of %s failed (%s); it lapses by itself", key, exc)

    async def hand_over(self, key: str) -> None:
        """Release the key and ask another live node to continue it (its input waits)."""
        await self.let_go(key)
        other = await self.pick_node()
        if other is None:
            log.warning(
                "no other live node to hand %s over to; it continues at the next start", key
            )
            return
        await self.streams.send(other, Forward(kind="continue", key=key, origin=self.node))
        log.info("handed %s over to node %s", key, other)

    async def forward(self, node: str, key: str, wake: Wake, *, answer_here: bool = False) -> str:
        """Send ``wake`` to ``node``'s inbox; the entry id, once Redis holds it.

        ``answer_here``: the chat is tied to this process, so the wake's sink
        names this node and its answers come back here
        (:mod:`threads.cluster.relay`); otherwise the owner delivers them.
        """
        wire = wake_wire(wake)
        if answer_here:
            wire["sink"] = {**wire["sink"], "node": self.node}
        return await self.streams.send(
            node, Forward(kind="wake", key=key, origin=self.node, wake=wire)
        )

    async def call(self, node: str, key: str, op: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Ask ``node``, which owns ``key``, to run ``op`` on the key's thread; its answer.

        The op waits in the owner's inbox behind the key's earlier wakes.
        :class:`TimeoutError` when no answer comes within two leases (the
        owner died: its successor runs the key, ask again).
        """
        call_id = secrets.token_hex(8)
        answer = self.relay.call(call_id)
        try:
            await self.streams.send(
                node,
                Forward(
                    kind="op",
                    key=key,
                    origin=self.node,
                    op={"op": op, "args": dict(args), "call": call_id},
                ),
            )
            async with asyncio.timeout(self.ttl * 2):
                return await answer
        finally:
            answer.cancel()

    async def owner_of(self, key: str) -> str | None:
        """The other node whose lease on ``key`` is live, or None (free, lapsed or ours)."""
        lease = await self.leases.get(KEY + key)
        if lease is None or lease.node == self.node or lease.lapsed(await self.leases.now_ms()):
            return None
        return lease.node

    async def pick_node(self) -> str | None:
        """A live node other than this one that is not draining, at random; None when none is."""
        now = await self.leases.now_ms()
        alive = {
            lease.node
            for lease in await self.leases.all(NODE)
            if not lease.lapsed(now) and lease.node != self.node
        }
        records = await self.book.records()
        ready = sorted(n for n in alive if not records.get(n, {}).get("draining"))
        return random.choice(ready) if ready else None

    # -- singletons

    async def lead(self, name: str, start: Action, stop: Action) -> Leadership:
        """Register a singleton, run here while this node holds ``leader:<name>``; stand now."""
        leadership = Leadership(name=LEADER + name, start=start, stop=stop)
        self._leaders[leadership.name] = leadership
        if not self.draining:
            await self._stand(leadership)
        return leadership

    async def resign(self) -> None:
        """Stop leading every singleton and let their leases go (a drain)."""
        for leadership in self._leaders.values():
            await self._resign(leadership, "this node is draining")

    # -- the tick

    async def tick(self, *, sweep: bool = True) -> None:
        """Renew every lease, stand for the singletons, publish, and sweep up after the dead.

        The member's own ticks leave the sweep to a task of its own, so a slow
        takeover never delays a renewal.
        """
        held = {KEY + k: f for k, f in self._keys.items()}
        held[NODE + self.node] = self._node_fence
        for name, leadership in self._leaders.items():
            if leadership.fence is not None:
                held[name] = leadership.fence
        for name in await self.leases.renew(held):
            await self._lost(name)
        if not self.draining:
            for leadership in self._leaders.values():
                if not leadership.leading:
                    await self._stand(leadership)
        await self.publish()
        if sweep:
            await self.sweep()

    async def sweep(self) -> None:
        """Take over what lapsed: dead nodes' inboxes, then keys whose owner stopped renewing."""
        if self.draining:
            return
        for name in await self.leases.lapsed():
            if name.startswith(NODE) and name != NODE + self.node:
                await self._bury(name.removeprefix(NODE))
            elif name.startswith(KEY):
                await self._adopt(name.removeprefix(KEY))

    async def publish(self) -> None:
        rows = self.owner.thread_rows() if self.owner is not None else []
        record: dict[str, Any] = {
            "node": self.node,
            "boot": self.identity.boot,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": self._started,
            "draining": self.draining,
            "updated": time.time(),
            "thread_count": len(rows),
            "threads": thread_rows(rows),
        }
        if self._info is not None:
            record.update(self._info())
        await self.book.publish(self.node, record)

    # -- views

    async def view(self) -> dict[str, Any]:
        """Nodes, their leases and the keys each owns: for ``health``, ``nodes``, the dashboard."""
        return {
            "node": self.node,
            "boot": self.identity.boot,
            "lease_seconds": self.ttl,
            "draining": self.draining,
            **await cluster_view(self.leases, self.book),
        }

    def local_view(self) -> dict[str, Any]:
        """This node's own part, without asking Redis."""
        return {
            "node": self.node,
            "boot": self.identity.boot,
            "lease_seconds": self.ttl,
            "draining": self.draining,
            "keys_owned": len(self._keys),
            "leads": sorted(
                name.removeprefix(LEADER) for name, lead in self._leaders.items() if lead.leading
            ),
        }

    # -- internals

    def _fence(self, key: str) -> Fence:
        return Fence(
            lease=self.leases.key(KEY + key), token=self._keys[key], clock=self.leases.clock
        )

    async def _ticking(self) -> None:
        await self._every(partial(self.tick, sweep=False), "renewing this node's leases")

    async def _sweeping(self) -> None:
        """Sweep as soon as another node's lease may have lapsed, and every third of a lease."""
        while True:
            try:
                await asyncio.sleep(await self._until_next_lapse())
                await self.sweep()
            except (RedisError, OSError) as exc:
                log.warning("taking over from a lapsed node failed (%s); trying again", exc)
                await asyncio.sleep(self.ttl / 3)
            except Exception:
                log.exception("taking over from a lapsed node failed; trying again")
                await asyncio.sleep(self.ttl / 3)

    async def _until_next_lapse(self) -> float:
        """Seconds until the soonest lease still held lapses (a live node renews it first)."""
        now = await self.leases.now_ms()
        soonest = await self.leases.redis.zrangebyscore(
            self.leases.index, f"({now}", "+inf", start=0, num=1, withscores=True
        )
        period = self.ttl / 3
        if not soonest:
            return period
        until = (float(soonest[0][1]) - now) / 1000 + LAPSE_MARGIN
        return min(period, max(LAPSE_MARGIN, until))

    async def _every(self, step: Callable[[], Awaitable[None]], what: str) -> None:
        """Run ``step`` every third of the lease, for as long as the member lives."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await step()
            except (RedisError, OSError) as exc:
                log.warning("%s failed (%s); trying again shortly", what, exc)
            except Exception:
                log.exception("%s failed; trying again shortly", what)

    async def _reading(self) -> None:
        while True:
            try:
                await self.inbox.handle(await self.streams.read(block_ms=READ_BLOCK_MS))
            except (RedisError, OSError) as exc:
                log.warning("reading this node's inbox failed (%s); retrying", exc)
                await asyncio.sleep(self.ttl / 3)

    async def _relaying(self, deliver: Deliver) -> None:
        while True:
            try:
                await self.relay.read(deliver, block_ms=READ_BLOCK_MS)
            except (RedisError, OSError) as exc:
                log.warning("reading this node's relay stream failed (%s); retrying", exc)
                await asyncio.sleep(self.ttl / 3)

    async def _lost(self, name: str) -> None:
        if name.startswith(KEY):
            key = name.removeprefix(KEY)
            if self._keys.pop(key, None) is not None and self.owner is not None:
                log.warning("the lease of %s lapsed or was taken; its thread is dropped", key)
                await self.owner.lost(key)
        elif name.startswith(LEADER) and name in self._leaders:
            await self._leaders[name].lost("its lease lapsed or was taken")
        elif name == NODE + self.node:
            log.warning("this node's own lease lapsed (a stall or a partition); taking it again")
            claim = await self.leases.claim(name)
            self._node_fence = claim.lease.fence

    async def _stand(self, leadership: Leadership) -> None:
        claim = await self.leases.claim(leadership.name)
        if claim.won and not await leadership.won(claim.lease.fence):
            await self.leases.release(leadership.name, claim.lease.fence)

    async def _resign(self, leadership: Leadership, why: str) -> None:
        fence = leadership.fence
        await leadership.lost(why)
        if fence is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.leases.release(leadership.name, fence)

    async def _bury(self, dead: str) -> None:
        """Take over a dead node's inbox; forget the node once nothing of it is left."""
        stream = self.streams.stream(dead)
        if self.relay.waiting:
            inbox = {_text(eid) for eid, _ in await self.streams.redis.xrange(stream) or []}
            gone = self.relay.gone_from(stream, inbox)
            if gone:
                # Taken by the dead node, or by another survivor that answers soon: a lease
                # later, whatever is still waiting was the dead node's.
                timer = asyncio.get_running_loop().call_later(
                    self.ttl, self.relay.abandon, gone, dead
                )
                self._timers.add(timer)
        # A dead node's last reads have been idle at least two thirds of a lease by now.
        entries = await self.streams.take_over(dead, idle_ms=int(self.ttl * 500))
        if entries:
            log.warning(
                "node %s is gone: taking over %d wakes sent to it (%s)",
                dead,
                len(entries),
                ", ".join(f"{e.id}{' again' if e.forward.redelivered else ''}" for e in entries),
            )
            await self.inbox.handle(entries)
        if await self.streams.backlog(dead) == 0:
            lease = await self.leases.get(NODE + dead)
            if lease is not None:
                await self.leases.release(NODE + dead, lease.fence)
            await self.book.forget(dead)
            # What was relayed to its chats has no one to read it (a restart drops it too).
            await self.leases.redis.delete(self.relay.stream(dead))

    async def _adopt(self, key: str) -> None:
        """A key whose owner stopped renewing: claim it, continue it, let go when idle."""
        route = await self.route(key)
        if not route.here:
            return
        assert self.owner is not None
        try:
            kept = await self.owner.take_over(key)
        except Exception:
            log.exception("taking over %s failed; its lease lapses for another node to try", key)
            kept = False
        if not kept:
            await self.let_go(key)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

"""The gateway's part in scale-out: its node, and what it leads when it leads.

Every gateway has a node identity (:class:`threads.node.NodeIdentity`,
claimed at start-up, shown in ``health``). With sessions in Redis it is also a cluster member
(:class:`threads.cluster.member.Member`): its keys are leased and fenced,
wakes for keys other nodes own travel on their inboxes, and the singletons —
the cron scheduler, each Telegram bot's polling (or webhook registration),
each Discord bot's gateway connection — run on one node at a time, with the
others standing by to take over. Webhooks, the web chat, the API and the
admin pages are served by every node.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from channels.base import Channel, Standby
from config.models import GatewayConfig
from threads.cluster.clock import LeaseClock, server_time
from threads.node import NodeIdentity
from threads.store.base import SessionStore

if TYPE_CHECKING:
    from threads.cluster.member import Member
    from threads.store.redis import RedisStore

log = logging.getLogger(__name__)

CRON = "cron"
HEARTBEATS = "heartbeats"


def member_for(
    store: SessionStore,
    config: GatewayConfig,
    identity: NodeIdentity,
    *,
    clock: LeaseClock = server_time,
    info: Callable[[], Mapping[str, Any]] | None = None,
) -> Member | None:
    """A cluster member when sessions live in Redis (leases and inboxes beside them); else None."""
    sessions = redis_store(store)
    if sessions is None:
        return None
    from threads.cluster.member import Member  # with Redis only: the client is loaded by now

    return Member(
        sessions.client,
        f"{sessions.prefix}cluster:",
        identity,
        ttl=config.cluster.lease_seconds,
        clock=clock,
        info=info,
    )


def redis_store(store: SessionStore) -> RedisStore | None:
    """``store`` when it is a :class:`~threads.store.redis.RedisStore`, else None.

    Asked without importing the Redis client (some 8 MB a gateway on files
    never uses): when :mod:`threads.store.redis` was never imported, no store
    of this process can be one.
    """
    module = sys.modules.get("threads.store.redis")
    if module is None:
        return None
    redis_class: type[RedisStore] = module.RedisStore
    return store if isinstance(store, redis_class) else None


def stand_by(channels: Mapping[str, Channel]) -> list[Standby]:
    """Put the bot channels in standby (before they start): they receive once they lead."""
    out: list[Standby] = []
    for channel in channels.values():
        if isinstance(channel, Standby):
            channel.standby = True
            out.append(channel)
    return out


async def lead_bots(member: Member, bots: list[Standby]) -> None:
    """One leader per bot: each bot's updates are taken by the node that holds its lease."""
    seen: set[str] = set()
    for bot in bots:
        if bot.leader in seen:
            continue
        seen.add(bot.leader)
        await member.lead(bot.leader, bot.start_receiving, bot.stop_receiving)


def node_health(identity: NodeIdentity | None, member: Member | None) -> dict[str, Any]:
    """The ``node`` part of ``health``: who this process is among the gateways."""
    out: dict[str, Any] = {}
    if identity is not None:
        out.update(id=identity.node_id, boot=identity.boot)
    if member is not None:
        out.update(member.local_view())
        out.pop("node", None)
    return out

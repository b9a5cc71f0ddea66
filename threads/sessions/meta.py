"""The session metadata the session tools write, and what it says about a session.

Header meta is set once, when a sub-agent session is created; the rest are
info entries (``Session.set_info``) layered over it, so the latest value of a
key wins (``Session.meta()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from config.models import GatewayConfig

# Header meta of a sessions_spawn child.
SPAWNED_BY = "spawned_by"  # the requester's session key
SPAWN_RECEIPT = "spawn_receipt"  # the id of the requester's accepted pool receipt
LABEL = "label"
MODEL = "model"  # read by the agent loop: the child's own model
CLEANUP = "cleanup"  # keep | delete
SPAWN_CHAIN = "spawn_chain"  # the exchange chain of the spawning turn
SPAWN_DEPTH = "spawn_depth"  # the child's depth in it
# Info meta of a child once its delegation settled.
DELEGATION = "delegation"  # the settled pool status: done | failed | canceled | capped
SETTLED_AT = "settled_at"  # ISO 8601, UTC
# Info meta of any session: the per-session send policy override.
SEND_POLICY = "send_policy"  # allow | deny | inherit


def settled_at(meta: Mapping[str, str]) -> datetime | None:
    value = meta.get(SETTLED_AT)
    return datetime.fromisoformat(value) if value else None


def is_archived(meta: Mapping[str, str], config: GatewayConfig, now: datetime) -> bool:
    """A kept sub-agent session is archived ``archive_after_minutes`` after it settled.

    Archival is derived from the settlement time rather than performed by a
    timer, so no restart can miss it (docs/decisions/sessions-04-archival-is-derived.md).
    """
    when = settled_at(meta)
    if when is None or meta.get(CLEANUP, "keep") != "keep":
        return False
    after = timedelta(minutes=config.agent_defaults.subagents.archive_after_minutes)
    return now >= when + after


def send_override(meta: Mapping[str, str]) -> str | None:
    """The session's own send policy (allow or deny), or None when it inherits."""
    value = meta.get(SEND_POLICY)
    return value if value in ("allow", "deny") else None

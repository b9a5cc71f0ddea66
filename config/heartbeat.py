"""The heartbeat section: the periodic check-in wakes, as a whole.

Which sessions get a heartbeat, how often and when, is set per session with
``gateway heartbeat set`` and kept in the state store; this section says
whether heartbeats run at all, how often the gateway looks for due ones, and
the backoff a session gets when its user has gone quiet.
"""

from __future__ import annotations

from pydantic import Field

from config.section import Section


class HeartbeatConfig(Section):
    """Heartbeats for the whole gateway."""

    enabled: bool = True
    # How often the gateway looks for due heartbeats: a beat is at most this late.
    tick_seconds: float = Field(default=30.0, ge=1, le=3600)
    # After the user has been quiet this long, a session's interval doubles, and
    # doubles again each time as long again passes, up to max_every_seconds.
    quiet_after_seconds: float = Field(default=6 * 3600, ge=60, le=30 * 86_400)
    max_every_seconds: float = Field(default=86_400, ge=60, le=30 * 86_400)

"""The approval gate: every call passes the rules, then the grants, and may park.

:class:`DurableApprovals` is the registry's :class:`~threads.agent.tools.ApprovalGate`.
For one call it asks the rules (:mod:`threads.approvals.rules`): ``allow``
lets it run; ``deny`` refuses it at once (the model reads ``DENIED:`` and
the reason); ``ask`` looks for a grant of the conversation that allows the
very call (it runs, and the session's trail says which grant decided), and
otherwise parks it: the call waits for a person, the turn ends pending, and
the request lapses ``[approvals] expiry_seconds`` later on the gate's clock.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from config.models import GatewayConfig
from threads.agent.tools import Tool, ToolContext, ToolOutput
from threads.approvals.boundary import STEP_GRANT, STEP_RULE
from threads.approvals.grants import Grant, GrantBook
from threads.approvals.rules import ApprovalRules
from threads.clock import WallClock
from threads.ids import new_entry_id
from threads.messages import ToolCallPart
from threads.state.errors import StateStoreError
from threads.store.entries import ApprovalAuditEntry
from threads.turns import Parked

log = logging.getLogger(__name__)


class DurableApprovals:
    """Rules, then grants, then a durable park; see the module docstring."""

    def __init__(
        self, config: GatewayConfig, *, clock: WallClock, grants: GrantBook | None = None
    ) -> None:
        self.rules = ApprovalRules(config)
        self.clock = clock
        self.grants = grants
        self.expiry = config.approvals.expiry_seconds

    async def review(
        self, tool: Tool[Any], call: ToolCallPart, ctx: ToolContext
    ) -> ToolOutput | None:
        verdict = self.rules.verdict(tool, ctx.agent, call.args)
        if verdict.action == "allow":
            return None
        if verdict.action == "deny":
            await _note(ctx, call, STEP_RULE, "denied", verdict.reason)
            return ToolOutput(content=f"DENIED: {verdict.reason}", is_error=True)
        grant = await self._grant(ctx.key, call)
        if grant is not None:
            await _note(ctx, call, STEP_GRANT, "approved", grant.describe(), grant_id=grant.id)
            return None
        expiry = self.clock.now() + timedelta(seconds=self.expiry) if self.expiry else None
        return ToolOutput(
            content=f"{tool.shown} waits for a person's approval",
            parked=Parked(call=call, tool=tool.shown, reason=verdict.reason, expiry=expiry),
        )

    async def _grant(self, key: str, call: ToolCallPart) -> Grant | None:
        if self.grants is None:
            return None
        try:
            return await self.grants.match(key, call.name, call.args)
        except StateStoreError as exc:
            # No grant is read as no match: the call asks a person rather than run unasked.
            log.warning("grants of %s could not be read (%s); asking instead", key, exc)
            return None


async def _note(
    ctx: ToolContext, call: ToolCallPart, step: str, outcome: str, detail: str, grant_id: str = ""
) -> None:
    """One chain step in the session's trail."""
    await ctx.run.session.approvals.note(
        ApprovalAuditEntry(
            id=new_entry_id(),
            step=step,
            call_id=call.id,
            outcome=outcome,
            detail=detail,
            run_id=ctx.run.run_id,
            grant_id=grant_id,
            grant_shared=bool(grant_id),
        )
    )

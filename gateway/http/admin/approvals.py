"""Admin endpoints over approvals: the tool calls that wait for a person; grants.

The same :class:`~threads.approvals.service.ApprovalService` as the chat
buttons and ``gateway approvals``: the dashboard is an operator's door (it
may decide any request), recorded in the session's trail as ``dashboard``.
"""

from __future__ import annotations

from aiohttp import web

from gateway.http.admin.errors import ApiError
from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.schemas import (
    ApprovalRequestOut,
    ApprovalsOut,
    ApproveRequest,
    DecisionOut,
    DenyRequest,
    GrantOut,
    GrantsOut,
)
from threads.approvals.service import ApprovalService, Decider

TAG = "approvals"
DASHBOARD = Decider(channel="dashboard", name="admin")


class ApprovalsApi:
    """Handlers for the approval routes."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def routes(self) -> list[Route]:
        return [
            Route(method="GET", path="/approvals", name="approvals", tag=TAG,
                  summary="The tool calls waiting for a decision, oldest first",
                  handler=self.listing, response=ApprovalsOut),
            Route(method="POST", path="/approvals/{id}/approve", name="approve_call", tag=TAG,
                  summary="Let a waiting call run (always: and the same call from now on)",
                  handler=self.approve, body=ApproveRequest, response=DecisionOut,
                  errors=(409,)),
            Route(method="POST", path="/approvals/{id}/deny", name="deny_call", tag=TAG,
                  summary="Refuse a waiting call; the agent reads DENIED: <reason>",
                  handler=self.deny, body=DenyRequest, response=DecisionOut, errors=(409,)),
            Route(method="GET", path="/grants", name="grants", tag=TAG,
                  summary="The standing approvals Always made, per conversation",
                  handler=self.grants, response=GrantsOut),
            Route(method="POST", path="/grants/{id}/revoke", name="revoke_grant", tag=TAG,
                  summary="End a grant: the next such call asks again",
                  handler=self.revoke, response=GrantOut, errors=(404,)),
        ]  # fmt: skip

    def _service(self) -> ApprovalService:
        service = self.parts.approvals
        if service is None:
            raise ApiError(409, "the gateway has not started its approvals")
        return service

    async def listing(self, request: web.Request, inputs: Inputs) -> ApprovalsOut:
        waiting = await self._service().waiting()
        return ApprovalsOut(requests=[ApprovalRequestOut(**w.wire()) for w in waiting])

    async def approve(self, request: web.Request, inputs: Inputs) -> DecisionOut:
        always = inputs.body_as(ApproveRequest).always
        settled = await self._service().decide(
            inputs.path["id"], approve=True, always=always, decider=DASHBOARD
        )
        return DecisionOut(**settled.wire())

    async def deny(self, request: web.Request, inputs: Inputs) -> DecisionOut:
        reason = inputs.body_as(DenyRequest).reason
        settled = await self._service().decide(
            inputs.path["id"], approve=False, reason=reason, decider=DASHBOARD
        )
        return DecisionOut(**settled.wire())

    async def grants(self, request: web.Request, inputs: Inputs) -> GrantsOut:
        found = await self._service().grants_of()
        return GrantsOut(grants=[GrantOut(**g.wire()) for g in found])

    async def revoke(self, request: web.Request, inputs: Inputs) -> GrantOut:
        return GrantOut(**(await self._service().revoke(inputs.path["id"])).wire())

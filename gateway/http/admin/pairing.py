"""Admin endpoints over pairing: pending requests and paired users; approve, deny, revoke.

The same :class:`~channels.pairing.PairingService` as ``gateway pairing``: an
approval is stored, then its user is told through the channel (or at the
next start when the channel cannot tell them now).
"""

from __future__ import annotations

from aiohttp import web

from channels.pairing import PairingService
from gateway.http.admin.errors import ApiError
from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.schemas import (
    PairingChannelOut,
    PairingCodeRequest,
    PairingOut,
    PairingOutcomeOut,
    RevokeOut,
    RevokeRequest,
)

TAG = "pairing"


class PairingApi:
    """Handlers for the pairing routes."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def routes(self) -> list[Route]:
        return [
            Route(method="GET", path="/pairing", name="pairing", tag=TAG,
                  summary="Every access-controlled channel's pending requests and paired users",
                  handler=self.listing, response=PairingOut),
            Route(method="POST", path="/pairing/{channel}/approve", name="approve_pairing",
                  tag=TAG, summary="Pair the user holding a code, and tell them",
                  handler=self.approve, body=PairingCodeRequest, response=PairingOutcomeOut,
                  errors=(404, 410)),
            Route(method="POST", path="/pairing/{channel}/deny", name="deny_pairing", tag=TAG,
                  summary="Drop the request holding a code, and tell its user once",
                  handler=self.deny, body=PairingCodeRequest, response=PairingOutcomeOut,
                  errors=(404, 410)),
            Route(method="POST", path="/pairing/{channel}/revoke", name="revoke_pairing",
                  tag=TAG, summary="Unpair a user (silently)",
                  handler=self.revoke, body=RevokeRequest, response=RevokeOut, errors=(404,)),
        ]  # fmt: skip

    def _pairing(self) -> PairingService:
        pairing = self.parts.pairing
        if pairing is None:
            raise ApiError(404, "this gateway has no channel with access control to pair on")
        return pairing

    async def listing(self, request: web.Request, inputs: Inputs) -> PairingOut:
        pairing = self.parts.pairing
        if pairing is None:
            return PairingOut(channels={})
        found = await pairing.listing()
        return PairingOut(
            channels={
                name: PairingChannelOut(pending=list(c.pending), paired=list(c.paired))
                for name, c in found.items()
            }
        )

    async def approve(self, request: web.Request, inputs: Inputs) -> PairingOutcomeOut:
        code = inputs.body_as(PairingCodeRequest).code
        outcome = await self._pairing().approve(inputs.path["channel"], code)
        return PairingOutcomeOut(request=outcome.request, told=outcome.told)

    async def deny(self, request: web.Request, inputs: Inputs) -> PairingOutcomeOut:
        code = inputs.body_as(PairingCodeRequest).code
        outcome = await self._pairing().deny(inputs.path["channel"], code)
        return PairingOutcomeOut(request=outcome.request, told=outcome.told)

    async def revoke(self, request: web.Request, inputs: Inputs) -> RevokeOut:
        user = inputs.body_as(RevokeRequest).user
        return RevokeOut(user=await self._pairing().revoke(inputs.path["channel"], user))

"""The nodes route: the gateways sharing one Redis, as ``gateway nodes`` shows them.

Every node answers it alike, from Redis: each node's record (its threads, as
it last published them), its lease, the keys it owns and what it leads.
"""

from __future__ import annotations

from aiohttp import web

from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.schemas import NodesOut
from gateway.scaleout import node_health

TAG = "threads"


class NodesApi:
    """Handler of ``GET /nodes``."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def routes(self) -> list[Route]:
        return [
            Route(method="GET", path="/nodes", name="nodes", tag=TAG,
                  summary="Every gateway node on this Redis: alive or gone, its leases, the "
                  "keys it owns and its threads",
                  handler=self.nodes, response=NodesOut),
        ]  # fmt: skip

    async def nodes(self, request: web.Request, inputs: Inputs) -> NodesOut:
        member = self.parts.member
        return NodesOut(
            node=node_health(self.parts.node, member),
            cluster=await member.view() if member is not None else None,
        )

"""The route table: one :class:`Route` per endpoint, read by the application and the OpenAPI document.

A route names its method and path (under ``/api``), the models of its query
string, body and answer, the error statuses it can answer besides the ones
every route has, and its handler. The handler gets the request and the
validated :class:`Inputs`, and returns the answer model (or, for an event
stream, the response it wrote). Because the aiohttp routes and the OpenAPI
paths are both made from this table, neither can list a route the other lacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from aiohttp import web
from pydantic import BaseModel

from gateway.http.admin.schemas import Body, Query

if TYPE_CHECKING:
    from channels.pairing import PairingService
    from cron.service import CronService
    from threads.approvals.service import ApprovalService
    from threads.cluster.member import Member
    from threads.manager import ThreadManager
    from threads.node import NodeIdentity
    from threads.sessions.policy import SendPolicy

Q = TypeVar("Q", bound=Query)
B = TypeVar("B", bound=Body)


class Parts(Protocol):
    """What the admin API reads and steers: the gateway's parts (some may be off or not yet up)."""

    @property
    def manager(self) -> ThreadManager: ...

    @property
    def send_policy(self) -> SendPolicy | None: ...

    @property
    def cron(self) -> CronService | None: ...

    @property
    def pairing(self) -> PairingService | None: ...

    @property
    def approvals(self) -> ApprovalService | None: ...

    @property
    def node(self) -> NodeIdentity | None: ...

    @property
    def member(self) -> Member | None: ...


@dataclass(frozen=True, slots=True)
class Inputs:
    """A request's validated inputs: path parameters, query model and body model."""

    path: Mapping[str, str]
    query: Query | None = None
    body: Body | None = None

    def query_as(self, model: type[Q]) -> Q:
        assert isinstance(self.query, model), f"the route declares {model.__name__}"
        return self.query

    def body_as(self, model: type[B]) -> B:
        assert isinstance(self.body, model), f"the route declares {model.__name__}"
        return self.body


Handler = Callable[[web.Request, Inputs], Awaitable[BaseModel | web.StreamResponse]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One endpoint of the admin API.

    ``response`` is the answer's model (None: free-form JSON, or an event
    stream when ``events`` is given: event name → the model of its data).
    ``errors`` are the statuses it may answer besides 401, 403 (every route),
    400 (a route with a query, a body or a path parameter) and 413 (a route with a body).
    """

    method: str
    path: str
    name: str
    summary: str
    tag: str
    handler: Handler
    query: type[Query] | None = None
    body: type[Body] | None = None
    response: type[BaseModel] | None = None
    events: Mapping[str, type[BaseModel]] | None = None
    status: int = 200
    errors: tuple[int, ...] = ()

    @property
    def statuses(self) -> tuple[int, ...]:
        """Every error status this route may answer, in order."""
        found = {401, 403, *self.errors}
        if self.query is not None or self.body is not None or "{" in self.path:
            found.add(400)
        if self.body is not None:
            found.add(413)
        return tuple(sorted(found))

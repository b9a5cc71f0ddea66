"""Admin endpoints over threads and sessions: health, live threads, sessions, tails, stops, policy.

Sessions are read through :class:`~threads.sessions.catalog.Catalog` (live
threads' sessions are never behind the store), the same reader the session
tools and ``gateway sessions`` use, so every view agrees on what a session is.
"""

from __future__ import annotations

from datetime import timedelta

from aiohttp import web

from gateway.http.admin.errors import ApiError
from gateway.http.admin.live import EventStreams, LiveThreads, tail_session
from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.schemas import (
    CheckSessionOut,
    HealthOut,
    HistoryOut,
    HistoryQuery,
    MetricsOut,
    MetricsQuery,
    SendPolicyOut,
    SendPolicyRequest,
    SessionPage,
    SessionRow,
    SessionsQuery,
    StopOut,
    StopRequest,
    TailEntry,
    TailQuery,
    ThreadsOut,
)
from gateway.metrics import Metrics
from threads.keys import SessionKey
from threads.sessions.catalog import Catalog
from threads.sessions.policy import SendPolicy
from threads.store.base import Watcher

TAG_THREADS = "threads"
TAG_SESSIONS = "sessions"


class SessionsApi:
    """Handlers for the threads and sessions routes."""

    def __init__(
        self, parts: Parts, live: LiveThreads, streams: EventStreams, metrics: Metrics
    ) -> None:
        self.parts = parts
        self.live = live
        self.streams = streams
        self.metrics = metrics

    def routes(self) -> list[Route]:
        return [
            Route(method="GET", path="/health", name="health", tag=TAG_THREADS,
                  summary="Seed 000's health: threads, provider, store, process, channels, cron",
                  handler=self.health, response=HealthOut),
            Route(method="GET", path="/threads", name="threads", tag=TAG_THREADS,
                  summary="Every live thread: state, current tool, time into its turn, queue",
                  handler=self.threads, response=ThreadsOut),
            Route(method="GET", path="/live", name="live", tag=TAG_THREADS,
                  summary="The threads view and the metrics, pushed as they change",
                  handler=self.live_stream, events={"threads": ThreadsOut, "metrics": MetricsOut},
                  errors=(503,)),
            Route(method="GET", path="/metrics", name="metrics", tag=TAG_THREADS,
                  summary="Turns and model calls per minute, model latency, tokens per session",
                  handler=self.metrics_series, query=MetricsQuery, response=MetricsOut),
            Route(method="POST", path="/stop", name="stop", tag=TAG_THREADS,
                  summary="Stop a session's turn (key) or every running turn (all); drain drops "
                  "queued user messages too",
                  handler=self.stop, body=StopRequest, response=StopOut, errors=(409,)),
            Route(method="GET", path="/sessions", name="list_sessions", tag=TAG_SESSIONS,
                  summary="Sessions, newest first, by kind and activity, a page at a time",
                  handler=self.list_sessions, query=SessionsQuery, response=SessionPage),
            Route(method="GET", path="/sessions/{key}", name="check_session", tag=TAG_SESSIONS,
                  summary="Seed 000's check_session: stored or not, and its live thread",
                  handler=self.check_session, response=CheckSessionOut),
            Route(method="GET", path="/sessions/{key}/history", name="session_history",
                  tag=TAG_SESSIONS, summary="A session's transcript (key or session id)",
                  handler=self.history, query=HistoryQuery, response=HistoryOut, errors=(404,)),
            Route(method="GET", path="/sessions/{key}/tail", name="session_tail",
                  tag=TAG_SESSIONS, summary="A session's new entries, pushed as they are written",
                  handler=self.tail, query=TailQuery, events={"entry": TailEntry},
                  errors=(404, 501, 503)),
            Route(method="GET", path="/sessions/{key}/send-policy", name="get_send_policy",
                  tag=TAG_SESSIONS, summary="The send policy in force for a session, and why",
                  handler=self.get_policy, response=SendPolicyOut),
            Route(method="PUT", path="/sessions/{key}/send-policy", name="set_send_policy",
                  tag=TAG_SESSIONS, summary="Set a session's own send policy (inherit clears it)",
                  handler=self.set_policy, body=SendPolicyRequest, response=SendPolicyOut,
                  errors=(404,)),
        ]  # fmt: skip

    # -- threads

    async def health(self, request: web.Request, inputs: Inputs) -> HealthOut:
        return HealthOut.model_validate(await self.parts.manager.health())

    async def threads(self, request: web.Request, inputs: Inputs) -> ThreadsOut:
        return ThreadsOut.model_validate(self.live.threads_view())

    async def live_stream(self, request: web.Request, inputs: Inputs) -> web.StreamResponse:
        return await self.streams.serve(request, self.live.stream)

    async def metrics_series(self, request: web.Request, inputs: Inputs) -> MetricsOut:
        query = inputs.query_as(MetricsQuery)
        return MetricsOut.model_validate(self.metrics.series(query.minutes))

    async def stop(self, request: web.Request, inputs: Inputs) -> StopOut:
        body = inputs.body_as(StopRequest)
        manager = self.parts.manager
        if body.all:
            report = await manager.stop_all(drain=body.drain)
        else:
            assert body.key is not None
            report = await manager.stop(str(SessionKey(body.key)), drain=body.drain)
        return StopOut(**report.to_json(), text=report.describe())

    # -- sessions

    def _catalog(self) -> Catalog:
        return Catalog.of(self.parts.manager)

    async def list_sessions(self, request: web.Request, inputs: Inputs) -> SessionPage:
        query = inputs.query_as(SessionsQuery)
        catalog = self._catalog()
        kinds = query.kinds
        since = (
            catalog.now() - timedelta(minutes=query.active_minutes)
            if query.active_minutes
            else None
        )
        matched = []
        for view in await catalog.views():
            if since is not None and view.updated < since:
                break  # newest first: every later one is older
            if kinds is not None and catalog.kind(view) not in kinds:
                continue
            if not query.include_archived and catalog.archived(view):
                continue
            matched.append(view)
        page = matched[query.offset : query.offset + query.limit]
        end = query.offset + len(page)
        return SessionPage(
            sessions=[SessionRow.model_validate(catalog.row(view)) for view in page],
            total=len(matched),
            offset=query.offset,
            limit=query.limit,
            next_offset=end if end < len(matched) else None,
        )

    async def check_session(self, request: web.Request, inputs: Inputs) -> CheckSessionOut:
        key = SessionKey(inputs.path["key"])
        return CheckSessionOut.model_validate(await self.parts.manager.check_session(key))

    async def history(self, request: web.Request, inputs: Inputs) -> HistoryOut:
        query = inputs.query_as(HistoryQuery)
        catalog = self._catalog()
        found = await catalog.history(
            inputs.path["key"], limit=query.limit, include_tools=query.include_tools
        )
        view = await catalog.view(found["sessionKey"], found["sessionId"])
        return HistoryOut.model_validate(
            {**found, "last_entry": view.entries[-1].id if view.entries else None}
        )

    async def tail(self, request: web.Request, inputs: Inputs) -> web.StreamResponse:
        after = inputs.query_as(TailQuery).after
        store = self.parts.manager.store
        if not isinstance(store, Watcher):
            raise ApiError(501, f"the session store ({type(store).__name__}) cannot be watched")
        catalog = self._catalog()
        resolved = await catalog.resolve(inputs.path["key"])
        view = await catalog.view(resolved.key, resolved.session_id)
        if after and all(entry.id != after for entry in view.entries):
            raise ApiError(404, f"session {resolved.session_id} holds no entry {after!r}")
        start = after or (view.entries[-1].id if view.entries else "")
        return await self.streams.serve(request, tail_session(store, view.id, start))

    # -- send policy

    def _policy(self) -> SendPolicy:
        policy = self.parts.send_policy
        if policy is None:
            raise ApiError(503, "the gateway has not started its send policy")
        return policy

    async def get_policy(self, request: web.Request, inputs: Inputs) -> SendPolicyOut:
        key = SessionKey(inputs.path["key"])
        policy = self._policy()
        decision = await policy.check(key)
        return SendPolicyOut(
            key=key,
            policy="allow" if decision.allowed else "deny",
            source=decision.source,
            reason=decision.reason,
            override=await policy.override(key),
        )

    async def set_policy(self, request: web.Request, inputs: Inputs) -> SendPolicyOut:
        key = SessionKey(inputs.path["key"])
        policy = self._policy()
        decision = await policy.set(key, inputs.body_as(SendPolicyRequest).setting)
        return SendPolicyOut(
            key=key,
            policy="allow" if decision.allowed else "deny",
            source=decision.source,
            reason=decision.reason,
            override=await policy.override(key),
        )

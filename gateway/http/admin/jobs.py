"""Admin endpoints over cron jobs: list, create, edit, pause, resume, remove, run now, runs, explain.

Every edit goes through the running :class:`~cron.service.CronService` (the
editing API the CLI uses), so it is validated the same way — a refused job
is a 400 naming each field — and applied to the scheduler at once. A job
definition is stated whole (decision cron-07): PUT replaces it, pause and
resume flip ``enabled`` alone.
"""

from __future__ import annotations

from aiohttp import web

from cron.models import MIN_INTERVAL, Job, JobView
from cron.service import CronService
from gateway.http.admin.errors import ApiError
from gateway.http.admin.routes import Inputs, Parts, Route
from gateway.http.admin.schemas import (
    ExplainOut,
    ExplainQuery,
    JobDetail,
    JobRequest,
    JobsOut,
    RemovedOut,
    RunNowOut,
    RunsOut,
    RunsQuery,
)

TAG = "cron"
NEXT_FIRES = 5


class JobsApi:
    """Handlers for the cron routes."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def routes(self) -> list[Route]:
        job = "/cron/jobs/{id}"
        return [
            Route(method="GET", path="/cron/jobs", name="list_jobs", tag=TAG,
                  summary="Every cron job with its next fire and last status",
                  handler=self.list_jobs, response=JobsOut, errors=(404,)),
            Route(method="POST", path="/cron/jobs", name="create_job", tag=TAG,
                  summary="Create a job (kind cron, at or every); 409 if the id is taken",
                  handler=self.create, body=JobRequest, response=JobDetail, status=201,
                  errors=(404, 409)),
            Route(method="GET", path=job, name="get_job", tag=TAG,
                  summary="One job and its next fire times",
                  handler=self.get, response=JobDetail, errors=(404,)),
            Route(method="PUT", path=job, name="replace_job", tag=TAG,
                  summary="Replace a job's definition (every field stated)",
                  handler=self.replace, body=JobRequest, response=JobDetail, errors=(404,)),
            Route(method="DELETE", path=job, name="remove_job", tag=TAG,
                  summary="Remove a job (its run ledger is kept)",
                  handler=self.remove, response=RemovedOut, errors=(404,)),
            Route(method="POST", path=f"{job}/pause", name="pause_job", tag=TAG,
                  summary="Keep the job but fire nothing (its fires are recorded skipped)",
                  handler=self.pause, response=JobDetail, errors=(404,)),
            Route(method="POST", path=f"{job}/resume", name="resume_job", tag=TAG,
                  summary="Fire a paused job again from its next due time",
                  handler=self.resume, response=JobDetail, errors=(404, 409)),
            Route(method="POST", path=f"{job}/run", name="run_job", tag=TAG,
                  summary="Fire the job now, paused or not; answers its run record",
                  handler=self.run_now, response=RunNowOut, errors=(404,)),
            Route(method="GET", path=f"{job}/runs", name="job_runs", tag=TAG,
                  summary="The job's newest run records, oldest first",
                  handler=self.runs, query=RunsQuery, response=RunsOut, errors=(404,)),
            Route(method="GET", path="/cron/explain", name="explain", tag=TAG,
                  summary="The next fire times of a cron expression in a time zone",
                  handler=self.explain, query=ExplainQuery, response=ExplainOut, errors=(404,)),
        ]  # fmt: skip

    def _cron(self) -> CronService:
        cron = self.parts.cron
        if cron is None:
            raise ApiError(404, "cron is off in this gateway ([cron] enabled = false)")
        return cron

    async def _detail(self, cron: CronService, view: JobView) -> JobDetail:
        fires = await cron.next_fires(view.job.id, NEXT_FIRES)
        return JobDetail(**dict(view), next_fires=fires)

    async def list_jobs(self, request: web.Request, inputs: Inputs) -> JobsOut:
        views = await self._cron().list_jobs()
        return JobsOut(jobs=sorted(views, key=lambda v: v.job.id))

    async def create(self, request: web.Request, inputs: Inputs) -> JobDetail:
        body = inputs.body_as(JobRequest)
        if not body.id:
            raise ApiError.bad_field("id", "required: letters, digits, '_' or '-'")
        cron = self._cron()
        if await cron.store.get(body.id) is not None:
            raise ApiError(
                409, f"cron job {body.id!r} exists already: PUT /api/cron/jobs/{body.id} edits it"
            )
        return await self._detail(cron, await self._upsert(cron, body, body.id))

    async def replace(self, request: web.Request, inputs: Inputs) -> JobDetail:
        body = inputs.body_as(JobRequest)
        job_id = inputs.path["id"]
        if body.id is not None and body.id != job_id:
            raise ApiError.bad_field("id", f"{body.id!r} is not the job in the path ({job_id!r})")
        cron = self._cron()
        await cron.get(job_id)  # 404 when there is no such job to replace
        return await self._detail(cron, await self._upsert(cron, body, job_id))

    async def _upsert(self, cron: CronService, body: JobRequest, job_id: str) -> JobView:
        """Store the job; an interval under the CLI's floor needs ``force``, as there."""
        floor = None if body.force else MIN_INTERVAL
        return await cron.upsert(
            self._draft(cron, body, job_id), min_interval=floor, force='"force": true'
        )

    def _draft(self, cron: CronService, body: JobRequest, job_id: str) -> Job:
        return cron.draft(
            id=job_id,
            kind=body.kind,
            expr=body.expr or None,
            at=body.at or None,
            every=body.every or None,
            timezone=body.timezone or cron.timezone,
            task=body.task,
            wake_session=body.wake_session or None,
            direct_wake=body.direct_wake,
            agent=body.agent or None,
            enabled=body.enabled,
        )

    async def get(self, request: web.Request, inputs: Inputs) -> JobDetail:
        cron = self._cron()
        return await self._detail(cron, await cron.get(inputs.path["id"]))

    async def remove(self, request: web.Request, inputs: Inputs) -> RemovedOut:
        await self._cron().remove(inputs.path["id"])
        return RemovedOut(id=inputs.path["id"], removed=True)

    async def pause(self, request: web.Request, inputs: Inputs) -> JobDetail:
        cron = self._cron()
        return await self._detail(cron, await cron.pause(inputs.path["id"]))

    async def resume(self, request: web.Request, inputs: Inputs) -> JobDetail:
        cron = self._cron()
        return await self._detail(cron, await cron.resume(inputs.path["id"]))

    async def run_now(self, request: web.Request, inputs: Inputs) -> RunNowOut:
        return RunNowOut(run=await self._cron().run_now(inputs.path["id"]))

    async def runs(self, request: web.Request, inputs: Inputs) -> RunsOut:
        cron = self._cron()
        job_id = inputs.path["id"]
        records = await cron.runs(job_id, inputs.query_as(RunsQuery).limit)
        if not records:
            await cron.get(job_id)  # a removed job keeps its ledger; an unknown id is 404
        return RunsOut(runs=records)

    async def explain(self, request: web.Request, inputs: Inputs) -> ExplainOut:
        query = inputs.query_as(ExplainQuery)
        cron = self._cron()
        zone = query.timezone or cron.timezone
        times = cron.explain(query.expr, zone, query.count)
        return ExplainOut(expr=query.expr, timezone=zone, times=times)

"""``/admin``: the dead-letter queue — list, retry one, retry all by filter, purge —, the delete
of a job that has not started, and the cancel of every job matching a filter. Admin keys only.

Bulk retry, purge and cancel work in batches (one short transaction each), so a large queue never
holds locks for long; they return how many jobs they changed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Response

from jobqueue.api.auth import AnyRequest, admin_only
from jobqueue.api.controllers.jobs import list_page
from jobqueue.api.errors import error_response, error_responses
from jobqueue.api.schemas import BulkCancelResult, Count, JobList, RetryResult
from jobqueue.api.services import ServicesDep
from jobqueue.model.errors import JobNotFound
from jobqueue.model.jobs import DeleteOutcome, RetryOutcome


class AdminController(Controller):
    path = "/admin"
    tags = ["admin"]
    guards = [admin_only]

    @get(
        "/dlq",
        summary="Dead-lettered jobs, newest first, with their last error",
        responses=error_responses(403, 422, 503),
    )
    async def dead_letters(
        self,
        request: AnyRequest,
        services: ServicesDep,
        queue: FromQuery[str | None] = None,
        job_type: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, QueryParameter(description="next_cursor of the previous page")] = None,
    ) -> JobList:
        return await list_page(
            services, request.user, limit=limit, cursor=cursor, state="dead_letter", queue=queue, job_type=job_type
        )

    @post(
        "/jobs/{job_id:uuid}/retry",
        summary="Retry one dead job now (one more attempt)",
        status_code=200,
        responses=error_responses(403, 404, 409, 503),
    )
    async def retry(self, job_id: FromPath[uuid.UUID], services: ServicesDep) -> Response[RetryResult]:
        outcome = await services.client.retry_dead(job_id)
        if outcome is RetryOutcome.NOT_FOUND:
            raise JobNotFound(job_id)
        if outcome is RetryOutcome.NOT_DEAD:
            return error_response(409, f"job {job_id} is not in the dead-letter queue", error="not_dead")
        if outcome is RetryOutcome.KEY_TAKEN:
            return error_response(
                409, f"job {job_id} stays dead: another job holds its idempotency key", error=outcome.value
            )
        return Response(RetryResult(job_id, outcome.value))

    @delete(
        "/jobs/{job_id:uuid}",
        summary="Delete a job that has not started (pending or scheduled, no "
        "attempt yet) with its idempotency key; a started job is a 409 (cancel it instead)",
        status_code=204,
        responses=error_responses(403, 404, 409, 503),
    )
    async def delete_job(self, job_id: FromPath[uuid.UUID], services: ServicesDep) -> Response[None]:
        outcome, state = await services.client.delete_waiting(job_id)
        if outcome is DeleteOutcome.NOT_FOUND:
            raise JobNotFound(job_id)
        if outcome is DeleteOutcome.STARTED:
            return error_response(
                409,
                f"job {job_id} has started ({state.value if state else '?'}): only a job "
                "that has not run yet is deleted; cancel it instead",
                error="started",
                state=state.value if state else None,
            )
        return Response(None, status_code=204)

    @post(
        "/dlq/retry-all",
        summary="Retry every dead job matching the filters, in batches",
        status_code=200,
        responses=error_responses(403, 422, 503),
    )
    async def retry_all(
        self, services: ServicesDep, queue: FromQuery[str | None] = None, job_type: FromQuery[str | None] = None
    ) -> Count:
        return Count(await services.client.retry_dead_letters(queue=queue, job_type=job_type))

    @delete(
        "/dlq",
        summary="Purge dead jobs matching the filters, in batches",
        status_code=200,
        responses=error_responses(403, 422, 503),
    )
    async def purge(
        self,
        services: ServicesDep,
        queue: FromQuery[str | None] = None,
        job_type: FromQuery[str | None] = None,
        before: Annotated[datetime | None, QueryParameter(description="only jobs that died before this time")] = None,
    ) -> Count:
        return Count(await services.client.purge_dead_letters(queue=queue, job_type=job_type, before=before))

    @post(
        "/jobs/cancel",
        summary="Cancel every job matching the filters, in batches: waiting ones are cancelled, "
        "running ones asked to stop; no filter at all needs all=true",
        status_code=200,
        responses=error_responses(403, 422, 503),
    )
    async def cancel_all(
        self,
        services: ServicesDep,
        queue: FromQuery[str | None] = None,
        job_type: FromQuery[str | None] = None,
        job_state: Annotated[
            str | None,
            QueryParameter(name="state", description="pending, failed, processing or waiting (default: all four)"),
        ] = None,
        before: Annotated[datetime | None, QueryParameter(description="only jobs created before this time")] = None,
        producer_id: FromQuery[str | None] = None,
        all_jobs: Annotated[
            bool, QueryParameter(name="all", description="true: cancel with no filter at all (every live job)")
        ] = False,
    ) -> BulkCancelResult:
        done = await services.client.cancel_jobs(
            queue=queue, job_type=job_type, state=job_state, before=before, producer_id=producer_id, all_jobs=all_jobs
        )
        return BulkCancelResult(done.cancelled, done.cancel_requested, done.complete)

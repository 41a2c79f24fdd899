"""``/jobs``: submit (one or a batch), status, result, cancel, and the newest-first listing.

Encrypted payload fields and results (`jobqueue.crypto.envelopes`) read back as ``"[encrypted]"``: the API
never decrypts, whatever keys its process holds. A producer key sees and cancels only jobs it submitted (another
producer's job is a 404, as if it
did not exist); an admin key sees all. Submissions pass backpressure first, then go through
`AsyncClient.submit` — the same validation and idempotency as Python and SQL, in one statement. A
submission naming a queue or job type nobody ever served or declared is accepted with ``warnings``
(`jobqueue.api.name_warnings`).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Iterable, Sequence

from litestar import Controller, get, post
from litestar.openapi import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import Response

from jobqueue.api.auth import AnyRequest, Principal
from jobqueue.api.backpressure import Backpressure
from jobqueue.api.errors import NotAllowed, error_response, error_responses
from jobqueue.api.request_checks import MAX_JSON_DEPTH, json_depth_exceeds
from jobqueue.api.schemas import (
    BatchSubmission,
    CancelResult,
    JobDetail,
    JobLinks,
    JobList,
    JobListItem,
    JobResult,
    JobSubmission,
    SubmittedBatch,
    SubmittedJob,
    as_sent,
)
from jobqueue.api.services import ServicesDep, services_of
from jobqueue.client import ValidatedJob
from jobqueue.crypto.envelopes import redact
from jobqueue.model.errors import DatabaseUnavailable, JobNotFound, ValidationError
from jobqueue.model.jobs import CancelOutcome, JobInfo, JobOutcome, JobState
from jobqueue.observability.tracing import check_traceparent

_CANCEL_REFUSED = {
    CancelOutcome.COMPLETED: "the job already completed",
    CancelOutcome.DEAD_LETTER: "the job is in the dead-letter queue (retry or purge it as an admin)",
    CancelOutcome.ALREADY_CANCELLED: "the job was already cancelled",
}


async def list_page(services: ServicesDep, user: Principal, *, cursor: str | None, **filters: Any) -> JobList:
    """One page of a listing (`AsyncClient.list_jobs`), its cursors sealed for this key
    (`jobqueue.api.cursors`): the position a page stopped at is often another producer's job."""
    before = await services.cursors.open(cursor, user)
    page = await services.reads.read(user.id, lambda client: client.list_jobs(cursor=before, **filters))
    return JobList([JobListItem.of(job) for job in page.jobs], await services.cursors.seal(page.next_cursor, user))


async def visible_job(services: ServicesDep, user: Principal, job_id: uuid.UUID) -> JobInfo:
    """The job if this key may see it; another producer's job does not exist for it. The query
    itself checks the producer (`job_store.get`), so such a job is never read: it costs what a
    missing id costs, and its answer is the same 404."""
    owner = None if user.is_admin else user.producer_id
    return await services.reads.read(user.id, lambda client: client.get(job_id, producer_id=owner))


async def _submit(
    services: ServicesDep, request: AnyRequest, items: list[JobSubmission], batch: bool
) -> tuple[list[SubmittedJob], list[str]]:
    """The jobs as submitted, and the warnings about the names they use (`jobqueue.api.name_warnings`)."""
    jobs, accepted = await _submit_jobs(services, request, items, batch)
    warnings = await services.name_warnings.of(
        ((job.queue, job.job_type) for job in accepted), request.user.producer_id
    )
    return jobs, warnings


async def _submit_jobs(
    services: ServicesDep, request: AnyRequest, items: list[JobSubmission], batch: bool
) -> tuple[list[SubmittedJob], list[ValidatedJob]]:
    user = request.user
    traceparent = _traceparent(request)
    for index, item in enumerate(items):
        if json_depth_exceeds(item.payload):
            raise ValidationError(_where(index, batch) + "payload", f"nests deeper than {MAX_JSON_DEPTH} levels")
    specs = [item.enqueue_fields(producer_id=user.producer_id, traceparent=traceparent) for item in items]
    accepted: list[ValidatedJob] = []

    def admit(built: Sequence[ValidatedJob]) -> None:
        """Validated (names within their limits), nothing written yet: the key's allow-lists, then
        the queue, may still refuse."""
        for index, job in enumerate(built):
            refused = user.refuses(job.queue, job.job_type)
            if refused is not None:
                raise NotAllowed(
                    _where(index, batch) + refused,
                    f"this API key may not submit to {refused} {getattr(job, refused)!r}; nothing was written",
                )
        services.backpressure.reserve(user.producer_id, _demands(built))
        accepted.extend(built)

    try:
        results = await services.client.submit(specs, admit=admit)
    except Exception as exc:
        services.backpressure.release(_demands(accepted))
        if isinstance(exc, ValidationError):  # the client names fields jobs[i].…: as sent for a single job
            field = exc.field if batch else exc.field.removeprefix("jobs[0].")
            raise ValidationError(as_sent(field), as_sent(exc.message)) from None
        raise
    services.backpressure.committed(_demands(job for job, (_, created) in zip(accepted, results) if created))
    if not all(created for _, created in results):
        services.backpressure.release(_demands(job for job, (_, created) in zip(accepted, results) if not created))
        return [
            SubmittedJob(job_id, outcome.state.value, created, JobLinks.of(job_id), redact(outcome.result))
            for (job_id, created), outcome in zip(results, await _outcomes(services, results))
        ], accepted
    return [SubmittedJob(job_id, _PENDING_STATE, True, JobLinks.of(job_id)) for job_id, _ in results], accepted


def _traceparent(request: AnyRequest) -> str | None:
    """The request's ``traceparent`` header, checked once for the whole request (a batch copies it
    into every job): a W3C trace context or none, else 422 naming the header."""
    found = request.headers.getall("traceparent", None)
    if not found:
        return None
    if len(found) > 1:
        raise ValidationError("traceparent", "must be given once (the request has several traceparent headers)")
    check_traceparent(found[0])
    return found[0]


def _where(index: int, batch: bool) -> str:
    """How an error names a field of the index-th job: ``jobs[i].`` in a batch, nothing alone."""
    return f"jobs[{index}]." if batch else ""


def _demands(jobs: Iterable[ValidatedJob]) -> list:
    return Backpressure.demands((job.queue, job.priority) for job in jobs)


_PENDING = JobOutcome(JobState.PENDING)
_PENDING_STATE = JobState.PENDING.value  # every job of a submission that created them all


async def _outcomes(services: ServicesDep, results: list[tuple[uuid.UUID, bool]]) -> list[JobOutcome]:
    """What to report per job: a created one is pending; one that already held its key is read,
    state and result, in one query. The jobs are committed by now, so a failed read must not turn
    the answer into a 503 (a client would resubmit, and get the same answer): such a job is
    reported pending, its state unknown, and a GET of its link tells the truth."""
    existing = [job_id for job_id, created in results if not created]
    try:
        outcomes = await services.client.outcomes(existing) if existing else {}
    except DatabaseUnavailable:
        outcomes = {}
    return [_PENDING if created else outcomes.get(job_id, _PENDING) for job_id, created in results]


class JobsController(Controller):
    path = "/jobs"
    tags = ["jobs"]

    @post(
        "/",
        summary="Submit a job",
        status_code=201,
        responses={
            200: ResponseSpec(
                SubmittedJob,
                description="the idempotency key is held (within its "
                "window): the job first submitted with it, its state and result; "
                "nothing created",
            ),
            **error_responses(409, 413, 422, 429, 503),
        },
    )
    async def submit(self, request: AnyRequest, data: JSONBody[JobSubmission]) -> Response[SubmittedJob]:
        [job], warnings = await _submit(services_of(request), request, [data], batch=False)
        if warnings:
            job.warnings = warnings
        return Response(job, status_code=201 if job.created else 200)

    @post(
        "/batch",
        summary="Submit several jobs in one transaction (all or nothing)",
        status_code=201,
        responses={
            200: ResponseSpec(SubmittedBatch, description="every job already existed (idempotency keys)"),
            **error_responses(409, 413, 422, 429, 503),
        },
    )
    async def submit_batch(self, request: AnyRequest, data: JSONBody[BatchSubmission]) -> Response[SubmittedBatch]:
        services = services_of(request)
        limit = services.settings.api.max_batch
        if not 1 <= len(data.jobs) <= limit:
            raise ValidationError("jobs", f"must hold 1 to {limit} jobs (got {len(data.jobs)})")
        jobs, warnings = await _submit(services, request, data.jobs, batch=True)
        created = sum(job.created for job in jobs)
        answer = SubmittedBatch(jobs, created, warnings) if warnings else SubmittedBatch(jobs, created)
        return Response(answer, status_code=201 if created else 200)

    @get("/", summary="List jobs, newest first (keyset pagination)", responses=error_responses(422, 503))
    async def list_jobs(
        self,
        request: AnyRequest,
        services: ServicesDep,
        job_state: Annotated[
            str | None,
            QueryParameter(
                name="state", description="pending, processing, completed, failed, dead_letter or cancelled"
            ),
        ] = None,
        job_type: FromQuery[str | None] = None,
        queue: FromQuery[str | None] = None,
        priority: Annotated[str | None, QueryParameter(description="critical, high, normal or low")] = None,
        scheduled: Annotated[
            bool | None,
            QueryParameter(description="true: only jobs whose run_at is still ahead; false: only those due"),
        ] = None,
        producer_id: Annotated[
            str | None, QueryParameter(description="admin keys only; producers always see their own")
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, QueryParameter(description="next_cursor of the previous page")] = None,
    ) -> JobList:
        user = request.user
        return await list_page(
            services,
            user,
            limit=limit,
            cursor=cursor,
            state=job_state,
            job_type=job_type,
            queue=queue,
            priority=priority,
            scheduled=scheduled,
            producer_id=producer_id if user.is_admin else user.producer_id,
        )

    @get(
        "/{job_id:uuid}",
        summary="A job: state, attempts, timestamps, result or errors",
        responses=error_responses(404, 503),
    )
    async def get_job(self, request: AnyRequest, job_id: FromPath[uuid.UUID], services: ServicesDep) -> JobDetail:
        user = request.user
        return JobDetail.of(await visible_job(services, user, job_id), tracebacks=user.is_admin)

    @get(
        "/{job_id:uuid}/result",
        summary="The stored result (404 while there is none, with the state)",
        responses=error_responses(404, 503),
    )
    async def get_result(
        self, request: AnyRequest, job_id: FromPath[uuid.UUID], services: ServicesDep
    ) -> Response[JobResult]:
        info = await visible_job(services, request.user, job_id)
        if info.state is not JobState.COMPLETED:
            return error_response(
                404, f"job {job_id} has no result: it is {info.state.value}", error="no_result", state=info.state.value
            )
        return Response(JobResult(info.id, info.state.value, redact(info.result), info.duration_ms, info.finished_at))

    @post(
        "/{job_id:uuid}/cancel",
        summary="Cancel: pending → cancelled (200), running → requested (202)",
        status_code=200,
        responses={
            202: ResponseSpec(CancelResult, description="running: cancel requested, the handler is told"),
            **error_responses(404, 409, 503),
        },
    )
    async def cancel(
        self, request: AnyRequest, job_id: FromPath[uuid.UUID], services: ServicesDep
    ) -> Response[CancelResult]:
        user = request.user
        outcome = await services.client.cancel(job_id, producer_id=None if user.is_admin else user.producer_id)
        if outcome is CancelOutcome.NOT_FOUND:
            raise JobNotFound(job_id)
        if not outcome.changed:
            return error_response(
                409,
                f"job {job_id} cannot be cancelled: {_CANCEL_REFUSED[outcome]}",
                error="not_cancellable",
                state=outcome.value.removesuffix("_already"),
            )
        return Response(
            CancelResult(job_id, outcome.value), status_code=202 if outcome is CancelOutcome.CANCEL_REQUESTED else 200
        )

"""The execution span around one job: a child of the producer's span through the stored traceparent.

`traced(tracing, job, run)` hands back `run` itself when tracing is off, so a worker without
tracing awaits exactly what it would have awaited anyway.
"""

from __future__ import annotations

from typing import Awaitable

from jobqueue.model.jobs import Job
from jobqueue.observability.tracing import Tracing, set_outcome
from jobqueue.worker.executor import Outcome


def traced(tracing: Tracing | None, job: Job, run: Awaitable[Outcome]) -> Awaitable[Outcome]:
    if tracing is None:
        return run
    return _traced(tracing, job, run)


async def _traced(tracing: Tracing, job: Job, run: Awaitable[Outcome]) -> Outcome:
    with tracing.execution(
        job_id=job.id, job_type=job.job_type, queue=job.queue, attempt=job.attempt, traceparent=job.traceparent
    ) as span:
        outcome = await run
        set_outcome(span, outcome.kind, outcome.error_type, outcome.message)
        return outcome

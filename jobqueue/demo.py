"""The demo app: `jobqueue-worker --app jobqueue.demo:queue`. `make run` and the benchmark use it.

Handlers: ``noop`` (returns nothing), ``echo`` (returns its payload), ``sleep`` (``seconds``),
``fail`` (always raises a retryable error), ``fail_permanent`` (dead-letters at once) and
``flaky`` (fails its first ``failures`` attempts, then succeeds), and ``send_email``, the
README's quick-start task, so that the README's REST example runs against `make run` as written.
"""

from __future__ import annotations

import asyncio

from jobqueue.app import JobQueue
from jobqueue.model.errors import PermanentError
from jobqueue.model.jobs import Job
from jobqueue.model.retry import Backoff

queue = JobQueue("demo")

_quick = Backoff(base=0.2, multiplier=2.0, max=2.0)


@queue.task("noop")
async def noop(job: Job) -> None:
    return None


@queue.task("echo")
async def echo(job: Job):
    return job.payload


@queue.task("send_email", max_attempts=5, timeout=30)
async def send_email(job: Job):
    """Sends nothing: the quick start's task, with its refusal of a payload without a recipient."""
    if not (job.payload or {}).get("to"):
        raise PermanentError("no recipient")
    return {"sent": True}


@queue.task("sleep")
async def sleep(job: Job):
    seconds = float((job.payload or {}).get("seconds", 1.0))
    slept = 0.0
    while slept < seconds:  # cooperative: a cancel request ends it early
        job.raise_if_cancelled()
        step = min(0.05, seconds - slept)
        await asyncio.sleep(step)
        slept += step
    return {"slept": seconds}


@queue.task("fail", backoff=_quick)
async def fail(job: Job):
    raise RuntimeError(f"demo failure on attempt {job.attempt}")


@queue.task("fail_permanent")
async def fail_permanent(job: Job):
    raise PermanentError("demo: this payload can never succeed")


@queue.task("flaky", backoff=_quick)
def flaky(job: Job):
    """A sync handler (runs in a thread) that fails its first ``failures`` attempts."""
    failures = int((job.payload or {}).get("failures", 1))
    if job.attempt <= failures:
        raise ConnectionError(f"demo: transient failure {job.attempt}/{failures}")
    return {"succeeded_on_attempt": job.attempt}

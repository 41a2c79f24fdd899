"""A JobQueue whose tasks use payload encryption (tests/integration/test_encryption.py)."""

from __future__ import annotations

import threading

from jobqueue import JobQueue
from jobqueue.model.jobs import Job

queue = JobQueue("crypt-tests")

#: (job_type, payload) of every handler run in this process, as the handler saw it.
seen: list[tuple[str, object]] = []
_lock = threading.Lock()


def _record(job: Job) -> None:
    with _lock:
        seen.append((job.job_type, job.payload))


@queue.task("charge", encrypted=["card.number", "ssn"], encrypt_result=True)
async def charge(job: Job):
    """Declares its sensitive fields: producers encrypt them without being told per call."""
    _record(job)
    return {"receipt": f"paid with {job.payload['card']['number']}"}


@queue.task("echo")
async def echo(job: Job):
    """Declares nothing: only what a call (or a SQL producer) encrypts is encrypted."""
    _record(job)
    return {"ok": True}


@queue.task("mirror")
async def mirror(job: Job):
    """Returns its payload as its result: what an attacker wants a copied ciphertext opened by."""
    _record(job)
    return job.payload

"""Sealing the payload fields of validated jobs (`jobqueue.crypto.envelopes`), for both clients.

Fields named by a call (``encrypt=``) or declared by a task (``@queue.task(encrypted=...)``) are
sealed once the job is validated, for its producer, job type and an id made here, which the job is
then inserted with. `AsyncClient` seals a request of many values off the event loop, a slice at a time.
"""

from __future__ import annotations

from typing import Any, Sequence

from jobqueue.client.validation import NewJob
from jobqueue.crypto.envelopes import Binding, Sealer, new_job_id

#: Values `AsyncClient` seals on the event loop at most (about 20 µs each, so 1.3 ms); a call of
#: more seals them in a thread, this many at a time (a 1 MB request can hold 60,000, 1.2 s of
#: work: in one thread call, the loop's every I/O step waited up to the interpreter's 5 ms switch
#: interval for the lock the thread held, 28 ms for ten socket round trips; in slices, 4 ms).
SEAL_OFF_LOOP = 64
#: Jobs to seal: (index in the call, paths, how errors name its fields).
SealPlan = Sequence[tuple[int, tuple[str, ...], str]]


def sealed_jobs(
    sealer: Sealer, built: Sequence[NewJob], plan: SealPlan, payloads: Sequence[Any], held: str | None
) -> list[NewJob]:
    """The planned jobs of ``built`` with their fields sealed (``payloads``: theirs, as given), in
    plan order: each for the producer its row will carry (``held``, the one the database holds the
    session to, else its own), its type and a new id."""
    sealed = []
    for (index, paths, field_prefix), payload in zip(plan, payloads):
        job, job_id = built[index], new_job_id()
        binding = Binding(held if held is not None else job.producer_id, job.job_type, job_id)
        sealed.append(job.sealed(job_id, sealer.seal(payload, paths, binding, field_prefix=field_prefix)))
    return sealed


def with_sealed(built: list[NewJob], plan: SealPlan, sealed: Sequence[NewJob]) -> list[NewJob]:
    jobs = list(built)
    for (index, _, _), job in zip(plan, sealed):
        jobs[index] = job
    return jobs


def seal_slices(plan: SealPlan, values: int) -> list[slice]:
    """``plan`` cut into consecutive slices of at most ``values`` values to seal (one job at least)."""
    slices, start, count = [], 0, 0
    for end, (_, paths, _) in enumerate(plan):
        if count and count + len(paths) > values:
            slices.append(slice(start, end))
            start, count = end, 0
        count += len(paths)
    return [*slices, slice(start, len(plan))]

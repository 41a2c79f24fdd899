"""Calls an operator's tools make on jobqueue.jobs (sql/queries/job_admin.sql): listing, deleting a job
that never ran, what each worker runs, dead-letter retry and purge, bulk cancel, and key rotation's
scan and write. The hot path (enqueue, claim, acks, leases) is `jobqueue.store.jobs`; the test
mode's two calls (`jobqueue.testing`: the queues to drain, scheduled jobs brought forward) are here
too."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from jobqueue.db.gateway import ActionCall, Call, column, scalar
from jobqueue.model.jobs import (
    DeleteOutcome,
    JobPage,
    JobState,
    JobSummary,
    Priority,
    RetryOutcome,
)
from jobqueue.model.payloads import dumps
from jobqueue.model.workers import RunningJob

# --- listing and dead-letter administration (REST API, admin tools) ---------------------------


def _decode_summaries(rows: list[tuple]) -> list[JobSummary]:
    return [JobSummary(r[0], r[1], r[2], Priority(r[3]), JobState(r[4]), *r[5:16]) for r in rows]


#: States a job completing on its first attempt never enters: they have their own listing index
#: (jobs_state_listing_idx), so a listing of one of them examines only its rows.
INDEXED_LIST_STATES = frozenset({"failed", "dead_letter", "cancelled"})


def list_jobs(
    *,
    limit: int,
    scan: int,
    before: uuid.UUID | None = None,
    state: str | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    priority: int | None = None,
    producer_id: str | None = None,
    scheduled: bool | None = None,
) -> Call[JobPage]:
    """One page, newest first, examining at most ``scan`` rows (see job_list). The page's cursor
    is its last row's id when it is full or the budget ran out; a page cut short by the budget
    may hold fewer than ``limit`` jobs, even none, and still have a cursor."""

    def decode(rows: list[tuple]) -> JobPage:
        more = bool(rows) and (len(rows) == limit or rows[-1][-1] == scan)
        return JobPage(_decode_summaries([r for r in rows if r[-2]]), str(rows[-1][0]) if more else None)

    name = "job_list_in_state" if state in INDEXED_LIST_STATES else "job_list"
    return Call(
        name,
        {
            "limit": limit,
            "scan": scan,
            "before": before,
            "state": state,
            "queue": queue,
            "job_type": job_type,
            "priority": priority,
            "producer_id": producer_id,
            "scheduled": scheduled,
        },
        decode,
    )


def delete_waiting(job_id: uuid.UUID) -> Call[tuple[DeleteOutcome, JobState | None]]:
    """Delete a job that has not started; (outcome, the job's state when it was found)."""
    return ActionCall(
        "job_delete_waiting",
        {"id": job_id},
        lambda rows: (DeleteOutcome(rows[0][0]), JobState(rows[0][1]) if rows[0][1] else None),
    )


def running_by_worker(*, per_worker: int) -> Call[dict[str, tuple[int, list[RunningJob]]]]:
    """Per worker id: how many jobs it runs, and the oldest ``per_worker`` of them."""

    def decode(rows: list[tuple]) -> dict[str, tuple[int, list[RunningJob]]]:
        found: dict[str, tuple[int, list[RunningJob]]] = {}
        for worker_id, running, *job in rows:
            found.setdefault(worker_id, (running, []))[1].append(RunningJob(*job))
        return found

    return Call("job_running_by_worker", {"per_worker": per_worker}, decode)


def retry_dead(job_id: uuid.UUID) -> Call[RetryOutcome]:
    return ActionCall("job_retry_dead", {"id": job_id}, lambda rows: RetryOutcome(rows[0][0]))


def retry_dead_batch(
    *, after: int, limit: int, queue: str | None, job_type: str | None
) -> Call[tuple[int, int, int | None]]:
    """(retried, scanned, last seq scanned) of one batch."""
    return ActionCall(
        "job_retry_dead_batch",
        {"after": after, "limit": limit, "queue": queue, "job_type": job_type},
        lambda rows: (rows[0][0], rows[0][1], rows[0][2]),
    )


def purge_dead_batch(
    *, after: int, limit: int, queue: str | None, job_type: str | None, before: datetime | None
) -> Call[tuple[int, int, int | None]]:
    """(purged, scanned, last seq scanned) of one batch."""
    return ActionCall(
        "job_purge_dead_batch",
        {"after": after, "limit": limit, "queue": queue, "job_type": job_type, "before": before},
        lambda rows: (rows[0][0], rows[0][1], rows[0][2]),
    )


#: Where a bulk cancel's walk of the waiting jobs starts: before every key of jobs_claim_idx (no
#: queue is named '' and no priority is below 0).
CANCEL_START = ("", -1, datetime.min.replace(tzinfo=timezone.utc), -1)


@dataclass(frozen=True, slots=True)
class CancelBatch:
    """What one `cancel_batch` did: waiting jobs cancelled, running jobs asked to stop, the cutoff
    it used (pass it to the next batch); ``ahead``: the walk of waiting jobs goes on from ``last``;
    ``skipped``: some it walked were locked (or had just changed) and are left for another pass;
    ``more_left``: held-back (ordering key) or running jobs still to do; ``keyed``: it cancelled an
    ordering key's head, whose next job may have turned pending behind the cursor."""

    cancelled: int
    requested: int
    cutoff: datetime
    ahead: bool
    skipped: bool
    more_left: bool
    keyed: bool
    last: tuple[str, int, datetime, int] | None


def cancel_batch(
    *,
    limit: int,
    after: tuple[str, int, datetime, int],
    first: bool,
    cutoff: datetime | None,
    state: str | None,
    queue: str | None,
    job_type: str | None,
    producer_id: str | None,
) -> Call[CancelBatch]:
    """One batch of a bulk cancel (job_cancel_batch), its walk of waiting jobs from ``after``;
    ``first``: the run's first batch, which records the run in the audit log."""

    def decode(rows: list[tuple]) -> CancelBatch:
        cancelled, requested, used, ahead, skipped, more_left, keyed, *last, _notified, _recorded = rows[0]
        return CancelBatch(
            cancelled, requested, used, ahead, skipped, more_left, keyed, tuple(last) if last[0] is not None else None
        )

    return ActionCall(
        "job_cancel_batch",
        {
            "limit": limit,
            "after_queue": after[0],
            "after_priority": after[1],
            "after_run_at": after[2],
            "after_seq": after[3],
            "first": first,
            "cutoff": cutoff,
            "state": state,
            "queue": queue,
            "job_type": job_type,
            "producer_id": producer_id,
        },
        decode,
    )


def session_producer() -> Call[str | None]:
    """The producer id the database holds this session's jobs to (None: any; see enqueue())."""
    return Call("job_session_producer", {}, scalar)


# --- key rotation (jobqueue.cli.keys) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredValues:
    """A job's encrypted values as key rotation reads them (``last_error``: a dead job's last error type)."""

    seq: int
    id: uuid.UUID
    producer_id: str | None
    job_type: str
    state: str
    payload: Any
    result: Any
    last_error: str | None


def rewrap_scan(
    *, after: int, limit: int, kid: str, holding: str = "stale"
) -> Call[tuple[int, int | None, list[StoredValues]]]:
    """(scanned, last seq scanned, the jobs holding values of the kind ``holding`` names: "stale",
    under another key than ``kid`` or unbound; "any"; "unbound")."""

    def decode(rows: list[tuple]) -> tuple[int, int | None, list[StoredValues]]:
        scanned, last_seq, found = rows[0]
        return scanned, last_seq, [StoredValues(seq, uuid.UUID(job_id), *rest) for seq, job_id, *rest in found]

    return Call("job_rewrap_scan", {"after": after, "limit": limit, "kid": kid, "holding": holding}, decode)


def rewrap_write(
    payloads: Sequence[tuple[uuid.UUID, Any, Any]], results: Sequence[tuple[uuid.UUID, Any, Any]]
) -> Call[tuple[list[uuid.UUID], int]]:
    """Store (id, old, new) payloads and results, each only where the old value is still there;
    returns the ids of the jobs whose payload was written, and how many results were."""
    return Call(
        "job_rewrap_write",
        {
            "payload_ids": [p[0] for p in payloads],
            "old_payloads": [dumps(p[1]) for p in payloads],
            "new_payloads": [dumps(p[2]) for p in payloads],
            "result_ids": [r[0] for r in results],
            "old_results": [dumps(r[1]) for r in results],
            "new_results": [dumps(r[2]) for r in results],
        },
        lambda rows: (list(rows[0][0]), rows[0][1]),
    )


# --- the test mode (jobqueue.testing): never run by a worker ----------------------------------


def waiting_queues(served: Sequence[str]) -> Call[list[str]]:
    """The queues that hold waiting jobs (due or not) of the ``served`` job types."""
    return Call("job_waiting_queues", {"served": list(served)}, column)


def bring_forward(queues: Sequence[str], served: Sequence[str]) -> Call[list[uuid.UUID]]:
    """The waiting jobs of ``served`` in ``queues`` due soonest (scheduled, or retries waiting out
    their backoff) due now; their ids (none: nothing of theirs waits)."""
    return Call("job_bring_forward", {"queues": list(queues), "served": list(served)}, column)

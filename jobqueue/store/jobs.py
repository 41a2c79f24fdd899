"""Calls on jobqueue.jobs and the result/error rows its transitions write (sql/queries/jobs.sql);
the operator's listing and dead-letter calls are `jobqueue.store.job_admin`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Generic, Sequence, TypeVar

from jobqueue.db.gateway import ActionCall, Call, column, no_result, scalar_or_none
from jobqueue.model.jobs import (
    AttemptError,
    CancelOutcome,
    Job,
    JobInfo,
    JobOutcome,
    JobProgress,
    JobState,
    Priority,
)

T = TypeVar("T")


def enqueue(
    *,
    job_type: str,
    payload_json: str,
    priority: str,
    run_at: datetime | None,
    delay: timedelta | None,
    queue: str,
    max_attempts: int | None,
    idempotency_key: str | None,
    producer_id: str | None,
    traceparent: str | None,
    timeout: timedelta | None = None,
    expires_at: datetime | None = None,
    expire_after: timedelta | None = None,
    idempotency_window: timedelta | None = None,
    idempotency_mismatch: str | None = None,
    ordering_key: str | None = None,
) -> Call[uuid.UUID]:
    return Call(
        "job_enqueue",
        {
            "job_type": job_type,
            "payload": payload_json,
            "priority": priority,
            "run_at": run_at,
            "delay": delay,
            "queue": queue,
            "max_attempts": max_attempts,
            "idempotency_key": idempotency_key,
            "producer_id": producer_id,
            "traceparent": traceparent,
            "timeout": timeout,
            "expires_at": expires_at,
            "expire_after": expire_after,
            "idempotency_window": idempotency_window,
            "idempotency_mismatch": idempotency_mismatch,
            "ordering_key": ordering_key,
        },
        scalar_or_none,
    )


def enqueue_many(jobs_json: str, *, lock_wait: float | None = None) -> Call[list[tuple[uuid.UUID, bool]]]:
    """``lock_wait``: seconds this statement may wait for a lock (None: the connection's own)."""
    decode = lambda rows: [(r[0], r[1]) for r in rows]  # noqa: E731
    if lock_wait is None:
        return Call("job_enqueue_many", {"jobs": jobs_json}, decode)
    return Call(
        "job_enqueue_many_waiting_briefly", {"jobs": jobs_json, "lock_timeout": f"{int(lock_wait * 1000)}ms"}, decode
    )


def _decode_jobs(rows: list[tuple]) -> list[Job]:
    """Claimed jobs; then each job's order key (run_at, seq), its producer and its cron tick."""
    return [
        Job(
            id,
            queue,
            job_type,
            payload,
            priority,
            attempt,
            max_attempts,
            traceparent,
            cancel_requested,
            created_at,
            timeout,
            (run_at, seq),
            producer_id,
            scheduled_for,
        )
        for (
            id,
            queue,
            job_type,
            payload,
            priority,
            attempt,
            max_attempts,
            traceparent,
            cancel_requested,
            created_at,
            timeout,
            run_at,
            seq,
            producer_id,
            scheduled_for,
        ) in rows
    ]


#: Where a one-queue claim resumes, per priority level: the order key (run_at, seq) of the last
#: job claimed at that level (see job_claim); None at a level: scan it from the start.
ResumePoints = Sequence[tuple[datetime, int] | None]


@dataclass(frozen=True, slots=True)
class Deadlines:
    """How a claim sets each attempt's deadline: ``timeouts_json`` (seconds by job type, a JSON
    object: the tasks' own timeouts), else ``default`` seconds (the worker's processing TTL). The
    lease never outlives the deadline by more than ``grace`` seconds."""

    timeouts_json: str = "{}"
    default: float = 900.0
    grace: float = 5.0

    def params(self) -> dict[str, Any]:
        return {"timeouts": self.timeouts_json, "default_timeout": self.default, "deadline_grace": self.grace}


def claim(
    *,
    worker_id: str,
    queues: Sequence[str],
    limit: int,
    lease_seconds: float,
    deadlines: Deadlines = Deadlines(),
    resume: ResumePoints = (),
    blocked: Sequence[str] = (),
    only: Sequence[str] | None = None,
    limited: bool | None = None,
    until: tuple[int, tuple | None] = (3, None),
    served: Sequence[str] | None = None,
    now: datetime | None = None,
) -> Call[list[Job]]:
    """``resume`` applies to a one-queue claim only. ``served``: the job types the worker has
    handlers for, the only ones it claims (None: any type). ``blocked``: job types not to claim (those of
    open circuit breakers); ``only``: claim jobs of these types alone (a half-open circuit's probe).
    ``limited``: None — this worker knows of no limit (the claim takes nothing once one exists);
    False/True — a claim inside a transaction that holds `limits.allowances`, which marks what it
    takes as holding a limit's slot (True) or not (False). ``until``: (level, order key or None) —
    scan the levels before it whole, that level up to the key (None: whole), none after it."""
    return Call(
        "job_claim",
        {
            "worker_id": worker_id,
            "queues": list(queues),
            "limit": limit,
            "limits_checked": limited is not None,
            "mark_limited": bool(limited),
            "until_level": until[0],
            "until_run_at": until[1][0] if until[1] else None,
            "until_seq": until[1][1] if until[1] else None,
            "lease_seconds": lease_seconds,
            "now": now,
            **deadlines.params(),
            "blocked": list(blocked),
            "only": None if only is None else list(only),
            "served": None if served is None else list(served),
            "after_run_at": [point[0] if point else None for point in resume],
            "after_seq": [point[1] if point else None for point in resume],
        },
        _decode_jobs,
    )


def claim_weighted(
    *,
    worker_id: str,
    slots: Sequence[tuple[str, int, int]],
    lease_seconds: float,
    deadlines: Deadlines = Deadlines(),
    blocked: Sequence[str] = (),
    served: Sequence[str] | None = None,
    now: datetime | None = None,
) -> Call[list[Job]]:
    """slots: (queue, priority level, how many) triples; ``blocked`` and ``served`` as for `claim`."""
    return Call(
        "job_claim_weighted",
        {
            "worker_id": worker_id,
            "blocked": list(blocked),
            "served": None if served is None else list(served),
            "queues": [s[0] for s in slots],
            "priorities": [s[1] for s in slots],
            "quotas": [s[2] for s in slots],
            "lease_seconds": lease_seconds,
            "now": now,
            **deadlines.params(),
        },
        _decode_jobs,
    )


@dataclass(frozen=True, slots=True)
class Acked(Generic[T]):
    """What an ack or lease statement did: ``written``, its answer for the rows it changed (as the
    statement always answered), and ``busy``, the jobs it passed over because another transaction
    holds their row locked although this attempt could still have written them — try those again
    (job_complete_many: `mine`)."""

    written: T
    busy: frozenset[uuid.UUID] = frozenset()


def _acked(written: Callable[[list[tuple]], T]) -> Callable[[list[tuple]], Acked[T]]:
    """Decodes rows whose last column says busy: the others, as ``written`` decodes them."""

    def decode(rows: list[tuple]) -> Acked[T]:
        return Acked(written([r[:-1] for r in rows if not r[-1]]), frozenset(r[0] for r in rows if r[-1]))

    return decode


def complete_many(
    *, worker_id: str, ids: list[uuid.UUID], attempts: list[int], results: list[str | None], durations: list[float]
) -> Call[Acked[list[uuid.UUID]]]:
    return Call(
        "job_complete_many",
        {"worker_id": worker_id, "ids": ids, "attempts": attempts, "results": results, "durations": durations},
        _acked(column),
    )


def fail_many(
    *,
    worker_id: str,
    ids: list[uuid.UUID],
    attempts: list[int],
    actions: list[str],
    retry_in: list[float],
    error_types: list[str],
    messages: list[str],
    tracebacks: list[str | None],
    default_limits: tuple[int, int],
) -> Call[Acked[list[tuple[uuid.UUID, str, datetime]]]]:
    """actions[i]: 'retry' (dead-lettered anyway when out of attempts, or shed), 'dead' or 'cancel'.
    ``default_limits``: the (soft, hard) depth limits of queues without their own (the API's
    JOBQUEUE_API_SOFT_LIMIT / _HARD_LIMIT), against which load shedding measures a queue."""
    return Call(
        "job_fail_many",
        {
            "worker_id": worker_id,
            "ids": ids,
            "attempts": attempts,
            "actions": actions,
            "retry_in": retry_in,
            "error_types": error_types,
            "messages": messages,
            "tracebacks": tracebacks,
            "default_soft_limit": default_limits[0],
            "default_hard_limit": default_limits[1],
        },
        _acked(lambda rows: [(r[0], r[1], r[2]) for r in rows]),
    )


def ack_lock_wait(seconds: float) -> Call[None]:
    """The rest of the caller's transaction waits at most ``seconds`` for a lock."""
    return Call("job_ack_lock_wait", {"lock_timeout": f"{max(1, round(seconds * 1000))}ms"}, no_result)


#: One attempt of a job: what a worker holds, heartbeats, acks and releases (a job reclaimed from
#: it and claimed by it again is two attempts, never confused).
Attempt = tuple[uuid.UUID, int]


def release_many(*, worker_id: str, attempts: Sequence[Attempt]) -> Call[int]:
    """Back to pending, the attempt not counted (cancelled instead when a cancel was requested);
    how many. One whose row another transaction holds locked is not released (see release_each)."""
    return Call(
        "job_release_many",
        {"worker_id": worker_id, "ids": [a[0] for a in attempts], "attempts": [a[1] for a in attempts]},
        scalar_or_none,
    )


def release_each(*, worker_id: str, attempts: Sequence[Attempt]) -> Call[Acked[set[uuid.UUID]]]:
    """`release_many`, answering which jobs it released and which it passed over as locked (acks
    of attempts a handler gave back)."""
    return Call(
        "job_release_many",
        {"worker_id": worker_id, "ids": [a[0] for a in attempts], "attempts": [a[1] for a in attempts]},
        lambda rows: Acked(set(rows[0][2] or ()), frozenset(rows[0][3] or ())),
    )


def held_by(worker_id: str) -> Call[set[Attempt]]:
    """The attempts the database says ``worker_id`` holds."""
    return Call("job_held_by", {"worker_id": worker_id}, lambda rows: {(r[0], r[1]) for r in rows})


def extend_leases(
    *,
    worker_id: str,
    attempts: Sequence[Attempt],
    lease_seconds: float,
    deadline_grace: float,
    now: datetime | None = None,
) -> Call[Acked[dict[Attempt, bool]]]:
    """Extends the leases of the attempts still held; ``written`` maps them to their cancel flags,
    ``busy`` names the jobs whose row another transaction holds locked (still held, not renewed)."""
    return Call(
        "job_extend_leases",
        {
            "worker_id": worker_id,
            "ids": [a[0] for a in attempts],
            "attempts": [a[1] for a in attempts],
            "lease_seconds": lease_seconds,
            "deadline_grace": deadline_grace,
            "now": now,
        },
        _acked(lambda rows: {(r[0], r[1]): r[2] for r in rows}),
    )


def reclaim_expired(*, limit: int = 1000, now: datetime | None = None) -> Call[list[tuple[uuid.UUID, str, str]]]:
    return Call("job_reclaim_expired", {"limit": limit, "now": now}, lambda rows: [(r[0], r[1], r[2]) for r in rows])


def expire_waiting(*, limit: int = 1000, now: datetime | None = None) -> Call[list[uuid.UUID]]:
    """Dead-letters (reason expired) jobs still waiting past their expires_at; returns their ids."""
    return Call("job_expire_waiting", {"limit": limit, "now": now}, column)


def next_run_in(*, queues: Sequence[str], since: float = 0.0, now: datetime | None = None) -> Call[float | None]:
    """Seconds until the earliest run_at after ``since`` seconds ago (when the caller's last claim
    began), by the server's clock; None when no job is waiting."""
    return Call("job_next_run_at", {"queues": list(queues), "since": since, "now": now}, scalar_or_none)


_INFO_FIELDS = (
    "id",
    "queue",
    "job_type",
    "priority",
    "state",
    "attempts",
    "max_attempts",
    "payload",
    "run_at",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "idempotency_key",
    "producer_id",
    "traceparent",
    "cancel_requested",
    "locked_by",
    "locked_until",
    "result",
    "final_error",
    "duration_ms",
    "errors",
    "timeout",
    "expires_at",
    "deadline_at",
    "dead_reason",
    "scheduled_for",
    "ordering_key",
    "progress",
)


def _decode_info(rows: list[tuple]) -> JobInfo | None:
    if not rows:
        return None
    values = dict(zip(_INFO_FIELDS, rows[0]))
    values["priority"] = Priority(values["priority"])
    values["state"] = JobState(values["state"])
    values["progress"] = JobProgress.of(values["progress"])
    values["errors"] = [
        AttemptError(
            attempt=e["attempt"],
            error_type=e["error_type"],
            message=e["message"],
            traceback=e.get("traceback"),
            worker_id=e.get("worker_id"),
            failed_at=datetime.fromisoformat(e["failed_at"]),
        )
        for e in values["errors"] or []
    ]
    return JobInfo(**values)


def get(job_id: uuid.UUID, producer_id: str | None = None) -> Call[JobInfo | None]:
    """The job; with ``producer_id``, None for another producer's job (checked in the query)."""
    return Call("job_get", {"id": job_id, "producer_id": producer_id}, _decode_info)


def outcomes(ids: list[uuid.UUID]) -> Call[dict[uuid.UUID, JobOutcome]]:
    return Call("job_outcomes", {"ids": ids}, lambda rows: {r[0]: JobOutcome(JobState(r[1]), r[2]) for r in rows})


def cancel(job_id: uuid.UUID, producer_id: str | None = None) -> Call[CancelOutcome]:
    """Cancel; with ``producer_id``, another producer's job is ``not_found``."""
    return ActionCall("job_cancel", {"id": job_id, "producer_id": producer_id}, lambda rows: CancelOutcome(rows[0][0]))


def cancel_requested_among(job_ids: Sequence[uuid.UUID]) -> Call[set[uuid.UUID]]:
    """Which of these running jobs the database says were asked to stop (a NOTIFY is only a hint)."""
    return Call("job_cancel_requested_among", {"ids": list(job_ids)}, lambda rows: {r[0] for r in rows})


def transaction_begin(timeout: float) -> Call[None]:
    """The first statement of a handler's transaction: bounded by ``timeout`` seconds (the rest of
    the attempt's deadline)."""
    return Call("job_transaction_begin", {"timeout_ms": f"{max(1, int(timeout * 1000))}ms"}, no_result)


def complete_in_transaction(
    *, worker_id: str, attempt: Attempt, result_json: str | None, duration_ms: float
) -> Call[tuple[bool, bool]]:
    """The attempt's completion inside its handler's transaction: (completed, cancel_requested)."""
    job_id, number = attempt
    return Call(
        "job_complete_in_transaction",
        {"worker_id": worker_id, "id": job_id, "attempt": number, "result": result_json, "duration_ms": duration_ms},
        lambda rows: (rows[0][0], rows[0][1]),
    )


def record_progress(*, worker_id: str, reports: Sequence[tuple[Attempt, float, float | None, str | None]]) -> Call[int]:
    """The latest progress of each attempt in ``reports``: (attempt, done, total, message). How many were written."""
    return Call(
        "job_progress_many",
        {
            "worker_id": worker_id,
            "ids": [attempt[0] for attempt, *_ in reports],
            "attempts": [attempt[1] for attempt, *_ in reports],
            "done": [done for _, done, _, _ in reports],
            "totals": [total for _, _, total, _ in reports],
            "messages": [message for *_, message in reports],
        },
        lambda rows: rows[0][0],
    )

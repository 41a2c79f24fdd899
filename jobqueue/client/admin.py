"""The checks of every client request other than an enqueue, shared by both clients: job and key
ids, listings (of jobs and of the audit log), queue settings, API keys, dead-letter batches, cancels
by filter, circuits and limits.

Each turns its arguments into the store Call to run (or raises `ValidationError` naming the
field), so `AsyncClient` and `Client` differ only in how they run it.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any, Callable, Iterable

from jobqueue.client.validation import timespan
from jobqueue.config import MetricsSettings
from jobqueue.db import gateway as db
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.audit import ACTIONS, AREAS, AuditPage
from jobqueue.model.circuits import Circuit
from jobqueue.model.errors import CircuitNotFound, JobNotFound, LimitNotFound, QueueNotFound, ValidationError
from jobqueue.model.jobs import BulkCancel, JobInfo, JobPage, JobState, Priority
from jobqueue.model.limits import SCOPES, Limit, LimitSpec
from jobqueue.model.names import name_problem
from jobqueue.model.queues import QueueSettings, Unserved
from jobqueue.store import api_keys as key_store
from jobqueue.store import audit as audit_store
from jobqueue.store import circuits as circuit_store
from jobqueue.store import job_admin
from jobqueue.store import queues as queue_store

MAX_PAGE = 500
#: Rows a listing examines per page at most, whatever its filters (see `job_admin.list_jobs`):
#: what one page may cost, ~4 ms and 138 buffers with 1,000,000 jobs (docs/performance.md).
LIST_SCAN = 5_000
MAX_LIST_SCAN = 100_000
ROLES = ("producer", "admin")


def _optional_name(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(field, "must be a non-empty string when given")
    return value


def list_call(
    limit: int,
    cursor: str | None,
    *,
    scan: int = LIST_SCAN,
    state: str | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    priority: Any = None,
    producer_id: str | None = None,
    scheduled: bool | None = None,
) -> db.Call[JobPage]:
    _page_size(limit, scan)
    before = None
    if cursor is not None:
        try:
            before = uuid.UUID(cursor) if isinstance(cursor, str) else None
        except ValueError:
            pass
        if before is None:
            raise ValidationError("cursor", "must be the next_cursor of a previous page")
    if state is not None:
        try:
            state = JobState(state).value
        except ValueError:
            raise ValidationError(
                "state", f"must be one of {', '.join(s.value for s in JobState)} (got {state!r})"
            ) from None
    if scheduled is not None and not isinstance(scheduled, bool):
        raise ValidationError("scheduled", f"must be true or false when given (got {scheduled!r})")
    level = None if priority is None else int(Priority.parse(priority))
    return job_admin.list_jobs(
        limit=limit,
        scan=scan,
        before=before,
        state=state,
        queue=_optional_name("queue", queue),
        job_type=_optional_name("job_type", job_type),
        priority=level,
        producer_id=_optional_name("producer_id", producer_id),
        scheduled=scheduled,
    )


def _page_size(limit: Any, scan: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_PAGE} (got {limit!r})")
    if isinstance(scan, bool) or not isinstance(scan, int) or not limit <= scan <= MAX_LIST_SCAN:
        raise ValidationError("scan", f"must be an integer from limit to {MAX_LIST_SCAN} (got {scan!r})")


def audit_list_call(
    limit: int,
    cursor: str | None,
    *,
    scan: int = LIST_SCAN,
    actor: str | None = None,
    action: str | None = None,
    target: str | None = None,
    since: datetime | None = None,
    producer_id: str | None = None,
) -> db.Call[AuditPage]:
    """One page of the audit log, newest first, as `list_call` pages jobs (``scan``: the entries
    a page may examine); ``action`` is an action or its area, ``since`` an aware time."""
    _page_size(limit, scan)
    before = None
    if cursor is not None:
        if not isinstance(cursor, str) or not cursor.isdigit() or len(cursor) > 19:
            raise ValidationError("cursor", "must be the next_cursor of a previous page")
        before = int(cursor)
    if action is not None and action not in ACTIONS and action not in AREAS:
        raise ValidationError("action", f"must be an action ({', '.join(ACTIONS)}) or an area ({', '.join(AREAS)})")
    if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
        raise ValidationError("since", "must be a timezone-aware time")
    return audit_store.list_entries(
        limit=limit,
        scan=scan,
        before=before,
        actor=_optional_name("actor", actor),
        action=action,
        target=_optional_name("target", target),
        since=since,
        producer_id=_optional_name("producer_id", producer_id),
    )


def queue_name(queue: Any) -> str:
    problem = name_problem(queue)
    if problem is not None:
        raise ValidationError("queue", problem)
    return queue


def paused_call(queue: str, paused: bool, force: Any) -> db.Call[QueueSettings | None]:
    if not isinstance(force, bool):
        raise ValidationError("force", f"must be true or false (got {force!r})")
    return queue_store.set_paused(queue_name(queue), paused, force=force)


def known_queue(queue: str, settings: QueueSettings | None) -> QueueSettings:
    """After `paused_call`: the queue's settings, or `QueueNotFound` when nothing was written."""
    if settings is None:
        raise QueueNotFound(queue)
    return settings


def limits_call(queue: str, soft_limit: int | None, hard_limit: int | None) -> db.Call[QueueSettings]:
    for field, value in (("soft_limit", soft_limit), ("hard_limit", hard_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31):
            raise ValidationError(field, f"must be a positive integer or null (got {value!r})")
    if soft_limit is not None and hard_limit is not None and soft_limit > hard_limit:
        raise ValidationError("soft_limit", "must not exceed hard_limit")
    return queue_store.set_limits(queue_name(queue), soft_limit=soft_limit, hard_limit=hard_limit)


def defaults_call(queue: str, job_ttl: Any, idempotency_window: Any) -> db.Call[QueueSettings]:
    return queue_store.set_enqueue_defaults(
        queue_name(queue),
        job_ttl=timespan(job_ttl, ValidationError, "job_ttl"),
        idempotency_window=timespan(idempotency_window, ValidationError, "idempotency_window"),
    )


def unserved_call(settings: MetricsSettings, cap: int) -> db.Call[list[Unserved]]:
    return queue_store.unserved(cap=cap, stale_seconds=settings.worker_stale_seconds)


def shedding_call(queue: str, shed_low_retries: Any) -> db.Call[QueueSettings]:
    if not isinstance(shed_low_retries, bool):
        raise ValidationError("shed_low_retries", f"must be true or false (got {shed_low_retries!r})")
    return queue_store.set_shedding(queue_name(queue), shed_low_retries)


#: The longest name a key may carry: a label for listings, not a description.
MAX_KEY_NAME = 100


def new_key_call(
    producer_id: Any,
    role: str,
    queues: Iterable[str] | None = None,
    job_types: Iterable[str] | None = None,
    name: Any = None,
    expires_in: Any = None,
) -> tuple[str, db.Call[ApiKey | None]]:
    if not isinstance(producer_id, str) or not producer_id.strip() or len(producer_id) > 200:
        raise ValidationError("producer_id", "must be a non-empty string of at most 200 characters")
    if role not in ROLES:
        raise ValidationError("role", f"must be one of {', '.join(ROLES)} (got {role!r})")
    allowed = {field: _allow_list(field, names) for field, names in (("queues", queues), ("job_types", job_types))}
    if role == "admin" and any(names is not None for names in allowed.values()):
        raise ValidationError(
            "queues" if allowed["queues"] is not None else "job_types",
            "admin keys administer every queue: allow-lists are for producer keys",
        )
    if name is not None and (
        not isinstance(name, str) or not name.strip() or len(name) > MAX_KEY_NAME or not name.isprintable()
    ):
        raise ValidationError("name", f"must be a printable string of 1 to {MAX_KEY_NAME} characters (got {name!r})")
    lifetime = timespan(expires_in, ValidationError, "expires_in")
    key = key_store.new_key()
    return key, key_store.create(key=key, producer_id=producer_id, role=role, name=name, expires_in=lifetime, **allowed)


def _allow_list(field: str, names: Iterable[str] | None) -> list[str] | None:
    """A key's allow-list as stored: None (anything), or distinct non-empty names."""
    if names is None:
        return None
    if isinstance(names, str):
        raise ValidationError(field, "must be a list of names, not one string")
    listed = list(dict.fromkeys(names))
    if not listed or not all(isinstance(name, str) and name.strip() for name in listed):
        raise ValidationError(field, "must name at least one, each a non-empty string")
    for name in listed:  # a name no job could have would be a silent mistake
        problem = name_problem(name)
        if problem is not None:
            raise ValidationError(field, f"{name[:64]!r}: {problem}")
    return listed


BatchCall = Callable[[int], db.Call[tuple[int, int, "int | None"]]]


def retry_batches(queue: str | None, job_type: str | None, batch_size: int) -> BatchCall:
    queue, job_type = _optional_name("queue", queue), _optional_name("job_type", job_type)  # as the listings
    return lambda after: job_admin.retry_dead_batch(after=after, limit=batch_size, queue=queue, job_type=job_type)


def purge_batches(queue: str | None, job_type: str | None, before: datetime | None, batch_size: int) -> BatchCall:
    queue, job_type = _optional_name("queue", queue), _optional_name("job_type", job_type)
    if before is not None and before.tzinfo is None:
        raise ValidationError("before", "must be timezone-aware")
    return lambda after: job_admin.purge_dead_batch(
        after=after, limit=batch_size, queue=queue, job_type=job_type, before=before
    )


#: The states a cancel applies to: waiting (pending, scheduled), waiting for a retry, running, and
#: held back behind an ordering key.
CANCEL_STATES = ("pending", "failed", "processing", "waiting")
MAX_CANCEL_BATCH = 10_000


class CancelRun:
    """A cancel by filter, batch after batch (`job_admin.cancel_batch`): each client runs
    `next_call()` until it is None, waiting `take(result)` seconds between batches. A pass walks the
    waiting jobs once, in index order; jobs it found locked (a claim, an ack, an operator's open
    transaction) are looked for again by another pass from the start. A pass that changes nothing
    while matching jobs stay locked is retried `LOCKED_RETRIES` times, `LOCKED_PAUSE` seconds
    apart, then the run ends incomplete instead of waiting on them."""

    LOCKED_RETRIES = 20
    LOCKED_PAUSE = 0.05

    def __init__(
        self,
        *,
        queue: Any,
        job_type: Any,
        state: Any,
        before: datetime | None,
        producer_id: Any,
        all_jobs: bool,
        batch_size: int,
    ) -> None:
        self._filters = dict(
            queue=_optional_name("queue", queue),
            job_type=_optional_name("job_type", job_type),
            producer_id=_optional_name("producer_id", producer_id),
        )
        if state is not None and state not in CANCEL_STATES:
            raise ValidationError(
                "state", f"must be one of {', '.join(CANCEL_STATES)}: only those can be cancelled (got {state!r})"
            )
        if before is not None and (not isinstance(before, datetime) or before.tzinfo is None):
            raise ValidationError("before", "must be a timezone-aware time")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_CANCEL_BATCH:
            raise ValidationError("batch_size", f"must be an integer from 1 to {MAX_CANCEL_BATCH} (got {batch_size!r})")
        if all_jobs is not True and state is None and before is None and not any(self._filters.values()):
            raise ValidationError(
                "all", "name at least one filter (queue, job_type, state, before, producer_id), or ask for all jobs"
            )
        self._state, self._cutoff, self._limit = state, before, batch_size
        self._after, self._skipped, self._changed = job_admin.CANCEL_START, False, False
        self._done, self._locked_passes, self._first = False, 0, True
        self.result = BulkCancel(0, 0)

    def next_call(self) -> db.Call[job_admin.CancelBatch] | None:
        if self._done:
            return None
        return job_admin.cancel_batch(
            limit=self._limit,
            after=self._after,
            first=self._first,
            cutoff=self._cutoff,
            state=self._state,
            **self._filters,
        )

    def take(self, batch: job_admin.CancelBatch) -> float:
        """Count one batch's work; the seconds to wait before the next one."""
        self._cutoff, self._first = batch.cutoff, False  # the first batch's "now": later jobs are not chased
        self.result = BulkCancel(
            self.result.cancelled + batch.cancelled, self.result.cancel_requested + batch.requested
        )
        self._skipped |= batch.skipped or batch.keyed  # a key's next job may be pending behind the cursor now
        self._changed |= bool(batch.cancelled or batch.requested)
        if batch.ahead and batch.last is not None:
            self._after = batch.last
            return 0.0
        if not (self._skipped or batch.more_left):
            self._done = True
            return 0.0
        # the walk is over, and jobs were left: another pass, from the start
        self._after, self._skipped = job_admin.CANCEL_START, False
        changed, self._changed = self._changed, False
        if changed:
            self._locked_passes = 0
            return 0.0
        self._locked_passes += 1
        if self._locked_passes > self.LOCKED_RETRIES:
            self._done = True
            self.result = dataclasses.replace(self.result, complete=False)
        return self.LOCKED_PAUSE


def found(job_id: uuid.UUID, info: JobInfo | None) -> JobInfo:
    if info is None:
        raise JobNotFound(job_id)
    return info


def circuit_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("name", f"must be a non-empty string (got {name!r})")
    return name


def forced(name: str, changed: str | None) -> db.Call[list[Circuit]]:
    """After `circuit_store.force`: the circuit as it now is (CircuitNotFound if there is none)."""
    if changed is None:
        raise CircuitNotFound(name)
    return circuit_store.list_all(name)


def limit_key(scope: Any, name: Any) -> tuple[str, str]:
    if scope not in SCOPES:
        raise ValidationError("scope", f"must be one of {', '.join(SCOPES)} (got {scope!r})")
    return scope, circuit_name(name)


def limit_of(scope: str, name: str, limits: list[Limit]) -> Limit:
    matching = [limit for limit in limits if (limit.scope, limit.name) == (scope, name)]
    if not matching:  # cleared by someone else in between
        raise LimitNotFound(scope, name)
    return matching[0]


def limit_written(spec: LimitSpec, marked: int | None) -> None:
    """After `limit_store.set_limit`: None means the set would have limited nothing (not written)."""
    if marked is None:
        removed = "rate" if spec.rate is None and "rate" not in spec.keep else "concurrency"
        raise ValidationError(removed, "removing it leaves this limit nothing to limit: clear the limit instead")


def as_uuid(value: Any, field: str = "job_id") -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationError(field, f"must be a UUID (got {value!r})") from None

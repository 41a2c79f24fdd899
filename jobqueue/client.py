"""The producer/admin API: enqueue, enqueue_many, get, cancel — async, with a thin sync facade.

Both clients run the same store Calls through `jobqueue.db.gateway`; only the connection type differs.
Pass ``connection=`` to run inside your own psycopg transaction: the job then exists if and only
if your transaction commits (the NOTIFY that wakes workers is sent at that commit too).

Encryption (`jobqueue.crypto.envelopes`): ``enqueue(..., encrypt=["card.number"])`` and an ``"encrypt"``
entry in an ``enqueue_many`` spec encrypt those payload fields, as do the fields a task declared
(``@queue.task(encrypted=...)``, read from ``jobqueue.task_defaults`` at most 5 s late), with the key
ring of ``settings.encryption_keys``, once the job is validated: sealed for its producer (the one the
database holds this login to, if any), job type and an id made here, which the job is then inserted
with. `AsyncClient` seals a request of many values in a thread, off the event loop. `get` and `wait`
decrypt an encrypted result when this client holds its key; payloads stay encrypted outside the worker.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

import psycopg

from jobqueue.coalesce import SubmitCoalescer
from jobqueue.config import Settings
from jobqueue.crypto.envelopes import Binding, Sealer, new_job_id, open_result
from jobqueue.db import gateway as db
from jobqueue.events.hub import EventHub, EventsUnavailable
from jobqueue.model.api_keys import ApiKey
from jobqueue.model.circuits import Circuit
from jobqueue.model.durations import LONGEST, duration_problem
from jobqueue.model.errors import (
    CircuitNotFound,
    EncryptionError,
    JobFailed,
    JobNotFound,
    LimitNotFound,
    ValidationError,
    WaitTimeout,
)
from jobqueue.model.jobs import (
    CancelOutcome,
    DeleteOutcome,
    JobInfo,
    JobOutcome,
    JobPage,
    JobState,
    Priority,
    RetryOutcome,
    ThroughputMinute,
)
from jobqueue.model.limits import SCOPES, Limit, LimitSpec
from jobqueue.model.names import (
    BLANK,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PRODUCER_ID_LENGTH,
    name_problem,
    too_long,
)
from jobqueue.model.payloads import dumps, holds_nul
from jobqueue.model.queues import QueueSettings, QueueStats, Unserved
from jobqueue.model.quotas import WaitingCounts
from jobqueue.model.workers import RunningJob, WorkerInfo
from jobqueue.observability import metrics, tracing
from jobqueue.runtime.refresh_ahead import RefreshAheadCache
from jobqueue.schedule_admin import Schedules
from jobqueue.store import api_keys as key_store
from jobqueue.store import circuits as circuit_store
from jobqueue.store import events as event_store
from jobqueue.store import history as history_store
from jobqueue.store import jobs as job_store
from jobqueue.store import limits as limit_store
from jobqueue.store import meta as meta_store
from jobqueue.store import metrics as metrics_store
from jobqueue.store import queues as queue_store
from jobqueue.store import workers as worker_store

_ENQUEUE_FIELDS = frozenset({
    "job_type", "payload", "priority", "queue", "run_at", "delay", "max_attempts",
    "idempotency_key", "producer_id", "traceparent", "timeout", "expires_at", "expire_after",
    "idempotency_window", "idempotency_mismatch",
})
#: ``idempotency_mismatch``: a repeat whose job differs returns the original job, or is refused.
MISMATCH_MODES = ("return", "reject")
#: The longest timeout, expiry or idempotency window (as jobqueue.job_problem enforces).
LONGEST_SPAN = LONGEST
#: The priority names as the database takes them: the common case needs no parsing.
_PRIORITY_LABELS = frozenset(level.label for level in Priority)
#: A str as a JSON string, exactly as `json.dumps` writes it (the C encoder's own function).
_json_string = json.encoder.encode_basestring_ascii
#: Values `AsyncClient` seals on the event loop at most (about 20 µs each, so 1.3 ms); a call of
#: more seals them in a thread, this many at a time (a 1 MB request can hold 60,000, 1.2 s of
#: work: in one thread call, the loop's every I/O step waited up to the interpreter's 5 ms switch
#: interval for the lock the thread held, 28 ms for ten socket round trips; in slices, 4 ms).
SEAL_OFF_LOOP = 64


def _span(value: Any, invalid: Callable[[str, str], ValidationError], name: str) -> timedelta | None:
    """Seconds or a timedelta, more than 0 and at most LONGEST_SPAN (`jobqueue.model.durations`)."""
    if value is None:
        return None
    if problem := duration_problem(value):
        raise invalid(name, problem)
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def _interval_text(value: timedelta) -> str:
    """An interval as PostgreSQL reads it, exact to the microsecond."""
    return f"{value.days} days {value.seconds}.{value.microseconds:06d} seconds"


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to enqueue, validated and normalised the same way for every path."""

    job_type: str
    payload_json: str
    priority: str
    queue: str
    run_at: datetime | None
    delay: timedelta | None
    max_attempts: int | None
    idempotency_key: str | None
    producer_id: str | None
    traceparent: str | None
    timeout: timedelta | None = None
    expires_at: datetime | None = None
    expire_after: timedelta | None = None
    idempotency_window: timedelta | None = None
    idempotency_mismatch: str | None = None
    id: uuid.UUID | None = None  # made by the producer when it seals fields for the job (else the database's)

    @classmethod
    def build(cls, job_type: Any, payload: Any = None, *, priority: Any = "normal", queue: Any = "default",
              run_at: Any = None, delay: Any = None, max_attempts: Any = None, idempotency_key: Any = None,
              producer_id: str | None = None, traceparent: str | None = None, timeout: Any = None,
              expires_at: Any = None, expire_after: Any = None, idempotency_window: Any = None,
              idempotency_mismatch: Any = None, field_prefix: str = "") -> "NewJob":
        """Validate and normalise one job. ``timeout``, ``expire_after`` and ``idempotency_window``
        are seconds or a timedelta; ``expires_at`` an aware datetime after the job's run_at (the
        database checks it against a run_at it computes); ``idempotency_mismatch`` is "return"
        (default: a repeat gets the original job) or "reject" (`IdempotencyMismatch` when the
        repeat's job_type, queue or payload differ)."""
        def invalid(name: str, message: str) -> ValidationError:
            return ValidationError(field_prefix + name, message)

        # The checks of names.name_problem written out: this runs for every job of a bulk enqueue.
        if not isinstance(job_type, str) or len(job_type) > MAX_NAME_LENGTH or not job_type.strip(BLANK):
            raise invalid("job_type", name_problem(job_type) or "")
        if not isinstance(queue, str) or len(queue) > MAX_NAME_LENGTH or not queue.strip(BLANK):
            raise invalid("queue", name_problem(queue) or "")
        try:
            payload_json = dumps({} if payload is None else payload)
        except (TypeError, ValueError) as exc:
            raise invalid("payload", f"must be JSON-serialisable ({exc})") from None
        if holds_nul(payload_json):
            raise invalid("payload", "must not contain the NUL character (PostgreSQL's jsonb cannot store it)")
        if type(priority) is not str or priority not in _PRIORITY_LABELS:
            try:
                priority = Priority.parse(priority).label
            except ValidationError as exc:
                raise invalid("priority", exc.message) from None
        if run_at is not None:
            if not isinstance(run_at, datetime):
                raise invalid("run_at", "must be a datetime")
            if run_at.tzinfo is None:
                raise invalid("run_at", "must be timezone-aware")
            # as SQL's job_problem() (0022): Python's datetime, so every reader of the job, ends at year 9999
            if run_at - datetime.now(timezone.utc) > LONGEST_SPAN:
                raise invalid("run_at", f"must be at most {LONGEST_SPAN.days} days from now (got {run_at.isoformat()})")
        if delay is not None:
            if problem := duration_problem(delay, zero=True):
                raise invalid("delay", problem)
            if not isinstance(delay, timedelta):
                delay = timedelta(seconds=delay)
            if run_at is not None:
                raise invalid("run_at", "give run_at or delay, not both")
        if max_attempts is not None and (
            not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
        ):
            raise invalid("max_attempts", f"must be an integer of at least 1 (got {max_attempts!r})")
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not idempotency_key:
                raise invalid("idempotency_key", "must be a non-empty string when given")
            if len(idempotency_key) > MAX_IDEMPOTENCY_KEY_LENGTH:
                raise invalid("idempotency_key", too_long(idempotency_key, MAX_IDEMPOTENCY_KEY_LENGTH) or "")
        if producer_id is not None:
            if not isinstance(producer_id, str) or not producer_id:
                # "" would share the idempotency scope of jobs enqueued without a producer
                raise invalid("producer_id", "must be a non-empty string when given")
            if len(producer_id) > MAX_PRODUCER_ID_LENGTH:
                raise invalid("producer_id", too_long(producer_id, MAX_PRODUCER_ID_LENGTH) or "")
        if traceparent is not None and (problem := tracing.traceparent_problem(traceparent)) is not None:
            raise invalid("traceparent", problem)
        if timeout is not None or expire_after is not None or idempotency_window is not None:
            timeout = _span(timeout, invalid, "timeout")
            expire_after = _span(expire_after, invalid, "expire_after")
            idempotency_window = _span(idempotency_window, invalid, "idempotency_window")
        if expires_at is not None:
            if not isinstance(expires_at, datetime):
                raise invalid("expires_at", "must be a datetime")
            if expires_at.tzinfo is None:
                raise invalid("expires_at", "must be timezone-aware")
            if expire_after is not None:
                raise invalid("expire_after", "give expires_at or expire_after, not both")
            if run_at is not None and expires_at <= run_at:
                raise invalid("expires_at", f"must be after run_at ({run_at.isoformat()})")
            now = datetime.now(timezone.utc)
            due = max(run_at, now) if run_at is not None else now + (delay or timedelta(0))
            if expires_at - due > LONGEST_SPAN:
                raise invalid("expires_at", f"must be at most {LONGEST_SPAN.days} days after run_at "
                                            f"(got {expires_at.isoformat()})")
        if idempotency_mismatch is not None and idempotency_mismatch not in MISMATCH_MODES:
            raise invalid("idempotency_mismatch", f"must be one of {', '.join(MISMATCH_MODES)} "
                                                  f"(got {idempotency_mismatch!r})")
        return cls(job_type, payload_json, priority, queue, run_at, delay, max_attempts,
                   idempotency_key, producer_id, traceparent, timeout, expires_at, expire_after,
                   idempotency_window, idempotency_mismatch)

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any], index: int, producer_id: str | None) -> "NewJob":
        prefix = f"jobs[{index}]."
        if type(spec) is not dict and not isinstance(spec, Mapping):  # the ABC check costs, a dict passes first
            raise ValidationError(f"jobs[{index}]", "must be a mapping of enqueue fields")
        if not _ENQUEUE_FIELDS.issuperset(spec):
            raise ValidationError(prefix + sorted(set(spec) - _ENQUEUE_FIELDS)[0], "is not a field of a job")
        if "producer_id" in spec:
            return cls.build(field_prefix=prefix, **spec)
        return cls.build(field_prefix=prefix, producer_id=producer_id, **spec)

    def sealed(self, job_id: uuid.UUID, payload: Any) -> "NewJob":
        """This job with its payload sealed for ``job_id``, the id it is inserted with."""
        return replace(self, id=job_id, payload_json=dumps(payload))

    def call(self) -> db.Call[uuid.UUID]:
        if self.id is not None:  # only enqueue_many takes an id
            many = _many_call((self,))
            return db.Call(many.name, many.params, lambda rows: many.decode(rows)[0][0])
        return job_store.enqueue(
            job_type=self.job_type, payload_json=self.payload_json, priority=self.priority,
            run_at=self.run_at, delay=self.delay, queue=self.queue, max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key, producer_id=self.producer_id, traceparent=self.traceparent,
            timeout=self.timeout, expires_at=self.expires_at, expire_after=self.expire_after,
            idempotency_window=self.idempotency_window, idempotency_mismatch=self.idempotency_mismatch)

    def as_json_fragment(self) -> str:
        """This job as one element of enqueue_many's JSON array (payload spliced in verbatim).
        Written field by field: a bulk enqueue makes one per job, and most fields are absent."""
        text = ('{"job_type":' + _json_string(self.job_type) + ',"queue":' + _json_string(self.queue)
                + ',"priority":"' + self.priority + '"')
        if self.producer_id is not None:
            text += ',"producer_id":' + _json_string(self.producer_id)
        if self.traceparent is not None:
            text += ',"traceparent":' + _json_string(self.traceparent)
        if self.idempotency_key is not None:
            text += ',"idempotency_key":' + _json_string(self.idempotency_key)
        if self.max_attempts is not None:
            text += f',"max_attempts":{self.max_attempts}'
        if self.run_at is not None:
            text += ',"run_at":"' + self.run_at.isoformat() + '"'
        if self.expires_at is not None:
            text += ',"expires_at":"' + self.expires_at.isoformat() + '"'
        if self.idempotency_mismatch is not None:
            text += ',"idempotency_mismatch":"' + self.idempotency_mismatch + '"'
        if self.id is not None:
            text += ',"id":"' + str(self.id) + '"'
        for name, span in (("delay", self.delay), ("timeout", self.timeout), ("expire_after", self.expire_after),
                           ("idempotency_window", self.idempotency_window)):
            if span is not None:
                text += f',"{name}":"{_interval_text(span)}"'
        return text + ',"payload":' + self.payload_json + "}"


def _build_many(jobs: Iterable[Mapping[str, Any]], producer_id: str | None) -> list[NewJob]:
    return [NewJob.from_mapping(spec, i, producer_id) for i, spec in enumerate(jobs)]


#: Jobs to seal: (index in the call, paths, how errors name its fields).
SealPlan = Sequence[tuple[int, tuple[str, ...], str]]


def _sealed(sealer: Sealer, built: Sequence[NewJob], plan: SealPlan, payloads: Sequence[Any],
            held: str | None) -> list[NewJob]:
    """The planned jobs of ``built`` with their fields sealed (``payloads``: theirs, as given), in
    plan order: each for the producer its row will carry (``held``, the one the database holds the
    session to, else its own), its type and a new id."""
    sealed = []
    for (index, paths, field_prefix), payload in zip(plan, payloads):
        job, job_id = built[index], new_job_id()
        binding = Binding(held if held is not None else job.producer_id, job.job_type, job_id)
        sealed.append(job.sealed(job_id, sealer.seal(payload, paths, binding, field_prefix=field_prefix)))
    return sealed


def _with_sealed(built: list[NewJob], plan: SealPlan, sealed: Sequence[NewJob]) -> list[NewJob]:
    jobs = list(built)
    for (index, _, _), job in zip(plan, sealed):
        jobs[index] = job
    return jobs


def _slices(plan: SealPlan, values: int) -> list[slice]:
    """``plan`` cut into consecutive slices of at most ``values`` values to seal (one job at least)."""
    slices, start, count = [], 0, 0
    for end, (_, paths, _) in enumerate(plan):
        if count and count + len(paths) > values:
            slices.append(slice(start, end))
            start, count = end, 0
        count += len(paths)
    return [*slices, slice(start, len(plan))]


def _many_call(built: Sequence[NewJob], *, lock_wait: float | None = None) -> db.Call[list[tuple[uuid.UUID, bool]]]:
    """One enqueue_many statement; ``lock_wait`` bounds its lock waits when its jobs hold keys."""
    keyed = lock_wait is not None and any(job.idempotency_key is not None for job in built)
    return job_store.enqueue_many("[" + ",".join(job.as_json_fragment() for job in built) + "]",
                                  lock_wait=lock_wait if keyed else None)


#: How often wait() reads the job anyway, in case its final event was missed; and how often it
#: polls when the process has no LISTEN connection.
WAIT_RECHECK = 5.0
WAIT_POLL = 0.5
_FINAL = (JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED)
_FINAL_EVENTS = ("job.completed", "job.dead_letter", "job.cancelled")


def _outcome(info: JobInfo, keys: Any) -> Any:
    """What wait() answers for a finished job: its result (decrypted; `EncryptionKeyMissing` when
    this client lacks the key), or `JobFailed`."""
    if info.state is JobState.COMPLETED:
        return open_result(info.result, keys, Binding(info.producer_id, info.job_type, info.id))
    raise JobFailed(info)


def _readable(info: JobInfo, keys: Any, decrypt: bool) -> JobInfo:
    """The job with its result decrypted when this client may and can; as stored otherwise (a
    status read does not fail for want of a key). The payload stays encrypted: only workers open it."""
    if not decrypt or info.result is None:
        return info
    try:
        result = open_result(info.result, keys, Binding(info.producer_id, info.job_type, info.id))
    except EncryptionError:
        return info
    return info if result is info.result else replace(info, result=result)


MAX_PAGE = 500
#: Rows a listing examines per page at most, whatever its filters (see `job_store.list_jobs`):
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


def _list_call(limit: int, cursor: str | None, *, scan: int = LIST_SCAN, state: str | None = None,
               queue: str | None = None, job_type: str | None = None, priority: Any = None,
               producer_id: str | None = None, scheduled: bool | None = None) -> db.Call[JobPage]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_PAGE} (got {limit!r})")
    if isinstance(scan, bool) or not isinstance(scan, int) or not limit <= scan <= MAX_LIST_SCAN:
        raise ValidationError("scan", f"must be an integer from limit to {MAX_LIST_SCAN} (got {scan!r})")
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
            raise ValidationError("state", f"must be one of {', '.join(s.value for s in JobState)} (got {state!r})") from None
    if scheduled is not None and not isinstance(scheduled, bool):
        raise ValidationError("scheduled", f"must be true or false when given (got {scheduled!r})")
    level = None if priority is None else int(Priority.parse(priority))
    return job_store.list_jobs(limit=limit, scan=scan, before=before, state=state,
                               queue=_optional_name("queue", queue), job_type=_optional_name("job_type", job_type),
                               priority=level, producer_id=_optional_name("producer_id", producer_id),
                               scheduled=scheduled)


def _queue_name(queue: Any) -> str:
    problem = name_problem(queue)
    if problem is not None:
        raise ValidationError("queue", problem)
    return queue


def _limits_call(queue: str, soft_limit: int | None, hard_limit: int | None) -> db.Call[QueueSettings]:
    for field, value in (("soft_limit", soft_limit), ("hard_limit", hard_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31):
            raise ValidationError(field, f"must be a positive integer or null (got {value!r})")
    if soft_limit is not None and hard_limit is not None and soft_limit > hard_limit:
        raise ValidationError("soft_limit", "must not exceed hard_limit")
    return queue_store.set_limits(_queue_name(queue), soft_limit=soft_limit, hard_limit=hard_limit)


def _defaults_call(queue: str, job_ttl: Any, idempotency_window: Any) -> db.Call[QueueSettings]:
    return queue_store.set_enqueue_defaults(_queue_name(queue), job_ttl=_span(job_ttl, ValidationError, "job_ttl"),
                                            idempotency_window=_span(idempotency_window, ValidationError,
                                                                     "idempotency_window"))


def _unserved_call(settings: Settings, cap: int) -> db.Call[list[Unserved]]:
    return queue_store.unserved(cap=cap, stale_seconds=settings.worker_stale_seconds)


def _shedding_call(queue: str, shed_low_retries: Any) -> db.Call[QueueSettings]:
    if not isinstance(shed_low_retries, bool):
        raise ValidationError("shed_low_retries", f"must be true or false (got {shed_low_retries!r})")
    return queue_store.set_shedding(_queue_name(queue), shed_low_retries)


def _new_key_call(producer_id: Any, role: str, queues: Iterable[str] | None = None,
                  job_types: Iterable[str] | None = None) -> tuple[str, db.Call[ApiKey | None]]:
    if not isinstance(producer_id, str) or not producer_id.strip() or len(producer_id) > 200:
        raise ValidationError("producer_id", "must be a non-empty string of at most 200 characters")
    if role not in ROLES:
        raise ValidationError("role", f"must be one of {', '.join(ROLES)} (got {role!r})")
    allowed = {field: _allow_list(field, names) for field, names in (("queues", queues), ("job_types", job_types))}
    if role == "admin" and any(names is not None for names in allowed.values()):
        raise ValidationError("queues" if allowed["queues"] is not None else "job_types",
                              "admin keys administer every queue: allow-lists are for producer keys")
    key = key_store.new_key()
    return key, key_store.create(key=key, producer_id=producer_id, role=role, **allowed)


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


def _retry_batches(queue: str | None, job_type: str | None, batch_size: int) -> BatchCall:
    queue, job_type = _optional_name("queue", queue), _optional_name("job_type", job_type)  # as the listings
    return lambda after: job_store.retry_dead_batch(after=after, limit=batch_size, queue=queue, job_type=job_type)


def _purge_batches(queue: str | None, job_type: str | None, before: datetime | None, batch_size: int) -> BatchCall:
    queue, job_type = _optional_name("queue", queue), _optional_name("job_type", job_type)
    if before is not None and before.tzinfo is None:
        raise ValidationError("before", "must be timezone-aware")
    return lambda after: job_store.purge_dead_batch(after=after, limit=batch_size, queue=queue, job_type=job_type,
                                                    before=before)


def _found(job_id: uuid.UUID, info: JobInfo | None) -> JobInfo:
    if info is None:
        raise JobNotFound(job_id)
    return info


def _circuit_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("name", f"must be a non-empty string (got {name!r})")
    return name


def _forced(name: str, changed: str | None) -> db.Call[list[Circuit]]:
    """After `circuit_store.force`: the circuit as it now is (CircuitNotFound if there is none)."""
    if changed is None:
        raise CircuitNotFound(name)
    return circuit_store.list_all(name)


def _limit_key(scope: Any, name: Any) -> tuple[str, str]:
    if scope not in SCOPES:
        raise ValidationError("scope", f"must be one of {', '.join(SCOPES)} (got {scope!r})")
    return scope, _circuit_name(name)


def _limit_of(scope: str, name: str, limits: list[Limit]) -> Limit:
    found = [limit for limit in limits if (limit.scope, limit.name) == (scope, name)]
    if not found:  # cleared by someone else in between
        raise LimitNotFound(scope, name)
    return found[0]


def _job_id(value: Any, field: str = "job_id") -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValidationError(field, f"must be a UUID (got {value!r})") from None


class AsyncClient:
    """Async producer/admin client over a small autocommit pool (open it, or use ``async with``)."""

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None,
                 producer_id: str | None = None, pool_size: int | None = None, pool_timeout: float = 10.0,
                 connect_timeout: int | None = None, submit_lanes: int = 0, coalesce_max_jobs: int = 1000,
                 coalesce_stall_after: float = 0.1, coalesce_lock_wait: float = 0.2, application_name: str = db.CLIENT_NAME,
                 decrypt_results: bool = True) -> None:
        """``application_name``: how its connections show in ``pg_stat_activity``; their timeouts
        and PgBouncer mode come from ``settings``.

        ``submit_lanes`` > 0 coalesces concurrent `submit` calls made without ``connection=``
        (group commit, `jobqueue.coalesce`): at most that many statements in flight, later
        callers' jobs ride together in the next one, up to ``coalesce_max_jobs`` jobs; a statement
        in flight for ``coalesce_stall_after`` seconds no longer holds its lane; a statement of several
        callers waits at most ``coalesce_lock_wait`` seconds for a lock (another transaction's
        uncommitted holder of one caller's idempotency key) before each caller goes again alone.
        ``decrypt_results=False``: `get` leaves encrypted results as stored (the REST API redacts them)."""
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.dsn
        self.producer_id = producer_id
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured
        self._pool = db.async_pool(self.dsn, min_size=1, max_size=pool_size or self.settings.pool_max_size,
                                   name=application_name, settings=self.settings,
                                   timeout=pool_timeout, connect_timeout=connect_timeout)
        self.coalescer = (SubmitCoalescer(lambda built, grouped: self._run(
                              _many_call(built, lock_wait=coalesce_lock_wait if grouped else None), None),
                                          lanes=submit_lanes,
                                          max_jobs=coalesce_max_jobs, max_wait=pool_timeout,
                                          stall_after=coalesce_stall_after)
                          if submit_lanes > 0 else None)
        #: cron schedules: ``await client.schedules.add(name, cron, job_type, ...)`` (jobqueue.schedule_admin)
        self.schedules = Schedules(lambda call: self._run(call, None))
        self._application_name = application_name
        self._events: EventHub | None = None  # opened by the first wait()
        self.sealer = Sealer(self.settings.encryption_keys)
        self._declarations: RefreshAheadCache[None, Sealer] = RefreshAheadCache(self._learn_declarations,
                                                                                self.sealer.ttl)
        self._held: tuple[str | None] | None = None  # the pool's session producer, once read
        self.decrypt_results = decrypt_results

    async def open(self) -> "AsyncClient":
        await self._pool.open()
        return self

    async def close(self) -> None:
        if self._events is not None:
            await self._events.stop()
        await self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, call: db.Call, connection: psycopg.AsyncConnection | None) -> Any:
        if connection is not None:
            return await db.run(connection, call)
        async with db.connection(self._pool) as conn:
            return await db.run(conn, call)

    async def enqueue(self, job_type: str, payload: Any = None, *, connection: psycopg.AsyncConnection | None = None,
                      **options: Any) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        paths = (await self._sealer()).paths(job_type, options.pop("encrypt", None))
        with tracing.producing(self.tracing, job_type, options) as span:
            job = NewJob.build(job_type, payload, **options)
            if paths:
                job = (await self._seal([job], [(0, paths, "")], [payload], connection))[0]
            job_id = await self._run(job.call(), connection)
            span.enqueued([job_id])
        return job_id

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                           connection: psycopg.AsyncConnection | None = None) -> list[uuid.UUID]:
        return [job_id for job_id, _ in await self.submit(jobs, connection=connection)]

    async def submit(self, jobs: Iterable[Mapping[str, Any]], *, connection: psycopg.AsyncConnection | None = None,
                     admit: Callable[[list[NewJob]], None] | None = None) -> list[tuple[uuid.UUID, bool]]:
        """`enqueue_many` that also says, per job, whether it was created (False: its idempotency key
        was held — within its window — and the holder's id is returned). One statement, all or nothing.
        ``admit`` sees the validated jobs before anything is written and may refuse by raising
        (the REST API's backpressure)."""
        jobs, plan = (await self._sealer()).plan(jobs)
        heavy = sum(len(paths) for _, paths, _ in plan) > SEAL_OFF_LOOP
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            built = _build_many(jobs, self.producer_id)
            if plan:
                built = await self._seal(built, plan, [jobs[index].get("payload") for index, _, _ in plan], connection)
            if admit is not None:
                admit(built)
            if heavy:  # sealing made a statement of ~10x the request (60,000 values: 9.7 MB, 35-84 ms to write)
                results = await self._run(await asyncio.to_thread(_many_call, built), connection)
            elif connection is None and self.coalescer is not None:
                results = await self.coalescer.submit(built)
            else:
                results = await self._run(_many_call(built), connection)
            span.enqueued([job_id for job_id, _ in results])
        return results

    async def _sealer(self) -> Sealer:
        """The sealer, with the tasks' encrypted fields read again when its copy is stale — ahead of
        time and once for concurrent callers (`jobqueue.runtime.refresh_ahead`), so a busy producer never
        waits for that read, and never uses declarations older than the sealer's ttl."""
        await self._declarations.get(None)
        return self.sealer

    async def _learn_declarations(self, _key: None) -> Sealer:
        self.sealer.learn(await self._run(worker_store.encrypted_fields(), None))
        return self.sealer

    async def _seal(self, built: list[NewJob], plan: SealPlan, payloads: Sequence[Any],
                    connection: psycopg.AsyncConnection | None) -> list[NewJob]:
        """``built`` with the planned jobs sealed: on the loop for at most `SEAL_OFF_LOOP` values,
        else in a thread a slice at a time, so a heavy request never holds the event loop every
        other request waits on (30,000 paths once held it for 22-29 s)."""
        held = await self._held_producer(connection)
        if sum(len(paths) for _, paths, _ in plan) <= SEAL_OFF_LOOP:  # (submit() counts the same)
            return _with_sealed(built, plan, _sealed(self.sealer, built, plan, payloads, held))
        sealed: list[NewJob] = []
        for part in _slices(plan, SEAL_OFF_LOOP):
            sealed += await asyncio.to_thread(_sealed, self.sealer, built, plan[part], payloads[part], held)
        return _with_sealed(built, plan, sealed)

    async def _held_producer(self, connection: psycopg.AsyncConnection | None) -> str | None:
        """The producer the database holds this login to (None: any), which the rows of its jobs
        carry whatever a call asks: read once for the pool (it logs in as one role), and on each
        call that brings a connection of its own."""
        if connection is not None:
            return await self._run(job_store.session_producer(), connection)
        if self._held is None:
            self._held = (await self._run(job_store.session_producer(), None),)
        return self._held[0]

    async def get(self, job_id: uuid.UUID | str, *, producer_id: str | None = None,
                  connection: psycopg.AsyncConnection | None = None) -> JobInfo:
        """``producer_id``: as that producer (another producer's job is `JobNotFound`, and costs
        the database what a missing one does)."""
        job_id = _job_id(job_id)
        info = _found(job_id, await self._run(job_store.get(job_id, producer_id), connection))
        return _readable(info, self.settings.encryption_keys, self.decrypt_results)

    async def cancel(self, job_id: uuid.UUID | str, *, producer_id: str | None = None,
                     connection: psycopg.AsyncConnection | None = None) -> CancelOutcome:
        """``producer_id``: act as that producer (another producer's job is ``NOT_FOUND``)."""
        return await self._run(job_store.cancel(_job_id(job_id), producer_id), connection)

    async def wait(self, job_id: uuid.UUID | str, *, timeout: float | None = None) -> Any:
        """The job's result once it has completed; `JobFailed` when it was dead-lettered or
        cancelled (``.info`` holds its errors); `WaitTimeout` after ``timeout`` seconds (None: no
        limit). Woken by the job's own events (LISTEN, one connection per client, shared by every
        wait), not by polling: the job is read once when waiting starts, then on its final event,
        and every `WAIT_RECHECK` seconds and after a reconnect in case an event was missed. Without
        a LISTEN connection (``JOBQUEUE_LISTEN=0``) it reads the job every `WAIT_POLL` seconds."""
        job_id = _job_id(job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        subscription = await self._subscribe(job_id)
        try:
            while True:
                info = await self.get(job_id)
                if info.state in _FINAL:
                    return _outcome(info, self.settings.encryption_keys)
                if not await self._next_event(subscription, deadline):
                    raise WaitTimeout(f"job {job_id} did not finish within {timeout:g} s (it goes on)")
        finally:
            if subscription is not None and self._events is not None:
                self._events.unsubscribe(subscription)

    async def _subscribe(self, job_id: uuid.UUID):
        """A subscription to ``job_id``'s events, or None when this process listens to nothing."""
        if self._events is None:
            listen = (db.Session.of(self.settings, self._application_name, dsn=self.dsn, direct=True).conninfo()
                      if self.settings.listen else None)
            self._events = EventHub(self, listen, name="client-wait")
        try:
            return await self._events.subscribe(queue=None, job_id=job_id, producer_id=None)
        except EventsUnavailable:
            return None

    async def _next_event(self, subscription, deadline: float | None) -> bool:
        """Until the job's next final event, a reconnect or the recheck interval (True: read the job
        again), or the deadline (False)."""
        recheck = time.monotonic() + (WAIT_RECHECK if subscription is not None else WAIT_POLL)
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            remaining = (recheck if deadline is None else min(recheck, deadline)) - time.monotonic()
            if remaining <= 0:
                return True
            if subscription is None:
                await asyncio.sleep(remaining)
                continue
            try:
                event = await asyncio.wait_for(subscription.inbox.get(), remaining)
            except asyncio.TimeoutError:
                continue
            if event.event in _FINAL_EVENTS or event.event.startswith("stream."):
                return True

    async def outcomes(self, job_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, JobOutcome]:
        """The state of each job and its result once completed, in one query; ids that do not
        exist are left out."""
        return await self._run(job_store.outcomes(list(job_ids)), None)

    # --- listings, dead letters, queues, API keys (the REST API and admin tools) ---------------

    async def list_jobs(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> JobPage:
        """Newest first; filters: state, queue, job_type, priority, producer_id, scheduled (True:
        run_at still ahead, False: due). Each page examines at most ``scan`` rows (default
        `LIST_SCAN`): a page may hold fewer than ``limit`` jobs, even none, and still have a
        ``next_cursor`` — only a None cursor means there is nothing older."""
        return await self._run(_list_call(limit, cursor, **filters), None)

    async def delete_waiting(self, job_id: uuid.UUID | str) -> tuple[DeleteOutcome, JobState | None]:
        """Delete a job that has not started (pending or scheduled, no attempt yet) with its
        idempotency key; (outcome, the state it was found in). A started job is kept: cancel it."""
        return await self._run(job_store.delete_waiting(_job_id(job_id)), None)

    async def running_jobs(self, *, per_worker: int = 10) -> dict[str, tuple[int, list[RunningJob]]]:
        """Per worker id: how many jobs it runs now, and the oldest ``per_worker`` of them."""
        return await self._run(job_store.running_by_worker(per_worker=per_worker), None)

    async def throughput_history(self, *, minutes: int = 60) -> list[ThroughputMinute]:
        """The last ``minutes`` minutes of throughput (rates per second), as the maintenance leader
        sampled them; oldest first. Empty while no leader has run the historian."""
        return await self._run(history_store.rates(minutes=minutes), None)

    async def retry_dead(self, job_id: uuid.UUID | str) -> RetryOutcome:
        """A dead-lettered job back to pending now (one more attempt allowed)."""
        return await self._run(job_store.retry_dead(_job_id(job_id)), None)

    async def retry_dead_letters(self, *, queue: str | None = None, job_type: str | None = None,
                                 batch_size: int = 500) -> int:
        """Every dead job matching the filters back to pending, in batches; returns how many."""
        return await self._batches(_retry_batches(queue, job_type, batch_size), batch_size)

    async def purge_dead_letters(self, *, queue: str | None = None, job_type: str | None = None,
                                 before: datetime | None = None, batch_size: int = 1000) -> int:
        """Delete dead jobs matching the filters (died before ``before``), in batches; returns how many."""
        return await self._batches(_purge_batches(queue, job_type, before, batch_size), batch_size)

    async def _batches(self, batch: BatchCall, batch_size: int) -> int:
        total, after, scanned = 0, 0, batch_size
        while scanned >= batch_size:
            done, scanned, after = await self._run(batch(after), None)
            total += done
        return total

    async def workers(self) -> list[WorkerInfo]:
        """The worker registry: every worker process's row, live ones first."""
        return await self._run(worker_store.list_all(), None)

    async def queue_stats(self) -> list[QueueStats]:
        return await self._run(queue_store.stats(), None)

    async def unserved_jobs(self, *, cap: int = 1_000_000) -> list[Unserved]:
        """Runnable jobs whose type no live worker of their queue has a handler for, per queue and
        job type (counts stop at ``cap`` per priority level): no worker claims them until one whose
        app can run them starts."""
        return await self._run(_unserved_call(self.settings, cap), None)

    async def circuits(self) -> list[Circuit]:
        """Every circuit breaker workers declared, with its state and job types."""
        return await self._run(circuit_store.list_all(), None)

    async def open_circuit(self, name: str) -> Circuit:
        """Hold the breaker open: no worker claims its job types, and no probe runs, until
        `close_circuit`. CircuitNotFound if no worker declared it."""
        return await self._force_circuit(name, "open")

    async def close_circuit(self, name: str) -> Circuit:
        """Close the breaker now (its failure count starts afresh; it trips again on new failures)."""
        return await self._force_circuit(name, "close")

    async def _force_circuit(self, name: str, action: str) -> Circuit:
        name = _circuit_name(name)
        changed = await self._run(circuit_store.force(name, action), None)
        return (await self._run(_forced(name, changed), None))[0]

    async def limits(self) -> list[Limit]:
        """Every global limit, with the jobs running under it and the starts in its current window."""
        return await self._run(limit_store.list_all(), None)

    async def set_limit(self, scope: str, name: str, *, concurrency: int | None = None,
                        rate: str | None = None) -> Limit:
        """Set (or replace) a limit on a job type (``scope="job_type"``) or queue (``"queue"``); it
        wins over the code's until `clear_limit`. Its jobs already running count against it."""
        spec = LimitSpec.build(scope, name, concurrency=concurrency, rate=rate)
        await self._run(limit_store.set_limit(spec), None)
        return _limit_of(spec.scope, spec.name, await self._run(limit_store.list_all(), None))

    async def clear_limit(self, scope: str, name: str) -> None:
        """Remove a limit (LimitNotFound if there is none); a code limit returns at the next worker start."""
        scope, name = _limit_key(scope, name)
        if await self._run(limit_store.clear(scope, name), None) is None:
            raise LimitNotFound(scope, name)

    async def pause_queue(self, queue: str) -> QueueSettings:
        """Workers stop claiming from ``queue`` (within milliseconds); it keeps accepting jobs."""
        return await self._run(queue_store.set_paused(_queue_name(queue), True), None)

    async def resume_queue(self, queue: str) -> QueueSettings:
        return await self._run(queue_store.set_paused(_queue_name(queue), False), None)

    async def set_queue_limits(self, queue: str, *, soft_limit: int | None, hard_limit: int | None) -> QueueSettings:
        return await self._run(_limits_call(queue, soft_limit, hard_limit), None)

    async def set_queue_defaults(self, queue: str, *, job_ttl: timedelta | float | None,
                                 idempotency_window: timedelta | float | None) -> QueueSettings:
        """What enqueue applies to ``queue``'s jobs when a call gives none (seconds or timedelta):
        ``job_ttl`` expires waiting jobs that long after their run_at (None: never);
        ``idempotency_window`` holds their keys that long (None: 24 hours)."""
        return await self._run(_defaults_call(queue, job_ttl, idempotency_window), None)

    async def set_queue_shedding(self, queue: str, shed_low_retries: bool) -> QueueSettings:
        """Load shedding on retry for ``queue``: while on and the queue is above its soft limit, a
        retryable failure of a ``low`` job is dead-lettered (dead_reason ``shed``), not retried."""
        return await self._run(_shedding_call(queue, shed_low_retries), None)

    async def queue_settings(self) -> dict[str, QueueSettings]:
        return await self._run(queue_store.all_settings(), None)

    async def waiting_counts(self, *, cap: int, stale_seconds: float) -> WaitingCounts:
        """Waiting jobs per queue (pending, scheduled or waiting for a retry), each count capped at
        ``cap`` (bounded cost), and the queues live workers serve."""
        return await self._run(queue_store.waiting_counts(cap=cap, stale_seconds=stale_seconds), None)

    async def submitted_total(self) -> int:
        """Jobs ever submitted (the job sequence, rolled-back enqueues included): one cheap read."""
        return await self._run(metrics_store.submitted(), None)

    async def create_api_key(self, producer_id: str, *, role: str = "producer", queues: Iterable[str] | None = None,
                             job_types: Iterable[str] | None = None) -> tuple[str, ApiKey]:
        """A new key (returned once, stored only hashed) acting as ``producer_id``; ``queues`` /
        ``job_types``: the only ones it may submit (producer keys; None: any)."""
        key, call = _new_key_call(producer_id, role, queues, job_types)
        return key, await self._run(call, None)

    async def api_key(self, key: str) -> ApiKey | None:
        """The live key matching ``key``, or None (unknown or revoked)."""
        return await self._run(key_store.lookup(key), None)

    async def api_keys(self) -> list[ApiKey]:
        return await self._run(key_store.list_all(), None)

    async def api_secret(self, name: str) -> bytes | None:
        """A secret the REST API's processes share (``jobqueue.api_secrets``; ``cursor`` seals
        listing cursors), or None. Readable by the API and admin roles only."""
        return await self._run(key_store.secret(name), None)

    async def revoke_api_key(self, key_id: uuid.UUID | str) -> ApiKey | None:
        return await self._run(key_store.revoke(_job_id(key_id, field="key_id")), None)

    async def metrics_snapshot(self, *, cap: int, stale_seconds: float, max_queues: int | None = None) -> metrics.Snapshot:
        """What /metrics and the dashboard show, read on one pooled connection (see jobqueue.observability.metrics);
        ``max_queues``: at most that many undeclared queues by name (`metrics.fold`)."""
        async with db.connection(self._pool) as conn:
            return await metrics.collect(conn, cap=cap, stale_seconds=stale_seconds, max_queues=max_queues)

    async def schema_revision(self) -> str | None:
        return await self._run(meta_store.schema_revision(), None)

    async def register_event_listener(self, listener_id: str, *, ttl: float) -> None:
        """Ask the database to send job events for ``ttl`` seconds (refresh while listening)."""
        await self._run(event_store.register_listener(listener_id, ttl=ttl), None)

    async def unregister_event_listener(self, listener_id: str) -> None:
        await self._run(event_store.unregister_listener(listener_id), None)

    async def job_event_rows(self, job_ids: Sequence[uuid.UUID], *,
                             recent_seconds: float) -> dict[uuid.UUID, event_store.EventRow]:
        """The rows of jobs that job-event notifications named (what the event hub checks them against)."""
        return await self._run(event_store.job_rows(job_ids, recent_seconds=recent_seconds), None)


class Client:
    """The same API, blocking: for scripts, web frameworks without asyncio, and psycopg sync code."""

    def __init__(self, dsn: str | None = None, *, settings: Settings | None = None,
                 producer_id: str | None = None, pool_size: int | None = None, pool_timeout: float = 10.0,
                 application_name: str = db.CLIENT_NAME) -> None:
        self.settings = settings or Settings.from_env()
        self.dsn = dsn or self.settings.dsn
        self.producer_id = producer_id
        self._pool = db.sync_pool(self.dsn, min_size=1, max_size=pool_size or self.settings.pool_max_size,
                                  name=application_name, settings=self.settings,
                                  timeout=pool_timeout)
        #: cron schedules: ``client.schedules.add(name, cron, job_type, ...)`` (jobqueue.schedule_admin)
        self.schedules = Schedules(lambda call: self._run(call, None))
        self.tracing = tracing.from_env()  # None (no spans, no cost) unless OpenTelemetry is configured
        self.sealer = Sealer(self.settings.encryption_keys)
        self._held: tuple[str | None] | None = None  # the pool's session producer, once read

    def open(self) -> "Client":
        self._pool.open()
        return self

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "Client":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, call: db.Call, connection: psycopg.Connection | None) -> Any:
        if connection is not None:
            return db.run_sync(connection, call)
        with db.connection_sync(self._pool) as conn:
            return db.run_sync(conn, call)

    def enqueue(self, job_type: str, payload: Any = None, *, connection: psycopg.Connection | None = None,
                **options: Any) -> uuid.UUID:
        options.setdefault("producer_id", self.producer_id)
        paths = self._sealer().paths(job_type, options.pop("encrypt", None))
        with tracing.producing(self.tracing, job_type, options) as span:
            job = NewJob.build(job_type, payload, **options)
            if paths:
                job = _sealed(self.sealer, [job], [(0, paths, "")], [payload], self._held_producer(connection))[0]
            job_id = self._run(job.call(), connection)
            span.enqueued([job_id])
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]], *,
                     connection: psycopg.Connection | None = None) -> list[uuid.UUID]:
        return [job_id for job_id, _ in self.submit(jobs, connection=connection)]

    def submit(self, jobs: Iterable[Mapping[str, Any]], *,
               connection: psycopg.Connection | None = None) -> list[tuple[uuid.UUID, bool]]:
        jobs, plan = self._sealer().plan(jobs)
        with tracing.producing_many(self.tracing, list(jobs)) as (span, jobs):
            built = _build_many(jobs, self.producer_id)
            if plan:
                built = _with_sealed(built, plan, _sealed(self.sealer, built, plan,
                                                          [jobs[index].get("payload") for index, _, _ in plan],
                                                          self._held_producer(connection)))
            results = self._run(_many_call(built), connection)
            span.enqueued([job_id for job_id, _ in results])
        return results

    def _sealer(self) -> Sealer:
        if self.sealer.stale():
            self.sealer.learn(self._run(worker_store.encrypted_fields(), None))
        return self.sealer

    def _held_producer(self, connection: psycopg.Connection | None) -> str | None:
        """`AsyncClient._held_producer`."""
        if connection is not None:
            return self._run(job_store.session_producer(), connection)
        if self._held is None:
            self._held = (self._run(job_store.session_producer(), None),)
        return self._held[0]

    def get(self, job_id: uuid.UUID | str, *, producer_id: str | None = None,
            connection: psycopg.Connection | None = None) -> JobInfo:
        job_id = _job_id(job_id)
        return _readable(_found(job_id, self._run(job_store.get(job_id, producer_id), connection)),
                         self.settings.encryption_keys, True)

    def cancel(self, job_id: uuid.UUID | str, *, producer_id: str | None = None,
               connection: psycopg.Connection | None = None) -> CancelOutcome:
        return self._run(job_store.cancel(_job_id(job_id), producer_id), connection)

    def wait(self, job_id: uuid.UUID | str, *, timeout: float | None = None) -> Any:
        """`AsyncClient.wait`, blocking (it runs one on its own event loop for the call: not from
        inside a running event loop)."""
        async def waiting() -> Any:
            async with AsyncClient(self.dsn, settings=self.settings, pool_size=1) as client:
                return await client.wait(job_id, timeout=timeout)

        return asyncio.run(waiting())

    def list_jobs(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> JobPage:
        return self._run(_list_call(limit, cursor, **filters), None)

    def retry_dead(self, job_id: uuid.UUID | str) -> RetryOutcome:
        return self._run(job_store.retry_dead(_job_id(job_id)), None)

    def delete_waiting(self, job_id: uuid.UUID | str) -> tuple[DeleteOutcome, JobState | None]:
        return self._run(job_store.delete_waiting(_job_id(job_id)), None)

    def retry_dead_letters(self, *, queue: str | None = None, job_type: str | None = None, batch_size: int = 500) -> int:
        return self._batches(_retry_batches(queue, job_type, batch_size), batch_size)

    def purge_dead_letters(self, *, queue: str | None = None, job_type: str | None = None,
                           before: datetime | None = None, batch_size: int = 1000) -> int:
        return self._batches(_purge_batches(queue, job_type, before, batch_size), batch_size)

    def _batches(self, batch: BatchCall, batch_size: int) -> int:
        total, after, scanned = 0, 0, batch_size
        while scanned >= batch_size:
            done, scanned, after = self._run(batch(after), None)
            total += done
        return total

    def workers(self) -> list[WorkerInfo]:
        return self._run(worker_store.list_all(), None)

    def queue_stats(self) -> list[QueueStats]:
        return self._run(queue_store.stats(), None)

    def unserved_jobs(self, *, cap: int = 1_000_000) -> list[Unserved]:
        return self._run(_unserved_call(self.settings, cap), None)

    def circuits(self) -> list[Circuit]:
        return self._run(circuit_store.list_all(), None)

    def open_circuit(self, name: str) -> Circuit:
        return self._force_circuit(name, "open")

    def close_circuit(self, name: str) -> Circuit:
        return self._force_circuit(name, "close")

    def _force_circuit(self, name: str, action: str) -> Circuit:
        name = _circuit_name(name)
        changed = self._run(circuit_store.force(name, action), None)
        return self._run(_forced(name, changed), None)[0]

    def limits(self) -> list[Limit]:
        return self._run(limit_store.list_all(), None)

    def set_limit(self, scope: str, name: str, *, concurrency: int | None = None, rate: str | None = None) -> Limit:
        spec = LimitSpec.build(scope, name, concurrency=concurrency, rate=rate)
        self._run(limit_store.set_limit(spec), None)
        return _limit_of(spec.scope, spec.name, self._run(limit_store.list_all(), None))

    def clear_limit(self, scope: str, name: str) -> None:
        scope, name = _limit_key(scope, name)
        if self._run(limit_store.clear(scope, name), None) is None:
            raise LimitNotFound(scope, name)

    def pause_queue(self, queue: str) -> QueueSettings:
        return self._run(queue_store.set_paused(_queue_name(queue), True), None)

    def resume_queue(self, queue: str) -> QueueSettings:
        return self._run(queue_store.set_paused(_queue_name(queue), False), None)

    def set_queue_limits(self, queue: str, *, soft_limit: int | None, hard_limit: int | None) -> QueueSettings:
        return self._run(_limits_call(queue, soft_limit, hard_limit), None)

    def set_queue_defaults(self, queue: str, *, job_ttl: timedelta | float | None,
                           idempotency_window: timedelta | float | None) -> QueueSettings:
        return self._run(_defaults_call(queue, job_ttl, idempotency_window), None)

    def set_queue_shedding(self, queue: str, shed_low_retries: bool) -> QueueSettings:
        return self._run(_shedding_call(queue, shed_low_retries), None)

    def create_api_key(self, producer_id: str, *, role: str = "producer", queues: Iterable[str] | None = None,
                       job_types: Iterable[str] | None = None) -> tuple[str, ApiKey]:
        key, call = _new_key_call(producer_id, role, queues, job_types)
        return key, self._run(call, None)

    def api_keys(self) -> list[ApiKey]:
        return self._run(key_store.list_all(), None)

    def revoke_api_key(self, key_id: uuid.UUID | str) -> ApiKey | None:
        return self._run(key_store.revoke(_job_id(key_id, field="key_id")), None)

"""Enqueue validation: `NewJob`, one job checked and normalised the same way for every path
(`enqueue`, `enqueue_many`/`submit`, the REST API through them), and the `enqueue_many` statement.

A bad job is refused with a `ValidationError` naming its field (``jobs[i].…`` in a bulk call)
before anything is sent; the time bounds are the rule SQL's ``job_problem()`` applies (migration
0022), which the database checks all the same.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from jobqueue.db import gateway as db
from jobqueue.model.durations import LONGEST, duration_problem
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority
from jobqueue.model.names import (
    BLANK,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_ORDERING_KEY_LENGTH,
    MAX_PRODUCER_ID_LENGTH,
    name_problem,
    too_long,
)
from jobqueue.model.payloads import dumps, holds_nul
from jobqueue.observability import tracing
from jobqueue.store import jobs as job_store

_ENQUEUE_FIELDS = frozenset(
    {
        "job_type",
        "payload",
        "priority",
        "queue",
        "run_at",
        "delay",
        "max_attempts",
        "idempotency_key",
        "producer_id",
        "traceparent",
        "timeout",
        "expires_at",
        "expire_after",
        "idempotency_window",
        "idempotency_mismatch",
        "ordering_key",
    }
)
#: ``idempotency_mismatch``: a repeat whose job differs returns the original job, or is refused.
MISMATCH_MODES = ("return", "reject")
#: The longest timeout, expiry or idempotency window (as jobqueue.job_problem enforces).
LONGEST_SPAN = LONGEST
#: The priority names as the database takes them: the common case needs no parsing.
_PRIORITY_LABELS = frozenset(level.label for level in Priority)
#: A str as a JSON string, exactly as `json.dumps` writes it (the C encoder's own function).
_json_string = json.encoder.encode_basestring_ascii


def timespan(value: Any, invalid: Callable[[str, str], ValidationError], name: str) -> timedelta | None:
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
    #: jobs of one producer with the same key run one at a time, in enqueue order
    ordering_key: str | None = None
    id: uuid.UUID | None = None  # made by the producer when it seals fields for the job (else the database's)

    @classmethod
    def build(
        cls,
        job_type: Any,
        payload: Any = None,
        *,
        priority: Any = "normal",
        queue: Any = "default",
        run_at: Any = None,
        delay: Any = None,
        max_attempts: Any = None,
        idempotency_key: Any = None,
        producer_id: str | None = None,
        traceparent: str | None = None,
        timeout: Any = None,
        expires_at: Any = None,
        expire_after: Any = None,
        idempotency_window: Any = None,
        idempotency_mismatch: Any = None,
        ordering_key: Any = None,
        field_prefix: str = "",
    ) -> "NewJob":
        """Validate and normalise one job. ``timeout``, ``expire_after`` and ``idempotency_window``
        are seconds or a timedelta; ``expires_at`` an aware datetime after the job's run_at (the
        database checks it against a run_at it computes); ``idempotency_mismatch`` is "return"
        (default: a repeat gets the original job) or "reject" (`IdempotencyMismatch` when the
        repeat's job_type, queue or payload differ); ``ordering_key`` a string of at most 255
        characters: jobs of one producer with the same key run one at a time, in enqueue order."""

        def invalid(name: str, message: str) -> ValidationError:
            return ValidationError(field_prefix + name, message)

        # The checks of names.name_problem written out: this runs for every job of a bulk enqueue.
        if (
            not isinstance(job_type, str)
            or len(job_type) > MAX_NAME_LENGTH
            or not job_type.strip(BLANK)
            or "\x00" in job_type
        ):
            raise invalid("job_type", name_problem(job_type) or "")
        if not isinstance(queue, str) or len(queue) > MAX_NAME_LENGTH or not queue.strip(BLANK) or "\x00" in queue:
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
        if ordering_key is not None and (
            not isinstance(ordering_key, str)
            or len(ordering_key) > MAX_ORDERING_KEY_LENGTH
            or not ordering_key.strip(BLANK)
        ):
            problem = too_long(ordering_key, MAX_ORDERING_KEY_LENGTH) if isinstance(ordering_key, str) else None
            raise invalid("ordering_key", problem or "must be a non-blank string when given")
        if producer_id is not None:
            if not isinstance(producer_id, str) or not producer_id:
                # "" would share the idempotency scope of jobs enqueued without a producer
                raise invalid("producer_id", "must be a non-empty string when given")
            if len(producer_id) > MAX_PRODUCER_ID_LENGTH:
                raise invalid("producer_id", too_long(producer_id, MAX_PRODUCER_ID_LENGTH) or "")
        if traceparent is not None and (problem := tracing.traceparent_problem(traceparent)) is not None:
            raise invalid("traceparent", problem)
        if timeout is not None or expire_after is not None or idempotency_window is not None:
            timeout = timespan(timeout, invalid, "timeout")
            expire_after = timespan(expire_after, invalid, "expire_after")
            idempotency_window = timespan(idempotency_window, invalid, "idempotency_window")
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
                raise invalid(
                    "expires_at",
                    f"must be at most {LONGEST_SPAN.days} days after run_at (got {expires_at.isoformat()})",
                )
        if idempotency_mismatch is not None and idempotency_mismatch not in MISMATCH_MODES:
            raise invalid(
                "idempotency_mismatch", f"must be one of {', '.join(MISMATCH_MODES)} (got {idempotency_mismatch!r})"
            )
        return cls(
            job_type,
            payload_json,
            priority,
            queue,
            run_at,
            delay,
            max_attempts,
            idempotency_key,
            producer_id,
            traceparent,
            timeout,
            expires_at,
            expire_after,
            idempotency_window,
            idempotency_mismatch,
            ordering_key,
        )

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
            many = many_call((self,))
            return db.Call(many.name, many.params, lambda rows: many.decode(rows)[0][0])
        return job_store.enqueue(
            job_type=self.job_type,
            payload_json=self.payload_json,
            priority=self.priority,
            run_at=self.run_at,
            delay=self.delay,
            queue=self.queue,
            max_attempts=self.max_attempts,
            idempotency_key=self.idempotency_key,
            producer_id=self.producer_id,
            traceparent=self.traceparent,
            timeout=self.timeout,
            expires_at=self.expires_at,
            expire_after=self.expire_after,
            idempotency_window=self.idempotency_window,
            idempotency_mismatch=self.idempotency_mismatch,
            ordering_key=self.ordering_key,
        )

    def as_json_fragment(self) -> str:
        """This job as one element of enqueue_many's JSON array (payload spliced in verbatim).
        Written field by field: a bulk enqueue makes one per job, and most fields are absent."""
        text = (
            '{"job_type":'
            + _json_string(self.job_type)
            + ',"queue":'
            + _json_string(self.queue)
            + ',"priority":"'
            + self.priority
            + '"'
        )
        if self.producer_id is not None:
            text += ',"producer_id":' + _json_string(self.producer_id)
        if self.traceparent is not None:
            text += ',"traceparent":' + _json_string(self.traceparent)
        if self.idempotency_key is not None:
            text += ',"idempotency_key":' + _json_string(self.idempotency_key)
        if self.ordering_key is not None:
            text += ',"ordering_key":' + _json_string(self.ordering_key)
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
        for name, span in (
            ("delay", self.delay),
            ("timeout", self.timeout),
            ("expire_after", self.expire_after),
            ("idempotency_window", self.idempotency_window),
        ):
            if span is not None:
                text += f',"{name}":"{_interval_text(span)}"'
        return text + ',"payload":' + self.payload_json + "}"


def build_many(jobs: Iterable[Mapping[str, Any]], producer_id: str | None) -> list[NewJob]:
    return [NewJob.from_mapping(spec, i, producer_id) for i, spec in enumerate(jobs)]


def many_call(built: Sequence[NewJob], *, lock_wait: float | None = None) -> db.Call[list[tuple[uuid.UUID, bool]]]:
    """One enqueue_many statement; ``lock_wait`` bounds its lock waits when its jobs hold keys
    (an idempotency key's row, an ordering key's lock)."""
    keyed = lock_wait is not None and any(
        job.idempotency_key is not None or job.ordering_key is not None for job in built
    )
    return job_store.enqueue_many(
        "[" + ",".join(job.as_json_fragment() for job in built) + "]", lock_wait=lock_wait if keyed else None
    )


class ValidatedJob(Protocol):
    """What a `submit` call's ``admit`` hook sees of each job: validated and normalised (its
    names within their limits, its priority a level's label), nothing written yet. A `NewJob`."""

    @property
    def job_type(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def priority(self) -> str:
        """The level's label: critical, high, normal or low."""

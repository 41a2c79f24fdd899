"""Request and response bodies of the REST API's queue endpoints (/queues and its settings): the
queues' depths and rates from the metrics snapshot, and what an operator may change on a queue.
The job endpoints' bodies are in `jobqueue.api.schemas`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec
from msgspec import Meta

from jobqueue.api.schemas import INT32, TEN_YEARS, seconds
from jobqueue.model.jobs import Priority
from jobqueue.model.queues import QueueSettings
from jobqueue.observability.metrics import OTHER, Snapshot


class PriorityLevel(msgspec.Struct):
    """One priority level of a queue, as /metrics counts it (see `QueueList`)."""

    priority: str
    depth: int
    scheduled: int
    retrying: int
    processing: int
    oldest_age_seconds: float


class QueueOut(msgspec.Struct):
    queue: str
    paused: bool
    soft_limit: int | None
    hard_limit: int | None
    job_ttl_seconds: float | None
    idempotency_window_seconds: float | None
    shed_low_retries: bool
    depth: int
    scheduled: int
    retrying: int
    processing: int
    dead: int
    oldest_age_seconds: float
    priorities: list[PriorityLevel]
    unserved: int = 0
    unserved_job_types: dict[str, int] = {}

    @classmethod
    def of(
        cls,
        name: str,
        settings: QueueSettings,
        levels: list[PriorityLevel],
        dead: int,
        unserved: dict[str, int] | None = None,
    ) -> "QueueOut":
        return cls(
            name,
            settings.paused,
            settings.soft_limit,
            settings.hard_limit,
            seconds(settings.job_ttl),
            seconds(settings.idempotency_window),
            settings.shed_low_retries,
            sum(s.depth for s in levels),
            sum(s.scheduled for s in levels),
            sum(s.retrying for s in levels),
            sum(s.processing for s in levels),
            dead,
            max((s.oldest_age_seconds for s in levels), default=0.0),
            levels,
            sum((unserved or {}).values()),
            unserved or {},
        )


class OtherQueues(msgspec.Struct):
    """What the queues not listed by name hold together (``queues`` of them): the figures of
    `QueueOut`, summed."""

    queues: int
    depth: int
    scheduled: int
    retrying: int
    processing: int
    dead: int


class QueueList(msgspec.Struct):
    """Every queue with jobs waiting, running or dead, served by a live worker, or configured by an
    admin — read from the metrics snapshot /metrics serves (`jobqueue.observability.metrics`), not counted per
    request: ``measured_at`` is when it was counted, and it is served for up to
    ``max_age_seconds`` after that. Same figures as /metrics: ``depth`` runnable now (pending, or
    failed and due), ``scheduled`` run_at still ahead (delays, retries not yet due), ``retrying``
    waiting for a retry (state failed, counted in depth or scheduled too), ``processing``,
    ``dead`` dead-lettered; ``unserved`` runnable jobs whose job type no live worker of the queue has
    a handler for (``unserved_job_types``: how many of each) — no worker claims them, they wait; each
    count stops at ``count_cap``. Listed by name: every queue a
    live worker serves or an admin configured, and the ``JOBQUEUE_METRICS_MAX_QUEUES`` largest
    others; ``other`` sums up the rest (null when there is none)."""

    queues: list[QueueOut]
    measured_at: datetime
    max_age_seconds: float
    count_cap: int
    other: OtherQueues | None = None

    @classmethod
    def of(cls, snapshot: Snapshot, max_age_seconds: float) -> "QueueList":
        levels: dict[str, list[PriorityLevel]] = {}
        for q in snapshot.queues:
            figures = levels.setdefault(q.queue, [])
            if q.runnable or q.scheduled or q.retrying or q.processing:
                figures.append(
                    PriorityLevel(
                        Priority(q.priority).label,
                        q.runnable,
                        q.scheduled,
                        q.retrying,
                        q.processing,
                        round(q.oldest_age_seconds, 3),
                    )
                )
        dead: dict[str, int] = {}
        for d in snapshot.dead:
            dead[d.queue] = dead.get(d.queue, 0) + d.dead
        unserved: dict[str, dict[str, int]] = {}
        for u in snapshot.unserved:
            unserved.setdefault(u.queue, {})[u.job_type] = u.runnable
        names = sorted((set(levels) | set(dead) | set(snapshot.settings)) - {OTHER})
        listed = [
            QueueOut.of(
                name,
                snapshot.settings.get(name) or QueueSettings(name),
                levels.get(name, []),
                dead.get(name, 0),
                unserved.get(name),
            )
            for name in names
        ]
        other = None
        if snapshot.other_queues:
            rest = QueueOut.of(OTHER, QueueSettings(OTHER), levels.get(OTHER, []), dead.get(OTHER, 0))
            other = OtherQueues(
                snapshot.other_queues, rest.depth, rest.scheduled, rest.retrying, rest.processing, rest.dead
            )
        return cls(listed, snapshot.measured_at, max_age_seconds, snapshot.cap, other)


class QueueSettingsOut(msgspec.Struct):
    queue: str
    paused: bool
    soft_limit: int | None
    hard_limit: int | None
    job_ttl_seconds: float | None
    idempotency_window_seconds: float | None
    shed_low_retries: bool

    @classmethod
    def of(cls, settings: QueueSettings) -> "QueueSettingsOut":
        return cls(
            settings.queue,
            settings.paused,
            settings.soft_limit,
            settings.hard_limit,
            seconds(settings.job_ttl),
            seconds(settings.idempotency_window),
            settings.shed_low_retries,
        )


class QueueLimits(msgspec.Struct, forbid_unknown_fields=True):
    """Backpressure limits of one queue; null falls back to the API's defaults."""

    soft_limit: Annotated[int, Meta(ge=1, le=INT32)] | None = None
    hard_limit: Annotated[int, Meta(ge=1, le=INT32)] | None = None


class QueueDefaults(msgspec.Struct, forbid_unknown_fields=True):
    """What enqueue applies to this queue's jobs when a submission gives none."""

    job_ttl_seconds: (
        Annotated[
            float,
            Meta(
                le=TEN_YEARS,
                description=(
                    "a job still waiting this long after its run_at is dead-lettered as expired (null: never)"
                ),
            ),
        ]
        | None
    ) = None
    idempotency_window_seconds: (
        Annotated[
            float,
            Meta(le=TEN_YEARS, description=("how long an idempotency key stays held after submission (null: 24 h)")),
        ]
        | None
    ) = None


class QueueShedding(msgspec.Struct, forbid_unknown_fields=True):
    """Load shedding on retry: above the queue's soft limit, retries of low jobs are dead-lettered."""

    shed_low_retries: Annotated[
        bool,
        Meta(
            description=(
                "while the queue's runnable depth is above its soft limit, a retryable failure of a low-priority "
                "job is dead-lettered with dead_reason 'shed' instead of retried"
            )
        ),
    ]

"""What a cron schedule is: the validated definition (`ScheduleSpec`) and the stored row (`Schedule`).

Every way of defining a schedule — ``@queue.periodic``, the client, the CLI, REST — builds a
`ScheduleSpec`, so the checks and their messages are the same everywhere (a ValidationError
naming the field). Plain SQL inserts get the same refusals from the table's trigger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobqueue.model.cron import CronSchedule
from jobqueue.model.errors import ValidationError
from jobqueue.model.jobs import Priority
from jobqueue.model.names import name_problem
from jobqueue.model.payloads import dumps

MISFIRE_POLICIES = ("fire_once", "fire_all", "skip")
DEFAULT_MISFIRE_POLICY = "fire_once"
DEFAULT_MISFIRE_LIMIT = 100
_INT32 = 2**31 - 1  # the columns are integers


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a non-empty string")
    return value


def _name(field: str, value: Any) -> str:
    """A job type or queue name: the rule every enqueue applies, so that each fire would be accepted."""
    problem = name_problem(value)
    if problem is not None:
        raise ValidationError(field, problem)
    return value


def _positive(field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _INT32:
        raise ValidationError(field, f"must be an integer from 1 to {_INT32} (got {value!r})")
    return value


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule's definition, checked: build it with `ScheduleSpec.build`."""

    name: str
    cron: str
    job_type: str
    timezone: str
    payload_json: str
    priority: str
    queue: str
    max_attempts: int | None
    misfire_policy: str
    misfire_limit: int
    enabled: bool

    @classmethod
    def build(
        cls,
        name: Any,
        cron: Any,
        job_type: Any,
        *,
        timezone: Any = "UTC",
        payload: Any = None,
        priority: Any = "normal",
        queue: Any = "default",
        max_attempts: Any = None,
        misfire_policy: Any = DEFAULT_MISFIRE_POLICY,
        misfire_limit: Any = DEFAULT_MISFIRE_LIMIT,
        enabled: Any = True,
    ) -> "ScheduleSpec":
        schedule = CronSchedule(cron, timezone)
        try:
            payload_json = dumps({} if payload is None else payload)
        except (TypeError, ValueError) as exc:
            raise ValidationError("payload", f"must be JSON-serialisable ({exc})") from None
        if misfire_policy not in MISFIRE_POLICIES:
            raise ValidationError(
                "misfire_policy", f"must be one of {', '.join(MISFIRE_POLICIES)} (got {misfire_policy!r})"
            )
        if not isinstance(enabled, bool):
            raise ValidationError("enabled", f"must be true or false (got {enabled!r})")
        return cls(
            name=_text("name", name),
            cron=schedule.expression,
            job_type=_name("job_type", job_type),
            timezone=schedule.zone.key,
            payload_json=payload_json,
            priority=Priority.parse(priority).label,
            queue=_name("queue", queue),
            max_attempts=None if max_attempts is None else _positive("max_attempts", max_attempts),
            misfire_policy=misfire_policy,
            misfire_limit=_positive("misfire_limit", misfire_limit),
            enabled=enabled,
        )

    def schedule(self) -> CronSchedule:
        return CronSchedule(self.cron, self.timezone)

    @property
    def payload(self) -> Any:
        return json.loads(self.payload_json)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A row of ``jobqueue.schedules`` as the client, CLI and API show it."""

    id: int
    name: str
    cron: str
    timezone: str
    job_type: str
    payload: Any
    priority: str
    queue: str
    max_attempts: int | None
    enabled: bool
    misfire_policy: str
    misfire_limit: int
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    error: str | None
    source: str
    created_at: datetime
    updated_at: datetime

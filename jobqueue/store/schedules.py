"""Calls on jobqueue.schedules and jobqueue.schedule_fires (sql/queries/schedules.sql)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from jobqueue.db.gateway import ActionCall, Call, any_row, column, scalar, scalar_or_none
from jobqueue.model.errors import Conflict, ScheduleNotFound
from jobqueue.model.schedules import Schedule, ScheduleSpec


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """What the scheduler needs of a schedule to plan its fires."""

    id: int
    name: str
    cron: str
    timezone: str
    next_fire_at: datetime | None
    updated_at: datetime
    misfire_policy: str
    misfire_limit: int


def _spec_params(spec: ScheduleSpec, next_fire_at: datetime | None, source: str) -> dict:
    return {
        "name": spec.name,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "job_type": spec.job_type,
        "payload": spec.payload_json,
        "priority": spec.priority,
        "queue": spec.queue,
        "max_attempts": spec.max_attempts,
        "enabled": spec.enabled,
        "misfire_policy": spec.misfire_policy,
        "misfire_limit": spec.misfire_limit,
        "next_fire_at": next_fire_at,
        "source": source,
    }


def _one(name: str):
    def decode(rows: list[tuple]) -> Schedule:
        if not rows:
            raise ScheduleNotFound(name)
        return Schedule(*rows[0])

    return decode


def insert(spec: ScheduleSpec, *, next_fire_at: datetime | None, source: str) -> Call[Schedule]:
    def decode(rows: list[tuple]) -> Schedule:
        if not rows:
            raise Conflict(f"a schedule named {spec.name!r} exists already")
        return Schedule(*rows[0])

    return ActionCall("schedule_insert", _spec_params(spec, next_fire_at, source), decode)


def put(spec: ScheduleSpec, *, next_fire_at: datetime | None, source: str) -> Call[Schedule]:
    return ActionCall("schedule_put", _spec_params(spec, next_fire_at, source), _one(spec.name))


def sync(specs: Sequence[ScheduleSpec], *, now: datetime) -> Call[list[str]]:
    """Create or redefine declared schedules (a new or changed one fires from ``now`` on);
    returns the names actually written."""
    return Call(
        "schedule_sync",
        {
            "names": [s.name for s in specs],
            "crons": [s.cron for s in specs],
            "timezones": [s.timezone for s in specs],
            "job_types": [s.job_type for s in specs],
            "payloads": [s.payload_json for s in specs],
            "priorities": [s.priority for s in specs],
            "queues": [s.queue for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
            "enabled": [s.enabled for s in specs],
            "misfire_policies": [s.misfire_policy for s in specs],
            "misfire_limits": [s.misfire_limit for s in specs],
            "next_fire_ats": [s.schedule().next_after(now) for s in specs],
        },
        column,
    )


def list_all() -> Call[list[Schedule]]:
    return Call("schedule_list", {}, lambda rows: [Schedule(*r) for r in rows])


def get(name: str) -> Call[Schedule]:
    return Call("schedule_get", {"name": name}, _one(name))


def set_enabled(name: str, enabled: bool) -> Call[Schedule]:
    return ActionCall("schedule_set_enabled", {"name": name, "enabled": enabled}, _one(name))


def delete(name: str) -> Call[None]:
    def decode(rows: list[tuple]) -> None:
        if not rows:
            raise ScheduleNotFound(name)

    return ActionCall("schedule_delete", {"name": name}, decode)


def run_now(name: str) -> Call[uuid.UUID]:
    def decode(rows: list[tuple]) -> uuid.UUID:
        if not rows:
            raise ScheduleNotFound(name)
        return rows[0][0]

    return ActionCall("schedule_run_now", {"name": name}, decode)


def due(*, now: datetime | None, limit: int) -> Call[list[DueSchedule]]:
    return Call("schedule_due", {"now": now, "limit": limit}, lambda rows: [DueSchedule(*r) for r in rows])


def next_due() -> Call[datetime | None]:
    return Call("schedule_next_due", {}, scalar_or_none)


def fire(
    schedule: DueSchedule, *, ticks: Sequence[datetime], next_fire_at: datetime, fired_by: str
) -> Call[list[tuple[datetime, uuid.UUID]]]:
    """Fire ``ticks`` and move next_fire_at on, if no one else did since ``schedule`` was read.
    Returns the (tick, job id) pairs created — empty when another scheduler got there first."""
    return Call(
        "schedule_fire",
        {
            "id": schedule.id,
            "expected_next": schedule.next_fire_at,
            "cron": schedule.cron,
            "timezone": schedule.timezone,
            "ticks": list(ticks),
            "next_fire_at": next_fire_at,
            "fired_by": fired_by,
        },
        lambda rows: [(r[0], r[1]) for r in rows],
    )


def set_error(schedule: DueSchedule, error: str) -> Call[bool]:
    return Call(
        "schedule_set_error",
        {"id": schedule.id, "cron": schedule.cron, "timezone": schedule.timezone, "error": error},
        any_row,
    )


def prune_fires(*, before: datetime, limit: int) -> Call[int]:
    return Call("schedule_fires_prune", {"before": before, "limit": limit}, scalar)

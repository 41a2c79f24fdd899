"""Calls for the fault campaign (queries.sql beside this module): the recording app's table and the
read-outs a scenario is judged by.

The SQL lives here, not in sql/queries/, because only the harness runs it: the wheel carries
sql/queries/ to every installation, and every jobqueue process loads all of it (`jobqueue.db.gateway.FileCall`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from jobqueue.db.gateway import FileCall, column, no_result, scalar

T = TypeVar("T")


class FaultCall(FileCall[T]):
    __slots__ = ()
    queries_file = Path(__file__).with_name("queries.sql")


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One job as the campaign judges it, once its scenario is over."""

    id: uuid.UUID
    job_type: str
    key: str | None  # the producer's logical job (payload "k"): two jobs with one key are one job submitted twice
    state: str
    attempts: int
    max_attempts: int
    finished_at: datetime | None
    result_outcome: str | None  # job_results.outcome
    result_attempt: int | None  # the attempt the stored result says it came from
    runs: int  # handler runs recorded
    failing_runs: int  # of those, runs whose handler failed on purpose
    last_error: str | None


def create_schema() -> list[FaultCall[None]]:
    return [
        FaultCall(name, {}, no_result)
        for name in ("faults_create_schema", "faults_create_executions", "faults_create_executions_index")
    ]


def record_execution(*, token: uuid.UUID, job_id: uuid.UUID, attempt: int, pid: int, fails: bool) -> FaultCall[None]:
    return FaultCall(
        "faults_record_execution",
        {"token": token, "job_id": job_id, "attempt": attempt, "pid": pid, "fails": fails},
        no_result,
    )


def held_by_pid(pid: int) -> FaultCall[list[uuid.UUID]]:
    return FaultCall("faults_held_by_pid", {"pid": pid}, column)


def registered_pids(pids: list[int]) -> FaultCall[list[int]]:
    return FaultCall("faults_registered_pids", {"pids": pids}, column)


def processing() -> FaultCall[list[uuid.UUID]]:
    return FaultCall("faults_processing", {}, column)


def progress() -> FaultCall[tuple[int, int, int]]:
    """(jobs in an end state, jobs still live, jobs pending)."""
    return FaultCall("faults_progress", {}, lambda rows: rows[0])


def job_outcomes() -> FaultCall[list[JobOutcome]]:
    return FaultCall("faults_job_outcomes", {}, lambda rows: [JobOutcome(*row) for row in rows])


def terminate_backends() -> FaultCall[int]:
    return FaultCall("faults_terminate_backends", {}, scalar)


def runs() -> FaultCall[list[tuple[datetime, int]]]:
    """(when, worker pid) of every handler run, in order."""
    return FaultCall("faults_runs", {}, lambda rows: [(at, pid) for at, pid in rows])

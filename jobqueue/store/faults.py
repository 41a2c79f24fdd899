"""Calls for the fault campaign (sql/queries/faults.sql): the recording app's table and the
read-outs a scenario is judged by."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from jobqueue.db.gateway import Call, column, no_result, scalar


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


def create_schema() -> list[Call[None]]:
    return [Call(name, {}, no_result) for name in
            ("faults_create_schema", "faults_create_executions", "faults_create_executions_index")]


def record_execution(*, token: uuid.UUID, job_id: uuid.UUID, attempt: int, pid: int, fails: bool) -> Call[None]:
    return Call("faults_record_execution",
                {"token": token, "job_id": job_id, "attempt": attempt, "pid": pid, "fails": fails}, no_result)


def held_by_pid(pid: int) -> Call[list[uuid.UUID]]:
    return Call("faults_held_by_pid", {"pid": pid}, column)


def registered_pids(pids: list[int]) -> Call[list[int]]:
    return Call("faults_registered_pids", {"pids": pids}, column)


def processing() -> Call[list[uuid.UUID]]:
    return Call("faults_processing", {}, column)


def progress() -> Call[tuple[int, int, int]]:
    """(jobs in an end state, jobs still live, jobs pending)."""
    return Call("faults_progress", {}, lambda rows: rows[0])


def job_outcomes() -> Call[list[JobOutcome]]:
    return Call("faults_job_outcomes", {}, lambda rows: [JobOutcome(*row) for row in rows])


def terminate_backends() -> Call[int]:
    return Call("faults_terminate_backends", {}, scalar)


def runs() -> Call[list[tuple[datetime, int]]]:
    """(when, worker pid) of every handler run, in order."""
    return Call("faults_runs", {}, lambda rows: [(at, pid) for at, pid in rows])

"""Calls on the circuit breakers and the job types behind them (sql/queries/circuits.sql)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

from jobqueue.db.gateway import ActionCall, Call, no_result, scalar_or_none
from jobqueue.model.circuits import Circuit, CircuitSpec

#: How a probe ended, for `probe_finished`.
PROBE_OUTCOMES = ("success", "failure", "inconclusive")


@dataclass(frozen=True, slots=True)
class Blocking:
    """A circuit that is not closed, as a worker sees it: the job types it must not claim, and in
    how many seconds it may start a probe (None: not for now — an operator holds it open, or its
    probe is running)."""

    name: str
    state: str
    forced_by_admin: bool
    probe_job_id: uuid.UUID | None
    probe_in: float | None
    job_types: tuple[str, ...]


#: A declaration a worker start did not apply: (what, name, the app that declared it otherwise),
#: e.g. ("circuit", "payments-api", "shop") — that app has a live worker and keeps its own.
Overruled = tuple[str, str, str]


def decode_overruled(rows: list[tuple]) -> list[Overruled]:
    return [(r[0], r[1], r[2]) for r in rows]


def sync(
    circuits: Sequence[CircuitSpec], circuit_by_type: Mapping[str, str | None], *, app: str
) -> Call[list[Overruled]]:
    """App ``app``'s breakers and memberships (see circuit_sync: another app's stay as it declared them)."""
    members = {job_type: name for job_type, name in circuit_by_type.items() if name is not None}
    return Call(
        "circuit_sync",
        {
            "app": app,
            "names": [c.name for c in circuits],
            "thresholds": [c.threshold for c in circuits],
            "windows": [c.window for c in circuits],
            "resets": [c.reset_after for c in circuits],
            "job_types": list(members),
            "circuits": list(members.values()),
            "all_types": list(circuit_by_type),
        },
        decode_overruled,
    )


def blocking(*, now: datetime | None = None) -> Call[list[Blocking]]:
    return Call(
        "circuit_blocking",
        {"now": now},
        lambda rows: [Blocking(r[0], r[1], r[2], r[3], r[4], tuple(r[5])) for r in rows],
    )


def record_failure(name: str, *, now: datetime | None = None) -> Call[str | None]:
    """The circuit's state after counting the failure (None: it was not closed, nothing counted)."""
    return Call("circuit_record_failure", {"name": name, "now": now}, scalar_or_none)


def trip(name: str, *, now: datetime | None = None) -> Call[str | None]:
    """'open' if this opened it; None if it was open already (or does not exist)."""
    return Call("circuit_trip", {"name": name, "now": now}, scalar_or_none)


def probe_begin(
    name: str, *, stale_probe: uuid.UUID | None = None, now: datetime | None = None
) -> Call[list[str] | None]:
    """The circuit's job types if this turned it half-open (run it in the probe claim's transaction)."""
    return Call("circuit_probe_begin", {"name": name, "stale_probe": stale_probe, "now": now}, scalar_or_none)


def probe_claimed(name: str, job_id: uuid.UUID) -> Call[None]:
    return Call("circuit_probe_claimed", {"name": name, "job_id": job_id}, no_result)


def probe_finished(name: str, job_id: uuid.UUID, outcome: str, *, now: datetime | None = None) -> Call[str | None]:
    """The circuit's new state; None if ``job_id`` is not its probe any more."""
    if outcome not in PROBE_OUTCOMES:
        raise ValueError(f"probe outcome must be one of {PROBE_OUTCOMES} (got {outcome!r})")
    return Call(
        "circuit_probe_finished", {"name": name, "job_id": job_id, "outcome": outcome, "now": now}, scalar_or_none
    )


def force(name: str, action: str) -> Call[str | None]:
    """``action`` 'open' or 'close'; the circuit's name, None if there is none of that name."""
    return ActionCall("circuit_force", {"name": name, "action": action}, scalar_or_none)


def _decode_circuits(rows: list[tuple]) -> list[Circuit]:
    return [
        Circuit(
            name=r[0],
            state=r[1],
            failures=r[2],
            window_started_at=r[3],
            opened_at=r[4],
            forced_by_admin=r[5],
            threshold=r[6],
            window_seconds=r[7],
            reset_after_seconds=r[8],
            probe_job_id=r[9],
            updated_at=r[10],
            job_types=list(r[11]),
            declared_by=r[12],
        )
        for r in rows
    ]


def list_all(name: str | None = None) -> Call[list[Circuit]]:
    return Call("circuit_list", {"name": name}, _decode_circuits)

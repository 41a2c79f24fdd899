"""What a circuit breaker is: its checked definition (`CircuitSpec`) and its stored row (`Circuit`).

A breaker is declared once on the app and named by the tasks that call the same dependency:

    payments = queue.circuit("payments-api", threshold=5, window=60, reset_after=30,
                             trip_on=(TimeoutError, httpx.ConnectError))

    @queue.task("charge", circuit="payments-api")
    async def charge(job): ...

Its state is shared by every worker through ``jobqueue.circuits`` (see sql/queries/circuits.sql
for the transitions): ``threshold`` counted failures within ``window`` seconds open it; while
open no worker claims its job types (they stay pending, no attempt used); ``reset_after``
seconds later one probe job runs (half-open): success closes it, a counted failure opens it again.
A failure counts when the handler's exception is an instance of one of ``trip_on`` (default:
every exception); it is also an ordinary failed attempt of its job. A handler may raise
`jobqueue.model.errors.CircuitOpen` to open its task's breaker at once: that attempt is given back
(the job returns to pending without using an attempt).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobqueue.model.durations import duration_problem
from jobqueue.model.errors import ValidationError

CLOSED, HALF_OPEN, OPEN = "closed", "half_open", "open"
#: The value of ``jobqueue_circuit_state`` for each state.
STATE_VALUES = {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}

DEFAULT_THRESHOLD = 5
DEFAULT_WINDOW = 60.0
DEFAULT_RESET_AFTER = 30.0
_INT32 = 2**31 - 1


def _seconds(field: str, value: Any) -> float:
    """A window or reset time: seconds (the column's unit), by the rule of `jobqueue.model.durations`."""
    problem = (
        f"must be a number of seconds (got {value!r})" if isinstance(value, timedelta) else duration_problem(value)
    )
    if problem:
        raise ValidationError(field, problem)
    return float(value)


def _exception_types(value: Any) -> tuple[type[BaseException], ...]:
    types = value if isinstance(value, tuple) else (value,)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise ValidationError("trip_on", f"must be an exception class or a non-empty tuple of them (got {value!r})")
    return types


@dataclass(frozen=True, slots=True)
class CircuitSpec:
    """A breaker's definition, checked: build it with `CircuitSpec.build` (or `JobQueue.circuit`)."""

    name: str
    threshold: int = DEFAULT_THRESHOLD
    window: float = DEFAULT_WINDOW
    reset_after: float = DEFAULT_RESET_AFTER
    trip_on: tuple[type[BaseException], ...] = (Exception,)

    @classmethod
    def build(
        cls,
        name: Any,
        *,
        threshold: Any = DEFAULT_THRESHOLD,
        window: Any = DEFAULT_WINDOW,
        reset_after: Any = DEFAULT_RESET_AFTER,
        trip_on: Any = (Exception,),
    ) -> "CircuitSpec":
        if not isinstance(name, str) or not name.strip():
            raise ValidationError("name", f"must be a non-empty string (got {name!r})")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or not 1 <= threshold <= _INT32:
            raise ValidationError("threshold", f"must be an integer from 1 to {_INT32} (got {threshold!r})")
        return cls(
            name=name,
            threshold=threshold,
            window=_seconds("window", window),
            reset_after=_seconds("reset_after", reset_after),
            trip_on=_exception_types(trip_on),
        )

    def counts(self, error: BaseException) -> bool:
        """Does this failure count toward opening the breaker?"""
        return isinstance(error, self.trip_on)


@dataclass(frozen=True, slots=True)
class Circuit:
    """A row of ``jobqueue.circuits`` with its job types, as the client, CLI, API and metrics show it."""

    name: str
    state: str  # closed | open | half_open
    failures: int  # counted in the window that began at window_started_at
    window_started_at: datetime | None
    opened_at: datetime | None
    forced_by_admin: bool
    threshold: int
    window_seconds: float
    reset_after_seconds: float
    probe_job_id: uuid.UUID | None
    updated_at: datetime
    job_types: list[str]
    declared_by: str = ""  # the app whose workers write its settings ('': declared before 0027)

    @property
    def state_value(self) -> int:
        return STATE_VALUES[self.state]

"""What a global limit is: its checked definition (`LimitSpec`) and its stored row (`Limit`).

A limit caps, across every worker on every host, how many jobs of one job type (scope
``job_type``, in every queue) or of one queue (scope ``queue``, all its types together) run at
once (``concurrency``) and how many start in any window of ``period`` seconds (``rate``):

    @queue.task("call_partner_api", concurrency=5, rate="10/s")
    async def call_partner_api(job): ...

    queue.queue_limit("exports", concurrency=2)

Workers write the app's limits to ``jobqueue.job_limits`` when they start; an operator can set
or clear one (`jobqueue limits set|clear`, ``PUT/DELETE /admin/limits/...``), and a limit an
operator set wins over the code's until it is cleared. The claim enforces them (see
sql/migrations/0020_job_limits.up.sql): a job type at its limit stays pending, the rest of its
queue keeps flowing.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobqueue.model.errors import ValidationError
from jobqueue.model.names import name_problem

SCOPES = ("job_type", "queue")
#: Starts a rate may allow per period (the window's log is kept in the limit's row).
MAX_RATE = 10_000
MAX_PERIOD = 86_400.0
_INT32 = 2**31 - 1
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(value: Any) -> tuple[int, float]:
    """``"10/s"``, ``"100/m"``, ``"5/2s"``, ``"1000/h"`` (or a (starts, seconds) pair) → (starts, period)."""
    if isinstance(value, tuple) and len(value) == 2:
        starts, period = value
    elif isinstance(value, str) and (match := _RATE.match(value.lower())) and match.group(3) in _UNITS:
        starts = int(match.group(1))
        period = float(match.group(2) or 1) * _UNITS[match.group(3)]
    else:
        raise ValidationError("rate", f"must look like '10/s', '100/m', '5/2s' or '1000/h' (got {value!r})")
    if isinstance(starts, bool) or not isinstance(starts, int) or not 1 <= starts <= MAX_RATE:
        raise ValidationError("rate", f"starts per period must be an integer from 1 to {MAX_RATE} (got {starts!r})")
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not 0 < period <= MAX_PERIOD:
        raise ValidationError("rate", f"the period must be above 0 and at most {MAX_PERIOD:g} seconds (got {period!r})")
    return starts, float(period)


def format_rate(rate: int | None, period: float | None) -> str | None:
    if rate is None or period is None:
        return None
    unit = {1.0: "s", 60.0: "m", 3600.0: "h"}.get(float(period))
    return f"{rate}/{unit}" if unit else f"{rate}/{period:g}s"


class Keep(enum.Enum):
    """`KEEP`: the default of an operator's `set_limit` parts — leave that part as the limit has it."""

    KEEP = "keep"


#: An operator setting one part of a limit (``set_limit(..., concurrency=2)``) keeps the other as
#: it is — before, the code's ``10/s`` silently vanished; None removes a part.
KEEP = Keep.KEEP
PARTS = ("concurrency", "rate")


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """A limit's definition, checked: build it with `LimitSpec.build`. ``keep``: the parts (of
    `PARTS`) an operator's set leaves as the stored limit has them."""

    scope: str
    name: str
    concurrency: int | None = None
    rate: int | None = None
    period: float | None = None
    keep: frozenset[str] = frozenset()

    @classmethod
    def operators(cls, scope: Any, name: Any, *, concurrency: Any, rate: Any) -> "LimitSpec":
        """An operator's set: a part given as `KEEP` stays as stored, None removes it."""
        keep = frozenset(part for part, value in zip(PARTS, (concurrency, rate)) if value is KEEP)
        if keep == frozenset(PARTS):
            raise ValidationError("concurrency", "give a concurrency, a rate, or both")
        return cls.build(
            scope,
            name,
            concurrency=None if concurrency is KEEP else concurrency,
            rate=None if rate is KEEP else rate,
            keep=keep,
        )

    @classmethod
    def build(
        cls, scope: Any, name: Any, *, concurrency: Any = None, rate: Any = None, keep: frozenset[str] = frozenset()
    ) -> "LimitSpec":
        if scope not in SCOPES:
            raise ValidationError("scope", f"must be one of {', '.join(SCOPES)} (got {scope!r})")
        problem = name_problem(name)  # a job type or queue name: the enqueue's rule, or it could never match
        if problem:
            raise ValidationError("name", problem)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= _INT32
        ):
            raise ValidationError("concurrency", f"must be an integer from 1 to {_INT32} (got {concurrency!r})")
        starts, period = parse_rate(rate) if rate is not None else (None, None)
        if concurrency is None and starts is None and not keep:
            raise ValidationError("concurrency", "give a concurrency, a rate, or both")
        return cls(scope=scope, name=name, concurrency=concurrency, rate=starts, period=period, keep=keep)


@dataclass(frozen=True, slots=True)
class Limit:
    """A row of ``jobqueue.job_limits`` with what it holds now (client, CLI, API and metrics)."""

    scope: str
    name: str
    concurrency: int | None
    rate: int | None
    period_seconds: float | None
    set_by: str  # code | admin
    running: int  # processing jobs claimed under it
    window_starts: int  # starts within the last period_seconds
    updated_at: datetime
    declared_by: str = ""  # set_by code: the app that declared it ('': before 0027)

    @property
    def rate_text(self) -> str | None:
        return format_rate(self.rate, self.period_seconds)


@dataclass(frozen=True, slots=True)
class Allowance:
    """What one claim transaction may take of a limit now (`limit_allowances`)."""

    scope: str
    name: str
    allowance: int
    free_in: float | None  # a spent rate: seconds until a start leaves its window

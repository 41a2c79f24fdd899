"""Calls on the global limits (sql/queries/limits.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

from jobqueue.db.gateway import ActionCall, Call, scalar, scalar_or_none
from jobqueue.model.limits import Allowance, Limit, LimitSpec
from jobqueue.store.circuits import Overruled, decode_overruled


def allowances(queues: Sequence[str], *, now: datetime | None = None) -> Call[list[Allowance]]:
    """Run it in the claim's transaction: it locks the limits' rows until the commit."""
    return Call(
        "limit_allowances",
        {"queues": list(queues), "now": now},
        lambda rows: [Allowance(r[0], r[1], r[2], r[3]) for r in rows],
    )


def record_starts(started: Mapping[tuple[str, str], int], *, now: datetime | None = None) -> Call[None]:
    """``started``: (scope, name) → jobs the transaction claimed under that limit."""
    keys = [key for key, count in started.items() if count > 0]
    return Call(
        "limit_record_starts",
        {
            "scopes": [k[0] for k in keys],
            "names": [k[1] for k in keys],
            "counts": [started[k] for k in keys],
            "now": now,
        },
        lambda rows: None,
    )


def any_for(queues: Sequence[str]) -> Call[bool]:
    return Call("limit_any", {"queues": list(queues)}, scalar)


def sync(declared: Sequence[LimitSpec], undeclared: Sequence[tuple[str, str]], *, app: str) -> Call[list[Overruled]]:
    """App ``app``'s limits (see limit_sync: another app's stay as it declared them)."""
    return Call(
        "limit_sync",
        {
            "app": app,
            "scopes": [d.scope for d in declared],
            "names": [d.name for d in declared],
            "concurrency": [d.concurrency for d in declared],
            "rates": [d.rate for d in declared],
            "periods": [d.period for d in declared],
            "undeclared_scopes": [u[0] for u in undeclared],
            "undeclared_names": [u[1] for u in undeclared],
        },
        decode_overruled,
    )


def set_limit(spec: LimitSpec) -> Call[int | None]:
    """An operator's limit (the parts in ``spec.keep`` as stored); the number of running jobs it
    now counts that were not counted before, or None when it would limit nothing (not written)."""
    return ActionCall(
        "limit_set",
        {
            "scope": spec.scope,
            "name": spec.name,
            "concurrency": spec.concurrency,
            "rate": spec.rate,
            "period": spec.period,
            "keep_concurrency": "concurrency" in spec.keep,
            "keep_rate": "rate" in spec.keep,
        },
        lambda rows: rows[0][1] if rows[0][0] else None,
    )


def clear(scope: str, name: str) -> Call[str | None]:
    """The limit's name, None if there was none."""
    return ActionCall("limit_clear", {"scope": scope, "name": name}, scalar_or_none)


def list_all(*, now: datetime | None = None) -> Call[list[Limit]]:
    return Call("limit_list", {"now": now}, lambda rows: [Limit(*r) for r in rows])

"""Calls about queues (sql/queries/queues.sql): statistics, waiting jobs and the enqueue gates
(`jobqueue.model.quotas`), paused flag, limits,
enqueue defaults (job TTL, idempotency window), load shedding of low-priority retries, and the
jobs nobody serves."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Sequence

from jobqueue.db.gateway import ActionCall, Call
from jobqueue.model.jobs import Priority
from jobqueue.model.queues import KnownNames, PriorityStats, QueueSettings, QueueStats, Unserved
from jobqueue.model.quotas import Gate, WaitingCounts


def _decode_stats(rows: list[tuple]) -> list[QueueStats]:
    by_queue: dict[str, QueueStats] = {}
    for queue, priority, pending, scheduled, processing, failed, dead, oldest, *settings in rows:
        stats = by_queue.get(queue)
        if stats is None:
            stats = by_queue[queue] = QueueStats(queue, QueueSettings(queue, *settings), [])
        if priority is not None:
            stats.levels.append(
                PriorityStats(Priority.parse(priority), pending, scheduled, processing, failed, dead, float(oldest))
            )
    return list(by_queue.values())


def stats() -> Call[list[QueueStats]]:
    return Call("queue_stats", {}, _decode_stats)


def _waiting(rows: list[tuple]) -> WaitingCounts:
    return WaitingCounts(
        {queue: int(n) for queue, n, _ in rows}, frozenset(queue for queue, _, served in rows if served)
    )


def waiting_counts(*, cap: int, stale_seconds: float) -> Call[WaitingCounts]:
    """Waiting jobs per queue (pending, scheduled or waiting for a retry), each capped at ``cap``,
    and the queues live workers serve (listed with 0 when nothing waits)."""
    return Call("queue_waiting_counts", {"cap": cap, "stale_seconds": stale_seconds}, _waiting)


def replace_gates(gates: Sequence[Gate], *, valid_for: float) -> Call[list[tuple[str, str, str]]]:
    """Exactly ``gates`` closed from now, for ``valid_for`` seconds; (change, queue, reason) of each
    gate that opened or closed (change ``opened`` / ``closed``)."""
    rows = [{"queue": g.queue, "reason": g.reason, "waiting": g.waiting, "quota": g.quota} for g in gates]
    return Call(
        "queue_gates_replace",
        {"gates": json.dumps(rows), "valid_for": valid_for},
        lambda found: [tuple(row) for row in found],
    )


def _one_settings(rows: list[tuple]) -> QueueSettings:
    return QueueSettings(*rows[0])


def all_settings() -> Call[dict[str, QueueSettings]]:
    return Call("queue_settings_all", {}, lambda rows: {r[0]: QueueSettings(*r) for r in rows})


def paused_among(queues: Sequence[str]) -> Call[set[str]]:
    return Call("queue_paused_among", {"queues": list(queues)}, lambda rows: {r[0] for r in rows})


def set_paused(queue: str, paused: bool, *, force: bool = False) -> Call[QueueSettings | None]:
    """None: the queue is unknown (see queue_set_paused) and nothing was written."""
    return ActionCall(
        "queue_set_paused",
        {"queue": queue, "paused": paused, "force": force},
        lambda rows: QueueSettings(*rows[0]) if rows else None,
    )


def known_names() -> Call[KnownNames]:
    """The queues and job types an enqueue may name without a warning (queue_known_names)."""
    return Call("queue_known_names", {}, lambda rows: KnownNames(frozenset(rows[0][0]), frozenset(rows[0][1])))


def set_limits(queue: str, *, soft_limit: int | None, hard_limit: int | None) -> Call[QueueSettings]:
    return ActionCall(
        "queue_set_limits", {"queue": queue, "soft_limit": soft_limit, "hard_limit": hard_limit}, _one_settings
    )


def set_enqueue_defaults(
    queue: str, *, job_ttl: timedelta | None, idempotency_window: timedelta | None
) -> Call[QueueSettings]:
    return ActionCall(
        "queue_set_enqueue_defaults",
        {"queue": queue, "job_ttl": job_ttl, "idempotency_window": idempotency_window},
        _one_settings,
    )


def set_shedding(queue: str, shed_low_retries: bool) -> Call[QueueSettings]:
    return ActionCall("queue_set_shedding", {"queue": queue, "shed_low_retries": shed_low_retries}, _one_settings)


def load(queues: Sequence[str], *, per_worker: int, stale_seconds: float) -> Call[dict[str, tuple[int, int]]]:
    """queue → (runnable depth counted up to per_worker x workers + 1, live workers serving it)."""
    return Call(
        "queue_load",
        {"queues": list(queues), "per_worker": per_worker, "stale_seconds": stale_seconds},
        lambda rows: {name: (int(runnable), int(workers)) for name, workers, runnable in rows},
    )


#: The most (queue, job type) pairs `unserved` looks at: its cost stays bounded whatever a producer
#: names its job types.
MAX_UNSERVED_PAIRS = 1000


def unserved(*, cap: int, stale_seconds: float, max_pairs: int = MAX_UNSERVED_PAIRS) -> Call[list[Unserved]]:
    return Call(
        "queue_unserved",
        {"cap": cap, "stale_seconds": stale_seconds, "max_pairs": max_pairs},
        lambda rows: [Unserved(q, t, int(n)) for q, t, n in rows],
    )

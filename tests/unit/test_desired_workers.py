"""jobqueue_desired_workers: the autoscaling rule over the fleet, from one metrics snapshot."""

from __future__ import annotations

from datetime import datetime, timezone

from jobqueue.model.autoscale import Rule
from jobqueue.observability.metrics import Snapshot, desired_workers
from jobqueue.observability.prometheus import render
from jobqueue.store.metrics import QueueCounts, WorkerRow
from tests.support.prometheus import parse, value

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def worker(name: str, queues: tuple[str, ...], utilization: float, alive: bool = True) -> WorkerRow:
    return WorkerRow(
        name, "host", 1, queues, 10, "running" if alive else "lost", 0, 0, utilization, 0.0, NOW, NOW, 0, alive
    )


def snapshot(depths: dict[str, list[int]], workers: list[WorkerRow], paused: frozenset[str] = frozenset()) -> Snapshot:
    queues = [
        QueueCounts(queue, level, runnable, 0, 0, 0, 0.0)
        for queue, levels in depths.items()
        for level, runnable in enumerate(levels)
    ]
    return Snapshot(
        measured_at=NOW,
        submitted=0,
        queues=queues,
        dead=[],
        totals=[],
        workers=workers,
        collect_seconds=0.0,
        paused=paused,
    )


def test_each_queue_gets_its_live_workers_moved_one_step():
    snap = snapshot(
        {"backlog": [0, 0, 1000, 1], "quiet": [0, 0, 5, 0], "busy": [0, 0, 30, 0], "steady": [0, 0, 120, 0]},
        [
            worker("a", ("backlog", "quiet"), 0.1),
            worker("b", ("backlog",), 0.1),
            worker("c", ("busy",), 0.95),
            worker("d", ("busy",), 0.95),
            worker("e", ("busy",), 0.95),
            worker("f", ("steady",), 0.5),
            worker("g", ("steady",), 0.5),
            worker("dead", ("quiet", "steady"), 0.0, alive=False),
        ],
    )
    assert desired_workers(snap, rule=Rule(), low=1, high=100) == {
        "backlog": 4,  # 1001 / 2 workers > 100: up by 2
        "quiet": 1,  # 5 per worker, utilization 0.1: down, clamped at the minimum
        "busy": 5,  # 10 per worker but 95 % busy: up
        "steady": 2,  # 60 per worker, 50 % busy: hold (the lost worker does not count)
    }
    assert desired_workers(snap, rule=Rule(), low=2, high=3)["backlog"] == 3


def test_a_queue_without_workers_asks_for_the_minimum_or_a_step_above_and_a_paused_one_for_fewer():
    snap = snapshot(
        {"orphan": [0, 0, 500, 0], "held": [0, 0, 10_000, 0]},
        [
            worker("a", ("held",), 0.0),
            worker("b", ("held",), 0.0),
            worker("c", ("held",), 0.0),
            worker("d", ("held",), 0.0),
        ],
        paused=frozenset({"held"}),
    )
    assert desired_workers(snap, rule=Rule(), low=2, high=100) == {"orphan": 2, "held": 2}
    text = render(snap, rule=Rule(step=3), worker_bounds=(1, 100))
    assert value(parse(text), "jobqueue_desired_workers", queue="orphan") == 3
    assert value(parse(text), "jobqueue_desired_workers", queue="held") == 1

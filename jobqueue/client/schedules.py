"""`Schedules`: add, list, pause, resume, remove and run cron schedules — `client.schedules`.

The same object serves the async and the sync client: each method builds the store Call and hands
it to the client's runner, so on an `AsyncClient` it returns an awaitable and on a `Client` the
value. Not-found and duplicate names are raised by the Call's decoding, on both.

    await client.schedules.add("nightly-report", "0 3 * * *", "report", timezone="Europe/Berlin")
    client.schedules.pause("nightly-report")          # sync client

New and redefined schedules get their next fire time computed here (croniter, in their zone), so
`list` shows it at once; resumed ones and rows inserted in plain SQL get theirs from the scheduler.
"""

from __future__ import annotations

from typing import Any, Callable

from jobqueue.db.gateway import Call
from jobqueue.model.schedules import ScheduleSpec
from jobqueue.runtime.clock import Clock, SystemClock
from jobqueue.store import schedules as schedule_store

SOURCES = ("python", "cli", "api", "sql")


class Schedules:
    def __init__(self, run: Callable[[Call], Any], *, source: str = "python", clock: Clock | None = None) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}")
        self._run = run
        self.source = source
        self.clock = clock or SystemClock()

    def with_source(self, source: str) -> "Schedules":
        """The same, recording ``source`` (cli, api…) on the rows it creates or redefines."""
        return Schedules(self._run, source=source, clock=self.clock)

    def add(self, name: str, cron: str, job_type: str, **options: Any) -> Any:
        """Create a schedule (`Conflict` when the name is taken). Options: timezone,
        payload, priority, queue, max_attempts, misfire_policy, misfire_limit, enabled."""
        spec = ScheduleSpec.build(name, cron, job_type, **options)
        return self._run(schedule_store.insert(spec, next_fire_at=self._first_fire(spec), source=self.source))

    def put(self, name: str, cron: str, job_type: str, **options: Any) -> Any:
        """Create the schedule or replace its definition (its paused/enabled state is kept)."""
        spec = ScheduleSpec.build(name, cron, job_type, **options)
        return self._run(schedule_store.put(spec, next_fire_at=self._first_fire(spec), source=self.source))

    def list(self) -> Any:
        return self._run(schedule_store.list_all())

    def get(self, name: str) -> Any:
        return self._run(schedule_store.get(name))

    def pause(self, name: str) -> Any:
        return self._run(schedule_store.set_enabled(name, False))

    def resume(self, name: str) -> Any:
        """Resume from now: ticks missed while paused are not fired; the scheduler computes the
        next fire time (it is woken by the change)."""
        return self._run(schedule_store.set_enabled(name, True))

    def remove(self, name: str) -> Any:
        return self._run(schedule_store.delete(name))

    def run_now(self, name: str) -> Any:
        """Enqueue one job from the schedule's definition now; returns its id."""
        return self._run(schedule_store.run_now(name))

    def _first_fire(self, spec: ScheduleSpec):
        return spec.schedule().next_after(self.clock.now())
